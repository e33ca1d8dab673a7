"""kafkasync beside Spark's own ``format("kafka")``, on a real broker, in the same run.

Spark's Java Kafka client cannot talk to the embedded cluster (DESIGN.md), so this part runs
only when ``KAFKASYNC_BOOTSTRAP`` names a real broker and ``KAFKASYNC_SPARK_KAFKA_JARS`` the JVM
connector's jars (comma-separated: spark-sql-kafka-0-10, spark-token-provider-kafka-0-10,
kafka-clients, commons-pool2), which ``run.py`` puts on ``spark.jars`` when it starts Spark.
Otherwise it returns why it was skipped.

On the broker it writes the benchmark's backlog (8 x 40,000 x 100 B, fresh topic with
``retention.ms=-1``, every delivery report checked) and measures, alternating, median of 3:
``trigger(availableNow=True)`` into the ``noop`` sink for both sources (format("kafka") with no
rate limit reads it in one batch, kafkasync's default likewise), and the batch read ``.count()``.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from benchmarks.spark_runs import batch_read_seconds
from benchmarks.workloads import produce_uniform
from kafkasync_dev.testing.spark import FORMAT_KAFKA_PROVIDER, has_format_kafka

PARTITIONS, RECORDS_PER_PARTITION, RUNS = 8, 40_000, 3


def skipped_because(spark) -> str | None:
    if not os.environ.get("KAFKASYNC_BOOTSTRAP"):
        return "KAFKASYNC_BOOTSTRAP (a real broker) is not set"
    if not os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS"):
        return "KAFKASYNC_SPARK_KAFKA_JARS (the JVM Kafka connector's jars) is not set"
    if not has_format_kafka(spark):
        return f"{FORMAT_KAFKA_PROVIDER} is not on the classpath (check KAFKASYNC_SPARK_KAFKA_JARS)"
    return None


def _available_now_seconds(spark, source: str, bootstrap: str, topic) -> float:
    started = time.perf_counter()
    query = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic.name).option("startingOffsets", "earliest").load()
             .writeStream.format("noop").trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{source}: {query.exception()}")
    rows = sum(p.numInputRows for p in query.recentProgress)
    if rows != topic.records:
        raise RuntimeError(f"{source} read {rows} of {topic.records} records")
    return time.perf_counter() - started


def compare(spark, listener: Any) -> dict:
    """Measurements, or ``{"skipped": reason}``."""
    reason = skipped_because(spark)
    if reason:
        return {"skipped": reason}
    from kafkasync_dev.testing.broker import KafkaBroker

    bootstrap = os.environ["KAFKASYNC_BOOTSTRAP"]
    with KafkaBroker(bootstrap) as broker:
        topic = produce_uniform(broker, f"kafkasync-bench-{int(time.time())}", PARTITIONS,
                                RECORDS_PER_PARTITION)
    stream = {"kafka": [], "kafkasync": []}
    batch = {"kafka": [], "kafkasync": []}
    for source in ("kafka", "kafkasync") * RUNS:
        stream[source].append(_available_now_seconds(spark, source, bootstrap, topic))
        batch[source].append(batch_read_seconds(spark, bootstrap, topic, source_format=source, runs=1))
    median = {name: {s: statistics.median(v) for s, v in runs.items()}
              for name, runs in (("available_now_s", stream), ("batch_read_s", batch))}
    return {
        "broker": bootstrap,
        "records": topic.records,
        **median,
        "kafkasync_vs_format_kafka": median["available_now_s"]["kafka"] / median["available_now_s"]["kafkasync"],
        "batch_read_faster": median["batch_read_s"]["kafkasync"] < median["batch_read_s"]["kafka"],
    }
