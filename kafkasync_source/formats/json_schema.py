"""``json-schema-confluent``: JSON documents framed by Confluent's ``JSONSerializer``.

After the 5-byte header the record is plain JSON text, so a field's time is read as
``eventTime.jsonPath`` reads one (msgspec decodes just the fields on the path, in C), from the
bytes after the header. The schema id is still looked up (once per id and process) so that a
record whose id the registry does not know is an invalid time, as for the other formats.

Decoded columns: Spark has no ``from_json_schema``; the column is what ``from_json`` gives with
the Spark type these rules derive from the reader schema: its ``properties`` a struct (every
field nullable, as a JSON document may leave any out), ``integer`` long, ``number`` double,
``boolean``, ``string``, ``array`` arrays, an object with only ``additionalProperties`` a map of
strings to its type; local ``$ref`` s (``#/definitions/...``, ``#/$defs/...``) are followed; a
property whose type is not one of those (several types, ``oneOf``/``anyOf`` of several, an
external ``$ref``, a ``$ref`` inside its own expansion, none) a string. Values follow
``from_json`` in its default mode, PERMISSIVE (formats/json_values.py): a property that does
not fit its type is null and the others keep their values, and a string column holds any other
JSON value as its text. Only a payload that is not a JSON object (not JSON, not UTF-8, an
array) has no value: an undecodable row.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.event_time.json_path import json_batch_reader, json_reader
from kafkasync_source.formats.decoded import (
    INCOMPATIBLE,
    MALFORMED,
    NOT_FRAMED,
    UNKNOWN_SCHEMA,
    DecodedColumn,
    TypeBudget,
    Undecodable,
)
from kafkasync_source.formats.framing import HEADER_BYTES, NotFramed, schema_id, schema_id_or_none
from kafkasync_source.formats.json_values import NotAValue, document_converter
from kafkasync_source.formats.registry import UnknownSchema, registry

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _json_path(path: str) -> str:
    """``source.ts_ms`` as the JSONPath ``$.source.ts_ms`` (``$['a b']`` for other names)."""
    steps = path.strip().split(".")
    if not all(steps) or any("'" in step for step in steps):
        raise ValueError(f"Option 'eventTime.field' {path!r} must be field names joined by '.', e.g. 'source.ts_ms'.")
    return "$" + "".join(f".{step}" if _PLAIN_NAME.fullmatch(step) else f"['{step}']" for step in steps)


class _Body:
    """The JSON after the header, as the JSONPath reader asks a record for its value."""

    __slots__ = ("_body",)

    def __init__(self, body: bytes) -> None:
        self._body = body

    def value(self) -> bytes:
        return self._body


class NotJsonSchema(InvalidTime):
    """The record's schema id names a schema of another type."""


def _known_body(options: Any, payload: Any) -> memoryview:
    """The JSON text of a framed payload whose schema id the registry knows (InvalidTime otherwise)."""
    known = registry(options.registry)
    schema = known.schema(schema_id(payload))
    if schema.schema_type != "JSON":
        raise NotJsonSchema(f"schema id {schema_id(payload)} is a {schema.schema_type} schema, not JSON Schema")
    return memoryview(payload)[HEADER_BYTES:]


def time_reader(options: Any, path: str, time_format: str) -> Callable[[Any], int]:
    read_json = json_reader(_json_path(path), time_format)
    payload_of = options.payload

    def read(record: Any) -> int:
        return read_json(_Body(_known_body(options, payload_of(record))))  # type: ignore[arg-type]
    return read


def batch_time_reader(options: Any, path: str, time_format: str) -> Optional[Callable[[list], Optional[list[int]]]]:
    read_all = json_batch_reader(_json_path(path), time_format)
    if read_all is None:
        return None
    def times(payloads: list) -> Optional[list[int]]:
        """``payloads``: the records' values (the seam takes them, or the executors have them)."""
        try:
            bodies = [_known_body(options, payload) for payload in payloads]
        except Exception:  # noqa: BLE001 - a record not framed or of an unknown id: each is read alone
            return None
        return read_all(bodies)
    return times


def spark_type(options: Any) -> Any:
    reader = options.reader_schema()
    assert reader is not None, "value.decode pins a reader schema at start"
    schema = (f"Option '{options.part}.decode': the reader schema (id {options.reader_schema_id}, subject "
              f"{options.subject!r})")
    try:
        root = json.loads(reader.schema_str)
    except (ValueError, RecursionError) as err:  # RecursionError: text nested deeper than Python's json reads
        raise ValueError(f"{schema} is not JSON this reader can read ({type(err).__name__})") from None
    return _Derivation(root, TypeBudget(schema)).type_of(root)


_MAX_DEPTH = 32
"""Nesting beyond which a property is typed a string."""


class _Derivation:
    """The Spark type of a JSON Schema, by the rules in the module's docstring.

    A ``$ref`` met again inside its own expansion (a schema that refers to itself: a tree's
    ``children``) is typed a string, which holds that subtree's JSON text: expanding it again
    would nest without end, and expanding it a fixed number of times makes a type that grows as
    the number of such references to that power. The type's size is bounded by a
    :class:`~kafkasync_source.formats.decoded.TypeBudget` all the same: definitions that each
    use the next one twice grow as fast without any cycle."""

    def __init__(self, root: Any, budget: TypeBudget) -> None:
        self._root = root
        self._budget = budget

    def type_of(self, schema: Any, depth: int = 0, expanding: tuple[str, ...] = ()) -> Any:
        import pyspark.sql.types as T

        if depth > _MAX_DEPTH or not isinstance(schema, dict):
            return T.StringType()
        reference = schema.get("$ref")
        if isinstance(reference, str):
            if not reference.startswith("#") or reference in expanding:  # another document (a registry
                return T.StringType()  # reference: not followed), or a cycle
            return self.type_of(self._target(reference), depth + 1, (*expanding, reference))
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            kind = kinds[0] if len(kinds) == 1 else None
        if kind is None and "properties" in schema:
            kind = "object"
        if kind is None:
            for combined in ("oneOf", "anyOf"):
                choices = schema.get(combined)
                if isinstance(choices, list):
                    choices = [o for o in choices if not (isinstance(o, dict) and o.get("type") == "null")]
                    if len(choices) == 1:
                        return self.type_of(choices[0], depth + 1, expanding)
        if kind == "object":
            properties = schema.get("properties")
            if isinstance(properties, dict) and properties:
                return T.StructType([self._field(str(name), sub, depth, expanding) for name, sub in properties.items()])
            extra = schema.get("additionalProperties")
            self._budget.spend()
            return T.MapType(T.StringType(), self.type_of(extra if isinstance(extra, dict) else {}, depth + 1,
                                                          expanding), True)
        if kind == "array":
            self._budget.spend()
            return T.ArrayType(self.type_of(schema.get("items", {}), depth + 1, expanding), True)
        simple = {"integer": T.LongType(), "number": T.DoubleType(), "boolean": T.BooleanType()}
        return simple.get(kind, T.StringType()) if isinstance(kind, str) else T.StringType()

    def _field(self, name: str, schema: Any, depth: int, expanding: tuple[str, ...]) -> Any:
        import pyspark.sql.types as T

        self._budget.spend()
        return T.StructField(name, self.type_of(schema, depth + 1, expanding), True)

    def _target(self, reference: str) -> Any:
        """What a local ``$ref`` (``#/definitions/Money``) points at in the root document: a URI
        fragment (``%`` escapes) holding a JSON Pointer (RFC 6901: ``~1`` is ``/``, ``~0`` is
        ``~``, a number indexes an array); {} where it points at nothing."""
        from urllib.parse import unquote

        target: Any = self._root
        for part in unquote(reference[1:]).strip("/").split("/"):
            if not part:
                continue
            name = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict):
                target = target.get(name, {})
            elif isinstance(target, list) and name.isdigit() and int(name) < len(target):
                target = target[int(name)]
            else:
                return {}
        return target


def column_decoder(options: Any, arrow_type: Any) -> Callable[[list], DecodedColumn]:
    """``records -> DecodedColumn``: each record's value as ``from_json`` gives it in PERMISSIVE
    mode; null at a tombstone, and null at each row named undecodable (not framed, an unknown
    schema id, a schema of another type, a payload that is not a JSON object)."""
    import pyarrow as pa

    convert = document_converter(options.spark_type())
    payload_of = options.payload

    def column(records: list) -> DecodedColumn:
        rows: list[Any] = []
        undecodable: list[Undecodable] = []
        for index, record in enumerate(records):
            payload = payload_of(record)
            row = None
            if payload is not None:
                try:
                    row = convert(_known_body(options, payload))
                except (InvalidTime, NotAValue) as why:
                    undecodable.append(Undecodable(index, _kind(why), str(why), schema_id_or_none(payload)))
            rows.append(row)
        return DecodedColumn(pa.array(rows, type=arrow_type), tuple(undecodable))
    return column


def _kind(err: Exception) -> str:
    if isinstance(err, NotFramed):
        return NOT_FRAMED
    if isinstance(err, UnknownSchema):
        return UNKNOWN_SCHEMA
    if isinstance(err, NotJsonSchema):
        return INCOMPATIBLE
    return MALFORMED
