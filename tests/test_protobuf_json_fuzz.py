"""Bounded on any bytes (issue 61, deliverable 3): the Protobuf and JSON Schema readers and
Confluent's framing, on mutated valid records and on random bytes. Each call ends in a value, a
named invalid time (InvalidTime) or a named undecodable row; nothing else escapes (the registry
double knows its ids or answers 404, so no format error is due). Time stays linear in the input:
the framing refuses a count of message indexes larger than the bytes left before reading any,
and every reader here is bounded by the parsers it hands the bytes to (upb, msgspec). Example
counts follow tests/property_budget.py."""

from __future__ import annotations

import json

from confluent_kafka.schema_registry import Schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_budget import examples
from pyspark.sql import types as T
from registry_double import RegistryDouble, framed, record
from test_protobuf_decode import FIELD, ORDER, built, proto_file

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats import decoded
from kafkasync_source.formats.framing import NotFramed, protobuf_indexes, schema_id
from kafkasync_source.formats.options import JSON_SCHEMA, PROTOBUF
from kafkasync_source.spark.schema import arrow_schema

FUZZ = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw, valid: list[bytes]) -> bytes:
    """A valid payload with bytes flipped, cut, inserted or repeated; or random bytes behind a header."""
    payload = bytearray(draw(st.sampled_from(valid)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(payload)))
        action = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        if action == "flip" and at < len(payload):
            payload[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del payload[at:]
        elif action == "insert":
            payload[at:at] = draw(st.binary(min_size=1, max_size=12))
        elif action == "repeat":
            payload[at:at] = payload[at:at + draw(st.integers(1, 16))] * draw(st.integers(1, 8))
    return bytes(payload)


def payloads(valid: list[bytes], schema_ref: int) -> st.SearchStrategy:
    random = st.binary(max_size=64)
    return st.one_of(mutated(valid), random, random.map(lambda body: framed(schema_ref, body)), st.none())


# --- the framing ---------------------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=40))
def test_the_framing_reads_any_bytes_into_an_id_and_indexes_or_says_not_framed(payload):
    try:
        assert 0 <= schema_id(payload) < 2**32
        indexes, start = protobuf_indexes(payload)
    except NotFramed:
        return
    assert all(index >= 0 for index in indexes) and 5 < start <= len(payload)


# --- Protobuf ------------------------------------------------------------------------------------

def _protobuf_setup():
    double = RegistryDouble()
    proto = proto_file("fuzz", {"Audit": [("note", 1, FIELD.TYPE_STRING)], "Order": [
        *ORDER["Order"], ("tags", 6, FIELD.TYPE_SINT64, None, FIELD.LABEL_REPEATED),
        ("took", 7, FIELD.TYPE_MESSAGE, ".google.protobuf.Duration"), ("kind", 8, FIELD.TYPE_ENUM, ".shop.Kind"),
        ("child", 9, FIELD.TYPE_MESSAGE, ".shop.Audit")]}, enums={"Kind": [("A", 0), ("B", 1)]})
    proto.message_type[1].field[5].options.packed = True
    file, classes = built(proto)
    schema_ref = double.add_protobuf(file)
    order = classes["Order"](id="o-1", count=2**32 - 1, total=2**64 - 1, ts_ms=1_700_000_000_000, tags=[-1, 2**40],
                             kind=1)
    order.at.seconds, order.at.nanos = 1_700_000_000, 5
    order.took.seconds = -3
    order.child.note = "n"
    valid = [framed(schema_ref, order.SerializeToString(), b"\x02\x02"),
             framed(schema_ref, classes["Audit"](note="x").SerializeToString(), b"\x00")]
    return double, schema_ref, valid


PROTOBUF_DOUBLE, PROTOBUF_ID, PROTOBUF_VALID = _protobuf_setup()
PROTOBUF_OPTIONS = PROTOBUF_DOUBLE.options(PROTOBUF, PROTOBUF_ID, record_name="shop.Order")
PROTOBUF_TIMES = [PROTOBUF_OPTIONS.time_reader(path, "epochMillis") for path in ("at", "ts_ms", "child.note")]
PROTOBUF_WRITER_TIMES = PROTOBUF_DOUBLE.options(PROTOBUF, None, decode=False).time_reader("ts_ms", "epochMillis")


def _arrow_type(options):
    return arrow_schema(T.StructType([T.StructField("v", options.spark_type())])).field("v").type


PROTOBUF_COLUMN = PROTOBUF_OPTIONS.column_decoder(_arrow_type(PROTOBUF_OPTIONS))


def assert_named(column, count: int) -> None:
    """Every row a value, or null and named with a kind and a reason; tombstones only null."""
    assert len(column.values) == count
    for row in column.undecodable:
        assert row.kind in decoded.KINDS and row.reason and column.values[row.row].as_py() is None


@FUZZ
@given(payloads(PROTOBUF_VALID, PROTOBUF_ID))
def test_protobuf_readers_on_any_bytes_end_in_a_value_an_invalid_time_or_a_named_row(payload):
    PROTOBUF_DOUBLE.install()
    for read in (*PROTOBUF_TIMES, PROTOBUF_WRITER_TIMES):
        try:
            assert isinstance(read(record(payload)), int)
        except InvalidTime as why:
            assert str(why)
    assert_named(PROTOBUF_COLUMN([record(payload), record(PROTOBUF_VALID[0])]), 2)


# --- JSON Schema ---------------------------------------------------------------------------------

JSON_DOUBLE = RegistryDouble()
JSON_ID = JSON_DOUBLE.add(Schema(json.dumps({
    "type": "object", "properties": {"id": {"type": "string"}, "ts": {"type": "integer"},
                                     "source": {"type": "object", "properties": {"ts_ms": {"type": "integer"}}},
                                     "tags": {"type": "array", "items": {"type": "number"}},
                                     "extra": {"type": "object", "additionalProperties": {"type": "boolean"}}}}),
    "JSON"))
JSON_OPTIONS = JSON_DOUBLE.options(JSON_SCHEMA, JSON_ID)
JSON_VALID = [framed(JSON_ID, json.dumps({"id": "a", "ts": 1_700_000_000_000, "source": {"ts_ms": 5},
                                          "tags": [1.5, -2], "extra": {"x": True}}).encode()),
              framed(JSON_ID, b'{"id": "\\u00e9\\ud83d\\ude00", "ts": "1700000000000", "tags": [], "source": null}')]
JSON_TIMES = [JSON_OPTIONS.time_reader(path, "epochMillis") for path in ("ts", "source.ts_ms")]
JSON_COLUMN = JSON_OPTIONS.column_decoder(_arrow_type(JSON_OPTIONS))


@FUZZ
@given(payloads(JSON_VALID, JSON_ID))
def test_json_schema_readers_on_any_bytes_end_in_a_value_an_invalid_time_or_a_named_row(payload):
    JSON_DOUBLE.install()
    for read in JSON_TIMES:
        try:
            assert isinstance(read(record(payload)), int)
        except InvalidTime as why:
            assert str(why)
    assert_named(JSON_COLUMN([record(payload), record(JSON_VALID[0])]), 2)
