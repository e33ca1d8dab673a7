"""One resolution of a writer schema to the reader schema, which every Avro reader follows: the
time at a path (per record and per batch) and the decoded value (numpy and per record).

The rules are Avro Java's ``org.apache.avro.Resolver`` (Avro 1.11/1.12; what Confluent's
``KafkaAvroDeserializer`` and Spark's ``from_avro`` decode with), with the specification's
name check for records added:

* reader aliases rename the writer's types and fields (``Schema.applyAliases``);
* the same primitive reads as it is; ``int`` promotes to ``long``, ``float``, ``double``;
  ``long`` to ``float``, ``double``; ``float`` to ``double``; ``string`` and ``bytes`` to each
  other; a ``fixed`` or an ``enum`` needs the reader's full name, a ``fixed`` its size; a
  ``record`` needs the reader's unqualified name or one of its aliases (the specification's
  rule; Java's ``RecordAdjust`` skips it, "to pass regression tests", so a record of another
  type would read as a plausible wrong value); fields match by name or reader alias, a reader
  field the writer lacks takes its default;
* a writer's union resolves each branch on its own. If the reader's union is equivalent
  (``Resolver.unionEquiv``: the same branches in the same order), branch i is the reader's
  branch i. Otherwise a value meets the reader's union through ``firstMatchingBranch``
  (``ResolvingGrammarGenerator.bestBranch`` before 1.9): the first branch of the writer's type
  (for a named type: of its full name; a record failing that, the first record it resolves to,
  preferring one of the same short name), then the first branch it promotes to. fastavro takes
  the first branch that matches *including* promotions (an ``int`` goes to a ``long`` branch
  listed before an ``int`` one) and skips resolution when writer and reader are equal, so the
  same bytes would decode differently with another compatible writer; kafkasync follows Java;
* an error is kept where it lies and raised only by a record that reaches it (Java's
  ``ErrorAction``: a union branch no record takes, an enum symbol no record holds, cost nothing);
* logical types are the **reader's** (Java's ``Action.logicalType``): a writer's plain ``long``
  read as ``timestamp-millis`` is a timestamp; a logical type the reader removed is the number.

Reader defaults are converted by the specification ("Complex Types", field defaults): ``bytes``
and ``fixed`` are text whose code points 0-255 are the bytes (``"\\u00ffA"`` is ``ff 41``);
times, dates and decimals are their numbers in their unit (a decimal's two's complement bytes);
a record default that omits a field takes that field's own default; a union's default is of its
first branch. A default that is not valid for its type refuses the reader schema, naming it.
"""

from __future__ import annotations

import decimal
import struct
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from kafkasync_source.formats.avro.schema import NO_DEFAULT, Field, Node, SchemaError
from kafkasync_source.formats.avro.spark_types import (
    MEMBERS,
    TIMESTAMP_MICROS_PER_UNIT,
    member_names,
    union_shape,
)

PROMOTIONS = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
              "string": ("bytes",), "bytes": ("string",)}
"""Writer type -> the reader types it promotes to, in Java's order (``firstMatchingBranch``)."""
INT64 = (-(2**63), 2**63 - 1)


@dataclass(eq=False)
class Action:
    """How a writer's value becomes the reader's (Java's ``Resolver.Action``)."""

    writer: Node
    reader: Node


@dataclass(eq=False)
class Read(Action):
    """A primitive or fixed read as the reader's primitive or fixed (the same, or promoted)."""


@dataclass(eq=False)
class EnumRead(Action):
    symbols: tuple[Optional[str], ...] = ()
    """Per writer symbol, the reader's symbol (its default for one it lacks; None: neither)."""


@dataclass(eq=False)
class Container(Action):
    element: Optional[Action] = None


@dataclass(eq=False)
class RecordRead(Action):
    steps: list[tuple[Optional[int], Union[Action, Node]]] = field(default_factory=list)
    """In the writer's order: (reader field index, action), or (None, the writer's type) to skip."""
    defaults: list[tuple[int, Any]] = field(default_factory=list)
    """(reader field index, the default's value) for the reader fields the writer lacks."""
    recursive: bool = False
    """Reached again from inside itself: its readers count depth."""
    error: Optional[Incompatible] = None
    """A reader field without a default that the writer lacks (Java's ``MISSING_REQUIRED_FIELD``):
    every value of this record fails."""
    where: str = ""
    """The path it was first reached at; its fields' errors name paths under it, until the
    record is reached at another path too (:meth:`_Resolver.record`)."""


@dataclass(eq=False)
class WriterUnion(Action):
    branches: list[Action] = field(default_factory=list)


@dataclass(eq=False)
class ReaderUnion(Action):
    """A value placed in the reader union's branch ``branch``."""

    branch: int = 0
    action: Optional[Action] = None


@dataclass(eq=False)
class Incompatible(Action):
    """Java's ``ErrorAction``: what reaches it cannot be read as the reader's type."""

    where: str = ""
    reason: str = ""

    def message(self) -> str:
        return f"field {self.where!r} {self.reason}" if self.where else f"the value {self.reason}"


def resolve(writer: Node, reader: Node) -> Action:
    return _Resolver().resolve(writer, reader, "")


def names_match(writer: Node, reader: Node) -> bool:
    """A writer's record read as this reader record: the same short name, or one of the reader's
    aliases (the specification's rule; see the module doc)."""
    return (writer.short_name == reader.short_name or writer.name in reader.aliases
            or writer.short_name in {a.rpartition(".")[2] for a in reader.aliases})


def _name_inside_by_record(record: RecordRead) -> None:
    """A record resolved once is read at every path that reaches it (Debezium's ``before`` and
    ``after`` share ``Value``): the paths in its fields' errors, made when it was first reached,
    would name the first path for a record met at another. They are named by the record's full
    name instead (``dbserver1.public.orders.Value.amount``), true wherever it is reached."""
    old, new = record.where, record.reader.name or record.where  # a record is always named
    if not old:
        return
    seen: set[int] = set()

    def rename(a: Any) -> None:
        if not isinstance(a, Action) or id(a) in seen:
            return
        seen.add(id(a))
        if isinstance(a, Incompatible) and (a.where == old or a.where.startswith((old + ".", old + "[", old + "{"))):
            a.where = new + a.where[len(old):]
        if isinstance(a, RecordRead):
            if a.where == old or a.where.startswith((old + ".", old + "[", old + "{")):
                a.where = new + a.where[len(old):]
            for child in (a.error, *(step for _, step in a.steps)):
                rename(child)
        elif isinstance(a, Container):
            rename(a.element)
        elif isinstance(a, ReaderUnion):
            rename(a.action)
        elif isinstance(a, WriterUnion):
            for branch in a.branches:
                rename(branch)
    rename(record)


def first_error(action: Action) -> Optional[Incompatible]:
    """The error every record of this writer meets (outside union branches, containers and enum
    symbols, which only some records reach), or None."""
    seen: set[int] = set()

    def walk(a: Action) -> Optional[Incompatible]:
        if isinstance(a, Incompatible):
            return a
        if isinstance(a, ReaderUnion) and a.action is not None:
            return walk(a.action)
        if isinstance(a, RecordRead) and id(a) not in seen:
            seen.add(id(a))
            if a.error is not None:
                return a.error
            for _, step in a.steps:
                found = walk(step) if isinstance(step, Action) else None
                if found is not None:
                    return found
        return None
    return walk(action)


class _Resolver:
    def __init__(self) -> None:
        self._records: dict[tuple[int, int], RecordRead] = {}
        self._busy: set[tuple[int, int]] = set()

    def resolve(self, w: Node, r: Node, where: str) -> Action:
        if w.kind == "union":
            if r.kind == "union" and _equivalent(w, r, set()):
                return WriterUnion(w, r, [ReaderUnion(b, r, i, self.resolve(b, r.branches[i], where))
                                          for i, b in enumerate(w.branches)])
            return WriterUnion(w, r, [self.resolve(b, r, where) for b in w.branches])
        if w.kind == r.kind:
            if w.kind in ("fixed", "enum") and w.name != r.name and w.name not in r.aliases:
                return Incompatible(w, r, where, f"is the writer's {w.describe()}, not the reader's {r.name}")
            if w.kind == "fixed" and w.size != r.size:
                return Incompatible(w, r, where, f"is a fixed of {w.size} bytes in the writer schema, "
                                                 f"{r.size} in the reader's")
            if w.kind == "enum":
                return EnumRead(w, r, tuple(s if s in r.symbols else r.enum_default for s in w.symbols))
            if w.kind in ("array", "map"):
                assert w.element is not None and r.element is not None
                inner = f"{where}{'[]' if w.kind == 'array' else '{}'}"
                return Container(w, r, self.resolve(w.element, r.element, inner))
            if w.kind == "record":
                if not names_match(w, r):
                    return Incompatible(w, r, where, f"is the writer's {w.describe()}, not the reader's {r.name} "
                                                     "(nor one of its aliases)")
                return self.record(w, r, where)
            return Read(w, r)
        if r.kind == "union":
            branch = self.first_matching_branch(w, r, where)
            if branch < 0:
                return Incompatible(w, r, where, f"is a {w.describe()} in the writer schema, which matches no "
                                                 "branch of the reader's union")
            return ReaderUnion(w, r, branch, self.resolve(w, r.branches[branch], where))
        if r.kind in PROMOTIONS.get(w.kind, ()):
            return Read(w, r)
        return Incompatible(w, r, where, f"is a {w.describe()} in the writer schema, which does not resolve to "
                                         f"the reader's {r.describe()}")

    def record(self, w: Node, r: Node, where: str) -> RecordRead:
        key = (id(w), id(r))
        found = self._records.get(key)
        if found is not None:
            found.recursive = found.recursive or key in self._busy
            if where != found.where and key not in self._busy:
                _name_inside_by_record(found)
            return found
        action = self._records[key] = RecordRead(w, r, where=where)
        self._busy.add(key)
        taken: set[int] = set()
        for writer_field in w.fields:
            index = _reader_field(writer_field, r)
            if index is None or index in taken:
                action.steps.append((None, writer_field.type))
                continue
            taken.add(index)
            inner = f"{where}.{r.fields[index].name}".lstrip(".")
            action.steps.append((index, self.resolve(writer_field.type, r.fields[index].type, inner)))
        for index, reader_field in enumerate(r.fields):
            if index in taken:
                continue
            inner = f"{where}.{reader_field.name}".lstrip(".")
            if reader_field.default is NO_DEFAULT:
                action.error = action.error or Incompatible(w, r, inner, "is missing from the writer schema and "
                                                                         "has no default in the reader's")
                continue
            action.defaults.append((index, default_value(reader_field.type, reader_field.default, inner)))
        self._busy.discard(key)
        return action

    def first_matching_branch(self, w: Node, r: Node, where: str) -> int:
        """Java's ``Resolver.ReaderUnion.firstMatchingBranch`` (see the module doc)."""
        structure = -1
        for index, branch in enumerate(r.branches):
            if branch.kind != w.kind:
                continue
            if w.kind not in ("record", "enum", "fixed"):
                return index
            if w.name == branch.name or w.name in branch.aliases:
                return index
            if w.kind == "record" and not _has_match_error(_Resolver().record(w, branch, where)):
                if structure < 0 or w.short_name == branch.short_name:
                    structure = index
        if structure >= 0:
            return structure
        for index, branch in enumerate(r.branches):
            if branch.kind in PROMOTIONS.get(w.kind, ()):
                return index
        return -1


def _reader_field(writer_field: Field, r: Node) -> Optional[int]:
    """The reader field a writer field fills: the same name, else a reader field's alias."""
    for index, candidate in enumerate(r.fields):
        if candidate.name == writer_field.name:
            return index
    for index, candidate in enumerate(r.fields):
        if writer_field.name in candidate.aliases:
            return index
    return None


def _has_match_error(action: RecordRead) -> bool:
    return action.error is not None or any(isinstance(step, Incompatible) for _, step in action.steps)


def _equivalent(w: Node, r: Node, seen: set[tuple[int, int]]) -> bool:
    """Java's ``Resolver.unionEquiv``: the same types, named types of the same short names."""
    if w.kind != r.kind or (w.kind in ("record", "enum", "fixed") and w.short_name != r.short_name):
        return False
    if w.kind in ("array", "map"):
        assert w.element is not None and r.element is not None
        return _equivalent(w.element, r.element, seen)
    if w.kind == "fixed":
        return w.size == r.size
    if w.kind == "enum":
        return w.symbols == r.symbols
    if w.kind == "union":
        return len(w.branches) == len(r.branches) and all(
            _equivalent(a, b, seen) for a, b in zip(w.branches, r.branches))
    if w.kind == "record":
        key = (id(w), id(r))
        if key in seen:
            return True
        seen.add(key)
        return len(w.fields) == len(r.fields) and all(
            a.name == b.name and _equivalent(a.type, b.type, seen) for a, b in zip(w.fields, r.fields))
    return True


# -- the reader's values ----------------------------------------------------------------------

def float32(value: Union[int, float]) -> float:
    """The float nearest ``value`` (a Python float that is exactly that float32): one rounding,
    as Java's ``(float) longValue`` (a long through a double would round twice)."""
    if isinstance(value, int) and abs(value) >= 2**24:
        magnitude = abs(value)
        shift = magnitude.bit_length() - 24
        kept, rest = divmod(magnitude, 1 << shift)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and kept & 1):
            kept += 1
        return float(kept << shift) if value > 0 else -float(kept << shift)
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # beyond float32: infinity, as a cast gives
        return float("inf") if value > 0 else float("-inf")


def logical_value(reader: Node, value: Any) -> Any:
    """A value of the reader's primitive as Spark shows it: microseconds for a timestamp (None
    beyond Spark's range), a Decimal for a decimal's bytes (None beyond its precision)."""
    per_unit = TIMESTAMP_MICROS_PER_UNIT.get(reader.logical or "")
    if per_unit is not None:
        micros = value * per_unit
        return micros if INT64[0] <= micros <= INT64[1] else None
    if reader.logical == "decimal":
        unscaled = int.from_bytes(value, "big", signed=True)
        if abs(unscaled) >= 10**reader.precision:
            return None
        # From its digits, exactly: Decimal(unscaled).scaleb() would round to the context's 28 digits.
        return decimal.Decimal((unscaled < 0, tuple(map(int, str(abs(unscaled)))), -reader.scale))
    return value


def check_defaults(root: Node) -> None:
    """Every default of a reader schema converted once (SchemaError naming the first that is
    not a value of its type), so that a reader schema with one is refused when the query starts."""
    seen: set[int] = set()

    def walk(node: Node, where: str) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        for inner in ([node.element] if node.element is not None else []) + node.branches:
            walk(inner, where)
        for f in node.fields:
            at = f"{where}.{f.name}".lstrip(".")
            if f.default is not NO_DEFAULT:
                default_value(f.type, f.default, at)
            walk(f.type, at)
    walk(root, "")


def default_value(node: Node, raw: Any, where: str) -> Any:
    """The reader default ``raw`` (JSON) as the value a decoder gives for ``node`` (see the
    module doc); SchemaError naming ``where`` if it is not a value of that type."""
    if node.kind == "union":
        first = node.branches[0]
        value = default_value(first, raw, where)
        if value is None or union_shape(node) != MEMBERS:
            return value
        return {member_names(node)[0]: value}
    value = _plain_default(node, raw, where)
    if node.logical in TIMESTAMP_MICROS_PER_UNIT or node.logical == "decimal":
        converted = logical_value(node, value)
        if converted is None:
            raise SchemaError(f"field {where!r}: the default {raw!r} is beyond what its type holds")
        return converted
    return value


def _plain_default(node: Node, raw: Any, where: str) -> Any:
    kind = node.kind
    wrong = SchemaError(f"field {where!r}: the default {str(raw)[:60]!r} is not a {node.describe()} "
                        "(Avro specification, field defaults)")
    if kind == "null":
        if raw is not None:
            raise wrong
        return None
    if kind == "boolean":
        if not isinstance(raw, bool):
            raise wrong
        return raw
    if kind in ("int", "long"):
        bits = 31 if kind == "int" else 63
        if type(raw) is not int or not -(2**bits) <= raw < 2**bits:
            raise wrong
        return raw
    if kind in ("float", "double"):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise wrong
        return float32(raw) if kind == "float" else float(raw)
    if kind in ("bytes", "fixed"):
        if not isinstance(raw, str) or any(ord(c) > 255 for c in raw) or (kind == "fixed" and len(raw) != node.size):
            raise wrong
        return raw.encode("latin-1")
    if kind == "string":
        if not isinstance(raw, str):
            raise wrong
        return raw
    if kind == "enum":
        if raw not in node.symbols:
            raise wrong
        return raw
    if kind in ("array", "map"):
        assert node.element is not None
        if kind == "array" and isinstance(raw, list):
            return [default_value(node.element, item, f"{where}[]") for item in raw]
        if kind == "map" and isinstance(raw, dict):
            return {key: default_value(node.element, item, f"{where}{{}}") for key, item in raw.items()}
        raise wrong
    if kind == "record":
        if not isinstance(raw, dict):
            raise wrong
        record = {}
        for f in node.fields:
            inner = f"{where}.{f.name}"
            if f.name in raw:
                record[f.name] = default_value(f.type, raw[f.name], inner)
            elif f.default is not NO_DEFAULT:
                record[f.name] = default_value(f.type, f.default, inner)
            else:
                raise SchemaError(f"field {where!r}: its default has no {f.name!r}, which has no default of its own")
        return record
    raise wrong
