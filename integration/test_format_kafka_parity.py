"""kafkasync beside Spark's own ``format("kafka")`` on the same topic of a real broker.

Needs the JVM connector on Spark's classpath, at the running PySpark's version: conftest.py
resolves it from Maven Central (or takes ``KAFKASYNC_SPARK_KAFKA_JARS``, comma-separated jars of
spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2) and puts
it on ``spark.jars``. Maven Central serves no connector for some Spark releases (4.3.0, 4.2.1
when this was written): there the tests are skipped, saying so, and ``make parity`` runs them in
a virtualenv of the newest PySpark whose connector is served.

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

from conftest import SPARK_CONNECTOR_PROBLEM
from kafkasync_source.source import register
from kafkasync_source.testing.spark import FORMAT_KAFKA_PROVIDER, has_format_kafka
from test_kafkasync_broker import produce

BASE_TS = int(time.time() * 1000) - 6 * 3_600_000


def skip_without_connector(reason: str) -> None:
    """Skip, saying why — or fail where the run exists to compare (``make parity`` sets
    ``KAFKASYNC_REQUIRE_FORMAT_KAFKA=1``)."""
    if os.environ.get("KAFKASYNC_REQUIRE_FORMAT_KAFKA", "") not in ("", "0"):
        pytest.fail(f"KAFKASYNC_REQUIRE_FORMAT_KAFKA is set, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def format_kafka(spark):
    if not has_format_kafka(spark):
        skip_without_connector(f"{FORMAT_KAFKA_PROVIDER} is not on the classpath: "
                               + ("; ".join(SPARK_CONNECTOR_PROBLEM) or "check KAFKASYNC_SPARK_KAFKA_JARS"))
    register(spark)
    print(f"\nformat(\"kafka\") beside kafkasync on Spark {spark.version}")
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
    start_at = str(BASE_TS + 2 * 60_000)  # every partition has records after it

    def first_offsets(source: str) -> dict[int, int]:
        frame = (format_kafka.read.format(source).option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", topic).option("startingTimestamp", start_at).load())
        return {row[0]: row[1] for row in frame.groupBy("partition").min("offset").collect()}

    assert first_offsets("kafkasync") == first_offsets("kafka")


def batch_rows(spark, source: str, bootstrap: str, topic: str, **options) -> list[tuple]:
    reader = spark.read.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    frame = reader.load().select("partition", "offset", "timestamp", "key", "value")
    return sorted(tuple(row) for row in frame.collect())


def test_batch_reads_between_offsets_and_times_return_format_kafkas_rows(
    format_kafka, bootstrap_servers, topic_factory
):
    topic = topic_factory(2)
    produce(bootstrap_servers, topic, [(p, BASE_TS + i * 1_000, f"{p}-{i}".encode())
                                       for p in range(2) for i in range(200)])
    by_offsets = {"startingOffsets": json.dumps({topic: {"0": 10, "1": 50}}),
                  "endingOffsets": json.dumps({topic: {"0": 120, "1": -1}})}
    by_times = {"startingTimestamp": str(BASE_TS + 30_000), "endingTimestamp": str(BASE_TS + 150_000)}
    for options in (by_offsets, by_times):
        kafka = batch_rows(format_kafka, "kafka", bootstrap_servers, topic, **options)
        assert kafka and batch_rows(format_kafka, "kafkasync", bootstrap_servers, topic, **options) == kafka


def test_include_headers_gives_format_kafkas_headers(format_kafka, bootstrap_servers, topic_factory):
    from confluent_kafka import Producer

    topic = topic_factory(1)
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    delivered = []
    for i in range(5):
        producer.produce(topic, value=b"v", partition=0, timestamp=BASE_TS + i,
                         headers=[("trace", f"t{i}".encode()), ("empty", b""), ("trace", b"again")],
                         on_delivery=lambda err, msg: delivered.append(err))
    producer.produce(topic, value=b"v", partition=0, timestamp=BASE_TS + 5,  # no headers: null in both
                     on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(30)
    assert delivered == [None] * 6

    def headers(source: str) -> list:
        frame = (format_kafka.read.format(source).option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", topic).option("includeHeaders", "true").load())
        return [(row.offset, None if row.headers is None else
                 [(h.key, bytes(h.value) if h.value is not None else None) for h in row.headers])
                for row in frame.orderBy("offset").collect()]

    kafka = headers("kafka")
    assert len(kafka) == 6 and kafka[5][1] is None and headers("kafkasync") == kafka
