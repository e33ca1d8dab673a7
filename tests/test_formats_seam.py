"""The Avro field's time through the one seam, against a real registry (Apicurio,
``schema_registry_url``) and without Spark: records are ``confluent_kafka.Message`` objects as a
consumer hands them over, their values written by confluent-kafka's ``AvroSerializer``."""

from __future__ import annotations

import time
from dataclasses import replace

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
