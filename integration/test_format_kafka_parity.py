"""kafkasync beside Spark's own ``format("kafka")`` on the same topic of a real broker.

Needs the JVM connector on Spark's classpath, at the running PySpark's version: conftest.py
resolves it from Maven Central (or takes ``KAFKASYNC_SPARK_KAFKA_JARS``, comma-separated jars of
spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2) and puts
it on ``spark.jars``. Maven Central serves no connector for some Spark releases (4.3.0, 4.2.1
when this was written): there the tests are skipped, saying so, and ``make parity`` runs them in
a virtualenv of the newest PySpark whose connector is served.

What must agree (docs/parity.md): with ``max.task.idle.ms=-1``
and ``maxOffsetsPerTrigger`` kafkasync cuts the batches Spark's proportional split cuts
(``KafkaMicroBatchStream.rateLimit``); ``startingTimestamp`` starts every partition at the
offset ``format("kafka")`` starts it at; batch reads between offsets or times return the same
rows; ``includeHeaders`` gives the same headers; ``minOffsetsPerTrigger``/``maxTriggerDelay``
hold batches back alike (``delayBatch``). Where they differ, on purpose (docs/parity.md, the
``failOnDataLoss`` row): a subscribed topic deleted under a running query fails format("kafka")
whatever failOnDataLoss says, and kafkasync only where unread records were lost.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from typing import Optional

import pytest
from conftest import SPARK_CONNECTOR_PROBLEM
from test_kafkasync_broker import produce

from kafkasync_dev.testing.backfills import spans
from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_dev.testing.republished import join_matches, orders_and_payments, windowed_count
from kafkasync_dev.testing.spark import FORMAT_KAFKA_PROVIDER, has_format_kafka, has_spark_avro
from kafkasync_source.spark.source import register

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
    query.awaitTermination(PATIENCE_S)
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


class BatchLog:
    """A streaming query of either source into foreachBatch, keeping (seconds since start,
    rows) per batch that had rows."""

    def __init__(self, spark, source: str, bootstrap: str, topic: str, checkpoint, **options) -> None:
        self.began = time.monotonic()
        self.batches: list[tuple[float, int]] = []
        self.per_topic: Counter[str] = Counter()
        self._lock = threading.Lock()
        reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        for key, value in options.items():
            reader = reader.option(key, str(value))
        self.query = (reader.load().writeStream.foreachBatch(self._sink)
                      .option("checkpointLocation", str(checkpoint))
                      .trigger(processingTime="500 milliseconds").start())

    def _sink(self, frame, batch_id) -> None:
        per_topic = {row.topic: row["count"] for row in frame.groupBy("topic").count().collect()}
        rows = sum(per_topic.values())
        if rows:
            with self._lock:
                self.batches.append((time.monotonic() - self.began, rows))
                self.per_topic.update(per_topic)

    def rows(self) -> list[int]:
        with self._lock:
            return [rows for _, rows in self.batches]

    def rows_of(self, topic: str) -> int:
        with self._lock:
            return self.per_topic[topic]

    def wait(self, condition, what: str, timeout: float = PATIENCE_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self):
            assert self.query.exception() is None, f"{what}: {self.query.exception()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.batches}"
            time.sleep(0.2)


def test_min_offsets_and_max_trigger_delay_hold_batches_back_as_format_kafka_does(
    format_kafka, bootstrap_servers, topic_factory, tmp_path
):
    """Spark's delayBatch: the first trigger is let through (here with nothing to read) and
    restarts the clock; then fewer than minOffsetsPerTrigger new offsets wait until
    maxTriggerDelay has passed since the last trigger let through."""
    topic = topic_factory(2)
    options = {"minOffsetsPerTrigger": 50, "maxTriggerDelay": "20s"}
    logs = {"kafka": BatchLog(format_kafka, "kafka", bootstrap_servers, topic, tmp_path / "kafka", **options),
            "kafkasync": BatchLog(format_kafka, "kafkasync", bootstrap_servers, topic, tmp_path / "kafkasync",
                                  **options, **{"max.task.idle.ms": -1})}
    try:
        for log in logs.values():
            log.wait(lambda log: log.query.lastProgress is not None, "a first trigger")
        time.sleep(2)
        sent = 0

        def send(count: int) -> None:
            nonlocal sent
            produce(bootstrap_servers, topic, [(i % 2, BASE_TS + sent + i, b"v") for i in range(count)])
            sent += count

        send(20)
        time.sleep(6)
        assert {name: log.rows() for name, log in logs.items()} == {"kafka": [], "kafkasync": []}, \
            "20 < 50 new offsets, 6 s < maxTriggerDelay: both hold the batch"
        send(40)
        for log in logs.values():
            log.wait(lambda log: sum(log.rows()) >= 60, "the 60 offsets")
        send(5)
        for log in logs.values():
            log.wait(lambda log: sum(log.rows()) >= 65, "the 5 offsets after maxTriggerDelay")
        assert {name: log.rows() for name, log in logs.items()} == {"kafka": [60, 5], "kafkasync": [60, 5]}
        for name, log in logs.items():
            held = log.batches[1][0] - log.batches[0][0]
            assert 15 <= held <= 45, f"{name}: the 5 offsets ran {held:.1f} s after the 60, not ~20 s"
    finally:
        for log in logs.values():
            log.query.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
@pytest.mark.parametrize("read_to_its_end", [False, True])
def test_a_topic_deleted_under_running_queries(format_kafka, bootstrap_servers, admin, topic_factory, tmp_path,
                                               fail_on_data_loss, read_to_its_end):
    """A subscribed topic deleted under running queries. format("kafka") fails whatever
    failOnDataLoss says: its look-up of the latest offsets describes the subscribed topics
    (``SubscribeStrategy``), and a topic that no longer exists raises
    UnknownTopicOrPartitionException (Spark 4.2.0 beside Kafka 4.3.1). kafkasync follows
    failOnDataLoss: true fails naming the partitions whose records were unread, false drops
    them and reads on; a topic read to its end and then deleted lost nothing, so it runs on."""
    doomed, kept = topic_factory(2), topic_factory(1)
    produce(bootstrap_servers, doomed, [(i % 2, BASE_TS + i, b"d") for i in range(400)])
    produce(bootstrap_servers, kept, [(0, BASE_TS + i, b"k") for i in range(10)])
    options = {"failOnDataLoss": str(fail_on_data_loss).lower(), "partitionDiscoveryIntervalMs": 500}
    if not read_to_its_end:
        options["maxOffsetsPerTrigger"] = 20  # 400 records: most stay unread at the deletion
    logs = {source: BatchLog(format_kafka, source, bootstrap_servers, f"{doomed},{kept}", tmp_path / source,
                             **options, **({"max.task.idle.ms": -1} if source == "kafkasync" else {}))
            for source in ("kafka", "kafkasync")}
    try:
        for log in logs.values():
            log.wait(lambda log: sum(log.rows()) >= (410 if read_to_its_end else 40), "records read")
        admin.delete_topics([doomed], operation_timeout=30)[doomed].result(30)
        kept_before = {name: log.rows_of(kept) for name, log in logs.items()}
        produce(bootstrap_servers, kept, [(0, BASE_TS + 1_000 + i, b"k") for i in range(5)])
        expected = {"kafka": "fails",
                    "kafkasync": "fails" if fail_on_data_loss and not read_to_its_end else "runs"}

        def outcome_of(name: str) -> Optional[str]:
            """"fails" once the query failed, "runs" once it read the kept topic's 5 records
            produced after the deletion, None before either (how soon each source notices a
            deleted topic depends on the machine: a deadline of 20 s here failed on a loaded one)."""
            if logs[name].query.exception() is not None:
                return "fails"
            return "runs" if logs[name].rows_of(kept) >= kept_before[name] + 5 else None

        # Wait until each source reached the outcome expected of it, or another one it cannot
        # leave (a failure), then assert exactly; a source that settles on neither fails here.
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline and any(
                outcome_of(name) != want and outcome_of(name) != "fails" for name, want in expected.items()):
            time.sleep(0.5)
        outcome = {name: outcome_of(name) for name in logs}
        errors = {name: str(log.query.exception())[:1500] for name, log in logs.items()}
        for name, log in logs.items():
            failure = log.query.exception()
            assert failure is None or doomed in str(failure), f"{name}'s error names no partition of {doomed}"
        if not fail_on_data_loss:
            assert "UnknownTopicOrPartition" in errors["kafka"], errors["kafka"]
        assert outcome == expected, errors
    finally:
        for log in logs.values():
            log.query.stop()


def test_on_a_republished_topic_format_kafka_loses_what_kafkasyncs_event_time_keeps(
    format_kafka, bootstrap_servers, tmp_path
):
    """A backfill and a join re-published by a copy job (Kafka timestamp = write time, the event
    time in the value), read with maxOffsetsPerTrigger=200 as format("kafka") users read large
    backfills, into the same queries on the value's time. The numbers are docs/event-time.md's."""
    broker = KafkaBroker(bootstrap_servers)
    name = f"kafkasync-it-parity-republished-{uuid.uuid4().hex[:8]}"
    backfill = spans(broker, name, republished=True)
    counts = {source: windowed_count(format_kafka, source, bootstrap_servers, backfill.subscribe,
                                     str(tmp_path / f"count-{source}"), maxOffsetsPerTrigger=200, **options)
              for source, options in (("kafka", {}), ("kafkasync", {"eventTime.jsonPath": "$.ts"}))}
    data = orders_and_payments(broker, f"{name}-join")
    matches = {source: join_matches(format_kafka, source, bootstrap_servers, data, str(tmp_path / f"join-{source}"),
                                    maxOffsetsPerTrigger=200, **options)
               for source, options in (("kafka", {}), ("kafkasync", {"eventTime.jsonPath": "$.ts"}))}
    print(f"\nre-published backfill of {backfill.records}: format(\"kafka\") dropped {counts['kafka'].dropped} in "
          f"{counts['kafka'].batches} batches, kafkasync eventTime.jsonPath {counts['kafkasync'].dropped} in "
          f"{counts['kafkasync'].batches}; join: {matches['kafka']} and {matches['kafkasync']} of {data.matches}")
    assert counts["kafka"].read == counts["kafkasync"].read == backfill.records
    assert counts["kafkasync"].dropped == 0 and counts["kafka"].dropped > 500
    assert matches["kafkasync"] == data.matches and matches["kafka"] < data.matches


def test_on_a_republished_debezium_avro_topic_from_avro_loses_what_kafkasyncs_event_field_keeps(
    format_kafka, bootstrap_servers, schema_registry_url, tmp_path
):
    """The same re-published backfill as Debezium Avro envelopes written by confluent-kafka's
    AvroSerializer (kafkasync_dev/testing/debezium.py), read with maxOffsetsPerTrigger=200 into
    a 5-minute count with a 10-minute watermark on ``source.ts_ms``: format("kafka") as its users
    decode Confluent-framed Avro (``substring(value, 6)`` drops the magic byte and schema id,
    ``from_avro`` with the one writer schema pinned) loses records behind the watermark;
    kafkasync with ``value.format=avro-confluent`` and ``eventTime.field=source.ts_ms`` none."""
    pytest.importorskip("fastavro", reason="the registry extra (pip install 'kafkasync[registry]') is not installed")
    if not has_spark_avro(format_kafka):
        skip_without_connector("Spark's from_avro (org.apache.spark:spark-avro_2.13) is not on the classpath: "
                               + ("; ".join(SPARK_CONNECTOR_PROBLEM) or "see kafkasync_dev/testing/spark.py"))
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from kafkasync_dev.testing.debezium import VALUE_V1, FramedWriter, envelope_schema

    broker = KafkaBroker(bootstrap_servers)
    backfill = spans(FramedWriter(broker, schema_registry_url), f"kafkasync-it-parity-debezium-{uuid.uuid4().hex[:8]}",
                     republished=True)
    decoded = from_avro(F.expr("substring(value, 6)"), envelope_schema(VALUE_V1))
    runs = {"kafka": ({}, F.timestamp_millis(decoded.getField("source").getField("ts_ms"))),
            "kafkasync": ({"value.format": "avro-confluent", "schema.registry.url": schema_registry_url,
                           "eventTime.field": "source.ts_ms"}, F.col("eventTime"))}
    counts = {source: windowed_count(format_kafka, source, bootstrap_servers, backfill.subscribe,
                                     str(tmp_path / f"count-{source}"), event_time=event_time,
                                     maxOffsetsPerTrigger=200, **options)
              for source, (options, event_time) in runs.items()}
    print(f"\nre-published Debezium Avro backfill of {backfill.records}: format(\"kafka\") + substring + from_avro "
          f"dropped {counts['kafka'].dropped} in {counts['kafka'].batches} batches, kafkasync eventTime.field "
          f"{counts['kafkasync'].dropped} in {counts['kafkasync'].batches}")
    assert counts["kafka"].read == counts["kafkasync"].read == backfill.records
    assert counts["kafkasync"].dropped == 0 and counts["kafka"].dropped > 500
