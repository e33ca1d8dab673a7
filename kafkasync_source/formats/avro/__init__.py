"""``avro-confluent``: Avro records framed by Confluent's serializers, read with their writer schema
and resolved to the query's one reader schema.

The modules, by concern:

* schema.py: the registry's text parsed and validated into a graph of types (never run);
* resolution.py: one resolution of each writer schema to the reader schema (Avro Java's rules,
  the reader's logical types and defaults), which every reader below follows;
* spark_types.py: ``from_avro``'s Spark type for the reader schema;
* values.py: one record's bytes to its value, bounded on any bytes (the reference of the others);
* columns.py, batch.py: the same with numpy over a run of records, all or nothing;
* time_path.py: the time at ``eventTime.field``'s path, per record and per batch;
* codec.py: the reader and its writers, compiled once per process (pure: schema text and bytes).

This module gives them the registry and the query's options; formats/options.py calls its four
functions.
"""

from __future__ import annotations

import operator
import threading
from typing import Any, Callable, Optional

from kafkasync_source.event_time.options import record_name
from kafkasync_source.formats.avro.codec import Codec, TimePath, parse_field_path
from kafkasync_source.formats.avro.schema import SchemaError
from kafkasync_source.formats.avro.spark_types import spark_type as _spark_type_of
from kafkasync_source.formats.decoded import DecodedColumn
from kafkasync_source.formats.registry import KafkaSyncFormatError, registry

__all__ = ["batch_time_reader", "column_decoder", "parse_field_path", "spark_type", "time_reader"]

_CODECS: dict[Any, Codec] = {}
_PATHS: dict[tuple[Any, str, str], TimePath] = {}
_LOCK = threading.Lock()


def _codec(options: Any) -> Codec:
    """One :class:`Codec` per process and query options (the pinned reader schema's id is in them)."""
    found = _CODECS.get(options)
    if found is None:
        with _LOCK:
            found = _CODECS.get(options)
            if found is None:
                reader = options.reader_schema()
                client = registry(options.registry)

                def fetch(schema_ref: int) -> tuple[str, str]:
                    schema = client.schema(schema_ref)
                    return schema.schema_type or "AVRO", schema.schema_str
                found = _CODECS[options] = Codec(None if reader is None else reader.schema_str, fetch)
    return found


def _time_path(options: Any, path: str, time_format: str) -> TimePath:
    key = (options, path, time_format)
    found = _PATHS.get(key)
    if found is None:
        found = _PATHS.setdefault(key, _codec(options).time_path(path, time_format))
    return found


def time_reader(options: Any, path: str, time_format: str) -> Callable[[Any], int]:
    """``record -> epoch ms``: one look-up of the payload's 5-byte header, then the writer
    schema's reader (time_path.py). InvalidTime where the record has no valid time there;
    KafkaSyncFormatError naming the record where its writer cannot be read as the reader."""
    payload_of = operator.methodcaller("value" if options.part == "value" else "key")
    return _time_path(options, path, time_format).reader(payload_of, record_name)


def batch_time_reader(options: Any, path: str, time_format: str) -> Callable[[list], Optional[list[int]]]:
    """The seam's ``read_all``: a consume() batch's times from its values, None unless every
    record has a valid time there (the seam then reads each record alone)."""
    return _time_path(options, path, time_format).batch


def spark_type(options: Any) -> Any:
    """``from_avro``'s type for the pinned reader schema; ValueError naming the field where Spark
    would refuse it (a recursive record, a decimal of more than 38 digits)."""
    codec = _codec(options)
    assert codec.reader is not None, "value.decode pins a reader schema at start"
    try:
        return _spark_type_of(codec.reader)
    except SchemaError as err:
        raise ValueError(f"Option '{options.part}.decode': the reader schema has no Spark type: {err}") from None


def column_decoder(options: Any, arrow_type: Any) -> Callable[[list], DecodedColumn]:
    """``records -> DecodedColumn``: each record decoded with its writer schema into the reader
    schema's Spark type; null at a tombstone, and null plus an :class:`~kafkasync_source.formats.
    decoded.Undecodable` (not framed, unknown id, malformed bytes, an incompatible writer) at a
    record that cannot be decoded. The decode mode is applied by the caller, not here."""
    codec = _codec(options)
    payload_of = operator.methodcaller("value" if options.part == "value" else "key")

    def decode(records: list) -> DecodedColumn:
        try:
            values, undecodable = codec.decode([payload_of(record) for record in records], arrow_type)
        except KafkaSyncFormatError as err:  # the registry cannot be asked: the query fails, naming a record
            row = err.args[1] if len(err.args) > 1 else 0
            raise KafkaSyncFormatError(f"kafkasync: {record_name(records[row])}: {err.args[0]}") from None
        return DecodedColumn(values, tuple(undecodable))
    return decode
