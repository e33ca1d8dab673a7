"""The Avro field's time through the one seam, against a real registry (Apicurio,
``schema_registry_url``) and without Spark: records are ``confluent_kafka.Message`` objects as a
consumer hands them over, their values written by confluent-kafka's ``AvroSerializer``."""

from __future__ import annotations

import time
from dataclasses import replace

import pyarrow as pa
import pytest
from confluent_kafka import Message

from kafkasync_dev.testing.debezium import VALUE_V1, avro_serializer, change_event, envelope_schema
from kafkasync_source.config.options import parse_options
from kafkasync_source.event_time import record_time
from kafkasync_source.event_time.options import KafkaSyncEventTimeError

T = 1_700_000_000_000


def test_the_seam_reads_each_record_the_same_the_first_time_and_from_its_known_header(schema_registry_url):
    """The time reader keys writer schemas by a payload's first five bytes: a record of a known
    header, and every record that is not framed or names an id the registry does not know, is
    answered as the first time, record by record and in a batch (no Spark, a real registry)."""
    topic = f"seam-headers-{time.time_ns()}"
    encode = avro_serializer(schema_registry_url, envelope_schema(VALUE_V1))
    good = [encode(change_event({"id": f"o{i}", "customer": "c" * 70 * i, "amount": 1.0}, T + i, T + 10**9), topic)
            for i in range(3)]  # customer: 0, 70 and 140 bytes, a length of one byte and of two
    strays = [None, b"\x00\x00\x00", b"{\"ts\": 1}", b"\x00\x7f\xff\xff\xf0" + good[0][5:]]
    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": topic,
                             "value.format": "avro-confluent", "schema.registry.url": schema_registry_url,
                             "eventTime.field": "source.ts_ms", "eventTime.onInvalid": "skip"}, streaming=True)
    seam = record_time(options.event_time)
    records = [Message(topic=topic, partition=0, offset=i, value=value, timestamp=(1, T))
               for i, value in enumerate([*good, *strays, *good])]
    expected = [T, T + 1, T + 2, -3, -3, -3, -3, T, T + 1, T + 2]  # -3: SKIPPED
    assert [seam.time_of(record) for record in records] == expected
    assert [seam.time_of(record) for record in records] == expected  # every header known or refused before
    assert seam.times_of(records) == expected
    strict = record_time(replace(options.event_time, on_invalid="fail"))
    for value, why in [(None, "a tombstone"), (b"\x00\x00\x00", "too short"),
                       (b"{\"ts\": 1}", "not Confluent's magic byte"), (strays[3], "has no schema id 2147483632")]:
        for _ in range(2):
            with pytest.raises(KafkaSyncEventTimeError, match=f"{topic}-0 offset 9 .*{why}"):
                strict.time_of(Message(topic=topic, partition=0, offset=9, value=value, timestamp=(1, T)))


class _Collected:
    """Where ``evolving_topic`` writes: the framed values as the serializers wrote them."""

    def __init__(self) -> None:
        self.records: list = []

    def create_topic(self, name: str, partitions: int = 1) -> None:
        pass

    def produce(self, topic: str, records) -> None:
        self.records.extend(records)


def test_the_decoded_column_of_an_evolving_topic_with_strays_is_what_fastavro_gives(schema_registry_url):
    """``value.decode``'s column over one consume() batch that holds v1, v2 and v3 writers of a
    Debezium topic (registered by confluent-kafka's serializers), a tombstone, a stray JSON value
    and an unknown schema id: by numpy where it decodes exactly, equal to the reference path
    (fastavro's ``schemaless_reader`` with the writer and the pinned reader schema, as before),
    null for the strays. Then the same batch in pieces of one record, where each run is one record."""
    import io
    import json

    import fastavro
    from pyspark.sql import types

    from kafkasync_dev.testing.debezium import evolving_topic
    from kafkasync_source.formats.avro import _codec
    from kafkasync_source.formats.registry import registry
    from kafkasync_source.spark.schema import arrow_schema

    topic = f"decoded-evolution-{time.time_ns()}"
    collected = _Collected()
    evolution = evolving_topic(collected, schema_registry_url, topic, per_version=4, start_ms=T)
    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": topic,
                             "value.format": "avro-confluent", "schema.registry.url": schema_registry_url,
                             "value.decode": "true"}, streaming=True)
    (value_format,) = options.decoded_formats
    arrow_type = arrow_schema(types.StructType([types.StructField("v", value_format.spark_type())])).field("v").type
    values = [record.value for record in collected.records]
    values[2:2] = [None, b"{\"ts\": 1}", b"\x00\x7f\xff\xff\xf0" + values[0][5:]]
    records = [Message(topic=topic, partition=0, offset=i, value=value, timestamp=(1, T))
               for i, value in enumerate(values)]

    client = registry(value_format.registry)
    reader = json.loads(value_format.reader_schema().schema_str)
    expected = []
    for value in values:
        if value is None or value[:1] != b"\x00" or value[1:5] == b"\x7f\xff\xff\xf0":
            expected.append(None)
            continue
        writer = json.loads(client.schema(int.from_bytes(value[1:5], "big")).schema_str)
        expected.append(fastavro.schemaless_reader(io.BytesIO(value[5:]), writer, reader))
    expected_column = pa.array(expected, type=arrow_type)

    decode = value_format.column_decoder(arrow_type)
    decoded = decode(records)
    assert decoded.values.to_pylist() == expected_column.to_pylist()
    # The tombstone is null, not undecodable; the stray JSON and the unknown id are named.
    assert [(row.row, row.kind, row.schema_id) for row in decoded.undecodable] == [
        (3, "not-framed", None), (4, "unknown-schema", 0x7ffffff0)]
    assert [decode([record]).values.to_pylist()[0] for record in records] == expected_column.to_pylist()
    assert expected_column.null_count == 3 and len({v[1:5] for v in values if v and v[:1] == b"\x00"}) == 4
    codec = _codec(value_format)  # every writer schema compiled to a numpy decoder (formats/avro/columns.py)
    assert all(codec.writer(written.schema_id).column(arrow_type) is not None for written in evolution.records)
