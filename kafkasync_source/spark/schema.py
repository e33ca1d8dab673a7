"""The output schema, identical to Spark's built-in Kafka source so queries carry over, and the
reader schemas a query pinned, carried in it from ``load()`` to every later process of the query.

Why the schema carries them: Spark fixes a DataFrame's type when it is loaded (``schema()``,
in a Python worker of its own), and later runs the query's other Python processes apart from
it: the streaming source's runner (``streamReader(schema)``: latestOffset, partitions) and the
planner of ``read()`` (``streamReader(schema)`` / ``reader(schema)`` again, pickled to the
executors). Each parses the options anew; taking the subject's latest version in each, a version
registered between ``load()`` and ``start()`` gave a column of one version's type decoded with
another's fields. What every one of them is handed is the schema ``schema()`` returned: the JVM
reads it with its field metadata (``DataType.fromJson``), keeps it in the table
(``PythonDataSourceV2.getTable``, ``PythonScanBuilder``) and sends it, metadata included, to each
runner as JSON (pyspark/sql/streaming/python_streaming_source_runner.py and
pyspark/sql/worker/plan_data_source_read.py: ``_parse_datatype_json_string``). So the decoded
column (and ``eventTime``, for ``eventTime.field``) carries its part's pin under
:data:`READER_SCHEMA_KEY`, and the readers take it from there (tests/test_formats_registry.py
shows a version registered between ``load()`` and ``start()`` unused). It also shows in
``df.schema``. A schema the user gives (``.schema(...)``) carries none: the reader is then
pinned when the query starts, and its type checked against the columns given; a stream must
then name the version (``<part>.subject.version``), as its runner and its planner pin apart.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.formats.options import ReaderPin

if TYPE_CHECKING:
    from kafkasync_source.config.options import SourceOptions

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


READER_SCHEMA_KEY = "kafkasync.readerSchema"
"""The field metadata key of a part's pinned reader schema: ``{"part", "subject", "version", "id"}``."""


def kafka_schema(
    include_headers: bool, *, include_partition_time: bool = False, include_event_time: bool = False,
    event_time_pin: Optional[Any] = None, decoded: Sequence[StructField] = (),
) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType [, headers] [, eventTime]
    [, partitionTime] [, keyDecoded [, keyDecodeError]] [, valueDecoded [, valueDecodeError]] (the
    last ones are kafkasync's own: ``eventTime.*``, ``includePartitionTime``, ``key.decode``,
    ``value.decode``). ``event_time_pin``: the value's reader schema (a ``ReaderPin``) where the
    event time is a field of it. ``decoded``: the decoded columns (:func:`decoded_fields`)."""
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
        fields.append(StructField("eventTime", TimestampType(), True,
                                  None if event_time_pin is None else _pin_metadata("value", event_time_pin)))
    if include_partition_time:
        fields.append(StructField("partitionTime", TimestampType()))
    fields.extend(decoded)
    return StructType(fields)


def source_schema(options: "SourceOptions", decoded_types: Mapping[str, DataType]) -> StructType:
    """The columns the source gives for ``options``, in order; ``decoded_types``: by part
    (``value``, ``key``), the type of its decoded column (its reader's ``spark_type()``)."""
    event_time_format = options.event_time.value_format if options.event_time is not None else None
    decoded = [field for f in options.decoded_formats for field in decoded_fields(f, decoded_types[f.part])]
    return kafka_schema(options.include_headers, include_partition_time=options.include_partition_time,
                        include_event_time=options.event_time is not None,
                        event_time_pin=event_time_format.pin if event_time_format is not None else None,
                        decoded=decoded)


def decoded_fields(format_options: Any, spark_type: DataType) -> list[StructField]:
    """A decoded ``value.format`` / ``key.format``'s columns: ``<part>Decoded`` of ``spark_type``
    (nullable: a tombstone, or under PERMISSIVE a record that cannot be decoded, is null), with
    its pinned reader schema in its metadata, and under PERMISSIVE ``<part>DecodeError`` beside it."""
    pin = format_options.pin
    fields = [StructField(decoded_column(format_options), spark_type, True,
                          None if pin is None else _pin_metadata(format_options.part, pin))]
    if format_options.error_column:
        fields.append(StructField(decode_error_column(format_options), StringType(), True))
    return fields


def decoded_column(format_options: Any) -> str:
    """``valueDecoded`` or ``keyDecoded``: the column of a decoded ``value.format`` / ``key.format``."""
    return f"{format_options.part}Decoded"


def decode_error_column(format_options: Any) -> str:
    """``valueDecodeError`` or ``keyDecodeError``: why a record's decoded column is null (PERMISSIVE)."""
    return f"{format_options.part}DecodeError"


def carried_pins(schema: StructType) -> dict[str, ReaderPin]:
    """The reader schemas pinned at ``load()``, by part, as the schema Spark hands a reader
    carries them (none in a schema the user gave). ValueError where two columns disagree."""
    pins: dict[str, ReaderPin] = {}
    for column in schema.fields:
        found: Mapping[str, Any] = (column.metadata or {}).get(READER_SCHEMA_KEY) or {}
        if not found:
            continue
        part = str(found.get("part"))
        pin = ReaderPin.from_json({key: value for key, value in found.items() if key != "part"})
        if pins.setdefault(part, pin) != pin:
            raise ValueError(f"the schema's columns name different reader schemas for the {part}: "
                             f"{pins[part].describe()} and {pin.describe()}")
    return pins


def check_decoded_type(format_options: Any, schema: StructType) -> None:
    """Fail, naming the column and the reader schema, where a schema the user gave (which carries
    no pin) does not hold the decoded column of the type its reader, pinned now, decodes into:
    rows of another type would fail in Spark far from the cause, or read as the wrong fields."""
    name = decoded_column(format_options)
    expected = format_options.spark_type()
    given = schema[name].dataType if name in schema.fieldNames() else None
    if given != expected:
        has = f"no column {name!r}" if given is None else f"{name} {given.simpleString()}"
        raise KafkaSyncOptionError(
            f"kafkasync: the schema given has {has}, and {format_options.describe_reader()} decodes into "
            f"{expected.simpleString()}: give no schema (the source pins the reader when the query is loaded "
            "and types the column after it), or this type.")


def check_given_columns(options: "SourceOptions", schema: StructType) -> None:
    """Fail, naming the first column that differs, where a schema handed to a reader does not
    hold the source's columns in the source's order: Spark takes a Python source's columns by
    position, so a given ``StructType([value, key, ...])`` read the keys as values, and
    ``keyDecoded``/``valueDecoded`` of one type swapped silently. The decoded columns' types
    are :func:`check_decoded_type`'s (or the pin's) to check; here only their place."""
    given = [(field.name, field.dataType) for field in schema.fields]
    types = dict(given)
    expected = [(field.name, field.dataType) for field in source_schema(
        options, {f.part: types.get(decoded_column(f), NullType()) for f in options.decoded_formats}).fields]
    if given == expected:
        return
    at = next((index for index, (a, b) in enumerate(zip(given, expected)) if a != b), min(len(given), len(expected)))

    def shown(columns: list[tuple[str, DataType]]) -> str:
        return f"{columns[at][0]} {columns[at][1].simpleString()}" if at < len(columns) else "none"

    raise KafkaSyncOptionError(
        f"kafkasync: the schema given has column {at + 1} {shown(given)}, where the source gives {shown(expected)}: "
        f"Spark takes a source's columns by position, so a schema given must be the source's columns in its order "
        f"({', '.join(name for name, _ in expected)}). Give no schema, or a loaded DataFrame's df.schema.")


def _pin_metadata(part: str, pin: ReaderPin) -> dict[str, Any]:
    return {READER_SCHEMA_KEY: {"part": part, **pin.to_json()}}


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema PySpark checks ``read()``'s record batches against (it must be equal).

    Built the way the installed PySpark builds it: 4.2+ take the session time zone (PySpark
    passes UTC here); 4.0/4.1 have no such parameter and use UTC timestamps.
    """
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)
