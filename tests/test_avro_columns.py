"""``value.decode`` by numpy (formats/avro/columns.py) against the per-record reader
(formats/avro/values.py) on the same resolution: the same Arrow values for arbitrary records,
across a writer schema's evolution (a field added with a default, one renamed through an alias,
promotions), or a refusal (``NotInBatch``) that sends the run record by record; never another
value. Both against fastavro: tests/test_avro_differential.py."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from avro_support import arrow_type_of, codec, framed
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples

from kafkasync_source.formats.avro.batch import NotInBatch
from kafkasync_source.formats.avro.columns import Columns, decode_run

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
    "score": st.floats(), "ratio": st.floats(width=32),
    "active": st.booleans(), "kind": st.sampled_from(["A", "B", "C"]), "digest": st.binary(min_size=3, max_size=3),
    "note": st.none() | st.text(max_size=5), "late_note": st.none() | st.text(max_size=5),
    "at_ms": st.integers(-(2**63 // 1000), (2**63 - 1) // 1000), "at_us": st.integers(-2**63, 2**63 - 1),
    "local_ms": st.integers(-(2**63 // 1000), (2**63 - 1) // 1000), "day": st.integers(-2**31, 2**31 - 1),
    "nothing": st.none(),
})
envelopes = st.fixed_dictionaries({
    "before": st.none() | rows, "after": st.none() | rows,
    "source": st.fixed_dictionaries({"version": st.text(max_size=70), "ts_ms": st.integers(-2**63, 2**63 - 1)}),
    "op": st.sampled_from(["c", "u", "d", "r"]), "ts_ms": st.none() | st.integers(-2**63, 2**63 - 1),
})


def by_numpy(writer: dict, reader: dict, payloads: list[bytes]) -> pa.Array:
    compiled = codec(writer, reader).writer(7)
    column = Columns().of(compiled.action, arrow_type_of(reader))
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    ends = np.cumsum(lengths)
    return decode_run(column, np.frombuffer(b"".join(payloads), dtype=np.uint8), ends - lengths + 5, ends)


def by_record(writer: dict, reader: dict, payloads: list[bytes]) -> pa.Array:
    compiled = codec(writer, reader).writer(7)
    return pa.array([compiled.decode_one(p) for p in payloads], type=arrow_type_of(reader))


def same(left: pa.Array, right: pa.Array) -> bool:
    """Equal values and types; floats by bits, NaN equal to NaN."""
    def bits(value):
        if isinstance(value, float):
            return ("nan",) if math.isnan(value) else ("float", math.copysign(1, value), value)
        if isinstance(value, dict):
            return {key: bits(inner) for key, inner in value.items()}
        return value
    plain = [pa.types.is_timestamp, pa.types.is_date32]
    assert not any(check(left.type) for check in plain)
    return left.type == right.type and [bits(v) for v in left.cast(_plain(left.type)).to_pylist()] == \
        [bits(v) for v in right.cast(_plain(right.type)).to_pylist()]


def _plain(data_type: pa.DataType) -> pa.DataType:
    """Timestamps as int64 and dates as int32: values beyond Python's datetime compare too."""
    if pa.types.is_timestamp(data_type):
        return pa.int64()
    if pa.types.is_date32(data_type):
        return pa.int32()
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in data_type])
    return data_type


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(envelopes, min_size=1, max_size=8))
def test_numpy_decodes_what_the_record_reader_decodes(events):
    payloads = [framed(ENVELOPE, event) for event in events]
    assert same(by_numpy(ENVELOPE, ENVELOPE, payloads), by_record(ENVELOPE, ENVELOPE, payloads))


V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "customer", "type": "string"}, {"name": "amount", "type": "float"},
    {"name": "ts", "type": "long"}]}
V2 = {"type": "record", "name": "Order", "fields": [
    *V1["fields"], {"name": "currency", "type": "string", "default": "EUR"},
    {"name": "coupon", "type": ["null", "string"], "default": None}]}
V3 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": ["null", "long"]}, {"name": "buyer", "type": "string", "aliases": ["customer"]},
    {"name": "amount", "type": "double"}, {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "currency", "type": "string", "default": "EUR"}, {"name": "coupon", "type": ["null", "string"],
                                                             "default": None},
    {"name": "region", "type": "string", "default": "eu"}, {"name": "priority", "type": "int", "default": 3}]}
"""v1 -> v2 (fields added with defaults) -> v3 (customer renamed buyer through an alias, id
promoted int -> [null, long] and amount float -> double, a logical type added to ts, two more
fields with defaults), read as v3."""

orders = st.fixed_dictionaries({"id": st.integers(-2**31, 2**31 - 1), "customer": st.text(max_size=70),
                                "amount": st.floats(width=32), "ts": st.integers(0, 2**50),
                                "currency": st.text(max_size=4), "coupon": st.none() | st.text(max_size=4)})


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(orders, min_size=1, max_size=6), st.sampled_from([V1, V2, V3]))
def test_every_writer_of_an_evolving_schema_reads_as_the_record_reader_reads_it(records, writer):
    if writer is V3:
        records = [{**r, "buyer": r["customer"], "region": "us", "priority": 1} for r in records]
    payloads = [framed(writer, record) for record in records]
    assert same(by_numpy(writer, V3, payloads), by_record(writer, V3, payloads))


@pytest.mark.parametrize("field_type", [
    {"type": "array", "items": "string"}, {"type": "map", "values": "long"}, ["null", "int", "string"],
    {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
])
def test_what_numpy_does_not_decode_is_refused_when_the_schema_is_compiled(field_type):
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": field_type}]}
    with pytest.raises(NotInBatch):
        Columns().of(codec(schema, schema).writer(7).action, arrow_type_of(schema))


SIMPLE = {"type": "record", "name": "S", "fields": [
    {"name": "name", "type": "string"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


@pytest.mark.parametrize("payload, why", [
    (b"\x00\x00\x00\x00\x07" + b"\x04\xff\xfe" + b"\x02", "invalid UTF-8"),
    (framed(SIMPLE, {"name": "a", "at": 1})[:-1], "a record cut short"),
    (framed(SIMPLE, {"name": "a", "at": 2**62}), "a time beyond Spark's range (microseconds past 2^63)"),
    (b"\x00\x00\x00\x00\x07" + b"\x03", "a negative length"),
    (b"\x00\x00\x00\x00\x07" + b"\x02a" + b"\xff" * 11, "a varint longer than 10 bytes"),
])
def test_a_record_numpy_cannot_decode_exactly_sends_the_run_record_by_record(payload, why):
    good = framed(SIMPLE, {"name": "b", "at": 2})
    with pytest.raises(NotInBatch):
        by_numpy(SIMPLE, SIMPLE, [good, payload])
    values, undecodable = codec(SIMPLE, SIMPLE).decode([good, payload], arrow_type_of(SIMPLE))
    assert values.to_pylist()[1] is None and [(u.row, u.kind) for u in undecodable] == [(1, "malformed")]


def test_bytes_after_a_record_are_ignored_as_confluents_deserializers_ignore_them():
    good = framed(SIMPLE, {"name": "b", "at": 2})
    assert same(by_numpy(SIMPLE, SIMPLE, [good + b"\x00\x01", good]), by_record(SIMPLE, SIMPLE, [good, good]))
