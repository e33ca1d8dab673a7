"""What the Avro tests share: records framed as Confluent's serializers frame them (fastavro's
``schemaless_writer`` behind the 5-byte header, as confluent-kafka's ``AvroSerializer`` writes),
and kafkasync's readers built from schema text alone (formats/avro/codec.py), no registry."""

from __future__ import annotations

import io
import json
import math
import struct
from typing import Any, Optional, Union

import fastavro
import pyarrow as pa
from pyspark.sql import types as T

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats.avro.codec import Codec
from kafkasync_source.formats.avro.schema import parse
from kafkasync_source.formats.avro.spark_types import spark_type
from kafkasync_source.formats.registry import UnknownSchema
from kafkasync_source.spark.schema import arrow_schema

Schema = Union[dict, list, str]


def text(schema: Schema) -> str:
    return schema if isinstance(schema, str) and schema.lstrip().startswith(("{", "[", '"')) else json.dumps(schema)


def body(schema: Schema, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(text(schema))), record)
    return out.getvalue()


def framed(schema: Schema, record: Any, schema_id: int = 7) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body(schema, record)


def codec(writers: Union[Schema, dict[int, Schema]], reader: Optional[Schema] = None) -> Codec:
    """A codec whose registry holds ``writers`` (one schema: id 7) and reads as ``reader``."""
    known = writers if isinstance(writers, dict) and all(isinstance(k, int) for k in writers) else {7: writers}

    def fetch(schema_id: int) -> tuple[str, str]:
        if schema_id not in known:
            raise UnknownSchema(f"the registry has no schema id {schema_id}")
        return "AVRO", text(known[schema_id])
    return Codec(None if reader is None else text(reader), fetch)


def arrow_type_of(reader: Schema) -> pa.DataType:
    data_type = spark_type(parse(text(reader)))
    return arrow_schema(T.StructType([T.StructField("v", data_type)])).field("v").type


def decode(writers: Union[Schema, dict[int, Schema]], reader: Schema, payloads: list) -> tuple[list, list]:
    """``(values as Python, undecodable rows)`` of ``value.decode`` over ``payloads``."""
    values, undecodable = codec(writers, reader).decode(payloads, arrow_type_of(reader))
    return values.to_pylist(), undecodable


def time_at(writers: Union[Schema, dict[int, Schema]], path: str, payload: bytes, reader: Optional[Schema] = None,
            time_format: str = "epochMillis") -> Union[int, str]:
    """The record reader's time, or ``"invalid: <why>"``."""
    try:
        return codec(writers, reader).time_path(path, time_format).time_of(payload)
    except InvalidTime as why:
        return f"invalid: {why}"


def norm(value: Any) -> Any:
    """Floats by bits, NaN as one value; maps as dicts; recursively."""
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [norm(v) for v in value]
    return value


def python_value(value: Any, data_type: pa.DataType) -> Any:
    """An Arrow value (``to_pylist``'s) with maps as dicts, as the oracle builds them."""
    if value is None:
        return None
    if pa.types.is_struct(data_type):
        return {f.name: python_value(value[f.name], f.type) for f in data_type}
    if pa.types.is_map(data_type):
        return {k: python_value(v, data_type.item_type) for k, v in value}
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return [python_value(v, data_type.value_type) for v in value]
    return value


def plain_type(data_type: pa.DataType) -> pa.DataType:
    """Timestamps as int64, dates as int32, inside any nesting: values beyond Python's datetime
    compare too."""
    if pa.types.is_timestamp(data_type):
        return pa.int64()
    if pa.types.is_date32(data_type):
        return pa.int32()
    if pa.types.is_struct(data_type):  # every field nullable: a null struct's children hold nulls
        return pa.struct([pa.field(f.name, plain_type(f.type)) for f in data_type])
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        item = data_type.value_field
        return pa.list_(pa.field(item.name, plain_type(item.type), item.nullable))
    if pa.types.is_map(data_type):
        return pa.map_(data_type.key_type, pa.field(data_type.item_field.name, plain_type(data_type.item_type),
                                                    data_type.item_field.nullable))
    return data_type


def plain_values(array: pa.Array) -> list:
    """An Arrow column as comparable Python values (:func:`norm` of :func:`python_value`)."""
    plain = plain_type(array.type)
    return [norm(python_value(v, plain)) for v in array.cast(plain).to_pylist()]
