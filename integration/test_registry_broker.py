"""Confluent-framed values on a real Apache Kafka broker with a real Schema Registry.

The registry is Apicurio Registry (its Confluent-compatible API), started beside the broker by
the ``schema_registry_url`` fixture (kafkasync_dev/testing/schema_registry.py); records are
written by confluent-kafka's own ``AvroSerializer``, ``ProtobufSerializer`` and
``JSONSerializer`` (kafkasync_dev/testing/debezium.py), as users write them.

* The writers themselves, checked against confluent-kafka's deserializers and the registry's
  BACKWARD check: what the other tests stand on.
* A Debezium Avro backfill re-published by a copy job (Kafka timestamp = write time, event time
  = ``source.ts_ms``), skewed so that ``format("kafka")`` with a cap drops records behind the
  watermark (integration/test_format_kafka_parity.py shows that loss), windowed on
  ``source.ts_ms`` through ``eventTime.field``: kafkasync drops 0.
* The real Kafka Streams with an Avro ``TimestampExtractor`` on ``source.ts_ms``
  (kafkasync_dev/testing/java/AvroFieldExtractor.java): kafkasync's capped batches are
  consecutive slices of its processing order, as integration/test_kafka_streams_order.py shows
  for a JSON field.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from typing import Any, Iterator

import pytest
from test_kafka_streams_order import CAP, HOUR, MINUTE, Row, batches, event_times, kafka_streams_release, slices

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.backfills import spans
from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.debezium import (
    DEBEZIUM_AVRO,
    FORMATS,
    INCOMPATIBLE_VALUE,
    JSON_SCHEMA,
    PROTOBUF,
    FramedWriter,
    envelope_schema,
    evolving_topic,
    incompatible_writer,
    order_message_class,
)
from kafkasync_dev.testing.republished import windowed_count
from kafkasync_source.spark.source import register

pytest.importorskip("fastavro", reason="the registry extra (pip install 'kafkasync[registry]') is not installed")

AVRO_OPTIONS = {"value.format": "avro-confluent", "eventTime.field": "source.ts_ms"}
"""How a Debezium Avro topic is synchronized on its commit time (plus ``schema.registry.url``)."""


@pytest.fixture
def broker(bootstrap_servers: str) -> Iterator[KafkaBroker]:
    """A producer on the session broker (topics with retention.ms=-1: records are stamped hours
    ago), every delivery report checked."""
    with KafkaBroker(bootstrap_servers) as made:
        yield made


def _consume_all(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0) -> list[Any]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kafkasync-it-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        consumer.subscribe([topic])
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message)
    finally:
        consumer.close()
    assert len(got) == count, f"{topic}: {len(got)} of {count} records within {timeout_s:.0f} s"
    return got


# ------------------------------------------------------------------ the writers


@pytest.mark.parametrize("fmt", FORMATS)
def test_writers_produce_what_confluent_kafkas_deserializers_read(broker: KafkaBroker, schema_registry_url: str,
                                                                   fmt: str) -> None:
    """Each format's records, read back with confluent-kafka's own deserializer through the
    registry: framed (magic 0, the registered id), the event time where the format keeps it, and
    the Kafka timestamp the copy job's write time, not the event time."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": schema_registry_url})
    prefix = f"kafkasync-it-writers-{fmt}-{uuid.uuid4().hex[:8]}"
    backfill = spans(FramedWriter(broker, schema_registry_url, fmt), prefix, republished=True)
    topic = f"{prefix}-payments"  # one partition: offsets index its event times
    expected = backfill.timestamps[(topic, 0)]
    registered = client.get_latest_version(f"{topic}-value").schema_id
    deserialize = {
        DEBEZIUM_AVRO: lambda: AvroDeserializer(client),
        PROTOBUF: lambda: ProtobufDeserializer(order_message_class(), {"use.deprecated.format": False}),
        JSON_SCHEMA: lambda: JSONDeserializer(None, schema_registry_client=client),
    }[fmt]()
    context = SerializationContext(topic, MessageField.VALUE)
    messages = _consume_all(broker.bootstrap_servers, topic, len(expected))
    for message in messages:
        value = message.value()
        assert value[0] == 0 and int.from_bytes(value[1:5], "big") == registered
        decoded = deserialize(value, context)
        if fmt == DEBEZIUM_AVRO:
            assert decoded["op"] == "c" and decoded["before"] is None
            event_ms, processed_ms = decoded["source"]["ts_ms"], decoded["ts_ms"]
            assert processed_ms == message.timestamp()[1]
        elif fmt == PROTOBUF:
            event_ms = decoded.ts_ms
            assert decoded.updated_at.ToMilliseconds() == event_ms
        else:
            event_ms = decoded["ts_ms"]
        assert event_ms == expected[message.offset()]
    written = [m.timestamp()[1] for m in sorted(messages, key=lambda m: m.offset())]
    assert written == sorted(written) and written != expected, "the Kafka timestamps are the write times"


def test_evolving_writers_read_under_the_latest_schema_and_an_incompatible_one_is_refused(
        broker: KafkaBroker, schema_registry_url: str) -> None:
    """v1 -> v2 (a field added with a default) -> v3 (a field renamed through an alias) on one
    topic: the registry accepts each under BACKWARD, and a reader of v3 (fastavro, Avro's
    resolution rules) reads every record as ``evolving_topic`` says. The registry refuses an
    incompatible schema under the topic's subject (BACKWARD is on: Apicurio's default is NONE);
    the record ``incompatible_writer`` writes under another subject cannot be read as v3."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": schema_registry_url})
    topic = f"kafkasync-it-evolution-{uuid.uuid4().hex[:8]}"
    start = int(time.time() * 1000) - 6 * HOUR
    evolution = evolving_topic(broker, schema_registry_url, topic, per_version=5, start_ms=start, partitions=2)
    assert len(set(evolution.schema_ids.values())) == 3
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema_id == evolution.schema_ids[3]
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(envelope_schema(INCOMPATIBLE_VALUE), "AVRO"))
    assert refused.value.http_status_code == 409, refused.value
    bad_id = incompatible_writer(broker, schema_registry_url, topic, event_ms=start + 6 * HOUR - MINUTE)
    assert bad_id not in evolution.schema_ids.values()

    reader = AvroDeserializer(client, latest.schema.schema_str)
    context = SerializationContext(topic, MessageField.VALUE)
    expected = {(w.partition, w.offset): w for w in evolution.records}
    messages = _consume_all(broker.bootstrap_servers, topic, len(expected) + 1)
    unreadable = []
    for message in messages:
        written = expected.get((message.partition(), message.offset()))
        if written is None:
            assert int.from_bytes(message.value()[1:5], "big") == bad_id
            with pytest.raises(Exception) as failure:
                reader(message.value(), context)
            unreadable.append(str(failure.value))
            continue
        assert int.from_bytes(message.value()[1:5], "big") == written.schema_id
        decoded = reader(message.value(), context)
        assert decoded["after"] == written.after_as_latest
        assert decoded["source"]["ts_ms"] == written.event_ms
    # fastavro's SchemaResolutionError names the types, not the field ("string is not double"):
    # naming the topic, partition, offset, schema id and field is kafkasync's job.
    assert len(unreadable) == 1 and "string is not double" in unreadable[0], unreadable


# ------------------------------------------------------------------ kafkasync on source.ts_ms


def test_debezium_backfill_windowed_on_source_ts_ms_drops_nothing(
        spark: Any, broker: KafkaBroker, schema_registry_url: str, tmp_path: Any) -> None:
    """The re-published spans backfill as Debezium Avro, read with maxOffsetsPerTrigger=200 into
    a 5-minute count with a 10-minute watermark on ``eventTime`` (= ``source.ts_ms``): every
    record counted. (format("kafka") + substring + from_avro on the same data drops hundreds:
    integration/test_format_kafka_parity.py.)"""
    from pyspark.sql import functions as F

    register(spark)
    backfill = spans(FramedWriter(broker, schema_registry_url), f"kafkasync-it-debezium-{uuid.uuid4().hex[:8]}",
                     republished=True)
    count = windowed_count(spark, "kafkasync", broker.bootstrap_servers, backfill.subscribe,
                           str(tmp_path / "checkpoint"), event_time=F.col("eventTime"), maxOffsetsPerTrigger=200,
                           **AVRO_OPTIONS, **{"schema.registry.url": schema_registry_url})
    print(f"\nDebezium Avro backfill of {backfill.records}: kafkasync on source.ts_ms read {count.read} in "
          f"{count.batches} batches, dropped {count.dropped} (late rows {count.late_rows})")
    assert count.read == backfill.records
    assert count.batches >= backfill.records // 200
    assert count.dropped == 0 and count.late_rows == 0


# ------------------------------------------------------------------ the real Kafka Streams


@pytest.fixture(scope="module")
def avro_streams_version() -> str:
    """Kafka Streams with Apache Avro at the broker's version, compiled first (skips saying why
    without mvn or javac, before a broker and Spark start)."""
    return kafka_streams_release(avro=True)


def test_capped_batches_on_source_ts_ms_are_slices_of_kafka_streams_avro_order(
        avro_streams_version: str, spark: Any, broker: KafkaBroker, schema_registry_url: str, tmp_path: Any) -> None:
    """Three single-partition Debezium Avro topics (one Kafka Streams task merges them; uneven
    rates and a burst: test_kafka_streams_order.event_times), re-published (write-time Kafka
    timestamps). Kafka Streams' AvroFieldExtractor takes ``source.ts_ms`` through the registry;
    its order is then the records sorted by that time (all distinct). kafkasync's batches of
    ``CAP`` with ``eventTime.field=source.ts_ms`` are consecutive slices of it."""
    from kafkasync_dev.testing.kafka_streams import AvroField, processing_order

    register(spark)
    writer = FramedWriter(broker, schema_registry_url)
    prefix = f"kafkasync-it-streams-avro-{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}-{name}" for name in ("dense", "burst", "short")]
    base = int(time.time() * 1000) - 24 * HOUR
    written = int(time.time() * 1000) - 10 * MINUTE
    times: dict[Row, int] = {}
    for topic, offsets in zip(topics, event_times(random.Random(52))):
        writer.create_topic(topic, 1)
        writer.produce(topic, [Record(0, written + len(times) + i, None,
                                      json.dumps({"id": f"{topic}-{i}", "ts": base + t, "amount": 1}).encode())
                               for i, t in enumerate(offsets)])
        times.update({(topic, 0, offset): base + t for offset, t in enumerate(offsets)})
    started = time.monotonic()
    order = processing_order(broker.bootstrap_servers, topics, len(times), version=avro_streams_version,
                             avro_field=AvroField(schema_registry_url, "source.ts_ms"))
    print(f"\nKafka Streams (Avro source.ts_ms) processed {len(order)} records in {time.monotonic() - started:.1f} s")
    assert order == sorted(times, key=times.__getitem__), "Kafka Streams' order is source.ts_ms order"

    got = batches(spark, broker.bootstrap_servers, topics, str(tmp_path / "checkpoint"),
                  **AVRO_OPTIONS, **{"schema.registry.url": schema_registry_url})
    expected = slices(order)
    print(f"kafkasync: {len(got)} batches of <= {CAP}: {[len(rows) for rows in got]}")
    assert [len(rows) for rows in got] == [sum(part.values()) for part in expected]
    for k, (rows, part) in enumerate(zip(got, expected)):
        assert Counter(rows) == part, f"batch {k}: {sorted(Counter(rows) - part)[:5]} instead of " \
                                      f"{sorted(part - Counter(rows))[:5]}"
