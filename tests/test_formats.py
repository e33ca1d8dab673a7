"""Schema Registry formats, the parts that need no registry: Confluent's framing, the Avro field
reader against fastavro's own decoding, Avro resolution, logical times, Spark types, and
settings whose secrets never show. (Against a real registry: tests/test_formats_registry.py.)"""

from __future__ import annotations

import io
import json
import re

import pytest
from avro_support import codec, decode, framed, time_at
from confluent_kafka.schema_registry._sync.protobuf import ProtobufSerializer
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples
from pyspark.sql import types as T

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime
from kafkasync_source.formats import framing
from kafkasync_source.formats.avro.schema import parse
from kafkasync_source.formats.avro.spark_types import spark_type
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
PATHS = {"source.ts_ms": lambda e: e["source"]["ts_ms"],
         "after.updated_at": lambda e: None if e["after"] is None else e["after"]["updated_at"] // 1000,
         "ts_ms": lambda e: e["ts_ms"]}
"""Each path's expected time in ms from the event as written (``updated_at`` is in µs)."""


def expected_time(event: dict, path: str):
    value = PATHS[path](event)
    if value is None:
        return "null"
    return value if 0 <= value <= MAX_TIME_MS else "invalid"


@settings(max_examples=examples(150), deadline=None)
@given(envelopes)
def test_the_field_reader_finds_what_was_written(event):
    payload = framed(ENVELOPE, event)
    for path in PATHS:
        got = time_at(ENVELOPE, path, payload)
        want = expected_time(event, path)
        if want == "null":
            assert got == f"invalid: {path.rpartition('.')[0] or path} is null"
        elif want == "invalid":
            assert isinstance(got, str) and got.startswith("invalid")
        else:
            assert got == want


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(envelopes, min_size=1, max_size=12), st.sampled_from(sorted(PATHS)))
def test_a_batch_reads_what_each_record_reads_or_leaves_the_batch_to_them(events, path):
    """The numpy batch reader (avro/batch.py) gives every record's time as the record reader
    does, or declines the whole batch where one record has none (a null on the path)."""
    payloads = [framed(ENVELOPE, event) for event in events]
    reader = codec(ENVELOPE).time_path(path, "epochMillis")
    expected = []
    for payload in payloads:
        try:
            expected.append(reader.time_of(payload))
        except InvalidTime:
            expected.append(None)
    assert reader.batch(payloads) == (None if None in expected else expected)


long_text = st.text(max_size=90)
"""Strings of 0 to 360 UTF-8 bytes: lengths of one byte (0-63) and of two, so that the time
reader's table skip (one look-up for a length of 0-63) and its exact fallback both run."""
long_envelopes = envelopes.flatmap(lambda e: st.fixed_dictionaries({
    "version": long_text, "name": long_text}).map(lambda s: {**e, "source": {**e["source"], **s}}))


@settings(max_examples=examples(200), deadline=None)
@given(long_envelopes, st.sampled_from(sorted(PATHS)))
def test_the_time_reader_skips_strings_of_any_length_before_the_path(event, path):
    """The generated reader's table skip (strings of 0-63 bytes) and its exact fallback give the
    same time, whatever the strings' lengths before the path."""
    got = time_at(ENVELOPE, path, framed(ENVELOPE, event))
    want = expected_time(event, path)
    assert got == want if isinstance(want, int) else isinstance(got, str)


def test_the_time_reader_refuses_a_negative_string_length():
    """A string's length is a zigzag varint; an odd first byte is a negative length, which no
    writer writes: an invalid time, not a jump backwards to read some other bytes as the time."""
    event = {"before": None, "after": None, "op": "c", "ts_ms": None,
             "source": {"version": "2.5", "name": "db", "ts_ms": 1_700_000_000_000, "db": "x"}}
    payload = bytearray(framed(ENVELOPE, event))
    assert payload[7] == 2 * len("2.5")  # after the header and the two null unions: source.version's length
    payload[7] = 3  # zigzag -2
    assert time_at(ENVELOPE, "source.ts_ms", bytes(payload)).startswith("invalid: a negative length")


def test_a_payload_cut_short_runs_out_before_the_field():
    payload = framed(ENVELOPE, {"before": None, "after": None, "op": "c", "ts_ms": None,
                                "source": {"version": "2.5", "name": "db", "ts_ms": 5, "db": "x"}})
    assert time_at(ENVELOPE, "source.ts_ms", payload) == 5
    assert time_at(ENVELOPE, "source.ts_ms", payload[:12]).startswith("invalid: the payload ends before the field")


@pytest.mark.parametrize("path, why", [
    ("source.nope", "source has no field 'nope' \\(its fields: version, name, ts_ms, db\\)"),
    ("op.x", "op is a string, not a record"),
    ("source", "is a record; a time is a number or a string"),
    ("source..ts_ms", "field names joined by '.'"),
])
def test_a_path_the_reader_schema_does_not_have_is_refused_naming_the_option(path, why):
    with pytest.raises(ValueError, match=why) as failure:
        codec(ENVELOPE, ENVELOPE).time_path(path, "epochMillis")
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
    payload = framed(writer, record)
    assert time_at(writer, "event_ts", payload, reader=V3, time_format="epochSeconds") == 1_700_000_000_000
    values, undecodable = decode(writer, V3, [payload])  # and the whole value resolves
    assert undecodable == [] and values[0]["event_ts"].timestamp() == 1_700_000_000


def test_a_field_the_writer_lacks_takes_the_readers_default():
    reader = {**V3, "fields": [*V3["fields"][:3], {"name": "region", "type": "long", "default": 1_600_000_000_000}]}
    payload = framed(V1, {"id": 1, "ts": 5})
    assert time_at(V1, "region", payload, reader=reader) == 1_600_000_000_000
    assert time_at(V1, "region", payload, reader=reader, time_format="epochSeconds") == 1_600_000_000_000_000


@pytest.mark.parametrize("writer, field, why", [
    ({**V1, "fields": [{"name": "id", "type": "long"}, {"name": "ts", "type": "string"}]}, "event_ts",
     "is a string in the writer schema, which does not resolve to the reader's long"),
    ({**V1, "fields": [{"name": "id", "type": "long"}]}, "event_ts",
     "is missing from the writer schema and has no default"),
])
def test_a_writer_that_does_not_resolve_fails_naming_the_schema_id_and_the_field(writer, field, why):
    payload = framed(writer, {"id": 1} if len(writer["fields"]) == 1 else {"id": 1, "ts": "x"}, schema_id=42)
    with pytest.raises(KafkaSyncFormatError, match=f"writer schema id 42 .*field '{field}' {why}"):
        time_at({42: writer}, field, payload, reader=V3)
    _, undecodable = decode({42: writer}, V3, [payload])
    assert [(u.kind, u.schema_id) for u in undecodable] == [("incompatible", 42)]
    assert re.search(f"writer schema id 42 .*field '{field}' {why}", undecodable[0].reason)


def test_a_mismatch_inside_a_union_branch_names_the_field_inside_it():
    bad_row = {**ROW, "fields": [*ROW["fields"][:4], {"name": "score", "type": "string"}, *ROW["fields"][5:]]}
    writer = {**ENVELOPE, "fields": [{"name": "before", "type": ["null", bad_row], "default": None},
                                     *ENVELOPE["fields"][1:]]}
    row = {"id": 1, "first_name": "a", "tags": [], "attributes": {}, "score": "high", "active": True,
           "digest": b"abcd", "kind": "A", "choice": None, "updated_at": 0}
    event = {"before": row, "after": None, "op": "u", "ts_ms": None,
             "source": {"version": "1", "name": "n", "ts_ms": 5, "db": "d"}}
    _, undecodable = decode(writer, ENVELOPE, [framed(writer, event)])
    assert undecodable[0].kind == "incompatible"
    # before and after share the record Value: its field is named by the record's full name, true
    # at either path (test_avro_findings: a record reached at two paths)
    assert ("field 'dbserver1.inventory.customers.Value.score' is a string in the writer schema, which does not "
            "resolve to the reader's double") in undecodable[0].reason


def test_resolution_follows_promotions_and_refuses_narrowing():
    wide = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "double"}]}
    narrow = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    assert decode(narrow, wide, [framed(narrow, {"n": 3})]) == ([{"n": 3.0}], [])  # int -> double: a promotion
    _, undecodable = decode(wide, narrow, [framed(wide, {"n": 3.0})])
    assert "field 'n' is a double in the writer schema" in undecodable[0].reason


# --- Logical types are times as they are; other values follow eventTime.format -----------------

@pytest.mark.parametrize("leaf, time_format, value, expected", [
    ({"type": "long", "logicalType": "timestamp-millis"}, "epochSeconds", 1_700_000_000_123, 1_700_000_000_123),
    ({"type": "long", "logicalType": "timestamp-micros"}, "epochMillis", 1_700_000_000_123_999, 1_700_000_000_123),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "epochMillis", 1_700_000_000_123, 1_700_000_000_123),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "epochMillis", 1_700_000_000_123_456,
     1_700_000_000_123),
    ({"type": "long", "logicalType": "timestamp-nanos"}, "epochMillis", 1_700_000_000_123_456_789, 1_700_000_000_123),
    ({"type": "int", "logicalType": "date"}, "epochMillis", 19_675, 19_675 * 86_400_000),
    ("long", "epochSeconds", 1_700_000_000, 1_700_000_000_000),
    ("long", "epochMicros", 1_700_000_000_123_456, 1_700_000_000_123),
    ("string", "iso8601", "2023-11-14T22:13:20.123Z", 1_700_000_000_123),
    ("string", "epochMillis", "1700000000123", 1_700_000_000_123),
    ("double", "epochSeconds", 1_700_000_000.25, 1_700_000_000_250),
])
def test_logical_times_and_formats(leaf, time_format, value, expected):
    schema = {"type": "record", "name": "R", "fields": [{"name": "t", "type": leaf}]}
    payload = framed(schema, {"t": value})
    assert time_at(schema, "t", payload, time_format=time_format) == expected
    path = codec(schema).time_path("t", time_format)
    assert path.batch([payload, payload]) in (None, [expected, expected])  # by numpy, or left to each record


@pytest.mark.parametrize("leaf, value", [({"type": "long", "logicalType": "timestamp-millis"}, -1),
                                         ({"type": "long", "logicalType": "timestamp-millis"}, 2**63 - 1),
                                         ("string", "yesterday")])
def test_a_time_before_1970_beyond_sparks_range_or_not_a_time_is_invalid(leaf, value):
    schema = {"type": "record", "name": "R", "fields": [{"name": "t", "type": leaf}]}
    payload = framed(schema, {"t": value})
    assert str(time_at(schema, "t", payload)).startswith("invalid")
    assert codec(schema).time_path("t", "epochMillis").batch([payload]) is None


# --- Spark types: from_avro's ----------------------------------------------------------------

def test_spark_types_follow_from_avro():
    envelope = spark_type(parse(json.dumps(ENVELOPE)))
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
    p = spark_type(parse(json.dumps({"type": "record", "name": "P", "fields": [
        {"name": "n", "type": ["int", "long"]}, {"name": "d", "type": ["null", "float", "double"]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}]})))
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
