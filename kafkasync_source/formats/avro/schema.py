"""Avro schemas as kafkasync reads them: the registry's text parsed into a graph of :class:`Node`,
validated as Avro's Java parser validates it (``Schema.Parser`` with name validation), never run.

Why a parser of our own, not fastavro's ``parse_schema``: fastavro accepts what Avro refuses (a
``fixed`` whose ``size`` is the string ``"0; import os"``, names with quotes or newlines), and
the old readers put such values into generated code. Here every value a reader takes from a
schema is checked for its type first: sizes, precisions and scales are ``int`` (not ``bool``),
sizes within Java's int range, names ``[A-Za-z_][A-Za-z0-9_]*`` (Avro 1.11 specification,
"Names"). A schema that breaks a rule is refused with :class:`SchemaError` naming the place.

Logical types follow Java's ``LogicalTypes.fromSchemaIgnoreInvalid`` (what ``Schema.Parser``
calls): an annotation that is not valid for its type (``date`` on a string, a ``decimal``
whose precision does not fit its fixed size) is ignored, and the value is its plain type, as
Spark's ``from_avro`` then reads it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed"})
MAX_DEPTH = 100
"""Nesting of a schema's JSON beyond which it is refused (json's own limit is the C stack)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JAVA_INT_MAX = 2**31 - 1
_LOGICAL_ON = {"date": "int", "time-millis": "int", "time-micros": "long", "timestamp-millis": "long",
               "timestamp-micros": "long", "timestamp-nanos": "long", "local-timestamp-millis": "long",
               "local-timestamp-micros": "long", "local-timestamp-nanos": "long", "uuid": "string"}
"""Logical types Java's ``LogicalTypes`` knows, on the one type each annotates (``decimal`` and
``duration`` are checked on their own)."""
NO_DEFAULT = object()
"""A field without a ``default``."""


class SchemaError(ValueError):
    """A schema text that is not a valid Avro schema; the message names where."""


@dataclass(eq=False)
class Node:
    """One Avro type. Named types (record, enum, fixed) are one object wherever referenced, so
    a recursive schema is a cyclic graph."""

    kind: str
    """A primitive's name, or record, enum, fixed, array, map, union."""
    name: Optional[str] = None
    """A named type's full name (``namespace.Name``)."""
    aliases: tuple[str, ...] = ()
    """A named type's aliases, as full names."""
    logical: Optional[str] = None
    """A valid logical type (see the module doc), else None."""
    precision: int = 0
    scale: int = 0
    size: int = 0
    """A fixed's size in bytes."""
    symbols: tuple[str, ...] = ()
    enum_default: Optional[str] = None
    fields: list[Field] = field(default_factory=list)
    element: Optional[Node] = None
    """An array's items or a map's values."""
    branches: list[Node] = field(default_factory=list)

    @property
    def short_name(self) -> Optional[str]:
        return None if self.name is None else self.name.rpartition(".")[2]

    def describe(self) -> str:
        """``int``, ``record dbserver1.Value``: how messages name a type."""
        return self.kind if self.name is None else f"{self.kind} {self.name}"


@dataclass(eq=False)
class Field:
    name: str
    type: Node
    default: Any = NO_DEFAULT
    """The JSON default as written (see resolution.py for its value), or :data:`NO_DEFAULT`."""
    aliases: tuple[str, ...] = ()


def parse(text: str) -> Node:
    """The schema text's root type; :class:`SchemaError` for anything Avro's parser refuses."""
    try:
        raw = json.loads(text)
    except RecursionError:
        raise SchemaError("the schema is nested too deeply to be read") from None
    except ValueError as err:
        raise SchemaError(f"the schema is not JSON: {err}") from None
    return _Parser().node(raw, "", 0, "the schema")


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, Node] = {}

    def node(self, raw: Any, namespace: str, depth: int, where: str) -> Node:
        if depth > MAX_DEPTH:
            raise SchemaError(f"{where}: the schema is nested more than {MAX_DEPTH} levels deep")
        if isinstance(raw, str):
            return self._reference(raw, namespace, where)
        if isinstance(raw, list):
            return self._union(raw, namespace, depth, where)
        if not isinstance(raw, dict):
            raise SchemaError(f"{where}: {_shown(raw)} is not a schema")
        kind = raw.get("type")
        if isinstance(kind, (dict, list)):  # {"type": {...}}: the inner schema itself
            return self.node(kind, namespace, depth + 1, where)
        if not isinstance(kind, str):
            raise SchemaError(f"{where}: a schema object needs a \"type\", not {_shown(kind)}")
        if kind in PRIMITIVES:
            node = Node(kind)
            node.logical = _logical(raw, node, where)
            return node
        if kind in NAMED:
            return self._named(raw, kind, namespace, depth, where)
        if kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            if key not in raw:
                raise SchemaError(f"{where}: an {kind} needs \"{key}\"")
            inner = f"{where}{'[]' if kind == 'array' else '{}'}"
            return Node(kind, element=self.node(raw[key], namespace, depth + 1, inner))
        return self._reference(kind, namespace, where)  # {"type": "SomeNamedType"}

    def _reference(self, name: str, namespace: str, where: str) -> Node:
        if name in PRIMITIVES:
            return Node(name)
        found = self.named.get(_full_name(name, namespace, where)) or self.named.get(name)
        if found is None:
            raise SchemaError(f"{where}: {_shown(name)} names no type defined before it")
        return found

    def _union(self, raw: list, namespace: str, depth: int, where: str) -> Node:
        if not raw:
            raise SchemaError(f"{where}: a union with no branch")
        branches = [self.node(b, namespace, depth + 1, where) for b in raw]
        seen: set[str] = set()
        for branch in branches:
            if branch.kind == "union":
                raise SchemaError(f"{where}: a union may not hold a union directly")
            key = branch.name or branch.kind
            if key in seen:
                raise SchemaError(f"{where}: the union holds {key} twice")
            seen.add(key)
        return Node("union", branches=branches)

    def _named(self, raw: dict, kind: str, namespace: str, depth: int, where: str) -> Node:
        name = raw.get("name")
        if not isinstance(name, str):
            raise SchemaError(f"{where}: a {kind} needs a \"name\", not {_shown(name)}")
        own_namespace = raw.get("namespace", namespace)
        if own_namespace is None:
            own_namespace = ""
        if not isinstance(own_namespace, str):
            raise SchemaError(f"{where}: a namespace is text, not {_shown(own_namespace)}")
        full = _full_name(name, own_namespace, where)
        if full in self.named or full in PRIMITIVES:
            raise SchemaError(f"{where}: the type {full} is defined twice")
        inner = full.rpartition(".")[0]
        node = Node(kind, name=full, aliases=tuple(_full_name(a, inner, where) for a in _names(raw, "aliases", where)))
        self.named[full] = node  # before its fields: they may refer to it
        where = f"{where} ({full})" if where == "the schema" else where
        if kind == "record":
            fields = raw.get("fields")
            if not isinstance(fields, list):
                raise SchemaError(f"{where}: a record needs a list of \"fields\"")
            for index, spec in enumerate(fields):
                node.fields.append(self._field(spec, inner, depth, where, index))
            names = [f.name for f in node.fields]
            if len(set(names)) != len(names):
                raise SchemaError(f"{where}: a field name appears twice in {full}")
        elif kind == "enum":
            node.symbols = tuple(_names(raw, "symbols", where, required=True))
            if len(set(node.symbols)) != len(node.symbols):
                raise SchemaError(f"{where}: a symbol appears twice in enum {full}")
            default = raw.get("default")
            if default is not None and default not in node.symbols:
                raise SchemaError(f"{where}: the enum default {_shown(default)} is not one of its symbols")
            node.enum_default = default
        else:
            size = raw.get("size")
            if type(size) is not int or not 0 <= size <= _JAVA_INT_MAX:
                raise SchemaError(f"{where}: a fixed size is a whole number from 0 to {_JAVA_INT_MAX}, "
                                  f"not {_shown(size)}")
            node.size = size
            node.logical = _logical(raw, node, where)
        return node

    def _field(self, spec: Any, namespace: str, depth: int, where: str, index: int) -> Field:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not _NAME.fullmatch(spec["name"]):
            raise SchemaError(f"{where}: field {index} needs a \"name\" of letters, digits and underscores, "
                              f"not {_shown(spec.get('name') if isinstance(spec, dict) else spec)}")
        name = spec["name"]
        at = name if where.startswith("the schema") else f"{where}.{name}"
        if "type" not in spec:
            raise SchemaError(f"{at}: a field needs a \"type\"")
        return Field(name, self.node(spec["type"], namespace, depth + 1, at), spec.get("default", NO_DEFAULT),
                     tuple(_names(spec, "aliases", at)))


def _names(raw: dict, key: str, where: str, required: bool = False) -> list[str]:
    names = raw.get(key, None if required else [])
    if not isinstance(names, list) or not all(isinstance(n, str) and all(map(_NAME.fullmatch, n.split(".")))
                                              for n in names):
        raise SchemaError(f"{where}: \"{key}\" is a list of names of letters, digits and underscores, "
                          f"not {_shown(names)}")
    return names


def _full_name(name: str, namespace: str, where: str) -> str:
    full = name if "." in name else f"{namespace}.{name}" if namespace else name
    parts = full.split(".")
    if not all(map(_NAME.fullmatch, parts)):
        raise SchemaError(f"{where}: {_shown(full)} is not an Avro name (letters, digits and underscores, "
                          "joined by dots)")
    return full


def _logical(raw: dict, node: Node, where: str) -> Optional[str]:
    """The annotation if Java's ``LogicalTypes`` takes it for this type, else None (ignored)."""
    logical = raw.get("logicalType")
    if not isinstance(logical, str):
        return None
    if logical == "decimal" and node.kind in ("bytes", "fixed"):
        precision, scale = raw.get("precision"), raw.get("scale", 0)
        if type(precision) is not int or type(scale) is not int or not 0 <= scale <= precision \
                or not 1 <= precision <= _JAVA_INT_MAX:  # Java reads them as ints
            return None
        if node.kind == "fixed" and precision > _max_precision(node.size):
            return None
        node.precision, node.scale = precision, scale
        return logical
    if logical == "duration":
        return logical if node.kind == "fixed" and node.size == 12 else None
    return logical if _LOGICAL_ON.get(logical) == node.kind else None


def _max_precision(size: int) -> int:
    """The most decimal digits a two's complement number of ``size`` bytes holds (Java's
    ``LogicalTypes.Decimal.maxPrecision``)."""
    if size < 1:
        return 0
    if size > 1024:  # beyond any decimal a reader takes: no big power computed for a hostile size
        return 2**31
    return int(math.floor(math.log10(2 ** (8 * size - 1) - 1)))


def _shown(value: Any) -> str:
    """A schema's value in a message: quoted, cut short, never more than 60 characters."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
