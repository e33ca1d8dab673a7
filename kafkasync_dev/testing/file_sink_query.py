"""A kafkasync query into a Parquet file sink, run as its own process, so a test can SIGKILL
it (JVM, Python workers and all) at any moment and restart it from its checkpoint.

Spark's file sink commits each batch's files in ``<output>/_spark_metadata``; reading the
output with Spark sees exactly the committed batches, which is what an exactly-once check
must look at. The Kafka cluster lives elsewhere (the test's embedded cluster): this process
only connects to its bootstrap address.

Usage: ``python -m kafkasync_dev.testing.file_sink_query BOOTSTRAP TOPIC CHECKPOINT OUTPUT``
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    bootstrap, topic, checkpoint, output = argv if argv is not None else sys.argv[1:]
    from kafkasync_dev.testing.spark import local_spark_session
    from kafkasync_source.spark.source import register

    spark = local_spark_session("kafkasync-file-sink-query", f"{checkpoint}-warehouse")
    register(spark)
    query = (
        spark.readStream.format("kafkasync")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("partition", "offset", "timestamp")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    print("kafkasync-file-sink-query: started", flush=True)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
