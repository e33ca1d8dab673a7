"""Schema Registry formats, the parts that need no registry: Confluent's framing, the Avro field
reader against fastavro's own decoding, Avro resolution, logical times, Spark types, and
settings whose secrets never show. (Against a real registry: tests/test_formats_registry.py.)"""

from __future__ import annotations

import io
import json
import re

import fastavro
import numpy as np
import pytest
from confluent_kafka.schema_registry._sync.protobuf import ProtobufSerializer
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats import framing
from kafkasync_source.formats.avro import (
    _compile_leaf,
    _Names,
    _reader_path,
    _spark_type,
    _time_converter,
    check_resolution,
    parse_field_path,
)
from kafkasync_source.formats.avro.batch import NotInBatch
from kafkasync_source.formats.options import require_extra
from kafkasync_source.formats.registry import KafkaSyncFormatError, RegistrySettings

ROW = {"type": "record", "name": "Value", "namespace": "dbserver1.inventory.customers", "fields": [
    {"name": "id", "type": "int"},
    {"name": "first_name", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attributes", "type": {"type": "map", "values": ["null", "long"]}},
    {"name": "score", "type": "double"},
    {"name": "active", "type": "boolean"},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "choice", "type": ["null", "int", "string", "Digest"]},
    {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
]}
SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.mysql", "fields": [
    {"name": "version", "type": "string"},
    {"name": "name", "type": "string"},
    {"name": "ts_ms", "type": "long"},
    {"name": "db", "type": "string"},
]}
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.customers", "fields": [
    {"name": "before", "type": ["null", ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "source", "type": SOURCE},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None},
]}
"""A Debezium change event's shape (Debezium's Avro converter: before, after, source{ts_ms}, op,
ts_ms), its rows given every kind of Avro type, so that skipping to the path crosses them all."""


def framed(schema: dict, record: dict, schema_id: int = 7) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()


def reader_of(writer: dict, path: str, reader: dict | None = None, schema_id: int = 7):
    steps = parse_field_path(path)
    reader_path = None if reader is None else _reader_path(_Names(json.dumps(reader)), steps, path)
    leaf = _compile_leaf(_Names(json.dumps(writer)), reader_path, steps, schema_id)
    return lambda payload: leaf.read(payload, framing.HEADER_BYTES), leaf.logical


# --- Confluent's framing ----------------------------------------------------------------------

def test_the_schema_id_is_the_four_bytes_after_the_magic_byte():
    assert framing.schema_id(b"\x00\x00\x01\x00\x02rest") == 65538


@pytest.mark.parametrize("payload, why", [
    (None, "tombstone"), (b"\x00\x00\x00\x01", "too short"), (b"", "too short"),
    (b"\x01\x00\x00\x00\x01abc", "not Confluent's magic byte"), (b"{\"ts\": 1}", "not Confluent's magic byte"),
])
def test_a_payload_that_is_not_framed_is_an_invalid_time_saying_why(payload, why):
    with pytest.raises(framing.NotFramed, match=why) as failure:
        framing.schema_id(payload)
    assert isinstance(failure.value, InvalidTime)


@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5))
def test_protobuf_message_indexes_read_as_confluent_kafka_writes_them(indexes):
    written = io.BytesIO()
    written.write(b"\x00\x00\x00\x00\x09")
    if indexes == [0]:
        written.write(b"\x00")  # the serializer's shortcut for the first message
    else:
        ProtobufSerializer._encode_varints(written, indexes, zigzag=True)
    written.write(b"message")
    payload = written.getvalue()
    assert framing.protobuf_indexes(payload) == (tuple(indexes), len(payload) - len(b"message"))


def test_protobuf_indexes_cut_short_are_not_framed():
    with pytest.raises(framing.NotFramed):
        framing.protobuf_indexes(b"\x00\x00\x00\x00\x09\x04\x02")


# --- A field's time: skipping to it reads what fastavro decodes --------------------------------

rows = st.fixed_dictionaries({
    "id": st.integers(-2**31, 2**31 - 1),
    "first_name": st.text(max_size=40),
    "tags": st.lists(st.text(max_size=8), max_size=4),
    "attributes": st.dictionaries(st.text(max_size=6), st.none() | st.integers(-2**63, 2**63 - 1), max_size=3),
    "score": st.floats(allow_nan=False),
    "active": st.booleans(),
    "digest": st.binary(min_size=4, max_size=4),
    "kind": st.sampled_from(["A", "B"]),
    "choice": st.none() | st.integers(-2**31, 2**31 - 1) | st.text(max_size=5),
    "updated_at": st.integers(0, 253_402_300_799_999_999),  # up to year 9999: fastavro makes it a datetime
})
envelopes = st.fixed_dictionaries({
    "before": st.none() | rows, "after": st.none() | rows,
    "source": st.fixed_dictionaries({"version": st.text(max_size=20), "name": st.text(max_size=20),
                                     "ts_ms": st.integers(-2**63, 2**63 - 1), "db": st.text(max_size=10)}),
    "op": st.sampled_from(["c", "u", "d", "r"]), "ts_ms": st.none() | st.integers(0, 2**62),
})


@settings(max_examples=150, deadline=None)
@given(envelopes)
def test_the_field_reader_finds_what_fastavro_decodes(event):
    payload = framed(ENVELOPE, event)
    decoded = fastavro.schemaless_reader(io.BytesIO(payload[5:]), fastavro.parse_schema(ENVELOPE), None,
                                         return_record_name=False)
    read_source, _ = reader_of(ENVELOPE, "source.ts_ms")
    assert read_source(payload) == decoded["source"]["ts_ms"]
    read_updated, logical = reader_of(ENVELOPE, "after.updated_at")
    assert logical == "timestamp-micros"
    if event["after"] is None:
        with pytest.raises(InvalidTime, match="after is null"):
            read_updated(payload)
    else:
        assert read_updated(payload) == event["after"]["updated_at"]
    read_ts, _ = reader_of(ENVELOPE, "ts_ms")
    if event["ts_ms"] is None:
        with pytest.raises(InvalidTime, match="ts_ms is null"):
            read_ts(payload)
    else:
        assert read_ts(payload) == event["ts_ms"]


@settings(max_examples=60, deadline=None)
@given(st.lists(envelopes, min_size=1, max_size=12), st.sampled_from(["source.ts_ms", "after.updated_at", "ts_ms"]))
def test_a_batch_reads_what_each_record_reads_or_leaves_the_batch_to_them(events, path):
    """The numpy batch reader (avro_batch.py) gives every record's value as the record reader
    does, or declines the whole batch where one record has none (a null on the path)."""
    payloads = [framed(ENVELOPE, event) for event in events]
    steps = parse_field_path(path)
    leaf = _compile_leaf(_Names(json.dumps(ENVELOPE)), None, steps, 7)
    expected = []
    for payload in payloads:
        try:
            expected.append(leaf.read(payload, framing.HEADER_BYTES))
        except InvalidTime:
            expected.append(None)
    buf = np.frombuffer(b"".join(payloads), dtype=np.uint8)
    ends = np.cumsum([len(p) for p in payloads])
    starts = ends - [len(p) for p in payloads]
    if None in expected:
        with pytest.raises(NotInBatch):
            leaf.read_batch(buf, starts + framing.HEADER_BYTES, ends)
    else:
        assert leaf.read_batch(buf, starts + framing.HEADER_BYTES, ends).tolist() == expected


long_text = st.text(max_size=90)
"""Strings of 0 to 360 UTF-8 bytes: lengths of one byte (0-63) and of two, so that the time
reader's table skip (one look-up for a length of 0-63) and its exact fallback both run."""
long_envelopes = envelopes.flatmap(lambda e: st.fixed_dictionaries({
    "version": long_text, "name": long_text}).map(lambda s: {**e, "source": {**e["source"], **s}}))


@settings(max_examples=200, deadline=None)
@given(long_envelopes, st.sampled_from(["source.ts_ms", "after.updated_at", "ts_ms"]))
def test_the_whole_time_reader_answers_as_the_field_reader_then_the_conversion(event, path):
    """``_Leaf.time_of`` (header skipped, the table skip, the leaf and the conversion in one
    generated function) gives the time, or the InvalidTime, that reading the field and then
    converting it gives, whatever the strings' lengths before the path."""
    payload = framed(ENVELOPE, event)
    leaf = _compile_leaf(_Names(json.dumps(ENVELOPE)), None, parse_field_path(path), 7, "epochMillis")
    convert = _time_converter(leaf.logical, "epochMillis")
    try:
        expected = convert(leaf.read(payload, framing.HEADER_BYTES))
    except InvalidTime as why:
        with pytest.raises(InvalidTime, match=re.escape(str(why))):
            leaf.time_of(payload)
    else:
        assert leaf.time_of(payload) == expected


def test_the_whole_time_reader_refuses_a_negative_string_length():
    """A string's length is a zigzag varint; an odd first byte is a negative length, which no
    writer writes: an invalid time, not a jump backwards to read some other bytes as the time."""
    event = {"before": None, "after": None, "op": "c", "ts_ms": None,
             "source": {"version": "2.5", "name": "db", "ts_ms": 1_700_000_000_000, "db": "x"}}
    payload = bytearray(framed(ENVELOPE, event))
    assert payload[7] == 2 * len("2.5")  # after the header and the two null unions: source.version's length
    payload[7] = 3  # zigzag -2
    leaf = _compile_leaf(_Names(json.dumps(ENVELOPE)), None, ["source", "ts_ms"], 7, "epochMillis")
    for read in (leaf.time_of, lambda p: leaf.read(p, framing.HEADER_BYTES)):
        with pytest.raises(InvalidTime, match="a negative length"):
            read(bytes(payload))


def test_a_payload_cut_short_runs_out_before_the_field():
    payload = framed(ENVELOPE, {"before": None, "after": None, "op": "c", "ts_ms": None,
                                "source": {"version": "2.5", "name": "db", "ts_ms": 5, "db": "x"}})
    read, _ = reader_of(ENVELOPE, "source.ts_ms")
    with pytest.raises(IndexError):
        read(payload[:12])
    leaf = _compile_leaf(_Names(json.dumps(ENVELOPE)), None, ["source", "ts_ms"], 7, "epochMillis")
    with pytest.raises(IndexError):  # the table skip's jump past the payload, then the exact reader's
        leaf.time_of(payload[:12])


@pytest.mark.parametrize("path, why", [
    ("source.nope", "source has no field 'nope' \\(its fields: version, name, ts_ms, db\\)"),
    ("op.x", "op is a string, not a record"),
    ("source", "is a record; a time is a number or a string"),
    ("source..ts_ms", "field names joined by '.'"),
])
def test_a_path_the_reader_schema_does_not_have_is_refused_naming_the_option(path, why):
    with pytest.raises(ValueError, match=why) as failure:
        reader_of(ENVELOPE, path, reader=ENVELOPE)
    assert "eventTime.field" in str(failure.value)


# --- Evolution: the path in the reader's names, each writer resolved to it ----------------------

V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
V3 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""},
    {"name": "event_ts", "aliases": ["ts"], "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "region", "type": "string", "default": "eu"}]}


@pytest.mark.parametrize("writer, record", [
    (V1, {"id": 1, "ts": 1_700_000_000_000}),
    (V2, {"id": 2, "note": "moved", "ts": 1_700_000_000_000}),
    (V3, {"id": 3, "note": "", "event_ts": 1_700_000_000_000, "region": "us"}),
])
def test_a_renamed_field_is_found_through_the_readers_alias_in_every_writer(writer, record):
    read, logical = reader_of(writer, "event_ts", reader=V3)
    assert read(framed(writer, record)) == 1_700_000_000_000 and logical == "timestamp-millis"
    check_resolution(_Names(json.dumps(writer)), _Names(json.dumps(V3)), 7)  # and the whole value resolves


def test_a_field_the_writer_lacks_takes_the_readers_default():
    reader = {**V3, "fields": [*V3["fields"][:3], {"name": "region", "type": "long", "default": 1_600_000_000_000}]}
    read, _ = reader_of(V1, "region", reader=reader)
    assert read(framed(V1, {"id": 1, "ts": 5})) == 1_600_000_000_000
    reader_path = _reader_path(_Names(json.dumps(reader)), ["region"], "region")
    leaf = _compile_leaf(_Names(json.dumps(V1)), reader_path, ["region"], 7, "epochSeconds")
    assert leaf.time_of(framed(V1, {"id": 1, "ts": 5})) == 1_600_000_000_000_000  # the default, as a time


@pytest.mark.parametrize("writer, field, why", [
    ({**V1, "fields": [{"name": "id", "type": "long"}, {"name": "ts", "type": "string"}]}, "event_ts",
     "is a string in the writer schema, which does not resolve to the reader's long"),
    ({**V1, "fields": [{"name": "id", "type": "long"}]}, "event_ts",
     "is missing from the writer schema and has no default"),
])
def test_a_writer_that_does_not_resolve_fails_naming_the_schema_id_and_the_field(writer, field, why):
    with pytest.raises(KafkaSyncFormatError, match=f"writer schema id 42 .*field '{field}' {why}"):
        reader_of(writer, field, reader=V3, schema_id=42)
    with pytest.raises(KafkaSyncFormatError, match=f"writer schema id 42 .*'{field}' {why}"):
        check_resolution(_Names(json.dumps(writer)), _Names(json.dumps(V3)), 42)


def test_a_mismatch_inside_a_union_branch_names_the_field_inside_it():
    bad_row = {**ROW, "fields": [*ROW["fields"][:4], {"name": "score", "type": "string"}, *ROW["fields"][5:]]}
    writer = {**ENVELOPE, "fields": [{"name": "before", "type": ["null", bad_row], "default": None},
                                     *ENVELOPE["fields"][1:]]}
    with pytest.raises(KafkaSyncFormatError, match="field 'before.score' is a string in the writer schema, which "
                                                   "does not resolve to the reader's double"):
        check_resolution(_Names(json.dumps(writer)), _Names(json.dumps(ENVELOPE)), 3)


def test_resolution_follows_promotions_and_refuses_narrowing():
    wide = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "double"}]}
    narrow = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    check_resolution(_Names(json.dumps(narrow)), _Names(json.dumps(wide)), 1)  # int -> double: a promotion
    with pytest.raises(KafkaSyncFormatError, match="field 'n' is a double in the writer schema"):
        check_resolution(_Names(json.dumps(wide)), _Names(json.dumps(narrow)), 1)


# --- Logical types are times as they are; other values follow eventTime.format -----------------

@pytest.mark.parametrize("logical, time_format, value, expected", [
    ("timestamp-millis", "epochSeconds", 1_700_000_000_123, 1_700_000_000_123),
    ("timestamp-micros", "epochMillis", 1_700_000_000_123_999, 1_700_000_000_123),
    ("local-timestamp-millis", "epochMillis", 1_700_000_000_123, 1_700_000_000_123),
    ("local-timestamp-micros", "epochMillis", 1_700_000_000_123_456, 1_700_000_000_123),
    ("timestamp-nanos", "epochMillis", 1_700_000_000_123_456_789, 1_700_000_000_123),
    ("date", "epochMillis", 19_675, 19_675 * 86_400_000),
    (None, "epochSeconds", 1_700_000_000, 1_700_000_000_000),
    (None, "epochMicros", 1_700_000_000_123_456, 1_700_000_000_123),
    (None, "iso8601", "2023-11-14T22:13:20.123Z", 1_700_000_000_123),
    (None, "epochMillis", "1700000000123", 1_700_000_000_123),
])
def test_logical_times_and_formats(logical, time_format, value, expected):
    assert _time_converter(logical, time_format)(value) == expected


@pytest.mark.parametrize("logical, value", [("timestamp-millis", -1), ("timestamp-millis", 2**63 - 1),
                                            (None, "yesterday")])
def test_a_time_before_1970_beyond_sparks_range_or_not_a_time_is_invalid(logical, value):
    with pytest.raises(InvalidTime):
        _time_converter(logical, "epochMillis")(value)


# --- Spark types: from_avro's ----------------------------------------------------------------

def test_spark_types_follow_from_avro():
    names = _Names(json.dumps(ENVELOPE))
    envelope, nullable = _spark_type(names.root, names)
    assert not nullable
    row = envelope["after"].dataType
    assert envelope["after"].nullable and not envelope["op"].nullable
    assert envelope["ts_ms"].dataType == T.LongType() and envelope["ts_ms"].nullable
    assert row["tags"].dataType == T.ArrayType(T.StringType(), False)
    assert row["attributes"].dataType == T.MapType(T.StringType(), T.LongType(), True)
    assert row["digest"].dataType == T.BinaryType() and row["kind"].dataType == T.StringType()
    assert row["updated_at"].dataType == T.TimestampType()
    # A union of several types: a struct of member0, member1, ... (null left out, every member nullable).
    assert row["choice"].dataType == T.StructType([
        T.StructField("member0", T.IntegerType()), T.StructField("member1", T.StringType()),
        T.StructField("member2", T.BinaryType())])
    promoted = _Names(json.dumps({"type": "record", "name": "P", "fields": [
        {"name": "n", "type": ["int", "long"]}, {"name": "d", "type": ["null", "float", "double"]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}]}))
    p, _ = _spark_type(promoted.root, promoted)
    assert [f.dataType for f in p.fields] == [T.LongType(), T.DoubleType(), T.TimestampNTZType(), T.DateType(),
                                               T.DecimalType(9, 2)]


# --- Settings, secrets, the extra ------------------------------------------------------------

def test_registry_settings_never_show_credentials():
    settings_ = RegistrySettings("https://svc:url-pw-5521@registry.example:8081/x, https://other:8081",
                                 (("basic.auth.user.info", "svc:ui-pw-7781"), ("ssl.key.password", "key-pw-991"),
                                  ("ssl.ca.location", "/etc/ca.pem")))
    shown = repr(settings_) + settings_.display_url + settings_.scrub(
        "failed for svc:ui-pw-7781 at https://svc:url-pw-5521@registry.example:8081 with key-pw-991")
    for secret in ("url-pw-5521", "ui-pw-7781", "key-pw-991"):
        assert secret not in shown
    assert "registry.example:8081" in shown and "https://other:8081" in settings_.display_url
    conf = RegistrySettings("http://r", (("timeout", "3"), ("max.retries", "1"))).client_conf()
    assert conf["timeout"] == 3.0 and conf["max.retries"] == 1  # numbers, as confluent-kafka's client demands


def test_a_format_without_its_decoders_names_the_extra(monkeypatch):
    from kafkasync_source.formats import options

    monkeypatch.setitem(options._MODULES, "avro-confluent", ("kafkasync_no_such_decoder",))
    with pytest.raises(ValueError, match=r"value.format=avro-confluent.*pip install 'kafkasync\[registry\]'"
                                         r".*kafkasync_no_such_decoder is missing"):
        require_extra("avro-confluent", "value.format")
