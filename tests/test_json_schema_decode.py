"""JSON Schema values as Spark's ``from_json`` gives them in PERMISSIVE mode (issue 61, item 4):
one property that does not fit its type is null and the others keep their values, a string
column holds other JSON as Jackson writes it back, and only a payload that is not a JSON object
is an undecodable row. Against a registry double that answers as the real registry does
(tests/registry_double.py), and, generated, against a model of ``from_json`` written here from
Spark's ``JacksonParser`` (``makeConverter``, ``convertObject``, ``convertArray``,
``convertMap``, ``parseJsonToken``, ``failedConversion``) with its own JSON scanner (Python's
``json``), not the decoder's msgspec. ``make parity`` compares the decoder with ``from_json``
itself (integration/test_format_decoders_parity.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples
from pyspark.sql import types as T
from registry_double import RegistryDouble, framed, record

from kafkasync_source.formats import decoded
from kafkasync_source.formats.json_values import NotAValue, document_converter
from kafkasync_source.formats.options import JSON_SCHEMA
from kafkasync_source.spark.schema import arrow_schema

ORDER = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
         "definitions": {"Money": {"type": "object", "properties": {"amount": {"type": "number"},
                                                                     "currency": {"type": "string"}}}},
         "properties": {"id": {"type": "string"}, "qty": {"type": "integer"},
                        "price": {"$ref": "#/definitions/Money"},
                        "customer": {"$ref": "customer.json"},  # another subject's document
                        "code": {"type": ["string", "integer"]},
                        "payment": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {
                            "iban": {"type": "string"}}}]},
                        "tags": {"type": "array", "items": {"type": "string"}}}}


def decode_column(options, payloads):
    arrow_type = arrow_schema(T.StructType([T.StructField("v", options.spark_type())])).field("v").type
    column = options.column_decoder(arrow_type)([record(p, i) for i, p in enumerate(payloads)])
    assert isinstance(column, decoded.DecodedColumn)
    return column


def test_a_property_that_does_not_fit_nulls_itself_only_and_other_json_in_a_string_is_its_text():
    """As ``from_json`` in Spark 4.2.0 (measured): a string column holds other JSON as Jackson
    writes it back, without whitespace."""
    double = RegistryDouble()
    schema_id = double.add(Schema(json.dumps(ORDER), "JSON"))
    options = double.options(JSON_SCHEMA, schema_id)
    assert options.spark_type()["customer"].dataType == T.StringType()  # an external $ref: not followed
    documents = [
        b'{"id": "o1", "qty": 2, "price": {"amount": 9.5, "currency": "EUR"},'
        b' "customer": {"name": "Ann",  "vip": true}, "code": 17, "payment": {"iban": "DE00"}, "tags": ["a", 1]}',
        b'{"id": 5, "qty": "many", "price": {"amount": "cheap", "currency": "EUR"}, "code": "A7", "tags": ["x"]}',
    ]
    column = decode_column(options, [framed(schema_id, d) for d in documents])
    assert column.undecodable == ()
    assert column.values.to_pylist() == [
        {"id": "o1", "qty": 2, "price": {"amount": 9.5, "currency": "EUR"}, "customer": '{"name":"Ann","vip":true}',
         "code": "17", "payment": '{"iban":"DE00"}', "tags": ["a", "1"]},
        {"id": "5", "qty": None, "price": {"amount": None, "currency": "EUR"}, "customer": None, "code": "A7",
         "payment": None, "tags": ["x"]}]


def test_only_a_payload_that_is_not_a_json_object_is_undecodable():
    double = RegistryDouble()
    schema_id = double.add(Schema(json.dumps(ORDER), "JSON"))
    avro_id = double.add(Schema('{"type": "string"}', "AVRO"))
    column = decode_column(double.options(JSON_SCHEMA, schema_id), [
        None, framed(schema_id, b'{"id": "a"}'), framed(schema_id, b'[{"id": "a"}]'), framed(schema_id, b'{"id": '),
        framed(schema_id, b'{"id": "\xff"}'), b'{"id": "a"}', framed(77, b'{}'), framed(avro_id, b'{}'),
        framed(schema_id, b"null")])
    assert [r and r["id"] for r in column.values.to_pylist()] == ["a" if i == 1 else None for i in range(9)]
    assert [(u.row, u.kind, u.schema_id) for u in column.undecodable] == [
        (2, decoded.MALFORMED, schema_id), (3, decoded.MALFORMED, schema_id), (4, decoded.MALFORMED, schema_id),
        (5, decoded.NOT_FRAMED, None), (6, decoded.UNKNOWN_SCHEMA, 77), (7, decoded.INCOMPATIBLE, avro_id),
        (8, decoded.MALFORMED, schema_id)]
    assert "not a JSON object" in column.undecodable[0].reason


# --- generated: the decoder against a model of from_json ---------------------------------------

class Node:
    """A JSON value as the model's scanner found it: its kind, its Python value (scalars) or
    children, and its exact text."""

    def __init__(self, kind: str, value: Any, text: str) -> None:
        self.kind, self.value, self.text = kind, value, text


_WHITESPACE = " \t\n\r"


def scan(text: str, at: int) -> tuple[Node, int]:
    """One JSON value at ``at`` (after whitespace): its node and where it ends."""
    while text[at] in _WHITESPACE:
        at += 1
    start = at
    if text[at] in "{[":
        closing, children, at = ("}" if text[at] == "{" else "]"), [], at + 1
        while True:
            while text[at] in _WHITESPACE:
                at += 1
            if text[at] == closing:
                at += 1
                break
            if text[at] == ",":
                at += 1
                continue
            if closing == "}":
                key, at = json.decoder.scanstring(text, at + 1)
                at = text.index(":", at) + 1
                child, at = scan(text, at)
                children.append((key, child))
            else:
                child, at = scan(text, at)
                children.append(child)
        return Node("object" if closing == "}" else "array", children, text[start:at]), at
    value, end = json.JSONDecoder().raw_decode(text, at)
    kind = ("null" if value is None else "boolean" if isinstance(value, bool) else "string"
            if isinstance(value, str) else "number")
    return Node(kind, value, text[start:end]), end


class DoesNotFit(Exception):
    pass


class WrittenBack:
    """A JSON value that a string column holds as text, written back by Jackson's generator:
    compared by what the text reads as (its exact form, Java's number format among it, is
    compared with from_json itself in make parity), and required to hold no whitespace outside
    its strings (``copyCurrentStructure`` writes none)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def matches(self, text: Any) -> bool:
        if not isinstance(text, str) or any(c in " \n\t\r" for c in _outside_strings(text)):
            return False
        return same(json.loads(text), _quoted_non_finite(self.value))


def _outside_strings(text: str) -> str:
    """The JSON text with every string's content removed."""
    out, in_string, escaped = [], False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            out.append(char)
    return "".join(out)


def _quoted_non_finite(value: Any) -> Any:
    """Jackson writes a number that is not finite as a string (``QUOTE_NON_NUMERIC_NUMBERS``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [_quoted_non_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _quoted_non_finite(v) for k, v in value.items()}
    return value


def from_json(node: Node, spark_type: Any) -> Any:
    """``JacksonParser.makeConverter`` for these types (parseJsonToken: null is null for every
    type; failedConversion: any other token that the type's converter does not take fails)."""
    if node.kind == "null":
        return None
    if isinstance(spark_type, T.StructType):
        if node.kind != "object":
            raise DoesNotFit
        row = {field.name: None for field in spark_type.fields}
        for key, child in node.value:  # convertObject: a field that fails is left null (partial result)
            if key in row:
                try:
                    row[key] = from_json(child, spark_type[key].dataType)
                except DoesNotFit:
                    row[key] = None
        return row
    if isinstance(spark_type, T.ArrayType):  # convertArray: only partial results are caught
        if node.kind != "array":
            raise DoesNotFit
        return [from_json(child, spark_type.elementType) for child in node.value]
    if isinstance(spark_type, T.MapType):  # convertMap: a value that fails fails the map
        if node.kind != "object":
            raise DoesNotFit
        return {key: from_json(child, spark_type.valueType) for key, child in node.value}
    if isinstance(spark_type, T.StringType):  # VALUE_STRING's text, else Jackson's copyCurrentStructure
        return node.value if node.kind == "string" else WrittenBack(json.loads(node.text))
    if isinstance(spark_type, T.BooleanType):
        if node.kind != "boolean":
            raise DoesNotFit
        return node.value
    if isinstance(spark_type, T.LongType):  # VALUE_NUMBER_INT, getLongValue
        if node.kind != "number" or any(c in node.text for c in ".eE") or not -2**63 <= node.value < 2**63:
            raise DoesNotFit
        return node.value
    assert isinstance(spark_type, T.DoubleType)  # VALUE_NUMBER_INT/FLOAT, or NaN/Infinity text
    if node.kind == "number":  # VALUE_NUMBER_INT is read as an integer first: -0 is 0.0
        return float(node.text) if any(c in node.text for c in ".eE") else float(int(node.text))
    specials = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "+INF": math.inf,
                "-Infinity": -math.inf, "-INF": -math.inf}
    if node.kind == "string" and node.value in specials:
        return specials[node.value]
    raise DoesNotFit


def spark_types(depth: int = 2) -> st.SearchStrategy:
    leaves = st.sampled_from([T.LongType(), T.DoubleType(), T.BooleanType(), T.StringType()])
    if depth == 0:
        return leaves
    inner = spark_types(depth - 1)
    return st.one_of(
        leaves,
        st.builds(lambda t: T.ArrayType(t, True), inner),
        st.builds(lambda t: T.MapType(T.StringType(), t, True), inner),
        structs(inner))


def structs(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.tuples(st.sampled_from("abcdef"), inner), min_size=1, max_size=5, unique_by=lambda f: f[0]) \
        .map(lambda fields: T.StructType([T.StructField(n, t, True) for n, t in fields]))


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6), st.sampled_from(["NaN", "-INF", "Infinity", ""]))
json_values = st.recursive(json_scalars, lambda children: st.one_of(
    st.lists(children, max_size=3), st.dictionaries(st.sampled_from("abcdefg"), children, max_size=4)), max_leaves=12)


def fitting(spark_type: Any) -> st.SearchStrategy:
    """Values of the type, or (one time in four, at any depth) any JSON value."""
    if isinstance(spark_type, T.StructType):
        exact = st.fixed_dictionaries({}, optional={f.name: fitting(f.dataType) for f in spark_type.fields})
    elif isinstance(spark_type, T.ArrayType):
        exact = st.lists(fitting(spark_type.elementType), max_size=3)
    elif isinstance(spark_type, T.MapType):
        exact = st.dictionaries(st.text(max_size=3), fitting(spark_type.valueType), max_size=3)
    else:
        exact = {T.LongType: st.integers(-2**63, 2**63 - 1), T.DoubleType: st.floats(allow_nan=False,
                                                                                        allow_infinity=False),
                 T.BooleanType: st.booleans(), T.StringType: st.text(max_size=8)}[type(spark_type)]
    return st.one_of(exact, exact, exact, json_values)


@st.composite
def documents(draw):
    spark_type = draw(structs(spark_types(2)))
    value = draw(fitting(spark_type))
    layout = draw(st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 1}, {"separators": (" ,  ", " : ")}]))
    return spark_type, json.dumps(value, ensure_ascii=draw(st.booleans()), **layout)


def same(a: Any, b: Any) -> bool:
    if isinstance(b, WrittenBack):
        return b.matches(a)
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=examples(150), deadline=None)
@given(documents())
def test_generated_documents_decode_as_the_model_of_from_json(document):
    spark_type, text = document
    expected = None
    try:
        expected = from_json(scan(text, 0)[0], spark_type)
    except DoesNotFit:
        pass
    convert = document_converter(spark_type)
    if expected is None:
        with pytest.raises(NotAValue):
            convert(text.encode())
        return
    got = convert(text.encode())
    as_arrow = pa.array([got], type=arrow_schema(T.StructType([T.StructField("v", spark_type)])).field("v").type)
    got = as_arrow.to_pylist()[0]
    assert same(got, _maps_as_dicts(expected, spark_type)), (text, spark_type.simpleString())


def _maps_as_dicts(value: Any, spark_type: Any) -> Any:
    """The model's value as pyarrow gives the column back (maps as lists of pairs)."""
    if value is None:
        return None
    if isinstance(spark_type, T.StructType):
        return {f.name: _maps_as_dicts(value[f.name], f.dataType) for f in spark_type.fields}
    if isinstance(spark_type, T.ArrayType):
        return [_maps_as_dicts(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, T.MapType):
        return [(k, _maps_as_dicts(v, spark_type.valueType)) for k, v in value.items()]
    return value
