"""kafkasync beside Spark's own ``format("kafka")`` on the same topic of a real broker.

Needs the JVM connector on Spark's classpath: ``KAFKASYNC_SPARK_KAFKA_JARS`` (comma-separated
jars of spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2;
conftest.py puts them on ``spark.jars``). Without it the tests are skipped, saying so.

What must agree (README, "Option parity with format("kafka")"): with ``max.task.idle.ms=-1``
and ``maxOffsetsPerTrigger`` kafkasync cuts the batches Spark's proportional split cuts
(``KafkaMicroBatchStream.rateLimit``), and ``startingTimestamp`` starts every partition at the
offset ``format("kafka")`` starts it at.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from kafkasync_source.source import register
from test_kafkasync_broker import produce

PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
BASE_TS = int(time.time() * 1000) - 6 * 3_600_000


@pytest.fixture(scope="module")
def format_kafka(spark):
    if not os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS"):
        pytest.skip("KAFKASYNC_SPARK_KAFKA_JARS (Spark's JVM Kafka connector jars) is not set")
    try:
        spark._jvm.java.lang.Class.forName(PROVIDER)
    except Exception:
        pytest.skip(f"{PROVIDER} is not on the classpath (check KAFKASYNC_SPARK_KAFKA_JARS)")
    register(spark)
    return spark


def batch_ends(spark, source: str, bootstrap: str, topic: str, checkpoint, **options) -> list[dict[int, int]]:
    """Per batch with records, the end offset of every partition, from Spark's progress."""
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    ends = []
    for progress in query.recentProgress:
        if not progress.numInputRows:
            continue
        end = json.loads(progress.sources[0].endOffset)
        partitions = end["topics"][topic] if "topics" in end else end[topic]
        ends.append({int(p): (v["offset"] if isinstance(v, dict) else v) for p, v in partitions.items()})
    return ends


def test_never_wait_with_max_offsets_per_trigger_cuts_format_kafkas_batches(
    format_kafka, bootstrap_servers, topic_factory, tmp_path
):
    topic = topic_factory(3)
    produce(bootstrap_servers, topic, [(p, BASE_TS + i, b"v") for p in range(3) for i in range((1, 4, 9)[p] * 70)])
    kafka = batch_ends(format_kafka, "kafka", bootstrap_servers, topic, tmp_path / "kafka",
                       maxOffsetsPerTrigger=100)
    kafkasync = batch_ends(format_kafka, "kafkasync", bootstrap_servers, topic, tmp_path / "kafkasync",
                           maxOffsetsPerTrigger=100, **{"max.task.idle.ms": -1})
    assert len(kafka) > 5 and kafkasync == kafka


def test_starting_timestamp_starts_where_format_kafka_starts(format_kafka, bootstrap_servers, topic_factory, tmp_path):
    topic = topic_factory(3)
    produce(bootstrap_servers, topic, [(p, BASE_TS + i * (1_000, 3_000, 7_000)[p], b"v")
                                       for p in range(3) for i in range(300)])
    start_at = str(BASE_TS + 5 * 60_000)

    def first_offsets(source: str) -> dict[int, int]:
        frame = (format_kafka.read.format(source).option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", topic).option("startingTimestamp", start_at).load())
        return {row[0]: row[1] for row in frame.groupBy("partition").min("offset").collect()}

    assert first_offsets("kafkasync") == first_offsets("kafka")
