"""No code from schema text (issue 61, finding 7): schemas meant to run code, or to break the
readers, registered as the registry would hand them over, are refused with a clear error or
read correctly, and nothing in them runs.

The old time reader put a ``fixed``'s ``size`` into ``exec``'d source, and fastavro accepts a
string there: ``"size": "0; <python>"`` ran that Python in every reader. Now every line of the
generated readers is one of a fixed set (formats/avro/time_path.py ``_LINES``) whose only fields
are integers checked to be ``int``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from avro_support import arrow_type_of, codec, framed

from kafkasync_source.formats.avro import time_path
from kafkasync_source.formats.avro.schema import SchemaError, parse
from kafkasync_source.formats.registry import KafkaSyncFormatError


def _with_fixed(size: object, name: str = "Digest") -> dict:
    return {"type": "record", "name": "R", "fields": [
        {"name": "d", "type": {"type": "fixed", "name": name, "size": size}}, {"name": "ts", "type": "long"}]}


def _payload_code(marker: Path) -> str:
    return f"0\n    open({str(marker)!r}, 'w').write('ran')\n    pos += 0"


@pytest.mark.parametrize("size, why", [
    ("0; import os", "a fixed size is a whole number"),
    (-1, "a fixed size is a whole number"),
    (True, "a fixed size is a whole number"),
    (2**31, "a fixed size is a whole number"),
    (10**400, "a fixed size is a whole number"),
    (1.5, "a fixed size is a whole number"),
])
def test_a_fixed_size_that_is_not_a_whole_number_of_java_ints_range_is_refused(size, why):
    with pytest.raises(SchemaError, match=why):
        parse(json.dumps(_with_fixed(size)))


def test_a_size_holding_python_runs_nothing_as_a_writer_or_as_the_reader(tmp_path):
    marker = tmp_path / "ran"
    hostile = _with_fixed(_payload_code(marker))
    honest = _with_fixed(4)
    payload = framed(honest, {"d": b"abcd", "ts": 5}, schema_id=9)
    # As a writer schema: every record of it names why, none runs anything.
    with pytest.raises(KafkaSyncFormatError, match="writer schema id 9 is not a valid Avro schema: .*fixed size"):
        codec({9: hostile}, honest).time_path("ts", "epochMillis").time_of(payload)
    _, undecodable = codec({9: hostile}, honest).decode([payload], arrow_type_of(honest))
    assert [(u.kind, u.schema_id) for u in undecodable] == [("incompatible", 9)]
    assert "fixed size" in undecodable[0].reason
    # As the reader schema: the query does not start.
    with pytest.raises(KafkaSyncFormatError, match="the reader schema cannot be read: .*fixed size"):
        codec({9: honest}, hostile)
    assert not marker.exists()


@pytest.mark.parametrize("name", ['a"b', "a\nb", "a'b", "a b", "x;import os", "", "1abc", "a.", "é"])
def test_names_that_are_not_avro_names_are_refused_wherever_they_stand(name):
    for schema in (_with_fixed(4, name=name),
                   {"type": "record", "name": name, "fields": [{"name": "ts", "type": "long"}]},
                   {"type": "record", "name": "R", "fields": [{"name": name, "type": "long"}]},
                   {"type": "record", "name": "R", "fields": [
                       {"name": "e", "type": {"type": "enum", "name": "E", "symbols": [name]}}]},
                   {"type": "record", "name": "R", "namespace": name, "fields": [{"name": "ts", "type": "long"}]},
                   {"type": "record", "name": "R", "fields": [{"name": "ts", "type": "long", "aliases": [name]}]}):
        if schema.get("namespace") == "":
            continue  # the empty namespace is Avro's null namespace
        with pytest.raises(SchemaError):
            parse(json.dumps(schema))


DUNDER = {"type": "record", "name": "__init__", "namespace": "__builtins__", "fields": [
    {"name": "__class__", "type": {"type": "fixed", "name": "__import__", "size": 2}},
    {"name": "__dict__", "type": ["null", {"type": "enum", "name": "__globals__", "symbols": ["__exec__", "_"]}]},
    {"name": "exec", "type": "string"},
    {"name": "__eq__", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def test_dunder_names_are_read_as_names(monkeypatch):
    """Names Python gives meaning to are data here: the record is read correctly, and the source
    of the generated time reader holds none of its names (only lines of ``_LINES``)."""
    sources: list[str] = []
    real_compile = compile

    def spy(source, *args, **kwargs):
        sources.append(source)
        return real_compile(source, *args, **kwargs)
    monkeypatch.setattr(time_path, "compile", spy, raising=False)
    record = {"__class__": b"ok", "__dict__": ("__builtins__.__globals__", "__exec__"), "exec": "print(1)",
              "__eq__": 1_700_000_000_000}
    payload = framed(DUNDER, record)
    assert codec(DUNDER, DUNDER).time_path("__eq__", "epochMillis").time_of(payload) == 1_700_000_000_000
    values, undecodable = codec(DUNDER, DUNDER).decode([payload], arrow_type_of(DUNDER))
    row = values.to_pylist()[0]
    assert undecodable == [] and row["__class__"] == b"ok" and row["__dict__"] == "__exec__"
    assert row["exec"] == "print(1)"
    assert sources, "the time reader is generated"
    for source in sources:
        for name in ("__init__", "__builtins__", "__class__", "__import__", "__dict__", "__globals__", "exec(",
                     "__exec__", "print", "__eq__"):
            assert name not in source
        templates = {line.strip() for text in time_path._LINES.values() for line in text.split("\n")}
        shapes = {line.strip() for line in source.split("\n")[1:]}
        assert all(any(_fits(line, t) for t in templates) for line in shapes), source


def _fits(line: str, template: str) -> bool:
    """``line`` is ``template`` with each ``{}`` a decimal integer."""
    import re

    pattern = "^" + re.escape(template).replace(r"\{\}", r"\d+") + "$"
    return re.match(pattern, line) is not None


def test_the_generated_readers_take_nothing_but_integers():
    lines: list[str] = []
    emit = time_path._Emitter.line
    emit(lines, 1, "pos += n", 12)
    for value in ("0; import os", True, -1, 1.0, None):
        with pytest.raises(ValueError, match="non-negative integers only"):
            emit(lines, 1, "pos += n", value)  # type: ignore[arg-type]
    assert lines == ["    pos += 12"]


@pytest.mark.parametrize("schema, why", [
    ("[" * 5000 + "]" * 5000, "nested"),
    (json.dumps({"type": "array", "items": {"type": "array", "items": {"type": "array", "items": "int"}}}), None),
    (json.dumps({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nowhere"}]}), "names no type"),
    (json.dumps({"type": "record", "name": "R", "fields": "__import__('os')"}), "a list of \"fields\""),
    (json.dumps(["int", "int"]), "holds int twice"),
    (json.dumps([]), "a union with no branch"),
    (json.dumps({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}), "not one of its symbols"),
    ("{\"type\": ", "not JSON"),
])
def test_schemas_avro_refuses_are_refused_with_a_clear_error(schema, why):
    if why is None:
        parse(schema)
        return
    with pytest.raises(SchemaError, match=why):
        parse(schema)


def test_huge_numbers_in_a_decimal_are_ignored_as_java_ignores_an_invalid_logical_type():
    """Java's ``LogicalTypes.fromSchemaIgnoreInvalid``: a precision that is no Java int, or does
    not fit its fixed size, leaves the plain type (bytes), as ``from_avro`` reads it."""
    for precision in (10**100, 2**31, -5, "9", True):
        node = parse(json.dumps({"type": "bytes", "logicalType": "decimal", "precision": precision}))
        assert node.logical is None and node.kind == "bytes"
    fixed = parse(json.dumps({"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 9}))
    assert fixed.logical is None


def _doubling(depth: int) -> dict:
    """Records each holding the one before twice (the second time by name): a few hundred bytes of
    schema text whose paths number 2^depth."""
    inner: object = {"type": "record", "name": "R0", "fields": [{"name": "s", "type": "string"}]}
    for level in range(1, depth + 1):
        inner = {"type": "record", "name": f"R{level}", "fields": [{"name": "a", "type": inner},
                                                                      {"name": "b", "type": f"R{level - 1}"}]}
    return {"type": "record", "name": "Top", "fields": [{"name": "x", "type": inner}, {"name": "ts", "type": "long"}]}


def test_a_schema_whose_paths_double_each_level_compiles_in_work_linear_in_its_text():
    """The time readers inlined every path through the writer schema before the event-time field,
    and the numpy program listed an op per path: 12 levels cost over a million Python calls, 16
    levels tens of millions (some 20 s), 30 levels hours, on the driver's fetch thread, for one
    registered schema. Now a record is inlined once and called after that, and a value of more
    than batch.MAX_OPS fields is read record by record: the work follows the schema's types and
    the record's bytes (each string at least one)."""
    from test_avro_fuzz import _counted

    writer = _doubling(12)
    reader = {"type": "record", "name": "Top", "fields": [{"name": "ts", "type": "long"}]}
    payload = b"\x00\x00\x00\x00\x07" + b"\x00" * 2**12 + b"\x04"
    compiled = codec(writer, reader)
    (path, calls) = _counted(lambda: codec(writer, reader).time_path("ts", "epochMillis").compiled(7))
    assert calls < 100_000, calls
    times = compiled.time_path("ts", "epochMillis")
    assert times.time_of(payload) == 2 and times.batch([payload, payload]) in (None, [2, 2])
    (decoded, calls) = _counted(lambda: compiled.decode([payload], arrow_type_of(reader)))
    assert decoded[1] == [] and decoded[0].to_pylist() == [{"ts": 2}]
    assert calls < 100 * len(payload), calls
