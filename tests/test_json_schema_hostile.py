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


# --- documents beyond Jackson's read limits ------------------------------------------------------

LIMITS = {"type": "object", "properties": {"n": {"type": "integer"}, "d": {"type": "number"},
                                           "s": {"type": "string"}, "z": {"type": "string"}}}


def nested(depth: int) -> bytes:
    """A document ``depth`` levels deep, its own object the first: ``{"x": [[...]], "z": "ok"}``."""
    return b'{"x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b', "z": "ok"}'


def test_documents_beyond_jacksons_read_limits_are_undecodable_as_from_json_has_no_value_for_them():
    """Measured with Spark 4.3.0's from_json (formats/json_limits.py): a number of more than
    1,000 digits or a key of more than 50,000 UTF-16 characters anywhere, or nesting beyond
    1,000, fail the whole record; the limit itself reads (but 1,000 levels, beyond Python's
    recursion limit here: named undecodable, docs/formats.md). Before, a 5,000-digit integer
    raised ValueError out of the column decoder (Python's int() refuses more than 4,300
    digits), and a document nested about 1,000 deep a bare RecursionError; shorter numbers and
    keys beyond the limits gave values where from_json gives none."""
    options, schema_id = options_for(LIMITS)
    digits = b"1" * 1000
    beyond = [b'{"n": ' + b"1" * 5000 + b', "z": "ok"}', b'{"x": -1' + digits + b', "z": "ok"}',
              b'{"d": 1' + digits[:500] + b"." + digits[:500] + b', "z": "ok"}',
              b'{"x": [1.' + digits[:998] + b'e+12], "z": "ok"}',
              ('{"x": {"' + "k" * 50_001 + '": 1}, "z": "ok"}').encode(),
              ('{"' + "\U0001F600" * 25_001 + '": 1, "z": "ok"}').encode(),  # 50,002 UTF-16 units
              nested(1001),
              b'{"' + b"k" * 50_001 + b'\\ud800": 1, "z": "ok"}']  # a lone surrogate msgspec refuses: not JSON
    within = [b'{"n": -' + digits + b', "z": "ok"}', b'{"d": ' + digits[:500] + b"." + digits[:500] + b', "z": "ok"}',
              b'{"x": 1e' + digits[:999] + b', "z": "ok"}', ('{"' + "k" * 50_000 + '": 1, "z": "ok"}').encode(),
              ('{"' + "\u00e9" * 50_000 + '": 1, "z": "ok"}').encode(), nested(600)]
    column = decode_column(options, [framed(schema_id, document) for document in beyond + within])
    assert [(u.row, u.kind) for u in column.undecodable] == [(row, "malformed") for row in range(len(beyond))]
    # Jackson's limit itself reads; Python's parsers reach it on 3.13, not on 3.11 (the recursion
    # limit, with a Spark worker's frames on top): there it is named, never a value of nulls.
    at_the_limit = decode_column(options, [framed(schema_id, nested(1000))])
    if at_the_limit.undecodable:
        assert [(u.row, u.kind) for u in at_the_limit.undecodable] == [(0, "malformed")]
        assert ("nests 1000 levels deep, deeper than this reader parses (Python's recursion limit)"
                in at_the_limit.undecodable[0].reason)
    else:
        assert at_the_limit.values.to_pylist()[0]["z"] == "ok"
    reasons = [u.reason for u in column.undecodable]
    assert all("beyond what from_json parses" in reason for reason in reasons[:-1])
    assert "not JSON" in reasons[-1]
    assert "a number has 5000 digits, beyond Jackson's 1000" in reasons[0]
    assert "a key has 50002 characters, beyond Jackson's 50000" in reasons[5]
    assert "nests 1001 levels deep, beyond Jackson's 1000" in reasons[6]
    assert [row and row["z"] for row in column.values.to_pylist()[len(beyond):]] == ["ok"] * len(within)


def test_a_string_longer_than_jacksons_limit_is_null_and_the_other_fields_keep_their_values():
    """from_json reads a string's text only when it is asked for it: past 20,000,000 characters
    that field is null (a partial result), and one in a field the type does not name costs nothing."""
    options, schema_id = options_for(LIMITS)
    long = b'"' + b"a" * 20_000_001 + b'"'
    column = decode_column(options, [framed(schema_id, b'{"z": ' + long + b', "n": 1}'),
                                     framed(schema_id, b'{"s": [' + long + b'], "z": "ok"}'),
                                     framed(schema_id, b'{"x": ' + long + b', "z": "ok"}')])
    assert column.undecodable == ()
    assert column.values.to_pylist() == [{"n": 1, "d": None, "s": None, "z": None},
                                         {"n": None, "d": None, "s": None, "z": "ok"},
                                         {"n": None, "d": None, "s": None, "z": "ok"}]


def test_an_integer_minus_zero_in_a_double_is_zero_as_jackson_reads_an_integer_token():
    """Measured with Spark 4.3.0: ``-0`` in a double is ``0.0`` (Jackson reads the integer 0 and
    converts it), ``-0.0`` stays ``-0.0``; kafkasync read ``-0`` as ``-0.0``."""
    options, schema_id = options_for({"type": "object", "properties": {
        "d": {"type": "number"}, "a": {"type": "array", "items": {"type": "number"}}}})
    column = decode_column(options, [framed(schema_id, b'{"d": -0, "a": [-0, -0.0, 0, -0e0]}')])
    row = column.values.to_pylist()[0]
    assert [str(value) for value in (row["d"], *row["a"])] == ["0.0", "0.0", "-0.0", "0.0", "-0.0"]


def test_a_key_written_twice_stays_twice_in_the_text_a_string_column_holds():
    """Measured with Spark 4.3.0: from_json writes a value back into a string column with
    Jackson's ``copyCurrentStructure``, which copies every member; kafkasync went through a
    dict and kept the last one only."""
    options, schema_id = options_for({"type": "object", "properties": {"s": {"type": ["string", "object"]}}})
    column = decode_column(options, [framed(schema_id, b'{"s": {"a": 1, "a": {"b": [2, {"b": 3, "b": 4}]}, "c": 5}}')])
    assert column.values.to_pylist() == [{"s": '{"a":1,"a":{"b":[2,{"b":3,"b":4}]},"c":5}'}]


def test_a_local_ref_is_followed_through_escaped_names_and_array_indexes():
    """A ``$ref`` is a URI fragment holding a JSON Pointer (RFC 6901): ``a~1b`` names ``a/b``,
    ``%20`` a space, and ``/1`` indexes an array. Each such reference was looked up as written,
    found nothing, and typed its property a string instead of its definition's struct."""
    money = {"type": "object", "properties": {"cents": {"type": "integer"}}}
    options, _ = options_for({"type": "object", "definitions": {"a/b": money, "m~n": money, "my money": money},
                              "allOf": [{"type": "string"}, money],
                              "properties": {"slash": {"$ref": "#/definitions/a~1b"},
                                             "tilde": {"$ref": "#/definitions/m~0n"},
                                             "space": {"$ref": "#/definitions/my%20money"},
                                             "index": {"$ref": "#/allOf/1"}, "none": {"$ref": "#/allOf/7"}}})
    struct = T.StructType([T.StructField("cents", T.LongType())])
    assert [(f.name, f.dataType) for f in options.spark_type().fields] == [
        ("slash", struct), ("tilde", struct), ("space", struct), ("index", struct), ("none", T.StringType())]
