"""The application integration/test_spark_cluster.py submits to a Spark standalone cluster with
``spark-submit``, as a user would: it imports kafkasync from the packed environment it runs in
(never from a checkout).

The backfill stream finds ``format("kafkasync")`` by discovery; the batch read and the live
stream run after ``kafkasync_source.register(spark)``. It reports on stdout, one
``kafkasync-cluster <stage> <json>`` line per step:

1. ``executors`` — each executor's Python and where it imports kafkasync from;
2. ``stream`` — a rate-limited, watermarked windowed count over a backfill, stopped after a few
   batches and restarted from its checkpoint with ``availableNow``: the batches in the offset
   log, the rows dropped behind the watermark;
3. ``batch`` — a batch read of the same topics;
4. ``restart-ready``, then ``live`` — a stream read while the test restarts the broker under it:
   the test writes the records it had acknowledged to ``WORK/acknowledged.json`` once it has
   restarted the broker, and the stream must read each of them exactly once.

Usage: ``spark-submit ... spark_cluster_app.py BOOTSTRAP BACKFILL_TOPICS LIVE_TOPIC WORK``
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def report(stage: str, payload: object) -> None:
    print(f"kafkasync-cluster {stage} {json.dumps(payload)}", flush=True)


def where_executors_import_kafkasync(spark: SparkSession) -> list[list[str]]:
    def probe(_):
        import sys as executor_sys

        import kafkasync_source

        yield [executor_sys.executable, kafkasync_source.__file__]

    return spark.sparkContext.parallelize(range(4), 4).mapPartitions(probe).collect()


def logged_batches(checkpoint: str) -> list[dict]:
    folder = os.path.join(checkpoint, "offsets")
    ends = []
    for batch in sorted(int(name) for name in os.listdir(folder) if name.isdigit()):
        with open(os.path.join(folder, str(batch))) as log:
            ends.append(json.loads(log.read().splitlines()[2]))
    return ends


def windowed_count(spark: SparkSession, bootstrap: str, topics: str, checkpoint: str, trigger: dict):
    counts = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "400").load()
              .withWatermark("timestamp", "10 minutes")
              .groupBy(F.window("timestamp", "5 minutes"), "topic").count())
    return (counts.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
            .trigger(**trigger).start())


def dropped(query) -> int:
    return sum(operator.get("numRowsDroppedByWatermark", 0)
               for progress in query.recentProgress for operator in json.loads(progress.json).get("stateOperators", []))


def stream_stopped_and_restarted(spark: SparkSession, bootstrap: str, topics: str, work: str) -> dict:
    checkpoint = os.path.join(work, "stream-checkpoint")
    first = windowed_count(spark, bootstrap, topics, checkpoint, {"processingTime": "1 second"})
    deadline = time.monotonic() + 180
    while sum(1 for p in first.recentProgress if p.numInputRows) < 3:
        if first.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the first run did not make 3 batches: {first.exception()}")
        time.sleep(0.2)
    first.stop()
    first_batches = len(logged_batches(checkpoint))
    second = windowed_count(spark, bootstrap, topics, checkpoint, {"availableNow": True})
    second.awaitTermination(300)
    if second.exception() is not None:
        raise RuntimeError(f"the restarted run failed: {second.exception()}")
    return {"first_run_batches": first_batches, "batches": logged_batches(checkpoint),
            "second_run_first_batch": min(p.batchId for p in second.recentProgress),
            "dropped": dropped(first) + dropped(second)}


def batch_read(spark: SparkSession, bootstrap: str, topics: str) -> dict:
    frame = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topics).load())
    return {f"{row.topic}-{row.partition}": row["count"]
            for row in frame.groupBy("topic", "partition").count().collect()}


def live_stream_through_a_broker_restart(spark: SparkSession, bootstrap: str, topic: str, work: str) -> dict:
    batches: dict[int, list[list[int]]] = {}

    def sink(frame, batch_id):
        # Keyed by batch id: a batch Spark replays after a failure is the same batch.
        batches[batch_id] = [[row.partition, row.offset] for row in frame.select("partition", "offset").collect()]

    query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", os.path.join(work, "live-checkpoint"))
             .trigger(processingTime="500 milliseconds").start())

    def read() -> Counter:
        return Counter(tuple(pair) for rows in list(batches.values()) for pair in rows)

    def wait(condition, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if query.exception() is not None:
                raise RuntimeError(f"the live query failed while waiting for {what}: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.2)

    acknowledged_file = os.path.join(work, "acknowledged.json")
    try:
        wait(lambda: sum(read().values()) >= 200, "records before the restart", 180)
        report("restart-ready", {"read": sum(read().values())})
        wait(lambda: os.path.exists(acknowledged_file), "the test to restart the broker", 300)
        with open(acknowledged_file) as handle:
            acknowledged = {tuple(pair) for pair in json.load(handle)}
        wait(lambda: set(read()) >= acknowledged, "every acknowledged record", 180)
        counts = read()
        return {"acknowledged": len(acknowledged), "read": len(counts),
                "missing": len(acknowledged - set(counts)), "most_reads_of_one_record": max(counts.values()),
                "failed": None if query.exception() is None else str(query.exception())[:2000]}
    finally:
        query.stop()


def main() -> int:
    bootstrap, topics, live_topic, work = sys.argv[1:5]
    spark = SparkSession.builder.appName("kafkasync-on-a-standalone-cluster").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # The test copies the suites' query start beside this app (the archive holds kafkasync, not
    # its test tools): a query whose source's worker misses Spark's fixed 10 s to connect back,
    # before anything was planned, starts again with a warning (kafkasync_dev/testing/query_start.py).
    from query_start import start_queries_surviving_slow_worker_starts

    start_queries_surviving_slow_worker_starts()
    import kafkasync_source

    report("driver", {"python": sys.executable, "kafkasync": kafkasync_source.__file__})
    report("executors", where_executors_import_kafkasync(spark))
    report("stream", stream_stopped_and_restarted(spark, bootstrap, topics, work))
    # Found by discovery above; registered explicitly from here on (the session's Python path
    # then serves the source, see docs/deployment.md): both ways must work on a cluster.
    kafkasync_source.register(spark)
    report("batch", batch_read(spark, bootstrap, topics))
    report("live", live_stream_through_a_broker_restart(spark, bootstrap, live_topic, work))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
