"""``make versions``: kafkasync on one PySpark version, quickly, on the embedded cluster.

A stream with a checkpoint reads a topic, stops, and is restarted from the checkpoint after more
records arrive (every record once, none twice); a batch read; and ``trigger(availableNow=True)``.
The source is found by Spark's data source auto-discovery (no ``register()``). Prints one line
per step and a summary line; a step the version cannot do fails the run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import pyspark

from kafkasync_dev.testing import MockKafkaCluster, Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_dev.testing.query_start import started
from kafkasync_dev.testing.spark import local_spark_session, workers_on_the_installed_pyspark

BASE_TS = 1_700_000_000_000
_SCHEMA = "partition INT, offset BIGINT"


def _stream(spark, bootstrap: str, topic: str, checkpoint: str, output: str, expected: int, *,
            available_now: bool = False) -> None:
    writer = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .selectExpr("partition", "offset").writeStream.format("parquet")
              .option("path", output).option("checkpointLocation", checkpoint))
    # Started again where Spark's fixed 10 s for the source's worker to start ran out before
    # anything was planned: CI runs this smoke beside other steps (kafkasync_dev/testing/query_start.py).
    query = started((writer.trigger(availableNow=True) if available_now
                     else writer.trigger(processingTime="500 milliseconds")).start)
    try:
        if available_now:
            query.awaitTermination(PATIENCE_S)
        deadline = time.monotonic() + PATIENCE_S
        while _rows(spark, output) < expected:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception())[:2000])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{_rows(spark, output)} of {expected} rows after {PATIENCE_S:.0f} s")
            time.sleep(0.5)
    finally:
        query.stop()


def _rows(spark, output: str) -> int:
    if not os.path.isdir(output) or not any(name.endswith(".parquet") for name in os.listdir(output)):
        return 0
    return spark.read.schema(_SCHEMA).parquet(output).count()


def main() -> int:
    version = pyspark.__version__
    work = tempfile.mkdtemp(prefix=f"kafkasync-smoke-{version}-")
    steps: list[str] = []
    with MockKafkaCluster() as cluster:
        topic = "smoke"
        cluster.create_topic(topic, 2)
        cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(100)])
        spark = local_spark_session(f"kafkasync-smoke-{version}", os.path.join(work, "warehouse"),
                                    worker_python=workers_on_the_installed_pyspark(work))
        try:
            bootstrap = cluster.bootstrap_servers
            checkpoint, output = os.path.join(work, "cp"), os.path.join(work, "out")
            _stream(spark, bootstrap, topic, checkpoint, output, 100)
            steps.append("stream with a checkpoint: 100 rows")
            cluster.produce(topic, [Record(i % 2, BASE_TS + 100 + i, None, b"v") for i in range(50)])
            _stream(spark, bootstrap, topic, checkpoint, output, 150)
            frame = spark.read.schema(_SCHEMA).parquet(output)
            distinct = frame.distinct().count()
            if (frame.count(), distinct) != (150, 150):
                raise RuntimeError(f"after the restart: {frame.count()} rows, {distinct} distinct, not 150")
            steps.append("restart from the checkpoint: 150 rows, each once")
            read = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic).load().count())
            if read != 150:
                raise RuntimeError(f"the batch read gave {read} rows, not 150")
            steps.append("batch read: 150 rows")
            try:
                from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow  # noqa: F401
            except ImportError:
                # Before 4.2 a Python source cannot learn the trigger: Spark wraps it and the
                # run ended having read 0 of 150 rows on 4.0.5 (kafkasync_source/driver/bounded_run.py).
                steps.append("availableNow: not supported (PySpark < 4.2 has no "
                             "SupportsTriggerAvailableNow for Python sources)")
            else:
                _stream(spark, bootstrap, topic, os.path.join(work, "cp-now"), os.path.join(work, "out-now"), 150,
                        available_now=True)
                steps.append("availableNow: 150 rows")
        except Exception as err:
            print(f"versions: PySpark {version}: FAILED after [{'; '.join(steps)}]: {err}", flush=True)
            return 1
        finally:
            spark.stop()
    print(f"versions: PySpark {version}: ok — {'; '.join(steps)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
