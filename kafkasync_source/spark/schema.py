"""The output schema, identical to Spark's built-in Kafka source so queries carry over."""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def kafka_schema(
    include_headers: bool, *, include_partition_time: bool = False, include_event_time: bool = False,
    decoded: Sequence[tuple[str, DataType]] = (),
) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType [, headers] [, eventTime]
    [, partitionTime] [, keyDecoded] [, valueDecoded] (the last four are kafkasync's own:
    ``eventTime.*``, ``includePartitionTime``, ``key.decode``, ``value.decode``). ``decoded``:
    each decoded column's name and Spark type (nullable: a record that cannot be decoded is null)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER)))
    if include_event_time:
        fields.append(StructField("eventTime", TimestampType()))
    if include_partition_time:
        fields.append(StructField("partitionTime", TimestampType()))
    fields.extend(StructField(name, data_type, True) for name, data_type in decoded)
    return StructType(fields)


def decoded_column(format_options: Any) -> str:
    """``valueDecoded`` or ``keyDecoded``: the column of a decoded ``value.format`` / ``key.format``."""
    return f"{format_options.part}Decoded"


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark checks ``read()``'s record batches against (it must be equal).

    Built the way the installed PySpark builds it: 4.2+ take the session time zone (PySpark
    passes UTC here); 4.0/4.1 have no such parameter and use UTC timestamps.
    """
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)
