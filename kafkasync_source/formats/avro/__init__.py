"""``avro-confluent``: Avro records framed by Confluent's serializers, read with their writer schema.

Two readers, for two costs:

* **A field's time** (``eventTime.field``) runs for every record on the driver's fetch path and
  on the executors, so it decodes only as far as the field: per writer schema, a reader compiled
  from that schema skips each field before the one on the path (a varint, a length and a jump)
  and decodes only the leaf; a record costs one look-up of its 5-byte header, then one generated
  function (skips, leaf and conversion; strings of 0-63 bytes skipped by a table look-up). Names
  on the path are the reader schema's, matched to the writer's by name or by the reader field's
  aliases, as Avro's resolution matches them (Avro 1.11 specification, "Schema Resolution"); a
  field the writer lacks takes the reader's default.
* **The value as columns** (``value.decode``) decodes a run of records of one writer schema at
  a time, resolving it to the reader schema (defaults, aliases, promotions): by numpy straight
  into Arrow columns (avro_columns.py) where it decodes every record exactly, else with
  fastavro (``fastavro.reader`` over the run, so that the schemas are parsed once a run).

Whether a writer resolves to the reader is checked once per writer schema, before its first
record is read, so that an incompatible writer fails naming the schema id and the field.
Spark types follow Spark's ``SchemaConverters.toSqlType`` (``from_avro``): records are structs,
``[null, T]`` unions are nullable ``T``, ``[int, long]`` is long, ``[float, double]`` double,
other unions structs of ``member0``, ``member1``...; ``timestamp-millis``/``-micros`` are
timestamps, ``local-timestamp-*`` timestamps without time zone, ``date`` dates, ``decimal``
decimals, enums strings.
"""

from __future__ import annotations

import io
import json
import operator
import struct
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime, checked, converter
from kafkasync_source.event_time.options import EPOCH_MICROS, EPOCH_MILLIS, EPOCH_SECONDS, record_name
from kafkasync_source.formats.avro.batch import NotInBatch, Program, framed, path_program
from kafkasync_source.formats.framing import HEADER_BYTES, read_varint, schema_id
from kafkasync_source.formats.registry import KafkaSyncFormatError, registry

Schema = Any  # an Avro schema as fastavro parses it: a name (str), a dict or a union (list)
Skip = Callable[[bytes, int], int]

_TIME_UNITS = {"timestamp-millis": (1, 1), "local-timestamp-millis": (1, 1),
               "timestamp-micros": (1, 1000), "local-timestamp-micros": (1, 1000),
               "timestamp-nanos": (1, 1_000_000), "local-timestamp-nanos": (1, 1_000_000),
               "date": (86_400_000, 1)}
"""Logical types that are times as they are: ``(ms per unit, units per ms)``."""
_PROMOTIONS = {"int": {"int", "long", "float", "double"}, "long": {"long", "float", "double"},
               "float": {"float", "double"}, "double": {"double"}, "string": {"string", "bytes"},
               "bytes": {"bytes", "string"}}
"""Writer type -> reader types it resolves to (the specification's promotions)."""
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_SHORT_LENGTH = tuple(1 + (b >> 1) if not b & 129 else 1 << 62 for b in range(256))
"""A string's or bytes' first byte -> the bytes to skip (length byte and data) when it is a
one-byte, even zigzag varint (a length of 0-63); otherwise a jump past any payload (see
:meth:`_Generated._compiled`)."""
_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")


class _Names:
    """A parsed schema and its named types (fastavro's full names), to follow references."""

    def __init__(self, schema_str: str) -> None:
        import fastavro

        self.named: dict[str, Any] = {}
        self.raw = json.loads(schema_str)
        self.root = fastavro.parse_schema(self.raw, named_schemas=self.named)

    def resolve(self, schema: Schema) -> Schema:
        return self.named.get(schema, schema) if isinstance(schema, str) else schema


def _kind(schema: Schema) -> str:
    if isinstance(schema, list):
        return "union"
    return schema if isinstance(schema, str) else schema["type"]


def _logical(schema: Schema) -> Optional[str]:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def _name(schema: Schema) -> Optional[str]:
    return schema.get("name") if isinstance(schema, dict) else None


# -- skipping what lies before the field -------------------------------------------------------

def _skip_varint(buf: bytes, pos: int) -> int:
    while buf[pos] & 0x80:
        pos += 1
    return pos + 1


def _skip_length(buf: bytes, pos: int) -> int:
    length, pos = read_varint(buf, pos)
    if length < 0:
        raise InvalidTime("a negative length: the payload does not match its writer schema")
    return pos + length


class _Skips:
    """Compiles a schema into a function that jumps over one value of it (per writer schema)."""

    def __init__(self, names: _Names) -> None:
        self._names = names
        self._named: dict[str, Skip] = {}

    def of(self, schema: Schema) -> Skip:
        schema = self._names.resolve(schema)
        kind = _kind(schema)
        if kind == "null":
            return lambda buf, pos: pos
        if kind == "boolean":
            return lambda buf, pos: pos + 1
        if kind in ("int", "long", "enum"):
            return _skip_varint
        if kind == "float":
            return lambda buf, pos: pos + 4
        if kind == "double":
            return lambda buf, pos: pos + 8
        if kind in ("bytes", "string"):
            return _skip_length
        if kind == "fixed":
            size = schema["size"]
            return lambda buf, pos: pos + size
        if kind == "union":
            branches = [self.of(branch) for branch in schema]

            def skip_union(buf: bytes, pos: int) -> int:
                index, pos = read_varint(buf, pos)
                return branches[index](buf, pos)
            return skip_union
        if kind == "record":
            return self._record(schema)
        if kind == "array":
            return _blocks(self.of(schema["items"]))
        if kind == "map":
            value = self.of(schema["values"])
            return _blocks(lambda buf, pos: value(buf, _skip_length(buf, pos)))
        raise ValueError(f"unknown Avro type {kind!r}")

    def _record(self, schema: dict) -> Skip:
        name = schema["name"]
        if name not in self._named:
            fields: list[Skip] = []
            self._named[name] = lambda buf, pos: _skip_all(fields, buf, pos)  # recursive types
            fields.extend(self.of(f["type"]) for f in schema["fields"])
        return self._named[name]


def _skip_all(skips: list[Skip], buf: bytes, pos: int) -> int:
    for skip in skips:
        pos = skip(buf, pos)
    return pos


def _blocks(item: Skip) -> Skip:
    """Arrays and maps: blocks of a count (negative: followed by the block's size in bytes)."""
    def skip(buf: bytes, pos: int) -> int:
        while True:
            count, pos = read_varint(buf, pos)
            if count == 0:
                return pos
            if count < 0:
                size, pos = read_varint(buf, pos)
                pos += size
                continue
            for _ in range(count):
                pos = item(buf, pos)
    return skip


# -- the time at a field path -----------------------------------------------------------------

def parse_field_path(path: str) -> list[str]:
    """``source.ts_ms`` -> ``["source", "ts_ms"]``; ValueError naming the option."""
    steps = path.strip().split(".")
    if not all(steps):
        raise ValueError(f"Option 'eventTime.field' {path!r} must be field names joined by '.', e.g. 'source.ts_ms'.")
    return steps


@dataclass(frozen=True)
class _Leaf:
    """What the path reaches: how to read it from the writer's bytes, and what it means."""

    read: Callable[[bytes, int], Any]
    logical: Optional[str]
    read_batch: Optional[Callable[[Any, Any, Any], Any]] = None
    """``(buf, positions, ends) -> values`` over a batch (avro_batch.py); None: record by record."""
    time_of: Optional[Callable[[bytes], int]] = None
    """``framed payload -> epoch ms`` in one generated function, the conversion inlined (when
    compiled for a time format): what the seam calls per record."""


def _field_index(reader_field: dict, writer_record: dict) -> Optional[int]:
    """The writer's field that a reader field resolves to: same name, else one of its aliases."""
    names = [reader_field["name"], *reader_field.get("aliases", ())]
    for name in names:
        for index, candidate in enumerate(writer_record["fields"]):
            if candidate["name"] == name:
                return index
    return None


def _non_null(schema: Schema, names: _Names, where: str) -> tuple[Optional[int], Schema]:
    """A ``[null, T]`` union's non-null branch and its index (None: not a union)."""
    schema = names.resolve(schema)
    if _kind(schema) != "union":
        return None, schema
    branches = [i for i, branch in enumerate(schema) if names.resolve(branch) != "null"]
    if len(branches) != 1:
        raise ValueError(f"{where} is a union of {len(branches)} types; a path goes through [null, T] unions only")
    return branches[0], names.resolve(schema[branches[0]])


def _reader_path(reader: _Names, steps: list[str], path: str) -> tuple[list[dict], Schema]:
    """The reader schema's field at each step and the leaf's (non-null) type; ValueError naming
    the option where the path does not lead to a number or a string."""
    fields: list[dict] = []
    schema: Schema = reader.root
    for depth, step in enumerate(steps):
        prefix = ".".join(steps[:depth]) or "the value"
        _, schema = _non_null(schema, reader, f"Option 'eventTime.field' {path!r}: {prefix}")
        if _kind(schema) != "record":
            raise ValueError(f"Option 'eventTime.field' {path!r}: {prefix} is a {_kind(schema)}, not a record")
        found = [f for f in schema["fields"] if f["name"] == step]
        if not found:
            names = ", ".join(f["name"] for f in schema["fields"])
            raise ValueError(f"Option 'eventTime.field' {path!r}: {prefix} has no field {step!r} (its fields: {names})")
        fields.append(found[0])
        schema = found[0]["type"]
    _, leaf = _non_null(schema, reader, f"Option 'eventTime.field' {path!r}")
    if _kind(leaf) not in ("int", "long", "float", "double", "string"):
        raise ValueError(f"Option 'eventTime.field' {path!r} is a {_kind(leaf)}; a time is a number or a string")
    return fields, leaf


def _compile_leaf(writer: _Names, reader_path: Optional[tuple[list[dict], Schema]], steps: list[str],
                  schema_ref: int, time_format: Optional[str] = None) -> _Leaf:
    """Per writer schema: skip to the field on the path, decode only it. ``reader_path``: the
    reader schema's fields along the path and its leaf type (None: the writer's own names).
    ``time_format``: also compile :attr:`_Leaf.time_of` for it."""
    # Per step: the union branch that holds the record (None: not a union), the record, the
    # index of the field on the path, and the path up to the record (for messages).
    stages: list[tuple[Optional[int], dict, int, str]] = []
    schema: Schema = writer.root
    for depth, step in enumerate(steps):
        prefix = ".".join(steps[:depth]) or "the value"
        branch, record = _non_null(schema, writer, f"in writer schema id {schema_ref}, {prefix}")
        if _kind(record) != "record":
            raise _incompatible(schema_ref, prefix, f"is a {_kind(record)} in the writer schema, not a record")
        reader_field = reader_path[0][depth] if reader_path else {"name": step}
        index = _field_index(reader_field, record)
        if index is None:
            if "default" not in reader_field:
                raise _incompatible(schema_ref, ".".join(steps[:depth + 1]),
                                    "is missing from the writer schema and has no default")
            default = reader_field["default"]
            if default is None:
                raise _incompatible(schema_ref, ".".join(steps[:depth + 1]),
                                    "is missing from the writer schema and its default is null: no time")
            assert reader_path is not None
            logical = _logical(reader_path[1])
            constant_time = None if time_format is None else _constant_time(_time_converter(logical, time_format),
                                                                            default)
            return _Leaf(_constant(default), logical, _constant_batch(default), constant_time)
        stages.append((branch, record, index, prefix))
        schema = record["fields"][index]["type"]
    path = ".".join(steps)
    leaf_branch, leaf = _non_null(schema, writer, f"in writer schema id {schema_ref}, {path}")
    writer_kind = _kind(leaf)
    logical = _logical(leaf)
    if reader_path:
        reader_kind, logical = _kind(reader_path[1]), _logical(reader_path[1])
        if reader_kind not in _PROMOTIONS.get(writer_kind, {writer_kind}):
            raise _incompatible(schema_ref, path, f"is a {writer_kind} in the writer schema, which does not "
                                                  f"resolve to the reader's {reader_kind}")
    try:
        batch = path_program(Program(writer.resolve, _kind), stages, leaf_branch, writer_kind)
    except NotInBatch:
        batch = None
    generated = _Generated(writer)
    time_of = None if time_format is None else generated.time_reader(
        stages, leaf_branch, writer_kind, path, _time_converter(logical, time_format),
        inline_millis=writer_kind in ("int", "long") and _TIME_UNITS.get(logical or "", (1, 1)) == (1, 1)
        and (logical in _TIME_UNITS or time_format == EPOCH_MILLIS))
    return _Leaf(generated.path_reader(stages, leaf_branch, writer_kind, path), logical, batch, time_of)


def _constant(value: Any) -> Callable[[bytes, int], Any]:
    """The reader's default for a field the writer lacks: every record of that writer has it."""
    return lambda buf, pos: value


def _constant_time(convert: Callable[[Any], int], value: Any) -> Callable[[bytes], int]:
    """The default's time, converted per record (an invalid default is an InvalidTime each time)."""
    return lambda payload: convert(value)


def _constant_batch(value: Any) -> Optional[Callable[[Any, Any, Any], Any]]:
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return lambda buf, positions, ends: np.full(len(positions), value)


class _Generated:
    """The path reader of one writer schema as straight-line Python, compiled once.

    Why generated code: the reader runs per record on the driver and the executors, and a
    closure per skipped field costs a Python call each (measured on a Debezium envelope: 13 us a
    record through closures against a few us inlined). The generated function inlines the
    skips of primitives, strings and unions of the fields before the path (a varint's bytes, a
    length and a jump), and calls the closures of :class:`_Skips` only for arrays, maps and
    recursive records. Its text is built from the schema's structure alone (field counts,
    fixed sizes, union arities): no name or other text of the schema enters the code."""

    def __init__(self, names: _Names) -> None:
        self._names = names
        self._skips = _Skips(names)
        self._calls: list[Skip] = []
        self._expanding: set[str] = set()
        self._optimistic = False

    def path_reader(self, stages: list[tuple[Optional[int], dict, int, str]], leaf_branch: Optional[int],
                    kind: str, path: str) -> Callable[[bytes, int], Any]:
        """``read(buf, pos) -> the leaf's value`` (the writer's), ``pos`` where the record starts."""
        return self._compiled("read(buf, pos)", stages, leaf_branch, kind, path, ["    return v"], {})

    def time_reader(self, stages: list[tuple[Optional[int], dict, int, str]], leaf_branch: Optional[int],
                    kind: str, path: str, convert: Callable[[Any], int], inline_millis: bool) -> Callable[[bytes], int]:
        """``time_of(framed payload) -> epoch ms``: the record starts after Confluent's header, and
        the conversion follows in the same function. ``inline_millis``: ``convert`` is the
        identity on 0 <= v <= MAX_TIME_MS (epoch ms, ``timestamp-millis``), so that common case
        costs a comparison, not a call; ``convert`` raises InvalidTime for the rest, as before."""
        tail = ["    if 0 <= v <= MAX_TIME_MS:", "        return v"] if inline_millis else []
        tail.append("    return convert(v)")
        scope = {"convert": convert, "MAX_TIME_MS": MAX_TIME_MS}
        exact = self._compiled("time_of(buf)", stages, leaf_branch, kind, path, tail, scope, start=HEADER_BYTES)
        return self._compiled("time_of(buf)", stages, leaf_branch, kind, path, tail,
                              {**scope, "exact": exact, "StructError": struct.error, "SHORT": _SHORT_LENGTH},
                              start=HEADER_BYTES, optimistic=True)

    def _compiled(self, signature: str, stages: list[tuple[Optional[int], dict, int, str]],
                  leaf_branch: Optional[int], kind: str, path: str, tail: list[str], scope: dict[str, Any],
                  start: Optional[int] = None, optimistic: bool = False) -> Any:
        """The function's text compiled. ``optimistic``: strings and bytes before the path are
        skipped by one table look-up (:data:`_SHORT_LENGTH`), which sends the position past any
        payload for a length that is not 0-63 bytes; the next read then raises IndexError (or
        struct's error), and the function answers with ``exact``, the same reader without the
        table, which gives the record's true time or true failure."""
        self._optimistic = optimistic
        lines = [f"def {signature}:"] + ([] if start is None else [f"    pos = {start}"])
        messages = [prefix for *_, prefix in stages] + [path]
        for number, (branch, record, index, _) in enumerate(stages):
            if branch is not None:
                self._branch_check(lines, branch, number)
            for field in record["fields"][:index]:
                self._skip(field["type"], lines, "    ")
        if leaf_branch is not None:
            self._branch_check(lines, leaf_branch, len(stages))
        lines += self._leaf(kind, path) + tail
        if optimistic:
            lines[1:] = ["    try:", *("    " + line for line in lines[1:]),
                         "    except (IndexError, StructError):", "        return exact(buf)"]
        scope = {**scope, "varint": read_varint, "calls": self._calls, "InvalidTime": InvalidTime,
                 "messages": messages, "DOUBLE": _DOUBLE, "FLOAT": _FLOAT}
        exec(compile("\n".join(lines), f"<avro path reader for {path}>", "exec"), scope)  # noqa: S102
        return scope[signature.partition("(")[0]]

    @staticmethod
    def _branch_check(lines: list[str], branch: int, message: int) -> None:
        lines += ["    b = buf[pos]", "    pos += 1",
                  f"    if b != {2 * branch}:",
                  f"        raise InvalidTime(messages[{message}] + ' is null')"]

    @staticmethod
    def _leaf(kind: str, path: str) -> list[str]:
        """Lines that leave the leaf's value in ``v`` (a varint inline: an epoch time in ms is 6 bytes)."""
        if kind in ("int", "long"):
            return _unrolled_varint()
        if kind in ("float", "double"):
            return [f"    v = {kind.upper()}.unpack_from(buf, pos)[0]"]
        if kind in ("string", "bytes"):
            return ["    n, pos = varint(buf, pos)", "    if n < 0 or pos + n > len(buf):",
                    "        raise InvalidTime('the payload ends inside ' + messages[-1])",
                    "    v = bytes(buf[pos:pos + n]).decode('utf-8')"]
        raise InvalidTime(f"{path} is a {kind}; a time is a number or a string")

    def _skip(self, schema: Schema, lines: list[str], indent: str) -> None:
        schema = self._names.resolve(schema)
        kind = _kind(schema)
        if kind == "null":
            return
        if kind in ("boolean", "float", "double", "fixed"):
            size = {"boolean": 1, "float": 4, "double": 8}.get(kind) or schema["size"]
            lines.append(f"{indent}pos += {size}")
        elif kind in ("int", "long", "enum"):
            lines += [f"{indent}while buf[pos] & 128:", f"{indent}    pos += 1", f"{indent}pos += 1"]
        elif kind in ("string", "bytes"):
            if self._optimistic:
                lines.append(f"{indent}pos += SHORT[buf[pos]]")
                return
            # b & 129 == 0: a one-byte, even zigzag varint, a length 0-63 (odd: negative, refused).
            lines += [f"{indent}b = buf[pos]", f"{indent}if not b & 129:", f"{indent}    pos += 1 + (b >> 1)",
                      f"{indent}else:", f"{indent}    n, pos = varint(buf, pos)", f"{indent}    if n < 0:",
                      f"{indent}        raise InvalidTime('a negative length: the payload does not match its writer"
                      " schema')",
                      f"{indent}    pos += n"]
        elif kind == "union" and len(schema) <= 63:
            lines += [f"{indent}b = buf[pos]", f"{indent}pos += 1"]
            for number, branch in enumerate(schema):
                lines.append(f"{indent}{'if' if number == 0 else 'elif'} b == {2 * number}:")
                lines.append(f"{indent}    pass")
                self._skip(branch, lines, indent + "    ")
            lines += [f"{indent}else:", f"{indent}    raise InvalidTime('a union index beyond the writer schema')"]
        elif kind == "record" and schema["name"] not in self._expanding:
            self._expanding.add(schema["name"])
            for field in schema["fields"]:
                self._skip(field["type"], lines, indent)
            self._expanding.discard(schema["name"])
        else:  # arrays, maps, recursive records, huge unions: a call
            self._calls.append(self._skips.of(schema))
            lines.append(f"{indent}pos = calls[{len(self._calls) - 1}](buf, pos)")


def _unrolled_varint() -> list[str]:
    """Lines that read a zigzag varint at ``pos`` into ``v``, one nested branch a byte (at most
    10, as ``read_varint``): no loop counter or shift to keep, which for an epoch time in ms
    (6 bytes) halves the leaf's steps."""
    lines = ["    b = buf[pos]", "    v = b & 127"]
    indent = "    "
    for byte in range(1, 10):
        lines += [f"{indent}if b > 127:", f"{indent}    b = buf[pos + {byte}]",
                  f"{indent}    v |= (b & 127) << {7 * byte}"]
        indent += "    "
    lines += [f"{indent}if b > 127:", f"{indent}    raise InvalidTime('a varint longer than 10 bytes')",
              "    v = (v >> 1) ^ -(v & 1)"]
    return lines


def _incompatible(schema_ref: int, field: str, why: str) -> KafkaSyncFormatError:
    return KafkaSyncFormatError(f"writer schema id {schema_ref} does not resolve to the reader schema: field "
                                f"{field!r} {why}")


def _time_converter(logical: Optional[str], time_format: str) -> Callable[[Any], int]:
    """A logical time type is a time as it is; other numbers and strings follow ``eventTime.format``."""
    if logical in _TIME_UNITS:
        unit, per_ms = _TIME_UNITS[logical]
        if unit == 1 and per_ms == 1:
            return checked
        return lambda value: checked(value * unit // per_ms)
    return converter(time_format)


class _Compiled:
    """Per process and (format options, path): one compiled leaf reader per writer schema id."""

    def __init__(self, options: Any, path: str, time_format: str) -> None:
        self._options = options
        self._steps = parse_field_path(path)
        self._format = time_format
        reader = options.reader_schema()
        self._reader_path = None if reader is None else _reader_path(_Names(reader.schema_str), self._steps, path)
        self.by_header: dict[bytes, Callable[[bytes], int]] = {}
        """Confluent's header (b"\\x00" + 4-byte id) -> that writer's time reader."""
        self._leaves: dict[int, _Leaf] = {}
        self._lock = threading.Lock()

    def reader_for(self, payload: Any) -> Callable[[bytes], int]:
        """The time reader of a framed payload's writer schema, keyed by the payload's first five
        bytes (magic byte and id), so that a record seen before costs one slice and one look-up.
        Raises NotFramed (a payload that is not framed), UnknownSchema, KafkaSyncFormatError."""
        schema_ref = schema_id(payload)
        leaf = self.leaf(schema_ref)
        assert leaf.time_of is not None, "compiled with the time format"
        self.by_header[payload[:HEADER_BYTES]] = leaf.time_of
        return leaf.time_of

    def leaf(self, schema_ref: int) -> _Leaf:
        """The compiled path of this writer schema (fetched and compiled once per process)."""
        found = self._leaves.get(schema_ref)
        if found is None:
            with self._lock:
                found = self._leaves.get(schema_ref)
                if found is None:
                    writer = registry(self._options.registry).schema(schema_ref)
                    if (writer.schema_type or "AVRO") != "AVRO":
                        raise InvalidTime(f"schema id {schema_ref} is a {writer.schema_type} schema, not Avro")
                    found = self._leaves[schema_ref] = _compile_leaf(
                        _Names(writer.schema_str), self._reader_path, self._steps, schema_ref, self._format)
        return found

    @property
    def time_format(self) -> str:
        return self._format


_COMPILED: dict[tuple[Any, str, str], _Compiled] = {}


def _compiled(options: Any, path: str, time_format: str) -> _Compiled:
    """One :class:`_Compiled` per process and query options, shared by the record and batch readers."""
    key = (options, path, time_format)
    found = _COMPILED.get(key)
    return found if found is not None else _COMPILED.setdefault(key, _Compiled(options, path, time_format))


def time_reader(options: Any, path: str, time_format: str) -> Callable[[Any], int]:
    """``record -> epoch ms``: one look-up of the payload's header, then the writer schema's
    generated reader (skips, leaf and conversion in one function: :meth:`_Generated.time_reader`)."""
    compiled = _compiled(options, path, time_format)
    by_header = compiled.by_header
    reader_for = compiled.reader_for
    payload_of = operator.methodcaller("value" if options.part == "value" else "key")

    def read(record: Any) -> int:
        payload = payload_of(record)
        try:
            try:
                time_of = by_header[payload[:HEADER_BYTES]]
            except (KeyError, TypeError):  # a new writer schema, or not framed (None, short, no magic byte)
                time_of = reader_for(payload)
            return time_of(payload)
        except IndexError:
            raise InvalidTime("the payload ends before the field: it does not match its writer schema") from None
        except KafkaSyncFormatError as err:
            raise KafkaSyncFormatError(f"kafkasync: {record_name(record)}: {err}") from None
    return read


_BATCH_UNITS = {EPOCH_MILLIS: (1, 1), EPOCH_SECONDS: (1000, 1), EPOCH_MICROS: (1, 1000)}
"""``eventTime.format`` of a plain integer as ``(ms per unit, units per ms)``; ISO 8601 text and
fractions are read record by record."""


def batch_time_reader(options: Any, path: str, time_format: str) -> Callable[[list], Optional[list[int]]]:
    """The seam's ``read_all``: a consume() batch's times from its values (avro_batch.py), None
    unless every record has a valid time there (the seam then reads each record alone)."""
    import numpy as np

    compiled = _compiled(options, path, time_format)

    def times(values: list) -> Optional[list[int]]:
        count = len(values)
        if not count:
            return []
        batch = framed(values, HEADER_BYTES)
        if batch is None:
            return None
        buf, starts, ends, ids = batch
        schema_refs = np.unique(ids).tolist()
        if len(schema_refs) == 1:  # the common case: one writer schema in the batch
            found = _batch_times(compiled, schema_refs[0], buf, starts, ends)
            return None if found is None else found.tolist()
        result = np.empty(count, dtype=np.int64)
        for schema_ref in schema_refs:  # a writer moving to its next version mid-batch
            which = np.flatnonzero(ids == schema_ref)
            found = _batch_times(compiled, schema_ref, buf, starts[which], ends[which])
            if found is None:
                return None
            result[which] = found
        return result.tolist()
    return times


def _batch_times(compiled: _Compiled, schema_ref: int, buf: Any, starts: Any, ends: Any) -> Optional[Any]:
    """Epoch ms of each record of one writer schema, or None (read them one at a time)."""
    import numpy as np

    try:
        leaf = compiled.leaf(schema_ref)
    except Exception:  # noqa: BLE001 - an unknown id, a registry down, an incompatible writer: each record says
        return None
    if leaf.read_batch is None:
        return None
    try:
        values = leaf.read_batch(buf, starts + HEADER_BYTES, ends)
    except NotInBatch:
        return None
    unit, per_ms = _TIME_UNITS.get(leaf.logical or "") or _BATCH_UNITS.get(compiled.time_format, (0, 0))
    if not unit or values.dtype.kind != "i":
        return None
    if unit == 1 and per_ms == 1:
        millis = values
    elif (np.abs(values) > (2**62) // unit).any():
        return None
    else:
        millis = values * unit // per_ms
    if (millis < 0).any() or (millis > MAX_TIME_MS).any():
        return None
    return millis


# -- the value as columns --------------------------------------------------------------------

def spark_type(options: Any) -> Any:
    """``from_avro``'s type for the pinned reader schema."""
    reader = options.reader_schema()
    assert reader is not None, "value.decode pins a reader schema at start"
    names = _Names(reader.schema_str)
    data_type, _ = _spark_type(names.root, names)
    return data_type


def _spark_type(schema: Schema, names: _Names) -> tuple[Any, bool]:
    """(Spark type, nullable), as ``SchemaConverters.toSqlType`` in apache/spark's spark-avro."""
    import pyspark.sql.types as T

    schema = names.resolve(schema)
    kind, logical = _kind(schema), _logical(schema)
    if kind == "union":
        branches = [b for b in schema if names.resolve(b) != "null"]
        nullable = len(branches) < len(schema)
        if len(branches) == 1:
            return _spark_type(branches[0], names)[0], nullable
        kinds = sorted(_kind(names.resolve(b)) for b in branches)
        if kinds == ["int", "long"]:
            return T.LongType(), nullable
        if kinds == ["double", "float"]:
            return T.DoubleType(), nullable
        return T.StructType([T.StructField(f"member{i}", _spark_type(b, names)[0], True)
                             for i, b in enumerate(branches)]), nullable
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            data_type, nullable = _spark_type(f["type"], names)
            fields.append(T.StructField(f["name"], data_type, nullable))
        return T.StructType(fields), False
    if kind == "array":
        item, nullable = _spark_type(schema["items"], names)
        return T.ArrayType(item, nullable), False
    if kind == "map":
        value, nullable = _spark_type(schema["values"], names)
        return T.MapType(T.StringType(), value, nullable), False
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return T.DecimalType(schema["precision"], schema.get("scale", 0)), False
    if logical == "date" and kind == "int":
        return T.DateType(), False
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType(), False
    if kind == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType(), False
    simple = {"null": T.NullType(), "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(),
              "float": T.FloatType(), "double": T.DoubleType(), "bytes": T.BinaryType(), "fixed": T.BinaryType(),
              "string": T.StringType(), "enum": T.StringType()}
    return simple[kind], kind == "null"


def check_resolution(writer: _Names, reader: _Names, schema_ref: int) -> None:
    """Raise KafkaSyncFormatError naming the first field where the writer schema does not
    resolve to the reader's (the specification's rules: names or aliases, defaults for fields
    the writer lacks, promotions, union branches, enum symbols without a default)."""
    why = _mismatch(writer, writer.root, reader, reader.root, "", set())
    if why is not None:
        field, reason = why
        raise _incompatible(schema_ref, field or "(the value)", reason)


def _mismatch(wn: _Names, w: Schema, rn: _Names, r: Schema, path: str,
              seen: set) -> Optional[tuple[str, str]]:
    w, r = wn.resolve(w), rn.resolve(r)
    wk, rk = _kind(w), _kind(r)
    if wk == "union":
        # Each writer branch must resolve to the reader (a record of another branch would fail).
        for branch in w:
            found = _mismatch(wn, branch, rn, r, path, seen)
            if found is not None:
                return found
        return None
    if rk == "union":
        for branch in r:
            if _mismatch(wn, w, rn, branch, path, seen.copy()) is None:
                return None
        # The branch the writer's value would take (same kind, and same name for a named type):
        # its own mismatch names the field inside it, e.g. after.amount, not just after.
        same = [b for b in r if _kind(rn.resolve(b)) == wk
                and (_name(rn.resolve(b)) or "").rpartition(".")[2] == (_name(w) or "").rpartition(".")[2]]
        if len(same) == 1:
            return _mismatch(wn, w, rn, same[0], path, seen)
        return path, f"is a {wk} in the writer schema, which matches no branch of the reader's union"
    if wk in _PRIMITIVES or rk in _PRIMITIVES:
        if rk in _PROMOTIONS.get(wk, {wk}):
            return None
        return path, f"is a {wk} in the writer schema, which does not resolve to the reader's {rk}"
    if wk != rk:
        return path, f"is a {wk} in the writer schema, the reader's is a {rk}"
    if wk in ("record", "enum", "fixed"):
        # "both schemas are records with the same (unqualified) name", or a reader alias names it.
        accepted = {(_name(r) or "").rpartition(".")[2], *(a.rpartition(".")[2] for a in r.get("aliases", ()))}
        if (_name(w) or "").rpartition(".")[2] not in accepted:
            return path, f"is the writer's {_name(w)}, not the reader's {_name(r)} (nor one of its aliases)"
    if wk == "fixed" and w["size"] != r["size"]:
        return path, f"is a fixed of {w['size']} bytes in the writer schema, {r['size']} in the reader's"
    if wk == "enum" and "default" not in r:
        missing = set(w["symbols"]) - set(r["symbols"])
        if missing:
            return path, f"has symbols {sorted(missing)} the reader's enum lacks (and it has no default)"
    if wk == "array":
        return _mismatch(wn, w["items"], rn, r["items"], f"{path}[]", seen)
    if wk == "map":
        return _mismatch(wn, w["values"], rn, r["values"], f"{path}{{}}", seen)
    if wk == "record":
        key = (_name(w), _name(r))
        if key in seen:
            return None
        seen.add(key)
        for field in r["fields"]:
            where = f"{path}.{field['name']}".lstrip(".")
            index = _field_index(field, w)
            if index is None:
                if "default" not in field:
                    return where, "is missing from the writer schema and has no default in the reader's"
                continue
            found = _mismatch(wn, w["fields"][index]["type"], rn, field["type"], where, seen)
            if found is not None:
                return found
    return None


class _Decoder:
    """Per process and (format options): the reader schema, and per writer id its resolution checked."""

    def __init__(self, options: Any) -> None:
        reader = options.reader_schema()
        assert reader is not None, "value.decode pins a reader schema at start"
        self._options = options
        self._reader = _Names(reader.schema_str)
        self._checked: dict[int, str] = {}
        self._columns: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()

    def writer_json(self, schema_ref: int) -> str:
        """The writer schema's text, once its resolution to the reader is checked."""
        found = self._checked.get(schema_ref)
        if found is None:
            with self._lock:
                writer = registry(self._options.registry).schema(schema_ref)
                if (writer.schema_type or "AVRO") != "AVRO":
                    raise InvalidTime(f"schema id {schema_ref} is a {writer.schema_type} schema, not Avro")
                check_resolution(_Names(writer.schema_str), self._reader, schema_ref)
                found = self._checked[schema_ref] = writer.schema_str
        return found

    @property
    def reader_schema(self) -> Any:
        return self._reader.raw

    def decode_run(self, schema_ref: int, bodies: list[bytes]) -> list[Any]:
        """Records of one writer schema, through one in-memory Avro container (schemas parsed
        once; ``fastavro.reader`` resolves each record to the reader schema)."""
        import fastavro

        container = _container(self.writer_json(schema_ref), bodies)
        return list(fastavro.reader(io.BytesIO(container), self._reader.raw))

    def columns(self, schema_ref: int, arrow_type: Any) -> Optional[Any]:
        """The writer schema's numpy decoder into ``arrow_type`` (avro_columns.py), None where
        the schemas hold what it does not decode (compiled once per writer schema)."""
        from kafkasync_source.formats.avro.columns import Columns

        key = (schema_ref, str(arrow_type))
        if key not in self._columns:
            writer = _Names(self.writer_json(schema_ref))
            try:
                compiled = Columns(writer.resolve, self._reader.resolve, _kind, _field_index).of(
                    writer.root, self._reader.root, arrow_type)
            except NotInBatch:
                compiled = None
            self._columns[key] = compiled
        return self._columns[key]

    def decode_one(self, schema_ref: int, body: bytes) -> Any:
        import fastavro

        return fastavro.schemaless_reader(io.BytesIO(body), json.loads(self.writer_json(schema_ref)),
                                          self._reader.raw)


_DECODERS: dict[Any, _Decoder] = {}


def column_decoder(options: Any, arrow_type: Any) -> Callable[[list], Any]:
    """``records -> pyarrow array``: each record decoded with its writer schema into the reader
    schema; null for a record that is not framed or whose id the registry does not know."""
    import pyarrow as pa

    decoder = _DECODERS.get(options)
    if decoder is None:
        decoder = _DECODERS.setdefault(options, _Decoder(options))
    to_arrow = _arrow_values(decoder.reader_schema)
    payload_of = operator.methodcaller("value" if options.part == "value" else "key")

    def decode(records: list) -> Any:
        import numpy as np

        payloads = [payload_of(record) for record in records]
        rows = None  # the records' positions among payloads, where some are not framed
        batch = framed(payloads, HEADER_BYTES)
        if batch is None:  # a tombstone or a stray record among them: a null value each
            rows = [index for index, payload in enumerate(payloads) if _is_framed(payload)]
            batch = framed([payloads[index] for index in rows], HEADER_BYTES)
            assert batch is not None
        buf, starts, ends, ids = batch
        schema_refs = np.unique(ids).tolist()
        pieces: list[Any] = []
        where = np.full(len(ids), -1, dtype=np.int64)
        """Each framed record's row in the runs' values joined; -1: a null value."""
        joined_rows = 0
        for schema_ref in schema_refs:
            which = np.arange(len(ids)) if len(schema_refs) == 1 else np.flatnonzero(ids == schema_ref)
            try:
                piece = _run_values(decoder, schema_ref, buf, starts[which], ends[which], arrow_type, to_arrow)
            except InvalidTime:  # the id is unknown or not Avro: null values
                continue
            except KafkaSyncFormatError as err:
                first = int(which[0]) if rows is None else rows[int(which[0])]
                raise KafkaSyncFormatError(f"kafkasync: {record_name(records[first])}: {err}") from None
            where[which] = joined_rows + np.arange(len(which))
            joined_rows += len(which)
            pieces.append(piece)
        if not pieces:
            return pa.nulls(len(payloads), arrow_type)
        joined = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        if rows is None and len(pieces) == 1 and joined_rows == len(payloads):  # one writer, all framed
            return joined
        if rows is not None:
            every = np.full(len(payloads), -1, dtype=np.int64)
            every[rows] = where
            where = every
        return joined.take(pa.array(where, mask=where < 0))
    return decode


def _is_framed(payload: Any) -> bool:
    try:
        schema_id(payload)
        return True
    except InvalidTime:
        return False


def _run_values(decoder: _Decoder, schema_ref: int, buf: Any, starts: Any, ends: Any, arrow_type: Any,
                to_arrow: Callable[[Any], Any]) -> Any:
    """The values of a run of records of one writer schema (each ``buf[starts[i]:ends[i]]``): by
    numpy (avro_columns.py) where it decodes the schemas and every record exactly, else through
    fastavro (one container of the run, or each record alone where one of them fails: null)."""
    import pyarrow as pa

    from kafkasync_source.formats.avro.columns import decode_run

    column = decoder.columns(schema_ref, arrow_type)  # checks the resolution first: KafkaSyncFormatError
    if column is not None:
        try:
            return decode_run(column, buf, starts + HEADER_BYTES, ends)
        except NotInBatch:
            pass
    data = buf.tobytes()
    payloads = [data[start:end] for start, end in zip(starts.tolist(), ends.tolist())]
    try:
        decoded = decoder.decode_run(schema_ref, [payload[HEADER_BYTES:] for payload in payloads])
    except InvalidTime:
        raise
    except Exception:  # noqa: BLE001 - one bad record among them: decode each alone
        decoded = [_one(decoder, schema_ref, payload) for payload in payloads]
    return pa.array([to_arrow(row) if row is not None else None for row in decoded], type=arrow_type)


def _one(decoder: _Decoder, schema_ref: int, payload: bytes) -> Any:
    from fastavro.read import SchemaResolutionError

    try:
        return decoder.decode_one(schema_ref, payload[HEADER_BYTES:])
    except (InvalidTime, KafkaSyncFormatError):
        raise
    except SchemaResolutionError as err:  # a rule check_resolution does not know: fastavro's words
        raise _incompatible(schema_ref, "(see fastavro)", str(err)[:300]) from None
    except Exception:  # noqa: BLE001 - a record whose bytes do not match its writer schema: null
        return None


def _zigzag(number: int) -> bytes:
    number = (number << 1) ^ (number >> 63)
    out = bytearray()
    while number & ~0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _container(schema_json: str, bodies: list[bytes]) -> bytes:
    """An Avro object container file (Avro specification, "Object Container Files") holding the
    records in one uncompressed block: how fastavro's public reader reads many records of one
    schema without parsing it once a record."""
    def text(value: bytes) -> bytes:
        return _zigzag(len(value)) + value
    sync = b"\x00" * 16
    meta = (_zigzag(2) + text(b"avro.schema") + text(schema_json.encode()) + text(b"avro.codec") + text(b"null")
            + _zigzag(0))
    data = b"".join(bodies)
    return b"Obj\x01" + meta + sync + _zigzag(len(bodies)) + _zigzag(len(data)) + data + sync


def _arrow_values(schema: Any) -> Callable[[Any], Any]:
    """fastavro's Python values -> what pyarrow takes for the Spark type: unions of several types
    become ``{"memberN": value}``, UUIDs text; everything else as it is."""
    import fastavro

    named: dict[str, Any] = {}
    root = fastavro.parse_schema(schema, named_schemas=named)
    needs = _Conversions(named)
    return needs.of(root) or (lambda value: value)


class _Conversions:
    def __init__(self, named: dict[str, Any]) -> None:
        self._named = named
        self._busy: set[str] = set()

    def of(self, schema: Schema) -> Optional[Callable[[Any], Any]]:
        """A conversion for values of ``schema``, or None where none is needed."""
        schema = self._named.get(schema, schema) if isinstance(schema, str) else schema
        kind = _kind(schema)
        if kind == "union":
            branches = [b for b in schema if b != "null"]
            kinds = sorted(_kind(self._named.get(b, b) if isinstance(b, str) else b) for b in branches)
            if len(branches) == 1:
                return self.of(branches[0])
            if kinds in (["int", "long"], ["double", "float"]):
                return None
            return _member_of(branches, self._named)
        if _logical(schema) == "uuid":
            return lambda value: None if value is None else str(value)
        if kind == "record":
            name = schema["name"]
            if name in self._busy:
                return None  # recursive: Spark refuses recursive Avro types anyway
            self._busy.add(name)
            converted = [(f["name"], self.of(f["type"])) for f in schema["fields"]]
            self._busy.discard(name)
            needed = [(field_name, convert) for field_name, convert in converted if convert is not None]
            if not needed:
                return None

            def record(value: Any) -> Any:
                if value is None:
                    return None
                for field_name, convert in needed:
                    value[field_name] = convert(value[field_name])
                return value
            return record
        if kind == "array":
            item = self.of(schema["items"])
            return None if item is None else (lambda value: None if value is None else [item(v) for v in value])
        if kind == "map":
            inner = self.of(schema["values"])
            return None if inner is None else (
                lambda value: None if value is None else {k: inner(v) for k, v in value.items()})
        return None


def _member_of(branches: list, named: dict[str, Any]) -> Callable[[Any], Any]:
    """A value of a multi-type union as Spark's ``member<i>`` struct, the branch chosen as
    fastavro chose it: by the value's Python type (records by their fields)."""
    python_types = {"boolean": (bool,), "int": (int,), "long": (int,), "float": (float,), "double": (float,),
                    "string": (str,), "enum": (str,), "bytes": (bytes,), "fixed": (bytes,), "record": (dict,),
                    "map": (dict,), "array": (list,)}
    kinds = [_kind(named.get(b, b) if isinstance(b, str) else b) for b in branches]

    def member(value: Any) -> Any:
        if value is None:
            return None
        for index, kind in enumerate(kinds):
            if isinstance(value, python_types.get(kind, ())) and not (kind != "boolean" and isinstance(value, bool)):
                return {f"member{index}": value}
        return None
    return member
