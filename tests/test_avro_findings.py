"""Issue 61's Avro findings, each as the test that reproduces it (each failed on the code before
the rework: the old readers gave the wrong value, an uncaught error, or a hang). Pure: schema text
and bytes through formats/avro/codec.py, no registry (the registry's part: test_formats_registry.py)."""

from __future__ import annotations

import copy
import json
from decimal import Decimal

import pytest
from avro_support import arrow_type_of, codec, decode, framed, time_at
from pyspark.sql import types as T

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.event_time.options import EventTimeOptions
from kafkasync_source.event_time.seam import _ExtractedTime
from kafkasync_source.formats.avro import codec as codec_module
from kafkasync_source.formats.avro.schema import SchemaError, parse
from kafkasync_source.formats.avro.spark_types import spark_type

T0 = 1_700_000_000_000
"""2023-11-14T22:13:20Z in ms."""


def record(*fields: dict, name: str = "R", namespace: str | None = None) -> dict:
    schema = {"type": "record", "name": name, "fields": list(fields)}
    return {**schema, "namespace": namespace} if namespace else schema


def micros(value: object) -> int:
    """A timestamp as Arrow's to_pylist gives it, in microseconds from 1970."""
    from datetime import datetime, timezone

    assert isinstance(value, datetime)
    return round((value.replace(tzinfo=value.tzinfo or timezone.utc)
                  - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000)


# -- 2. logical types come from the reader ---------------------------------------------------

def test_2_a_writers_plain_long_read_as_timestamp_millis_is_a_timestamp_in_the_value_and_the_event_time():
    writer = record({"name": "ts", "type": "long"})
    reader = record({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}})
    payload = framed(writer, {"ts": T0})
    values, undecodable = decode(writer, reader, [payload])
    assert undecodable == [] and micros(values[0]["ts"]) == T0 * 1000  # not 1970-01-20
    assert time_at(writer, "ts", payload, reader=reader, time_format="epochSeconds") == T0


def test_2_a_logical_type_the_reader_removed_is_the_plain_number_not_an_arrow_error():
    writer = record({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                    {"name": "day", "type": {"type": "int", "logicalType": "date"}})
    reader = record({"name": "ts", "type": "long"}, {"name": "day", "type": "int"})
    assert decode(writer, reader, [framed(writer, {"ts": T0 * 1000, "day": 19_675})]) == (
        [{"ts": T0 * 1000, "day": 19_675}], [])


# -- 3. union branches come from the index written -------------------------------------------

CARD = record({"name": "number", "type": ["null", "string"], "default": None}, name="Card")
IBAN = record({"name": "iban", "type": "string"}, {"name": "bic", "type": ["null", "string"], "default": None},
              name="Iban")


def test_3_a_union_of_records_keeps_the_record_written():
    schema = record({"name": "pay", "type": ["null", CARD, IBAN]})
    values, _ = decode(schema, schema, [framed(schema, {"pay": ("Iban", {"iban": "DE89", "bic": None})})])
    assert values[0]["pay"] == {"member0": None, "member1": {"iban": "DE89", "bic": None}}


def test_3_a_double_in_a_union_with_a_float_stays_a_double():
    schema = record({"name": "x", "type": ["null", "float", "double", "string"]})
    values, _ = decode(schema, schema, [framed(schema, {"x": ("double", 0.1)})])
    assert values[0]["x"] == {"member0": None, "member1": 0.1, "member2": None}


def test_3_a_long_beyond_an_int_in_a_union_with_an_int_is_the_long():
    schema = record({"name": "n", "type": ["int", "long", "string"]})
    values, undecodable = decode(schema, schema, [framed(schema, {"n": ("long", 2**40)})])
    assert undecodable == [] and values[0]["n"] == {"member0": None, "member1": 2**40, "member2": None}


def test_3_a_writers_branch_meets_the_readers_union_by_javas_rule_not_fastavros():
    """An int written in a writer's ``[null, int]`` read as ``[null, double, int]``: Java's
    ``firstMatchingBranch`` takes the exact ``int`` branch (fastavro the ``double``, a promotion
    listed first); the same for a string read as ``[bytes, string]``."""
    writer = record({"name": "n", "type": ["null", "int"]}, {"name": "s", "type": "string"})
    reader = record({"name": "n", "type": ["null", "double", "int"]}, {"name": "s", "type": ["bytes", "string"]})
    values, _ = decode(writer, reader, [framed(writer, {"n": ("int", 7), "s": "é"})])
    assert values[0] == {"n": {"member0": None, "member1": 7}, "s": {"member0": None, "member1": "é"}}


# -- 5. record-name strategies: another record type's field is never used ----------------------

PURCHASE = record({"name": "id", "type": "string"},
                  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                  name="Purchase", namespace="shop")
REFUND = record({"name": "id", "type": "string"},
                {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                name="Refund", namespace="shop")


def test_5_a_record_of_another_type_is_timed_by_its_own_schema_not_the_readers():
    payload = framed(PURCHASE, {"id": "p1", "ts": T0})
    assert time_at(PURCHASE, "ts", payload, reader=REFUND) == T0  # not T0 / 1000: 1970
    _, undecodable = decode(PURCHASE, REFUND, [payload])
    assert undecodable[0].kind == "incompatible" and "shop.Purchase, not the reader's shop.Refund" in \
        undecodable[0].reason


# -- 6. hostile bytes end named, and the seam never lets a batch reader's error out ------------

def test_6_a_huge_block_count_ends_at_once_as_an_invalid_time():
    schema = record({"name": "xs", "type": {"type": "array", "items": "long"}}, {"name": "ts", "type": "long"})
    payload = b"\x00\x00\x00\x00\x07" + b"\xfe\xff\xff\xff\xff\x7f" + b"\x02\x02"  # a block of 2^40 - 1 longs
    assert time_at(schema, "ts", payload).startswith("invalid: a block of")
    assert codec(schema).time_path("ts", "epochMillis").batch([payload]) is None


def test_6_a_length_near_2_63_does_not_wrap_positions():
    schema = record({"name": "s", "type": "string"}, {"name": "ts", "type": "long"})
    payload = b"\x00\x00\x00\x00\x07" + b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01" + b"\x02"
    assert str(time_at(schema, "ts", payload)).startswith("invalid")
    assert codec(schema).time_path("ts", "epochMillis").batch([payload]) is None
    _, undecodable = decode(schema, schema, [payload])
    assert [u.kind for u in undecodable] == ["malformed"]


def test_6_what_a_batch_reader_raises_sends_the_seam_to_each_record():
    """The executors read by batch, the driver record by record: a batch reader that raises
    (IndexError, ValueError...) must not end the task without naming a record, nor answer
    otherwise than the records read alone."""
    class Record:
        def __init__(self, value: int) -> None:
            self._value = value

        def value(self) -> int:
            return self._value

    def read(record: Record) -> int:
        if record.value() < 0:
            raise InvalidTime("negative")
        return record.value()

    def broken(values: list) -> list:
        raise IndexError("index 99 is out of bounds")
    seam = _ExtractedTime(EventTimeOptions("jsonPath", "$.ts", on_invalid="skip"), read, broken)
    assert seam.times_of([Record(5), Record(-1), Record(7)]) == [5, -3, 7]


# -- 8. a field added with a null default -----------------------------------------------------

def test_8_a_path_on_a_field_the_writer_lacks_with_a_null_default_is_an_invalid_time_not_a_failure():
    writer = record({"name": "id", "type": "long"})
    reader = record({"name": "id", "type": "long"}, {"name": "ts", "type": ["null", "long"], "default": None})
    assert time_at(writer, "ts", framed(writer, {"id": 1}), reader=reader) == \
        "invalid: ts is missing from this writer schema and its default is null"


# -- 11. trailing bytes ----------------------------------------------------------------------

def test_11_trailing_bytes_are_ignored_and_never_shift_a_neighbour():
    schema = record({"name": "a", "type": "string"}, {"name": "b", "type": ["null", "long", "bytes"]})
    first = framed(schema, {"a": "x", "b": ("long", 1)}) + b"\x02\x02"  # trailing bytes that look like a value
    second = framed(schema, {"a": "y", "b": ("bytes", b"z")})
    values, undecodable = decode(schema, schema, [first, second])
    assert undecodable == []
    assert values == [{"a": "x", "b": {"member0": 1, "member1": None}},
                      {"a": "y", "b": {"member0": None, "member1": b"z"}}]


# -- 13. a writer schema that fails to compile is remembered ----------------------------------

def test_13_a_writer_schema_that_cannot_be_compiled_is_compiled_once(monkeypatch):
    parsed: list[str] = []
    real = codec_module.parse

    def counting(text: str):
        parsed.append(text)
        return real(text)
    monkeypatch.setattr(codec_module, "parse", counting)
    broken = record({"name": "d", "type": {"type": "fixed", "name": "F", "size": "4"}})
    honest = record({"name": "d", "type": {"type": "fixed", "name": "F", "size": 4}})
    compiled = codec({9: broken}, honest)
    payload = b"\x00\x00\x00\x00\x09abcd"
    for _ in range(50):
        _, undecodable = compiled.decode([payload, payload], arrow_type_of(honest))
        assert [u.kind for u in undecodable] == ["incompatible"] * 2
    assert parsed == [json.dumps(honest), json.dumps(broken)]


# -- the categories found besides ------------------------------------------------------------

def test_a_timestamp_millis_default_is_milliseconds():
    writer = record({"name": "id", "type": "long"})
    reader = record({"name": "id", "type": "long"},
                    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": T0})
    values, _ = decode(writer, reader, [framed(writer, {"id": 1})])
    assert micros(values[0]["ts"]) == T0 * 1000


def test_bytes_and_fixed_defaults_are_code_points_not_utf8():
    writer = record({"name": "id", "type": "long"})
    reader = record({"name": "id", "type": "long"}, {"name": "b", "type": "bytes", "default": "\u00ffA"},
                    {"name": "f", "type": {"type": "fixed", "name": "Two", "size": 2}, "default": "\u00ffA"})
    values, _ = decode(writer, reader, [framed(writer, {"id": 1})])
    assert values[0]["b"] == b"\xffA" and values[0]["f"] == b"\xffA"


def test_a_decimal_default_and_value_read():
    writer = record({"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                                                "scale": 2}})
    fee = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}
    reader = record(writer["fields"][0], {"name": "fee", "type": fee, "default": "\u0001\u0000"})
    values, undecodable = decode(writer, reader, [framed(writer, {"amount": (-12345).to_bytes(2, "big", signed=True)})])
    assert undecodable == [] and values[0] == {"amount": Decimal("-123.45"), "fee": Decimal("25.6")}


def test_a_decimal_of_38_digits_keeps_every_digit():
    """Python's decimal context holds 28 digits: a decimal built by arithmetic would be rounded."""
    schema = record({"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 3}})
    unscaled = 10**38 - 7
    values, undecodable = decode(schema, schema, [framed(schema, {"d": unscaled.to_bytes(16, "big", signed=True)})])
    assert undecodable == [] and values[0]["d"] == Decimal(f"{unscaled}e-3")


def test_time_millis_and_time_micros_values_and_defaults_are_their_numbers():
    writer = record({"name": "t", "type": {"type": "int", "logicalType": "time-millis"}})
    reader = record(writer["fields"][0], {"name": "u", "type": {"type": "long", "logicalType": "time-micros"},
                                          "default": 3_600_000_000})
    assert spark_type(parse(json.dumps(reader)))["u"].dataType == T.LongType()
    assert decode(writer, reader, [framed(writer, {"t": 61_000})]) == ([{"t": 61_000, "u": 3_600_000_000}], [])


def test_a_record_default_holding_a_union_is_right_in_every_row_and_mutates_no_shared_default():
    writer = record({"name": "id", "type": "long"})
    inner = record({"name": "choice", "type": ["string", "long", "null"]}, name="Inner")
    reader = record({"name": "id", "type": "long"}, {"name": "inner", "type": inner, "default": {"choice": "a"}})
    pristine = copy.deepcopy(reader)
    values, _ = decode(writer, reader, [framed(writer, {"id": i}) for i in range(3)])
    assert [v["inner"] for v in values] == [{"choice": {"member0": "a", "member1": None}}] * 3
    assert reader == pristine


def test_a_record_default_that_omits_a_field_takes_that_fields_own_default():
    writer = record({"name": "id", "type": "long"})
    inner = record({"name": "a", "type": "long"}, {"name": "b", "type": "string", "default": "own"}, name="Inner")
    reader = record({"name": "id", "type": "long"}, {"name": "inner", "type": inner, "default": {"a": 1}})
    values, _ = decode(writer, reader, [framed(writer, {"id": 1})])
    assert values[0]["inner"] == {"a": 1, "b": "own"}


def test_a_timestamp_or_date_beyond_year_9999_is_its_value_not_a_null_record():
    schema = record({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                    {"name": "day", "type": {"type": "int", "logicalType": "date"}}, {"name": "id", "type": "long"})
    values, undecodable = codec(schema, schema).decode(
        [framed(schema, {"ts": 300_000_000_000_000_000, "day": 3_000_000, "id": 7})], arrow_type_of(schema))
    assert undecodable == []
    assert values.field("ts").cast("int64").to_pylist() == [300_000_000_000_000_000]
    assert values.field("day").cast("int32").to_pylist() == [3_000_000] and values.field("id").to_pylist() == [7]


def test_a_long_promoted_to_float_rounds_once():
    writer = record({"name": "x", "type": "long"})
    reader = record({"name": "x", "type": "float"})
    x = 2**53 + 2**29 + 1  # through a double: 2^53 + 2^29 (a tie) then float32 2^53; directly: 2^53 + 2^30
    values, _ = decode(writer, reader, [framed(writer, {"x": x})])
    assert values[0]["x"] == float(2**53 + 2**30)


def test_an_int_promoted_to_the_float_branch_of_a_float_and_double_union_is_rounded_to_a_float():
    """Avro Java takes the union's first branch the int promotes to (``float``), then from_avro's
    double column widens that float: 2^31 - 1 is 2^31, not 2147483647.0 (hypothesis found it:
    test_avro_differential.py, the batch reader's column of a merged union)."""
    writer = record({"name": "f", "type": "int"})
    reader = record({"name": "f", "type": ["float", "null", "double"]})
    values, undecodable = decode(writer, reader, [framed(writer, {"f": 2**31 - 1}) for _ in range(3)])
    assert undecodable == [] and [v["f"] for v in values] == [float(2**31)] * 3


def test_a_uuid_keeps_its_case_and_non_uuid_text_stays_the_string():
    schema = record({"name": "u", "type": {"type": "string", "logicalType": "uuid"}}, {"name": "id", "type": "long"})
    upper = "7ED72E8C-CC45-244F-9A2F-788C5B6EB286"
    values, undecodable = decode(schema, schema, [framed(schema, {"u": upper, "id": 1}),
                                                  framed(schema, {"u": "not a uuid", "id": 2})])
    assert undecodable == [] and values == [{"u": upper, "id": 1}, {"u": "not a uuid", "id": 2}]


def test_the_same_record_decodes_the_same_whatever_its_neighbours():
    schema = record({"name": "x", "type": ["null", "string", "bytes"]})
    target = framed(schema, {"x": ("bytes", b"\x00\xff")})
    broken = framed(schema, {"x": ("string", "ab")})[:-1]
    alone, _ = decode(schema, schema, [target])
    among, undecodable = decode(schema, schema, [broken, target, target])
    assert alone == [{"x": {"member0": None, "member1": b"\x00\xff"}}] and among[1:] == alone * 2
    assert [u.row for u in undecodable] == [0]


def test_a_value_schema_of_plain_bytes_is_the_raw_payload():
    """Confluent's serializers write a ``bytes`` schema's value without a length prefix
    (confluent-kafka ``AvroSerializer``, Java's ``AbstractKafkaAvroSerializer``)."""
    payload = b"\x00\x00\x00\x00\x07" + b"\x04raw \xff bytes"
    assert decode('"bytes"', '"bytes"', [payload, b"\x00\x00\x00\x00\x07"]) == ([b"\x04raw \xff bytes", b""], [])


@pytest.mark.parametrize("top", ['"long"', '"string"', '{"type": "array", "items": "int"}'])
def test_other_primitive_and_container_top_level_schemas_read(top):
    schema = json.loads(top)
    value = {"long": 5, "string": "s"}.get(schema if isinstance(schema, str) else "", [1, 2])
    assert decode(top, top, [framed(top, value)]) == ([value], [])


def test_fields_inside_record_array_and_map_branches_of_a_union_are_converted():
    inner = record({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                   {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}, name="Inner")
    schema = record({"name": "x", "type": ["null", "string", inner, {"type": "array", "items": "Inner"},
                                           {"type": "map", "values": "Inner"}]})
    row = {"ts": T0, "u": "ABC"}
    values, _ = decode(schema, schema, [framed(schema, {"x": ("Inner", row)}), framed(schema, {"x": ("array", [row])}),
                                        framed(schema, {"x": ("map", {"k": row})})])
    assert micros(values[0]["x"]["member1"]["ts"]) == T0 * 1000 and values[0]["x"]["member1"]["u"] == "ABC"
    assert micros(values[1]["x"]["member2"][0]["ts"]) == T0 * 1000
    assert micros(dict(values[2]["x"]["member3"])["k"]["ts"]) == T0 * 1000


def test_a_recursive_reader_schema_is_refused_naming_the_field():
    tree = record({"name": "label", "type": "string"}, {"name": "children", "type": {"type": "array", "items": "Tree"}},
                  name="Tree")
    with pytest.raises(SchemaError, match="children\\[\\] is the recursive record Tree"):
        spark_type(parse(json.dumps(tree)))


def test_an_enum_symbol_the_reader_lacks_is_its_default_or_a_named_incompatible_row():
    writer = record({"name": "k", "type": {"type": "enum", "name": "K", "symbols": ["A", "B", "C"]}})
    with_default = record({"name": "k", "type": {"type": "enum", "name": "K", "symbols": ["A", "Z"], "default": "Z"}})
    without = record({"name": "k", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}})
    payloads = [framed(writer, {"k": "A"}), framed(writer, {"k": "C"})]
    assert decode(writer, with_default, payloads) == ([{"k": "A"}, {"k": "Z"}], [])
    values, undecodable = decode(writer, without, payloads)
    assert values == [{"k": "A"}, None] and undecodable[0].row == 1 and "holds the symbol 'C'" in undecodable[0].reason


def test_a_field_of_a_record_reached_at_two_paths_is_named_by_the_records_full_name():
    """Debezium's ``before`` and ``after`` share one ``Value`` record, resolved once. Its field's
    error was named at the first path (``before.amount``) for a record whose ``after`` held the
    bad value (the test of the incompatible writer in test_formats_registry.py caught it); a
    record reached at one path keeps that path."""
    from kafkasync_source.formats.avro.resolution import WriterUnion, resolve

    def envelope(amount: str) -> str:
        value = {"type": "record", "name": "Value", "fields": [{"name": "amount", "type": amount}]}
        once = {"type": "record", "name": "Once", "fields": [{"name": "amount", "type": amount}]}
        return json.dumps({"type": "record", "name": "Envelope", "namespace": "db.orders", "fields": [
            {"name": "before", "type": ["null", value]}, {"name": "after", "type": ["null", "Value"]},
            {"name": "other", "type": ["null", once]}]})

    action = resolve(parse(envelope("string")), parse(envelope("double")))
    named = []
    for _, step in action.steps:
        assert isinstance(step, WriterUnion)
        inner = step.branches[1].action
        named.append(inner.steps[0][1].where)
    assert named == ["db.orders.Value.amount", "db.orders.Value.amount", "other.amount"]
