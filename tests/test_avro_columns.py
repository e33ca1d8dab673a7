"""``value.decode`` by numpy (formats/avro_columns.py) against fastavro's decoding: the same
Arrow values for arbitrary records, across a writer schema's evolution (a field added with a
default, one renamed through an alias, promotions), or a refusal (``NotInBatch``) that sends the
run through fastavro; never another value."""

from __future__ import annotations

import io
import json
import math

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from kafkasync_source.formats.avro import _arrow_values, _field_index, _kind, _Names, _spark_type
from kafkasync_source.formats.avro.batch import NotInBatch
from kafkasync_source.formats.avro.columns import Columns, decode_run
from kafkasync_source.spark.schema import arrow_schema

ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "int"},
    {"name": "big", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "blob", "type": "bytes"},
    {"name": "score", "type": "double"},
    {"name": "ratio", "type": "float"},
    {"name": "active", "type": "boolean"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 3}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "late_note", "type": ["string", "null"], "default": ""},
    {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "nothing", "type": "null"},
]}
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "dbserver1.inventory.t", "fields": [
    {"name": "before", "type": ["null", ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
        {"name": "version", "type": "string"}, {"name": "ts_ms", "type": "long"}]}},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None},
]}
"""A Debezium envelope whose row holds every type the numpy decoder decodes."""

rows = st.fixed_dictionaries({
    "id": st.integers(-2**31, 2**31 - 1), "big": st.integers(-2**63, 2**63 - 1),
    "name": st.text(max_size=80), "blob": st.binary(max_size=70),
    "score": st.floats(allow_nan=False), "ratio": st.floats(width=32, allow_nan=False),
    "active": st.booleans(), "kind": st.sampled_from(["A", "B", "C"]), "digest": st.binary(min_size=3, max_size=3),
    "note": st.none() | st.text(max_size=5), "late_note": st.none() | st.text(max_size=5),
    # Within Python's datetime range, where fastavro decodes them (beyond it: test below).
    "at_ms": st.integers(-62_135_596_800_000, 253_402_300_799_999),
    "at_us": st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),
    "local_ms": st.integers(-62_135_596_800_000, 253_402_300_799_999),
    "day": st.integers(-719_162, 2_932_896), "nothing": st.none(),
})
envelopes = st.fixed_dictionaries({
    "before": st.none() | rows, "after": st.none() | rows,
    "source": st.fixed_dictionaries({"version": st.text(max_size=70), "ts_ms": st.integers(-2**63, 2**63 - 1)}),
    "op": st.sampled_from(["c", "u", "d", "r"]), "ts_ms": st.none() | st.integers(-2**63, 2**63 - 1),
})


def framed(schema: dict, record: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return b"\x00\x00\x00\x00\x07" + body.getvalue()


def arrow_type_of(reader: dict) -> pa.DataType:
    names = _Names(json.dumps(reader))
    data_type, _ = _spark_type(names.root, names)
    return arrow_schema(T.StructType([T.StructField("v", data_type)])).field("v").type


def by_fastavro(writer: dict, reader: dict, payloads: list[bytes]) -> pa.Array:
    """What the decoded column held before: fastavro's values, converted as column_decoder does."""
    to_arrow = _arrow_values(reader)
    parsed_writer = fastavro.parse_schema(writer)
    values = [to_arrow(fastavro.schemaless_reader(io.BytesIO(p[5:]), parsed_writer, reader)) for p in payloads]
    return pa.array(values, type=arrow_type_of(reader))


def by_numpy(writer: dict, reader: dict, payloads: list[bytes]) -> pa.Array:
    w, r = _Names(json.dumps(writer)), _Names(json.dumps(reader))
    column = Columns(w.resolve, r.resolve, _kind, _field_index).of(w.root, r.root, arrow_type_of(reader))
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    ends = np.cumsum(lengths)
    return decode_run(column, np.frombuffer(b"".join(payloads), dtype=np.uint8), ends - lengths + 5, ends)


def same(left: pa.Array, right: pa.Array) -> bool:
    """Equal values; float32 compared by bits (a NaN-free strategy; -0.0 and 0.0 differ)."""
    def bits(value):
        if isinstance(value, float):
            return ("float", math.copysign(1, value), value)
        if isinstance(value, dict):
            return {key: bits(inner) for key, inner in value.items()}
        return value
    return left.type == right.type and [bits(v) for v in left.to_pylist()] == [bits(v) for v in right.to_pylist()]


@settings(max_examples=60, deadline=None)
@given(st.lists(envelopes, min_size=1, max_size=8))
def test_numpy_decodes_what_fastavro_decodes(events):
    payloads = [framed(ENVELOPE, event) for event in events]
    assert same(by_numpy(ENVELOPE, ENVELOPE, payloads), by_fastavro(ENVELOPE, ENVELOPE, payloads))


V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "customer", "type": "string"}, {"name": "amount", "type": "float"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
V2 = {"type": "record", "name": "Order", "fields": [
    *V1["fields"], {"name": "currency", "type": "string", "default": "EUR"},
    {"name": "coupon", "type": ["null", "string"], "default": None}]}
V3 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "buyer", "type": "string", "aliases": ["customer"]},
    {"name": "amount", "type": "double"}, {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "currency", "type": "string", "default": "EUR"}, {"name": "coupon", "type": ["null", "string"],
                                                             "default": None},
    {"name": "region", "type": "string", "default": "eu"}, {"name": "priority", "type": "int", "default": 3}]}
"""v1 -> v2 (fields added with defaults) -> v3 (customer renamed buyer through an alias, id and
amount promoted int -> long and float -> double, two more fields with defaults), read as v3."""

orders = st.fixed_dictionaries({"id": st.integers(-2**31, 2**31 - 1), "customer": st.text(max_size=70),
                                "amount": st.floats(width=32, allow_nan=False),
                                "ts": st.integers(0, 253_402_300_799_999), "currency": st.text(max_size=4),
                                "coupon": st.none() | st.text(max_size=4)})


@settings(max_examples=40, deadline=None)
@given(st.lists(orders, min_size=1, max_size=6), st.sampled_from([V1, V2, V3]))
def test_every_writer_of_an_evolving_schema_reads_as_fastavro_resolves_it(records, writer):
    if writer is V3:
        records = [{**r, "buyer": r["customer"], "region": "us", "priority": 1} for r in records]
    payloads = [framed(writer, record) for record in records]
    assert same(by_numpy(writer, V3, payloads), by_fastavro(writer, V3, payloads))


@pytest.mark.parametrize("field_type", [
    {"type": "array", "items": "string"}, {"type": "map", "values": "long"}, ["null", "int", "string"],
    {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
    {"type": "string", "logicalType": "uuid"},
])
def test_what_numpy_does_not_decode_is_refused_when_the_schema_is_compiled(field_type):
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": field_type}]}
    names = _Names(json.dumps(schema))
    with pytest.raises(NotInBatch):
        Columns(names.resolve, names.resolve, _kind, _field_index).of(names.root, names.root, arrow_type_of(schema))


def test_an_int_read_as_a_float_goes_through_fastavro():
    writer = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]}
    reader = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "float"}]}
    w, r = _Names(json.dumps(writer)), _Names(json.dumps(reader))
    with pytest.raises(NotInBatch):
        Columns(w.resolve, r.resolve, _kind, _field_index).of(w.root, r.root, arrow_type_of(reader))


SIMPLE = {"type": "record", "name": "S", "fields": [
    {"name": "name", "type": "string"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


@pytest.mark.parametrize("payload, why", [
    (b"\x00\x00\x00\x00\x07" + b"\x04\xff\xfe" + b"\x02", "invalid UTF-8, which fastavro refuses"),
    (framed(SIMPLE, {"name": "a", "at": 1}) + b"\x00", "a byte left over after the record"),
    (framed(SIMPLE, {"name": "a", "at": 1})[:-1], "a record cut short"),
    (framed(SIMPLE, {"name": "a", "at": 253_402_300_800_000}), "a time past year 9999, where fastavro fails"),
    (b"\x00\x00\x00\x00\x07" + b"\x03", "a negative length"),
])
def test_a_record_numpy_cannot_decode_exactly_sends_the_run_to_fastavro(payload, why):
    good = framed(SIMPLE, {"name": "b", "at": 2})
    with pytest.raises(NotInBatch):
        by_numpy(SIMPLE, SIMPLE, [good, payload])
