"""JSON Schema read as an attacker or an unlucky user writes it (issue 61): schemas that refer to
themselves or grow without bound, and documents that ``from_json`` itself refuses. Each test
failed on the decoder before its fix; the expected values were measured with Spark 4.3.0's own
``from_json`` where Spark has one (the module docstrings of formats/json_values.py and
formats/json_schema.py cite the rules)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema
from pyspark.sql import types as T
from registry_double import RegistryDouble, framed
from test_json_schema_decode import decode_column

from kafkasync_source.formats.options import JSON_SCHEMA


def options_for(schema: object):
    double = RegistryDouble()
    schema_id = double.add(Schema(schema if isinstance(schema, str) else json.dumps(schema), "JSON"))
    return double.options(JSON_SCHEMA, schema_id), schema_id


def test_a_schema_that_refers_to_itself_types_the_inner_reference_a_string_holding_its_text():
    """A tree (``children`` of the root's own type) was expanded 16 levels deep, and a root with
    three such properties made a type of 3^16 fields, derived for hours at query start. Now a
    ``$ref`` met inside its own expansion is a string: the subtree's JSON text."""
    tree = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#"}}}}
    options, schema_id = options_for(tree)
    node = T.StructType([T.StructField("name", T.StringType()),
                         T.StructField("children", T.ArrayType(T.StringType()))])
    assert options.spark_type() == T.StructType([T.StructField("name", T.StringType()),
                                                 T.StructField("children", T.ArrayType(node))])
    column = decode_column(options, [framed(schema_id, json.dumps(
        {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": []}]}]}).encode())])
    assert column.values.to_pylist() == [
        {"name": "a", "children": [{"name": "b", "children": ['{"name":"c","children":[]}']}]}]
    bomb = {"type": "object", "properties": {f"p{i}": {"$ref": "#"} for i in range(3)}}
    assert options_for(bomb)[0].spark_type().simpleString() == (
        "struct<" + ",".join(f"p{i}:struct<p0:string,p1:string,p2:string>" for i in range(3)) + ">")


def test_a_schema_whose_type_would_outgrow_the_budget_is_refused_naming_the_option():
    """Sixteen definitions that each use the next one twice are a type of 2^16 fields, without
    any cycle: refused at start, naming the option and the schema."""
    definitions = {f"D{i}": {"type": "object", "properties": {"a": {"$ref": f"#/definitions/D{i + 1}"},
                                                               "b": {"$ref": f"#/definitions/D{i + 1}"}}}
                   for i in range(16)}
    definitions["D16"] = {"type": "integer"}
    options, schema_id = options_for({"$ref": "#/definitions/D0", "definitions": definitions})
    with pytest.raises(ValueError, match=rf"Option 'value.decode': the reader schema \(id {schema_id}, subject "
                                         r"'topic-value'\) gives a Spark type of more than 10,000 fields"):
        options.spark_type()


def test_schema_text_nested_past_pythons_json_is_refused_naming_the_option():
    options, schema_id = options_for("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=rf"Option 'value.decode': the reader schema \(id {schema_id}.* is not JSON"):
        options.spark_type()
