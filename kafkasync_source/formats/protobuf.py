"""``protobuf-confluent``: Protobuf messages framed by Confluent's ``ProtobufSerializer``.

The writer schema is fetched by id as the serialized ``FileDescriptorProto``: Confluent's
registry answers ``.proto`` text unless asked with ``format=serialized`` (as confluent-kafka's
``ProtobufDeserializer`` asks), while Apicurio keeps the descriptor as the client sent it and
answers ``format=serialized`` with an error (HTTP 500, "Syntax error in ....proto"; measured on
Apicurio 3.3.3), so the schema is asked for as stored first and as ``serialized`` only when it
is text. The descriptor is built into a pool with the
well-known types and the schema's references (confluent-kafka's ``_init_pool`` and
``_resolve_named_schema``), and the message type is the one the record's message indexes name.
A message is parsed whole (the C ``upb`` parser; Protobuf has no order to skip by) and the path
followed by field name. Protobuf needs no reader-schema resolution: unknown fields are kept aside
and missing ones read as absent, so each record is read with its own writer schema and its
fields are named as the reader schema names them (field names, not numbers, are the contract
here, as in ``from_protobuf``).

``google.protobuf.Timestamp`` is a time as it is; other numbers and strings follow
``eventTime.format``. A message field that is not set, or a scalar with explicit presence
(``optional``) that is not set, is no time; a proto3 scalar without presence reads as its
default (0), as every Protobuf reader sees it.

Decoded columns follow Spark's ``from_protobuf`` (``SchemaConverters`` in spark-protobuf):
32-bit integers int, 64-bit long, ``uint32`` int, ``uint64`` long, enums strings, bytes binary,
``Timestamp`` timestamp, messages structs, repeated fields arrays, maps maps; every field
nullable, and a field that is not set is null (Spark's default, ``emit.default.values=false``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from kafkasync_source.event_time.formats import InvalidTime, checked, converter
from kafkasync_source.formats.decoded import DecodedColumn, invalid_row
from kafkasync_source.formats.framing import protobuf_indexes, schema_id
from kafkasync_source.formats.registry import KafkaSyncFormatError, registry

_TIMESTAMP = "google.protobuf.Timestamp"


class _Messages:
    """Per process and format options: message classes by (schema id, message indexes)."""

    def __init__(self, options: Any) -> None:
        self._options = options
        self._files: dict[int, Any] = {}
        self._classes: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._lock = threading.Lock()

    def message(self, payload: Any) -> Any:
        """The record's message, parsed with its writer schema (InvalidTime if it cannot be)."""
        schema_ref = schema_id(payload)
        indexes, start = protobuf_indexes(payload)
        key = (schema_ref, indexes)
        message_class = self._classes.get(key)
        if message_class is None:
            with self._lock:
                message_class = self._classes[key] = self._class(schema_ref, indexes)
        message = message_class()
        try:
            message.ParseFromString(payload[start:])
        except Exception as err:  # noqa: BLE001 - protobuf's DecodeError: bytes that are not this message
            raise InvalidTime(f"the payload is not a {message_class.DESCRIPTOR.full_name} ({err})") from None
        return message

    def _class(self, schema_ref: int, indexes: tuple[int, ...]) -> Any:
        from google.protobuf.message_factory import GetMessageClass

        file = self._files.get(schema_ref)
        if file is None:
            file = self._files[schema_ref] = self._file(schema_ref)
        try:
            descriptor = file.message_types_by_name[list(file.message_types_by_name)[indexes[0]]]
            for index in indexes[1:]:
                descriptor = descriptor.nested_types[index]
        except (IndexError, KeyError):
            raise InvalidTime(f"schema id {schema_ref} has no message at indexes {list(indexes)}") from None
        return GetMessageClass(descriptor)

    def _file(self, schema_ref: int) -> Any:
        from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema
        from confluent_kafka.schema_registry.common.protobuf import _init_pool, _str_to_proto
        from google.protobuf.descriptor_pool import DescriptorPool

        known = registry(self._options.registry)
        schema = known.schema(schema_ref)
        if schema.schema_type != "PROTOBUF":
            raise InvalidTime(f"schema id {schema_ref} is a {schema.schema_type} schema, not Protobuf")
        name = f"kafkasync-schema-{schema_ref}.proto"
        try:
            proto = _str_to_proto(name, schema.schema_str)
        except Exception:  # noqa: BLE001 - .proto text (Confluent's registry): ask for the descriptor
            schema = known.schema(schema_ref, "serialized")
            proto = None
        pool = DescriptorPool()
        _init_pool(pool)
        try:
            _resolve_named_schema(schema, known._client, pool)
            proto = proto or _str_to_proto(name, schema.schema_str)
            pool.Add(proto)
            return pool.FindFileByName(proto.name)
        except Exception as err:  # noqa: BLE001 - a descriptor the pool refuses
            raise KafkaSyncFormatError(
                f"schema id {schema_ref} is not a Protobuf descriptor this reader can build: "
                f"{known.settings.scrub(str(err))[:300]}"
            ) from None


_MESSAGES: dict[Any, _Messages] = {}


def _messages(options: Any) -> _Messages:
    found = _MESSAGES.get(options)
    return found if found is not None else _MESSAGES.setdefault(options, _Messages(options))


def time_reader(options: Any, path: str, time_format: str) -> Callable[[Any], int]:
    steps = path.strip().split(".")
    if not all(steps):
        raise ValueError(f"Option 'eventTime.field' {path!r} must be field names joined by '.', e.g. 'source.ts_ms'.")
    messages = _messages(options)
    convert = converter(time_format)
    payload_of = options.payload

    def read(record: Any) -> int:
        found = messages.message(payload_of(record))
        for depth, step in enumerate(steps):
            field = found.DESCRIPTOR.fields_by_name.get(step)
            if field is None:
                raise InvalidTime(f"{found.DESCRIPTOR.full_name} has no field {'.'.join(steps[:depth + 1])!r}")
            if field.has_presence and not found.HasField(step):
                raise InvalidTime(f"{'.'.join(steps[:depth + 1])} is not set")
            found = getattr(found, step)
        if hasattr(found, "DESCRIPTOR"):
            if found.DESCRIPTOR.full_name != _TIMESTAMP:
                raise InvalidTime(f"{path} is a {found.DESCRIPTOR.full_name}; a time is a number, a string or a "
                                  f"{_TIMESTAMP}")
            return checked(found.seconds * 1000 + found.nanos // 1_000_000)
        return convert(found)
    return read


def batch_time_reader(options: Any, path: str, time_format: str) -> None:
    return None


def _reader_descriptor(options: Any) -> Any:
    """The reader schema's message: the one ``<part>.record.name`` names (the message's full name,
    what confluent-kafka's ``ProtobufSerializer`` gives the record subject name strategies:
    ``message.DESCRIPTOR.full_name``, ``_sync/protobuf.py``), else the file's first. A file may
    define several messages, the one a subject is named after not always first (Spark's
    ``from_protobuf`` likewise takes the message's name beside the descriptor)."""
    reader = options.reader_schema()
    assert reader is not None, "value.decode pins a reader schema at start"
    file = _messages(options)._file(options.reader_schema_id)
    if options.record_name is None:
        return file.message_types_by_name[list(file.message_types_by_name)[0]]
    try:
        found = file.pool.FindMessageTypeByName(options.record_name)
    except KeyError:
        found = None
    if found is None or found.file.name != file.name:
        names = ", ".join(m.full_name for m in file.message_types_by_name.values())
        raise ValueError(f"Option '{options.part}.record.name' {options.record_name!r}: the reader schema (id "
                         f"{options.reader_schema_id}, subject {options.subject!r}) defines no such message "
                         f"(its messages: {names})")
    return found


def spark_type(options: Any) -> Any:
    return _struct(_reader_descriptor(options), set())


def _struct(descriptor: Any, busy: set) -> Any:
    import pyspark.sql.types as T

    if descriptor.full_name in busy:
        raise ValueError(f"{descriptor.full_name} is recursive; Spark's from_protobuf refuses it too by default")
    busy = busy | {descriptor.full_name}
    return T.StructType([T.StructField(field.name, _field_type(field, busy), True) for field in descriptor.fields])


def _field_type(field: Any, busy: set) -> Any:
    import pyspark.sql.types as T

    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return T.MapType(_single_type(key, busy), _single_type(value, busy), True)
    single = _single_type(field, busy)
    return T.ArrayType(single, True) if _repeated(field) else single


def _single_type(field: Any, busy: set) -> Any:
    import pyspark.sql.types as T
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_MESSAGE:
        if field.message_type.full_name == _TIMESTAMP:
            return T.TimestampType()
        return _struct(field.message_type, busy)
    simple = {F.CPPTYPE_INT32: T.IntegerType(), F.CPPTYPE_UINT32: T.IntegerType(), F.CPPTYPE_INT64: T.LongType(),
              F.CPPTYPE_UINT64: T.LongType(), F.CPPTYPE_FLOAT: T.FloatType(), F.CPPTYPE_DOUBLE: T.DoubleType(),
              F.CPPTYPE_BOOL: T.BooleanType(), F.CPPTYPE_ENUM: T.StringType()}
    if field.type == F.TYPE_BYTES:
        return T.BinaryType()
    return simple.get(field.cpp_type, T.StringType())


def _python(message: Any, reader: Any) -> dict:
    """A message as pyarrow takes it for the reader's struct: the fields it has set (others null),
    named as the reader names them."""

    row: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.name not in reader.fields_by_name:
            continue
        reader_field = reader.fields_by_name[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            inner = reader_field.message_type.fields_by_name["value"]
            row[field.name] = {k: _single(v, field.message_type.fields_by_name["value"], inner)
                               for k, v in value.items()}
        elif _repeated(field):
            row[field.name] = [_single(v, field, reader_field) for v in value]
        else:
            row[field.name] = _single(value, field, reader_field)
    return row


def _repeated(field: Any) -> bool:
    """``is_repeated`` (protobuf 5.28+; ``label`` is gone in 7.x), else the label."""
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    from google.protobuf.descriptor import FieldDescriptor as F

    return bool(field.label == F.LABEL_REPEATED)


def _single(value: Any, field: Any, reader_field: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_MESSAGE:
        if field.message_type.full_name == _TIMESTAMP:
            return value.ToDatetime(tzinfo=_utc())
        return _python(value, reader_field.message_type)
    if field.type == F.TYPE_ENUM:
        found = field.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    return value


def _utc() -> Any:
    from datetime import timezone
    return timezone.utc


def column_decoder(options: Any, arrow_type: Any) -> Callable[[list], Any]:
    import pyarrow as pa

    messages = _messages(options)
    reader = _reader_descriptor(options)

    def column(records: list) -> DecodedColumn:
        values: list[Optional[dict]] = []
        undecodable = []
        for row, record in enumerate(records):
            payload = options.payload(record)
            try:
                values.append(None if payload is None else _python(messages.message(payload), reader))
            except InvalidTime as why:  # not framed, an unknown id, bad message indexes
                values.append(None)
                undecodable.append(invalid_row(row, payload, why))
        return DecodedColumn(pa.array(values, type=arrow_type), tuple(undecodable))
    return column
