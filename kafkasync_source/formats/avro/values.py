"""The per-record Avro reader: one record's bytes, through the resolution (resolution.py), to the
value Spark shows for the reader schema; or a :class:`RowError` saying why not.

This is the reference the numpy column decoder (columns.py) and the time readers (time_path.py)
must agree with, and the path every record takes that they decline. It is bounded on any bytes:

* every read checks the record's end first (a record never reads its neighbour's bytes; bytes
  left after the record are ignored, as Confluent's deserializers ignore them);
* a varint is at most 10 bytes (5 for an ``int``, an enum's or a union's index: Java reads
  them with ``readInt``) and in its type's range, whether read or skipped;
* a length, a union index, an enum index, a boolean byte must be what a writer writes;
* an array or map block of ``n`` items needs ``n`` times its items' smallest size in bytes left,
  and items of no size at all (``null``, empty records) are capped at :data:`ZERO_SIZE_ITEMS`
  a record, so a block count read from the bytes never makes a loop longer than the input;
* a recursive record nests at most :data:`MAX_NESTING` levels.

Each takes time linear in the record's bytes (and the schema), and ends in a value, a
:data:`MALFORMED` error, or an :data:`INCOMPATIBLE` one naming the field.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Union

from kafkasync_source.formats.avro.resolution import (
    Action,
    Container,
    EnumRead,
    Incompatible,
    Read,
    ReaderUnion,
    RecordRead,
    WriterUnion,
    float32,
    logical_value,
)
from kafkasync_source.formats.avro.schema import Node
from kafkasync_source.formats.avro.spark_types import MEMBERS, member_names, union_shape
from kafkasync_source.formats.decoded import INCOMPATIBLE, MALFORMED

ZERO_SIZE_ITEMS = 65_536
"""Array or map items of no size (``null``, an empty record) one record may hold."""
MAX_NESTING = 64
"""Levels of a recursive record one value may nest."""
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")


class RowError(Exception):
    """Why one record has no value: ``kind`` is MALFORMED or INCOMPATIBLE (formats/decoded.py)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def malformed(reason: str) -> RowError:
    return RowError(MALFORMED, reason)


class Cursor:
    """A position in one record's bytes ``buf[pos:end]``, and what it has spent of the limits."""

    __slots__ = ("buf", "pos", "end", "zero_items", "depth")

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.zero_items = 0
        self.depth = 0


Reader = Callable[[Cursor], Any]


def varint(c: Cursor, max_bytes: int = 10) -> int:
    """A zigzag varint (an Avro ``long``; ``int`` with ``max_bytes=5``)."""
    buf, pos, end = c.buf, c.pos, c.end
    if pos < end and buf[pos] < 0x80:  # one byte: lengths, indexes, small numbers
        c.pos = pos + 1
        b = buf[pos]
        return (b >> 1) ^ -(b & 1)
    raw = shift = 0
    while True:
        if pos >= end:
            raise malformed("the record ends inside a number")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * max_bytes:
            raise malformed(f"a varint longer than {max_bytes} bytes")
    if raw >> (32 if max_bytes == 5 else 64):
        raise malformed(f"a varint beyond {'an int' if max_bytes == 5 else 'a long'}'s "
                        f"{32 if max_bytes == 5 else 64} bits")
    c.pos = pos
    return (raw >> 1) ^ -(raw & 1)


def int32(c: Cursor) -> int:
    value = varint(c, 5)
    if not -(2**31) <= value < 2**31:
        raise malformed(f"the int {value} is beyond 32 bits")
    return value


def take(c: Cursor, size: int, what: str) -> bytes:
    pos = c.pos
    if size < 0:
        raise malformed(f"a negative length {size} of {what}")
    if size > c.end - pos:
        raise malformed(f"the record ends inside {what} ({size} bytes, {c.end - pos} left)")
    c.pos = pos + size
    return c.buf[pos:pos + size]


def text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed(f"{where or 'the value'} is not UTF-8 text") from None


def min_size(node: Node, memo: dict[int, int]) -> int:
    """The fewest bytes a value of ``node`` is written in (a type on its way to itself: 0)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 0
    kind = node.kind
    if kind == "record":
        size = sum(min_size(f.type, memo) for f in node.fields)
    elif kind == "fixed":
        size = node.size
    else:
        size = {"null": 0, "float": 4, "double": 8}.get(kind, 1)
    memo[key] = size
    return size


def blocks(c: Cursor, item_size: int, what: str) -> Any:
    """The item counts of an array's or map's blocks, each checked against the bytes left.

    A negative count is followed by the block's size in bytes (Java's ``readArrayStart``/
    ``arrayNext`` read the items and ignore it; its ``skipArray`` jumps by it). A reader that
    ignores it and a skipper that jumps by it would place the next field at two different
    positions when the size is wrong: the value and the time at a path would disagree on the same
    bytes. So every reader here (values, skips, the time path's calls) reads the items and
    refuses a block whose items do not take exactly its size (MALFORMED); batch.py leaves such
    blocks to them."""
    while True:
        count = varint(c)
        if count == 0:
            return
        size = -1
        if count < 0:
            count = -count
            size = varint(c)
            if size < 0:
                raise malformed(f"a negative block size in {what}")
            if size > c.end - c.pos:
                raise malformed(f"a block of {size} bytes in {what}, with {c.end - c.pos} bytes left")
        if item_size:
            if count * item_size > c.end - c.pos:
                raise malformed(f"a block of {count} items in {what}, with {c.end - c.pos} bytes left")
        else:
            c.zero_items += count
            if c.zero_items > ZERO_SIZE_ITEMS:
                raise malformed(f"more than {ZERO_SIZE_ITEMS:,} items of no size in one record ({what})")
        start = c.pos
        yield count
        if size >= 0 and c.pos - start != size:
            raise malformed(f"a block of {what} says {size} bytes, its {count} items take {c.pos - start}")


class Compiler:
    """Compiles actions into value readers, writer types into skippers (once each; recursive
    records through a forward reference)."""

    def __init__(self) -> None:
        self._values: dict[int, Reader] = {}
        self._skips: dict[int, Callable[[Cursor], None]] = {}
        self._sizes: dict[int, int] = {}

    def value(self, action: Action, where: str = "", raw_bytes: bool = False) -> Reader:
        """``raw_bytes``: the writer's root is ``bytes``, which Confluent's serializers write as the
        payload itself, without a length (confluent-kafka ``_sync/avro.py``; Java's
        ``AbstractKafkaAvroSerializer`` writes a ``byte[]`` as it is)."""
        if raw_bytes and isinstance(action, ReaderUnion) and action.action is not None:
            return self._placed(action, self.value(action.action, where, raw_bytes=True))
        if raw_bytes and isinstance(action, Read):
            return self._read_as(action, lambda c: take(c, c.end - c.pos, "the payload"), where)
        if isinstance(action, Incompatible):
            message = action.message()

            def fail(c: Cursor) -> Any:
                raise RowError(INCOMPATIBLE, message)
            return fail
        if isinstance(action, Read):
            return self._read_as(action, self._primitive(action.writer, where), where)
        if isinstance(action, EnumRead):
            return self._enum(action, where)
        if isinstance(action, Container):
            return self._container(action, where)
        if isinstance(action, RecordRead):
            return self._record(action, where)
        if isinstance(action, WriterUnion):
            branches = [self.value(b, where) for b in action.branches]
            count = len(branches)

            def writer_union(c: Cursor) -> Any:
                index = int32(c)  # Java's readIndex is readInt
                if not 0 <= index < count:
                    raise malformed(f"union index {index} of {where or 'the value'}, whose writer union has "
                                    f"{count} branches")
                return branches[index](c)
            return writer_union
        assert isinstance(action, ReaderUnion) and action.action is not None
        return self._placed(action, self.value(action.action, where))

    def skip(self, node: Node, where: str) -> Callable[[Cursor], None]:
        """Moves past one value of the writer's ``node``, checking it as a reader would."""
        found = self._skips.get(id(node))
        if found is None:
            if node.kind == "record":
                fields: list[Callable[[Cursor], None]] = []

                def record(c: Cursor) -> None:
                    c.depth += 1
                    if c.depth > MAX_NESTING:
                        raise malformed(f"{where or 'the value'} nests deeper than {MAX_NESTING} levels")
                    for skip_field in fields:
                        skip_field(c)
                    c.depth -= 1
                self._skips[id(node)] = record
                fields.extend(self.skip(f.type, f"{where}.{f.name}".lstrip(".")) for f in node.fields)
                return record
            value = self._skip_leaf(node, where) if node.kind != "union" else None
            if node.kind == "union":
                branches = [self.skip(b, where) for b in node.branches]

                def union(c: Cursor) -> None:
                    index = int32(c)
                    if not 0 <= index < len(branches):
                        raise malformed(f"union index {index} of {where or 'the value'}")
                    branches[index](c)
                found = union
            else:
                assert value is not None
                found = value
            self._skips[id(node)] = found
        return found

    def _skip_leaf(self, node: Node, where: str) -> Reader:
        """Past a value without checking what only a reader of it checks (a boolean's byte, an
        int's range, UTF-8), as Java's skips and batch.py's do: all three agree on positions."""
        kind = node.kind
        shown = where or "the value"
        if kind in ("null", "boolean", "float", "double", "fixed"):
            size = {"null": 0, "boolean": 1, "float": 4, "double": 8}.get(kind, node.size)
            return lambda c: take(c, size, shown)
        if kind in ("int", "enum"):  # Java's skip reads them with readInt/readEnum: 5 bytes, 32 bits
            return int32
        if kind == "long":
            return varint
        return self._primitive(node, where)

    def _primitive(self, node: Node, where: str) -> Reader:
        """The writer's value of a primitive, fixed, enum index, array or map, as read."""
        kind = node.kind
        shown = where or "the value"
        if kind == "null":
            return lambda c: None
        if kind == "boolean":
            def boolean(c: Cursor) -> bool:
                b = take(c, 1, shown)[0]
                if b > 1:
                    raise malformed(f"{shown}: a boolean byte {b}, not 0 or 1")
                return b == 1
            return boolean
        if kind in ("int", "enum"):  # an enum's index is an int (Java's readEnum)
            return int32
        if kind == "long":
            return varint
        if kind == "float":
            return lambda c: _FLOAT.unpack(take(c, 4, shown))[0]
        if kind == "double":
            return lambda c: _DOUBLE.unpack(take(c, 8, shown))[0]
        if kind in ("bytes", "string"):
            return lambda c: take(c, varint(c), shown)
        if kind == "fixed":
            size = node.size
            return lambda c: take(c, size, shown)
        if kind in ("array", "map"):
            assert node.element is not None
            inner = self.skip(node.element, f"{where}{'[]' if kind == 'array' else '{}'}")
            item_size = min_size(node.element, self._sizes) + (kind == "map")

            def container(c: Cursor) -> None:
                """Past an array or map, its items read as the value reader reads them (a block
                given with its size is not jumped over: see :func:`blocks`)."""
                for count in blocks(c, item_size, shown):
                    for _ in range(count):
                        if kind == "map":
                            take(c, varint(c), shown)
                        inner(c)
            return container
        raise AssertionError(kind)

    def _read_as(self, action: Action, read: Reader, where: str) -> Reader:
        """A writer primitive's value as the reader's type (promotions, the reader's logical type)."""
        w, r = action.writer.kind, action.reader.kind
        shown = where or "the value"
        if r == "string":
            return lambda c: text(read(c), shown)
        if r == "float" and w in ("int", "long"):
            return lambda c: float32(read(c))
        if r == "double" and w in ("int", "long"):
            return lambda c: float(read(c))
        reader = action.reader
        if reader.logical in ("decimal", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                              "local-timestamp-micros"):
            def logical(c: Cursor) -> Any:
                value = logical_value(reader, read(c))
                if value is None:
                    raise malformed(f"{shown} is beyond what Spark's {reader.logical} type holds")
                return value
            return logical
        return read

    def _enum(self, action: EnumRead, where: str) -> Reader:
        symbols = action.symbols
        shown = where or "the value"
        writer_symbols = action.writer.symbols

        def enum(c: Cursor) -> Any:
            index = int32(c)
            if not 0 <= index < len(symbols):
                raise malformed(f"{shown}: enum index {index}, beyond the writer's {len(symbols)} symbols")
            symbol = symbols[index]
            if symbol is None:
                raise RowError(INCOMPATIBLE, f"field {shown!r} holds the symbol {writer_symbols[index]!r}, which "
                                             "the reader's enum lacks (and it has no default)")
            return symbol
        return enum

    def _container(self, action: Container, where: str) -> Reader:
        assert action.element is not None and action.writer.element is not None
        is_map = action.writer.kind == "map"
        inner = f"{where}{'{}' if is_map else '[]'}"
        item = self.value(action.element, inner)
        item_size = min_size(action.writer.element, self._sizes) + is_map
        shown = where or "the value"
        if is_map:
            def map_(c: Cursor) -> dict:
                found: dict = {}
                for count in blocks(c, item_size, shown):
                    for _ in range(count):
                        key = text(take(c, varint(c), shown), inner)
                        found[key] = item(c)
                return found
            return map_

        def array(c: Cursor) -> list:
            found: list = []
            for count in blocks(c, item_size, shown):
                found.extend(item(c) for _ in range(count))
            return found
        return array

    def _record(self, action: RecordRead, where: str) -> Reader:
        found = self._values.get(id(action))
        if found is not None:
            return found
        names = [f.name for f in action.reader.fields]
        steps: list[tuple[Union[str, None], Callable[[Cursor], Any]]] = []
        defaults = [(names[index], value) for index, value in action.defaults]
        error = action.error
        depth_counted = action.recursive

        def record(c: Cursor) -> dict:
            if error is not None:
                raise RowError(INCOMPATIBLE, error.message())
            if depth_counted:
                c.depth += 1
                if c.depth > MAX_NESTING:
                    raise malformed(f"{where or 'the value'} nests deeper than {MAX_NESTING} levels")
            value = dict(defaults)
            for name, step in steps:
                if name is None:
                    step(c)
                else:
                    value[name] = step(c)
            if depth_counted:
                c.depth -= 1
            return value
        self._values[id(action)] = record
        for index, step in action.steps:
            if index is None:
                assert isinstance(step, Node)
                steps.append((None, self.skip(step, where)))
            else:
                assert isinstance(step, Action)
                steps.append((names[index], self.value(step, f"{where}.{names[index]}".lstrip("."))))
        return record

    @staticmethod
    def _placed(action: ReaderUnion, read: Reader) -> Reader:
        """The value of the reader union's branch as the union shows it (spark_types.py)."""
        if action.reader.branches[action.branch].kind == "null":
            return read  # None
        if union_shape(action.reader) != MEMBERS:
            return read
        member = member_names(action.reader)[action.branch]
        return lambda c: {member: read(c)}

