"""The time at ``eventTime.field``'s path, from the one resolution (resolution.py): per record, in
one generated function per writer schema, and per consume() batch with numpy (batch.py).

What the path gives is what ``value.decode`` gives there, converted: the reader's logical type
decides (``timestamp-millis``/``-micros``/``-nanos``, ``local-timestamp-*``, ``date`` are times
as they are), otherwise the reader's number or text follows ``eventTime.format``. A field the
writer lacks takes the reader's default (a null default: no time for that writer's records, an
invalid time ``eventTime.onInvalid`` handles). A null on the way is an invalid time. Where the
path meets a shape the fast readers do not cover (a writer union of several types on the way,
a default record the path goes into), each record is decoded whole by values.py and the path
taken from its value.

Why generated code: the reader runs per record on the driver and the executors, and a closure
per skipped field costs a Python call each (measured on a Debezium envelope: 13 us a record
through closures against a few us inlined). The generated function inlines the skips of
primitives, strings, unions and records before the path and calls bounded closures (values.py)
for arrays, maps and recursive records. **Nothing of a schema enters its text but integers**:
every line is one of :data:`_LINES`, whose only fields are integers checked to be ``int`` (not
``bool``) and non-negative by :meth:`_Emitter.line`; names, paths and messages reach the code
as data in its scope. tests/test_avro_hostile.py registers schemas meant to break that.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime, checked, converter
from kafkasync_source.event_time.options import EPOCH_MICROS, EPOCH_MILLIS, EPOCH_SECONDS
from kafkasync_source.formats.avro import batch as numpy_batch
from kafkasync_source.formats.avro.resolution import (
    Action,
    Incompatible,
    Read,
    ReaderUnion,
    RecordRead,
    WriterUnion,
    float32,
)
from kafkasync_source.formats.avro.schema import Node
from kafkasync_source.formats.avro.values import Compiler, Cursor, RowError
from kafkasync_source.formats.framing import HEADER_BYTES, read_varint

_MS = {"timestamp-millis": (1, 1), "local-timestamp-millis": (1, 1), "timestamp-micros": (1, 1000),
       "local-timestamp-micros": (1, 1000), "timestamp-nanos": (1, 1_000_000),
       "local-timestamp-nanos": (1, 1_000_000), "date": (86_400_000, 1)}
"""Reader logical types that are times as they are: ``(ms per unit, units per ms)``."""
_FORMAT_UNITS = {EPOCH_MILLIS: (1, 1), EPOCH_SECONDS: (1000, 1), EPOCH_MICROS: (1, 1000)}
"""``eventTime.format`` of a plain integer, for the batch reader (text and fractions: per record)."""
_SHORT_LENGTH = tuple(1 + (b >> 1) if not b & 129 else 1 << 62 for b in range(256))
"""A string's first byte -> the bytes to skip when it is a one-byte, even zigzag varint (a
length of 0-63); otherwise a jump past any payload, after which the next read fails and the
exact reader answers (see :meth:`_Emitter.compile`)."""
_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")


class PathIncompatible(Exception):
    """The writer's value on the path does not resolve to the reader's (message: why)."""


@dataclass
class _Stage:
    branch: Optional[int]
    """The writer union's branch that leads on (None: no union here)."""
    skipped: list[Node]
    """The writer's fields before the one on the path."""
    prefix: str
    """The path so far, for messages."""


@dataclass
class Plan:
    """How to reach the path's value in one writer's bytes."""

    stages: list[_Stage]
    leaf_branch: Optional[int]
    leaf: Optional[Read]
    """The leaf's primitive read (writer kind, reader type); None for a default or generic plan."""
    default: Any = None
    """A reader default's value for the path (when ``constant``)."""
    constant: bool = False
    generic: Optional[Callable[[bytes], Any]] = None
    """``payload -> the path's value`` through values.py, where the fast plan does not apply."""


def plan(action: Action, steps: list[str]) -> Plan:
    """The stages to the path's leaf; PathIncompatible where the writer cannot resolve on it."""
    stages: list[_Stage] = []
    for depth in range(len(steps) + 1):
        prefix = ".".join(steps[:depth]) or "the value"
        branch, action = _through_unions(action, prefix)
        if depth == len(steps):
            if not isinstance(action, Read):
                raise PathIncompatible(f"{prefix} is a {action.writer.describe()} in the writer schema")
            return Plan(stages, branch, action)
        if not isinstance(action, RecordRead):
            raise PathIncompatible(f"{prefix} is a {action.writer.describe()} in the writer schema, not a record")
        if action.error is not None:
            if branch is not None or any(stage.branch is not None for stage in stages):
                raise _Generic(f"{prefix}: a record behind a writer's union that does not resolve")
            raise PathIncompatible(action.error.message())
        index = next((i for i, f in enumerate(action.reader.fields) if f.name == steps[depth]), None)
        if index is None:
            raise PathIncompatible(f"{prefix} has no field {steps[depth]!r} in the writer schema")
        skipped: list[Node] = []
        for reader_index, step in action.steps:
            if reader_index == index:
                break
            skipped.append(step.writer if isinstance(step, Action) else step)
        else:
            if branch is not None or any(stage.branch is not None for stage in stages):
                raise _Generic("a default beyond a writer's union: each record's branch decides")
            default = dict(action.defaults)[index]
            return Plan(stages, None, None, _within(default, steps[depth + 1:], ".".join(steps[:depth + 1])),
                        constant=True)
        stages.append(_Stage(branch, skipped, prefix))
        action = next(step for reader_index, step in action.steps if reader_index == index)  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _through_unions(action: Action, prefix: str) -> tuple[Optional[int], Action]:
    """Past a writer's ``[null, T]`` union (its T branch) and a reader's union (no bytes)."""
    branch = None
    if isinstance(action, WriterUnion):
        leading = [i for i, b in enumerate(action.branches) if not _gives_null(b)]
        if len(leading) != 1 or leading[0] > 63:
            raise _Generic(f"{prefix} is a union of several types in the writer schema")
        if any(isinstance(b, Incompatible) or (isinstance(b, ReaderUnion) and isinstance(b.action, Incompatible))
               for b in action.branches):
            # Only the records that take such a branch fail (Java's ErrorAction: the branch on
            # the path, or a null the reader's type cannot hold); the others have their time or
            # are null on the path, an invalid time: values.py decides per record.
            raise _Generic(f"{prefix}: a writer union with a branch that does not resolve")
        branch, action = leading[0], action.branches[leading[0]]
    if isinstance(action, ReaderUnion):
        assert action.action is not None
        action = action.action
    if isinstance(action, Incompatible):
        raise PathIncompatible(action.message())
    return branch, action


def _gives_null(action: Action) -> bool:
    if isinstance(action, ReaderUnion):
        return action.reader.branches[action.branch].kind == "null"
    return action.writer.kind == "null"


class _Generic(Exception):
    """The path's shape is read by decoding each record whole."""


def _within(value: Any, steps: list[str], where: str) -> Any:
    """The path's rest inside a default record's value."""
    for step in steps:
        if value is None:
            raise InvalidTime(f"{where} is null")
        value = value[step]
        where = f"{where}.{step}"
    return value


# -- the per-record reader ---------------------------------------------------------------------

def leaf_converter(reader: Node, time_format: str) -> Callable[[Any], int]:
    """The reader's value (as values.py gives it, before any logical conversion) -> epoch ms."""
    if reader.logical in _MS:
        unit, per_ms = _MS[reader.logical]
        if unit == per_ms == 1:
            return checked
        return lambda value: checked(value * unit // per_ms)
    return converter(time_format)


def _promoted(leaf: Read) -> Optional[Callable[[Any], Any]]:
    """The writer's raw leaf value as the reader's type (None: as it is)."""
    w, r = leaf.writer.kind, leaf.reader.kind
    if r == "float" and w in ("int", "long"):
        return float32
    if r == "double" and w in ("int", "long"):
        return float
    if r == "string" and w in ("bytes", "string"):
        def text(value: bytes) -> str:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidTime("the field's text is not UTF-8") from None
        return text
    return None


def record_reader(path_plan: Plan, time_format: str, path: str, reader_leaf: Optional[Node]) -> Callable[[bytes], int]:
    """``time_of(framed payload) -> epoch ms`` (InvalidTime where the record has none)."""
    if path_plan.constant:
        assert reader_leaf is not None
        default = path_plan.default
        convert = _value_converter(reader_leaf, time_format)

        def constant(payload: bytes) -> int:
            if default is None:
                raise InvalidTime(f"{path} is missing from this writer schema and its default is null")
            return convert(default)
        return constant
    if path_plan.generic is not None:
        assert reader_leaf is not None
        convert, take = _value_converter(reader_leaf, time_format), path_plan.generic

        def generic(payload: bytes) -> int:
            value = take(payload)
            if value is None:
                raise InvalidTime(f"{path} is null")
            return convert(value)
        return generic
    assert path_plan.leaf is not None
    leaf = path_plan.leaf
    to_time = leaf_converter(leaf.reader, time_format)
    promote = _promoted(leaf)
    convert = to_time if promote is None else (lambda value: to_time(promote(value)))
    inline = leaf.writer.kind in ("int", "long") and leaf.reader.kind in ("int", "long") and (
        _MS.get(leaf.reader.logical or "", (0, 0)) == (1, 1) or (leaf.reader.logical is None
                                                                 and time_format == EPOCH_MILLIS))
    return _Emitter(path_plan, path).compile(convert, inline)


def _value_converter(reader_leaf: Node, time_format: str) -> Callable[[Any], int]:
    """values.py's value of the reader's leaf (timestamps in microseconds) -> epoch ms."""
    if reader_leaf.logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                               "local-timestamp-micros"):
        return lambda micros: checked(micros // 1000)
    return leaf_converter(reader_leaf, time_format)


_LINES = {
    "pos = start": "pos = {}\nzero = 0",
    "pos += n": "pos += {}",
    "skip varint": "if buf[pos] & 128:\n    pos = skip_varint(buf, pos)\nelse:\n    pos += 1",
    "skip int": "if buf[pos] & 128:\n    pos = skip_int(buf, pos)\nelse:\n    pos += 1",
    "skip bytes": "b = buf[pos]\nif b & 129:\n    pos = skip_bytes(buf, pos)\nelse:\n    pos += 1 + (b >> 1)",
    "skip bytes by table": "pos += SHORT[buf[pos]]",
    "call": "pos, zero = calls[{}](buf, pos, zero)",
    "union index": "b = buf[pos]\nif b & 128:\n    b, pos = union_index(buf, pos)\nelse:\n    pos += 1",
    "if branch": "if b == {}:\n    pass",
    "elif branch": "elif b == {}:\n    pass",
    "else bad index": "else:\n    raise InvalidTime('a union index beyond the writer schema')",
    "on the path": "if b != {}:\n    off_the_path(b, {})",
    "varint first byte": "b = buf[pos]\nv = b & 127",
    "varint next byte": "if b > 127:\n    b = buf[pos + {}]\n    v |= (b & 127) << {}",
    "varint tenth byte": "if b > 1:\n    raise InvalidTime('a varint longer than 10 bytes, or beyond 64 bits')",
    "varint fifth byte": "if b > 127:\n    raise InvalidTime('an int longer than 5 bytes')",
    "zigzag": "v = (v >> 1) ^ -(v & 1)",
    "float leaf": "v = FLOAT.unpack_from(buf, pos)[0]",
    "double leaf": "v = DOUBLE.unpack_from(buf, pos)[0]",
    "bytes leaf": "v = bytes_leaf(buf, pos)",
    "int check": "if not -2147483648 <= v <= 2147483647:\n    raise InvalidTime('an int beyond 32 bits')",
    "inline millis": "if 0 <= v <= MAX_TIME_MS:\n    return v",
    "convert": "return convert(v)",
    "optimistic try": "try:",
    "optimistic except": "except (IndexError, StructError):\n    return exact(buf)",
}
"""Every line the generated readers are made of; ``{}`` only ever takes a checked integer."""


class _Emitter:
    """Writes a plan as straight-line Python (see the module doc)."""

    def __init__(self, path_plan: Plan, path: str) -> None:
        self._plan = path_plan
        self._path = path
        self._calls: list[Callable[[bytes, int, int], tuple[int, int]]] = []
        self._compiler = Compiler()
        self._optimistic = False
        self._inlined: set[int] = set()

    def compile(self, convert: Callable[[Any], int], inline_millis: bool) -> Callable[[bytes], int]:
        """The exact reader, and an optimistic one in front of it that skips strings by one
        table look-up (:data:`_SHORT_LENGTH`), answering with the exact one if that jumped past
        the payload (an IndexError or struct's error before the leaf was read)."""
        tail = (["inline millis"] if inline_millis else []) + ["convert"]
        messages = [stage.prefix for stage in self._plan.stages] + [self._path]
        scope = {"convert": convert, "MAX_TIME_MS": MAX_TIME_MS, "messages": messages, "InvalidTime": InvalidTime,
                 "skip_varint": _skip_varint, "skip_int": _skip_int, "union_index": _union_index,
                 "skip_bytes": _skip_bytes,
                 "bytes_leaf": _bytes_leaf, "DOUBLE": _DOUBLE, "FLOAT": _FLOAT, "SHORT": _SHORT_LENGTH,
                 "calls": self._calls, "off_the_path": _off_the_path(messages)}
        exact = self._function(scope, tail)
        self._optimistic = True
        return self._function({**scope, "exact": exact, "StructError": struct.error}, tail)

    def _function(self, scope: dict[str, Any], tail: list[str]) -> Callable[[bytes], int]:
        self._inlined = set()
        lines: list[str] = []
        self.line(lines, 0, "pos = start", HEADER_BYTES)
        for number, stage in enumerate(self._plan.stages):
            if stage.branch is not None:
                self.line(lines, 0, "union index")
                self.line(lines, 0, "on the path", 2 * stage.branch, number)
            for node in stage.skipped:
                self._skip(node, lines, 0)
        if self._plan.leaf_branch is not None:
            self.line(lines, 0, "union index")
            self.line(lines, 0, "on the path", 2 * self._plan.leaf_branch, len(self._plan.stages))
        assert self._plan.leaf is not None
        kind = self._plan.leaf.writer.kind
        if kind in ("int", "long"):
            self._varint_leaf(lines, 5 if kind == "int" else 10)
            if kind == "int":
                self.line(lines, 0, "int check")
        else:
            self.line(lines, 0, {"float": "float leaf", "double": "double leaf"}.get(kind, "bytes leaf"))
        for key in tail:
            self.line(lines, 0, key)
        if self._optimistic:
            lines = [*self._lines("optimistic try", 0), *("    " + line for line in lines),
                     *self._lines("optimistic except", 0)]
        lines = ["def time_of(buf):", *("    " + line for line in lines)]
        namespace = dict(scope)
        exec(compile("\n".join(lines), "<avro time reader>", "exec"), namespace)  # noqa: S102 - integers only
        return namespace["time_of"]  # type: ignore[no-any-return]

    @classmethod
    def line(cls, lines: list[str], indent: int, key: str, *numbers: int) -> None:
        """One line of :data:`_LINES`, its fields checked integers (the only way text is made)."""
        lines.extend(cls._lines(key, indent, *numbers))

    @staticmethod
    def _lines(key: str, indent: int, *numbers: int) -> list[str]:
        for number in (indent, *numbers):
            if type(number) is not int or number < 0:
                raise ValueError(f"a generated reader takes non-negative integers only, not {number!r}")
        return ["    " * indent + part for part in _LINES[key].format(*numbers).split("\n")]

    def _varint_leaf(self, lines: list[str], max_bytes: int) -> None:
        """A zigzag varint read into ``v`` inline, one nested branch a byte (at most 10): no loop
        counter or shift to keep, which for an epoch time in ms (6 bytes) halves the leaf's steps.
        A tenth byte above 1 (past 64 bits) or with its continuation bit is no long; a fifth
        byte with its continuation bit no int (values.py refuses both: the same bytes give no
        time here and no value there)."""
        self.line(lines, 0, "varint first byte")
        for byte in range(1, max_bytes):
            self.line(lines, byte - 1, "varint next byte", byte, 7 * byte)
        self.line(lines, max_bytes - 1, "varint tenth byte" if max_bytes == 10 else "varint fifth byte")
        self.line(lines, 0, "zigzag")

    def _skip(self, node: Node, lines: list[str], indent: int) -> None:
        kind = node.kind
        size = numpy_batch.fixed_size(node)
        if size is not None:
            if size:
                self.line(lines, indent, "pos += n", size)
        elif kind in ("int", "enum"):
            self.line(lines, indent, "skip int")
        elif kind == "long":
            self.line(lines, indent, "skip varint")
        elif kind in ("string", "bytes"):
            self.line(lines, indent, "skip bytes by table" if self._optimistic else "skip bytes")
        elif kind == "union" and len(node.branches) <= 63:
            self.line(lines, indent, "union index")
            for number, branch in enumerate(node.branches):
                self.line(lines, indent, "if branch" if number == 0 else "elif branch", 2 * number)
                self._skip(branch, lines, indent + 1)
            self.line(lines, indent, "else bad index")
        elif kind == "record" and id(node) not in self._inlined:
            # Inlined once a function; met again (a recursive record, or a type many fields or
            # levels hold: a record holding the one before twice doubles the paths each level)
            # it is a bounded call, so a reader's text grows with the schema's types, not its paths.
            self._inlined.add(id(node))
            for f in node.fields:
                self._skip(f.type, lines, indent)
        else:  # arrays, maps, recursive records, huge unions: a bounded call
            self._calls.append(_bounded(self._compiler.skip(node, self._path)))
            self.line(lines, indent, "call", len(self._calls) - 1)


def _bounded(skip: Callable[[Cursor], None]) -> Callable[[bytes, int, int], tuple[int, int]]:
    """``(buf, pos, zero) -> (pos, zero)``: past one value by values.py's skip; ``zero`` carries
    the items of no size counted so far in this record from call to call, so the record's cap
    (values.ZERO_SIZE_ITEMS) holds across its fields as in values.py, not per field (200 arrays
    of 65,536 nulls were 800 bytes and 13 million steps, and a time where the value is malformed)."""
    def call(buf: bytes, pos: int, zero: int) -> tuple[int, int]:
        if pos > len(buf):  # the optimistic reader's jump past the payload: the exact one answers
            raise IndexError("past the payload")
        c = Cursor(buf, pos, len(buf))
        c.zero_items = zero
        try:
            skip(c)
        except RowError as err:
            raise InvalidTime(str(err)) from None
        return c.pos, c.zero_items
    return call


def _skip_varint(buf: bytes, pos: int, max_bytes: int = 10) -> int:
    """Past a long (``max_bytes`` 5: an int), refusing what values.py's ``varint`` refuses: more
    than ``max_bytes`` bytes, or a last byte that carries bits beyond 64 (32) bits."""
    for end in range(pos, min(pos + max_bytes, len(buf))):
        if buf[end] < 0x80:
            if end == pos + max_bytes - 1 and buf[end] > (1 if max_bytes == 10 else 15):
                raise InvalidTime(f"a varint beyond {64 if max_bytes == 10 else 32} bits")
            return end + 1
    if len(buf) < pos + max_bytes:
        raise IndexError("the payload ends inside a number")
    raise InvalidTime(f"a varint longer than {max_bytes} bytes")


def _skip_int(buf: bytes, pos: int) -> int:
    """Past an int or an enum's index (Java's readInt: 5 bytes, 32 bits)."""
    return _skip_varint(buf, pos, 5)


def _union_index(buf: bytes, pos: int) -> tuple[int, int]:
    """A union's index of more than one byte (Java's readIndex is readInt: 5 bytes, 32 bits), as
    the raw zigzag number the generated code compares (``2 * branch``), and the position after."""
    end = _skip_int(buf, pos)
    raw = 0
    for shift, byte in enumerate(buf[pos:end]):
        raw |= (byte & 0x7F) << (7 * shift)
    return raw, end


def _skip_bytes(buf: bytes, pos: int) -> int:
    length, pos = read_varint(buf, pos)
    if length < 0:
        raise InvalidTime("a negative length: the payload does not match its writer schema")
    return pos + length


def _bytes_leaf(buf: bytes, pos: int) -> bytes:
    length, pos = read_varint(buf, pos)
    if length < 0 or pos + length > len(buf):
        raise InvalidTime("the payload ends inside the field, or gives it a negative length")
    return buf[pos:pos + length]


def _off_the_path(messages: list[str]) -> Callable[[int, int], None]:
    def raise_(b: int, stage: int) -> None:
        raise InvalidTime(f"{messages[stage]} is null" if not b & 1 and b < 128 else
                          "a union index beyond the writer schema")
    return raise_


# -- the batch reader -------------------------------------------------------------------------

def batch_reader(path_plan: Plan, time_format: str) -> Optional[Callable[[Any, Any, Any], Any]]:
    """``(buf, positions, ends) -> epoch ms`` of each record (NotInBatch where one has none or
    is read record by record); None where this plan is never read by batch."""

    leaf = path_plan.leaf
    if leaf is None or leaf.writer.kind not in ("int", "long") or leaf.reader.kind not in ("int", "long"):
        return None
    unit, per_ms = _MS.get(leaf.reader.logical or "") or _FORMAT_UNITS.get(time_format, (0, 0))
    if not unit:
        return None
    program = numpy_batch.Program()
    try:
        ops: list[numpy_batch.Op] = []
        for stage in path_plan.stages:
            if stage.branch is not None:
                ops.append(numpy_batch.branch_check(stage.branch))
            ops.extend(op for node in stage.skipped for op in program.skip(node))
        if path_plan.leaf_branch is not None:
            ops.append(numpy_batch.branch_check(path_plan.leaf_branch))
    except numpy_batch.NotInBatch:
        return None
    kind = leaf.writer.kind

    def read(buf: Any, positions: Any, ends: Any) -> Any:
        numpy_batch.run(ops, buf, positions, ends, numpy_batch.EVERYONE)
        values = numpy_batch.leaf_values(buf, positions, ends, kind)
        if unit == per_ms == 1:
            millis = values
        elif ((values > 2**62 // unit) | (values < -(2**62 // unit))).any():
            raise numpy_batch.NotInBatch("a time beyond Spark's range")
        else:
            millis = values * unit // per_ms
        if (millis < 0).any() or (millis > MAX_TIME_MS).any():
            raise numpy_batch.NotInBatch("a time before 1970 or beyond Spark's range")
        return millis
    return read


def generic_plan(decode: Callable[[bytes], Any], steps: list[str]) -> Plan:
    """Each record decoded whole (values.py's reader of the whole value), the path taken from it."""
    def take(payload: bytes) -> Any:
        value = decode(payload)
        for depth, step in enumerate(steps):
            if value is None:
                raise InvalidTime(f"{'.'.join(steps[:depth]) or 'the value'} is null")
            value = value[step]
        return value
    return Plan([], None, None, generic=take)


def is_generic(err: Exception) -> bool:
    return isinstance(err, _Generic)
