"""``json-schema-confluent``: JSON documents framed by Confluent's ``JSONSerializer``.

After the 5-byte header the record is plain JSON text, so a field's time is read as
``eventTime.jsonPath`` reads one (msgspec decodes just the fields on the path, in C), from the
bytes after the header. The schema id is still looked up (once per id and process) so that a
record whose id the registry does not know is an invalid time, as for the other formats.

Decoded columns: the reader schema's ``properties`` become a struct (every field nullable, as a
JSON document may leave any out), ``integer`` long, ``number`` double, ``boolean``, ``string``,
``array`` arrays, an object with only ``additionalProperties`` a map of strings to its type;
local ``$ref`` s (``#/definitions/...``, ``#/$defs/...``) are followed. Spark has no
``from_json_schema``; this is ``from_json`` with the schema those rules give.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

import msgspec

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.event_time.json_path import json_batch_reader, json_reader
from kafkasync_source.formats.decoded import DecodedColumn, invalid_row
from kafkasync_source.formats.framing import HEADER_BYTES, schema_id
from kafkasync_source.formats.registry import registry

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


def _known_body(options: Any, payload: Any) -> memoryview:
    """The JSON text of a framed payload whose schema id the registry knows (InvalidTime otherwise)."""
    known = registry(options.registry)
    schema = known.schema(schema_id(payload))
    if schema.schema_type != "JSON":
        raise InvalidTime(f"schema id {schema_id(payload)} is a {schema.schema_type} schema, not JSON Schema")
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
    root = json.loads(reader.schema_str)
    return _spark_type(root, root)


def _spark_type(schema: Any, root: dict, depth: int = 0) -> Any:
    import pyspark.sql.types as T

    if depth > 32 or not isinstance(schema, dict):
        return T.StringType()
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target.get(part, {}) if part and isinstance(target, dict) else target
        return _spark_type(target, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and "properties" in schema:
        kind = "object"
    if kind is None:
        for combined in ("oneOf", "anyOf"):
            options = [o for o in schema.get(combined, ()) if o.get("type") != "null"]
            if len(options) == 1:
                return _spark_type(options[0], root, depth + 1)
    if kind == "object":
        properties = schema.get("properties")
        if properties:
            return T.StructType([T.StructField(name, _spark_type(sub, root, depth + 1), True)
                                 for name, sub in properties.items()])
        extra = schema.get("additionalProperties")
        return T.MapType(T.StringType(), _spark_type(extra if isinstance(extra, dict) else {}, root, depth + 1), True)
    if kind == "array":
        return T.ArrayType(_spark_type(schema.get("items", {}), root, depth + 1), True)
    simple = {"integer": T.LongType(), "number": T.DoubleType(), "boolean": T.BooleanType()}
    return simple.get(kind, T.StringType()) if isinstance(kind, str) else T.StringType()


def column_decoder(options: Any, arrow_type: Any) -> Callable[[list], Any]:
    import pyarrow as pa

    decode = msgspec.json.decode

    def column(records: list) -> DecodedColumn:
        rows = []
        undecodable = []
        for row, record in enumerate(records):
            payload = options.payload(record)
            try:
                rows.append(None if payload is None else decode(_known_body(options, payload)))
            except InvalidTime as why:  # not framed, an unknown id, another schema type
                rows.append(None)
                undecodable.append(invalid_row(row, payload, why))
            except msgspec.DecodeError as why:
                rows.append(None)
                undecodable.append(invalid_row(row, payload, InvalidTime(f"not JSON: {why}")))
        try:
            values = pa.array(rows, type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            values = pa.array([_fits(value, arrow_type) for value in rows], type=arrow_type)
        return DecodedColumn(values, tuple(undecodable))
    return column


def _fits(value: Any, arrow_type: Any) -> Any:
    """A document that does not fit the reader schema's type reads as null, not as a failure."""
    import pyarrow as pa

    try:
        pa.array([value], type=arrow_type)
        return value
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return None
