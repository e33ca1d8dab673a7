"""``protobuf-confluent``: Protobuf messages framed by Confluent's ``ProtobufSerializer``.

The writer schema is fetched by id as the serialized ``FileDescriptorProto``: Confluent's
registry answers ``.proto`` text unless asked with ``format=serialized`` (as confluent-kafka's
``ProtobufDeserializer`` asks), while Apicurio keeps the descriptor as the client sent it and
answers ``format=serialized`` with an error (HTTP 500, "Syntax error in ....proto"; measured on
Apicurio 3.3.3), so the schema is asked for as stored first and as ``serialized`` only when it
is text, and so is each file it imports (its references). The descriptor is built into a pool
with the well-known types (confluent-kafka's ``_init_pool``) and those files; the writer's
message is the one the record's message indexes name in it (formats/framing.py).

**Read by tag, as ``from_protobuf`` reads.** Spark's ``from_protobuf`` parses the bytes with the
descriptor it is given, so fields are matched by number: a field renamed keeps its value, a
field the reader does not know is skipped, one it has that the writer lacks is absent. kafkasync
does the same with the pinned reader schema: a record is parsed with the reader's message
(the C ``upb`` parser). The reader's message is the one ``<part>.record.name`` names; a file of
one top-level message needs no name, a file of several does (``from_protobuf`` takes a message
name too), and a query that does not name it fails at start naming the option. A record whose
writer message (by its indexes in the writer's file) is another message than the reader's is
never parsed as the reader's: its decoded value is undecodable (``incompatible``). As
``from_protobuf`` does (``ProtobufDataToCatalyst.nullSafeEval``), a record whose top-level
unknown fields hold a number the reader knows (the writer changed that field's type) is
incompatible too.

**The time** (``eventTime.field``): the path in the reader's names, read from the record
parsed as above; a record of another message than the reader's (the record subject name
strategies let a topic hold several) is read with its writer's own message and names, as is
every record when no reader schema is pinned. ``google.protobuf.Timestamp`` (any message
``from_protobuf`` reads as a timestamp) is a time as it is; other numbers and strings follow
``eventTime.format``. A field that is not set is no time: a message or a scalar with presence
(``optional``, proto2, a oneof member) not set, and a proto3 scalar without presence that is 0
(or empty): Protobuf does not write such a field, so 0 is what a writer that never set it
sends, and 1970 would fall behind every watermark.

Decoded columns are ``from_protobuf``'s type and values (formats/protobuf_columns.py).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any, Callable, NamedTuple, Optional

from kafkasync_source.event_time.formats import InvalidTime, checked, converter
from kafkasync_source.formats.decoded import (
    INCOMPATIBLE,
    MALFORMED,
    NOT_FRAMED,
    UNKNOWN_SCHEMA,
    DecodedColumn,
    TypeBudget,
    Undecodable,
)
from kafkasync_source.formats.framing import NotFramed, protobuf_indexes, schema_id, schema_id_or_none
from kafkasync_source.formats.protobuf_columns import (
    Columns,
    ConversionError,
    as_dynamic_message,
    seconds_and_nanos,
    time_kind,
)
from kafkasync_source.formats.registry import KafkaSyncFormatError, UnknownSchema, registry


class Unreadable(InvalidTime):
    """A record this reader cannot read, and why: an invalid time under ``onInvalid``, an
    undecodable row of ``kind`` (formats/decoded.py) in a decoded column."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def _kind(err: InvalidTime) -> str:
    if isinstance(err, Unreadable):
        return err.kind
    if isinstance(err, NotFramed):
        return NOT_FRAMED
    if isinstance(err, UnknownSchema):
        return UNKNOWN_SCHEMA
    return MALFORMED


class _File(NamedTuple):
    proto: Any
    """The ``FileDescriptorProto``: its messages in declaration order, as message indexes count them."""
    descriptor: Any
    """The built ``FileDescriptor`` (its pool holds the references and well-known types)."""


class _Reader(NamedTuple):
    descriptor: Any
    message_class: Any
    """What records are parsed with: the message with its maps as lists of entries
    (protobuf_columns.as_dynamic_message)."""


class Parsed(NamedTuple):
    message: Any
    schema_id: int
    as_reader: bool
    """Parsed with the reader's message (else with the writer's own)."""


class _Messages:
    """Per process and format options: writer files by schema id, writer messages by (schema id,
    message indexes), and the reader's message, each built once (a failure too)."""

    def __init__(self, options: Any) -> None:
        self._options = options
        self._files: dict[int, Any] = {}
        """Schema id -> its ``_File``, or the KafkaSyncFormatError/Unreadable it gave."""
        self._writers: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._reader: Optional[_Reader] = None
        self._columns: Optional[Columns] = None
        self._lock = threading.Lock()

    def reader(self) -> Optional[_Reader]:
        """The pinned reader schema's message (None: no reader schema, each record as its writer's)."""
        if self._options.reader_schema_id is None:
            return None
        if self._reader is None:
            with self._lock:
                if self._reader is None:
                    from google.protobuf.message_factory import GetMessageClass

                    descriptor = self._reader_descriptor()
                    self._reader = _Reader(descriptor, GetMessageClass(as_dynamic_message(descriptor)))
        return self._reader

    def columns(self) -> Columns:
        """The reader message's Spark type and row builder (``value.decode`` pins a reader schema)."""
        if self._columns is None:
            reader = self.reader()
            assert reader is not None, "value.decode pins a reader schema at start"
            options = self._options
            self._columns = Columns(reader.descriptor, TypeBudget(
                f"Option '{options.part}.decode': the reader schema (id {options.reader_schema_id}, subject "
                f"{options.subject!r})'s message {reader.descriptor.full_name}"))
        return self._columns

    def _reader_descriptor(self) -> Any:
        """The message ``<part>.record.name`` names in the reader schema's file (the message's full
        name, what confluent-kafka's ``ProtobufSerializer`` gives the record subject name
        strategies: ``message.DESCRIPTOR.full_name``, ``_sync/protobuf.py``), or the file's only
        top-level message; ValueError naming the option otherwise."""
        options = self._options
        file = self._file(options.reader_schema_id)
        option = f"{options.part}.record.name"
        where = f"the reader schema (id {options.reader_schema_id}, subject {options.subject!r})"
        top = [message.name for message in file.proto.message_type]
        if options.record_name is None:
            if len(top) != 1:
                raise ValueError(
                    f"Option '{option}' is needed: {where} defines {len(top)} top-level messages "
                    f"({', '.join(top) or 'none'}), so name the one the records are (its full name, "
                    "package.Message), as Spark's from_protobuf takes a message name.")
            return file.descriptor.message_types_by_name[top[0]]
        try:
            found = file.descriptor.pool.FindMessageTypeByName(options.record_name)
        except KeyError:
            found = None
        if found is None or found.file.name != file.descriptor.name:
            raise ValueError(f"Option '{option}' {options.record_name!r}: {where} defines no such message (its "
                             f"top-level messages: {', '.join(top)})")
        return found

    def parse(self, payload: Any, *, reader_only: bool) -> Parsed:
        """The record's message: parsed with the reader's message where the writer's is the same
        message, else (``reader_only`` false) with the writer's. Unreadable saying why not."""
        schema_ref = schema_id(payload)
        indexes, start = protobuf_indexes(payload)
        writer = self._writer(schema_ref, indexes)
        reader = self.reader()
        if reader is not None and writer.full_name == reader.descriptor.full_name:
            message_class, as_reader = reader.message_class, True
        elif reader is not None and reader_only:
            raise Unreadable(INCOMPATIBLE, f"the writer message is {writer.full_name} (schema id {schema_ref}, "
                                           f"message indexes {list(indexes)}), not the reader's "
                                           f"{reader.descriptor.full_name}")
        else:
            from google.protobuf.message_factory import GetMessageClass

            message_class, as_reader = GetMessageClass(writer), False
        message = message_class()
        try:
            message.ParseFromString(payload[start:])
        except Exception as err:  # noqa: BLE001 - protobuf's DecodeError (and its RecursionError)
            raise Unreadable(MALFORMED, f"the bytes are not a {message_class.DESCRIPTOR.full_name} "
                                        f"(schema id {schema_ref}): {str(err)[:200]}") from None
        if not message.IsInitialized():  # protobuf-java's parseFrom refuses it too
            missing = ", ".join(message.FindInitializationErrors()[:5])
            raise Unreadable(MALFORMED, f"required field(s) {missing} missing (schema id {schema_ref})")
        _check_unknown_fields(message, schema_ref)
        return Parsed(message, schema_ref, as_reader)

    def _writer(self, schema_ref: int, indexes: tuple[int, ...]) -> Any:
        key = (schema_ref, indexes)
        found = self._writers.get(key)
        if found is None:
            with self._lock:
                found = self._writers.get(key)
                if found is None:
                    found = self._writers[key] = self._message_at(schema_ref, indexes)
        if isinstance(found, Exception):
            raise found
        return found

    def _message_at(self, schema_ref: int, indexes: tuple[int, ...]) -> Any:
        """The descriptor the indexes name (Confluent: the first into the file's top-level
        messages, each next into the nested ones, in declaration order), or the Unreadable."""
        try:
            file = self._file(schema_ref)
        except Unreadable as err:
            return err
        proto, names = file.proto.message_type, []
        for index in indexes:
            if index >= len(proto):
                return Unreadable(MALFORMED, f"schema id {schema_ref} has no message at indexes {list(indexes)}")
            names.append(proto[index].name)
            proto = proto[index].nested_type
        package = file.proto.package
        return file.descriptor.pool.FindMessageTypeByName(".".join([package, *names] if package else names))

    def _file(self, schema_ref: int) -> _File:
        found = self._files.get(schema_ref)
        if found is None:
            found = self._files.setdefault(schema_ref, self._build_file(schema_ref))
        if isinstance(found, Exception):
            raise found
        return found

    def _build_file(self, schema_ref: int) -> Any:
        """The writer's ``_File``, or the error it gives (kept: a schema that cannot be built is
        not built again for every record). UnknownSchema and a registry that cannot be asked,
        for the schema or for a file it imports, are raised, not kept: they say nothing about
        the schema, and the next record asks again (registry.py keeps what it knows)."""
        from confluent_kafka.schema_registry.common.protobuf import _init_pool
        from google.protobuf.descriptor_pool import DescriptorPool

        known = registry(self._options.registry)
        schema = known.schema(schema_ref)
        if schema.schema_type != "PROTOBUF":
            return Unreadable(INCOMPATIBLE, f"schema id {schema_ref} is a {schema.schema_type} schema, not Protobuf")
        pool = DescriptorPool()
        _init_pool(pool)
        try:
            for imported in self._imports(schema, schema_ref, set()):
                pool.Add(imported)
            proto = _descriptor(f"kafkasync-schema-{schema_ref}.proto", schema,
                                lambda: known.schema(schema_ref, "serialized"))
            pool.Add(proto)
            return _File(proto, pool.FindFileByName(proto.name))
        except (KafkaSyncFormatError, UnknownSchema):
            raise
        except Exception as err:  # noqa: BLE001 - a descriptor that does not parse, or that the pool refuses
            return KafkaSyncFormatError(
                f"schema id {schema_ref} is not a Protobuf descriptor this reader can build: "
                f"{known.settings.scrub(str(err))[:300]}"
            )

    def _imports(self, schema: Any, schema_ref: int, seen: set[str]) -> list[Any]:
        """The files ``schema`` imports from other subjects (its references, each a file's import
        name, a subject and a version), theirs first, as confluent-kafka's
        ``ProtobufDeserializer`` resolves them (``_sync/protobuf.py`` ``_resolve_named_schema``:
        each version fetched, the well-known types skipped, each name once) but for how a version
        is asked for: as stored first, as ``serialized`` only where it is ``.proto`` text.
        confluent-kafka always asks ``serialized``, which Apicurio 3.3.3 answers with HTTP 500
        for the descriptor its serializer registered, so no referencing schema could be read."""
        from confluent_kafka.schema_registry.common.protobuf import _is_builtin

        files: list[Any] = []
        for reference in schema.references or ():
            if _is_builtin(reference.name) or reference.name in seen:
                continue
            seen.add(reference.name)
            imported = self._version(reference, schema_ref, None)
            files += self._imports(imported, schema_ref, seen)
            serialized = partial(self._version, reference, schema_ref, "serialized")
            files.append(_descriptor(reference.name, imported, serialized))
        return files

    def _version(self, reference: Any, schema_ref: int, fmt: Optional[str]) -> Any:
        """The referenced subject version's ``Schema``; KafkaSyncFormatError naming it if the
        registry cannot give it (soft-deleted versions included, as confluent-kafka asks)."""
        known = registry(self._options.registry)
        try:
            return known._client.get_version(reference.subject, reference.version, True, fmt).schema
        except Exception as err:  # noqa: BLE001 - not found, unreachable: the query says which
            raise KafkaSyncFormatError(
                f"kafkasync: schema id {schema_ref} imports {reference.name!r}, subject {reference.subject!r} "
                f"version {reference.version}, which the registry at {known.settings.display_url} cannot give: "
                f"{known.settings.scrub(f'{type(err).__name__}: {err}')[:300]}"
            ) from None


def _descriptor(name: str, schema: Any, serialized: Callable[[], Any]) -> Any:
    """A registry schema's ``FileDescriptorProto``, named ``name``: its text as stored, the
    base64 descriptor (Apicurio keeps what the serializer registered), or else the schema
    ``serialized()`` gives (Confluent's registry keeps ``.proto`` text and answers
    ``format=serialized`` with the descriptor)."""
    from confluent_kafka.schema_registry.common.protobuf import _str_to_proto

    try:
        return _str_to_proto(name, schema.schema_str)
    except Exception:  # noqa: BLE001 - .proto text, not a descriptor
        return _str_to_proto(name, serialized().schema_str)


def _check_unknown_fields(message: Any, schema_ref: int) -> None:
    """``from_protobuf`` fails a record whose top-level unknown fields hold a number its message
    knows: the writer wrote that field with another wire type (another type)."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    unknown = UnknownFieldSet(message)
    if not len(unknown):
        return
    fields = message.DESCRIPTOR.fields_by_number
    for item in unknown:
        field = fields.get(item.field_number)
        if field is not None:
            raise Unreadable(INCOMPATIBLE, f"field {field.name!r} (number {field.number}) was written with "
                                           f"another type than the reader's (schema id {schema_ref})")


_MESSAGES: dict[Any, _Messages] = {}


def _messages(options: Any) -> _Messages:
    found = _MESSAGES.get(options)
    return found if found is not None else _MESSAGES.setdefault(options, _Messages(options))


def _steps(path: str) -> list[str]:
    steps = path.strip().split(".")
    if not all(steps):
        raise ValueError(f"Option 'eventTime.field' {path!r} must be field names joined by '.', e.g. 'source.ts_ms'.")
    return steps


def _check_path(descriptor: Any, steps: list[str], path: str) -> None:
    """ValueError naming the option where the reader's message has no such path."""
    for depth, step in enumerate(steps):
        field = descriptor.fields_by_name.get(step)
        where = ".".join(steps[:depth + 1])
        if field is None:
            raise ValueError(f"Option 'eventTime.field' {path!r}: {descriptor.full_name} has no field {step!r} "
                             f"(its fields: {', '.join(f.name for f in descriptor.fields)})")
        if field.is_repeated:
            raise ValueError(f"Option 'eventTime.field' {path!r}: {where} is a repeated field, not one time")
        if depth < len(steps) - 1:
            if field.message_type is None:
                raise ValueError(f"Option 'eventTime.field' {path!r}: {where} is not a message")
            descriptor = field.message_type


def time_reader(options: Any, path: str, time_format: str) -> Callable[[Any], int]:
    steps = _steps(path)
    messages = _messages(options)
    reader = messages.reader()
    if reader is not None:
        _check_path(reader.descriptor, steps, path)
    convert = converter(time_format)
    payload_of = options.payload

    def read(record: Any) -> int:
        found = messages.parse(payload_of(record), reader_only=False).message
        for depth, step in enumerate(steps):
            where = ".".join(steps[:depth + 1])
            field = found.DESCRIPTOR.fields_by_name.get(step)
            if field is None or field.is_repeated:
                raise InvalidTime(f"{found.DESCRIPTOR.full_name} has no single field {where!r}")
            if field.has_presence and not found.HasField(step):
                raise InvalidTime(f"{where} is not set")
            found = getattr(found, step)
            if not field.has_presence and found == field.default_value:
                raise InvalidTime(f"{where} is not set ({found!r}: a proto3 field without presence reads so when "
                                  "its writer did not set it)")
        if hasattr(found, "DESCRIPTOR"):
            if time_kind(found.DESCRIPTOR) != "timestamp":
                raise InvalidTime(f"{path} is a {found.DESCRIPTOR.full_name}; a time is a number, a string or a "
                                  "google.protobuf.Timestamp")
            try:
                seconds, nanos = seconds_and_nanos(found, path)
            except ConversionError as why:
                raise InvalidTime(str(why)) from None
            return checked(seconds * 1000 + nanos // 1_000_000)
        if isinstance(found, (bool, bytes)):
            raise InvalidTime(f"{path} is a {type(found).__name__}, not a time")
        if field.enum_type is not None:  # its number is no time (from_protobuf reads its name)
            raise InvalidTime(f"{path} is an enum ({field.enum_type.full_name}), not a time")
        return convert(found)
    return read


def batch_time_reader(options: Any, path: str, time_format: str) -> None:
    return None


def spark_type(options: Any) -> Any:
    return _messages(options).columns().spark_type


def column_decoder(options: Any, arrow_type: Any) -> Callable[[list], DecodedColumn]:
    """``records -> DecodedColumn``: each record's row as ``from_protobuf`` gives it, null at a
    tombstone, and null at each row named undecodable (not framed, an unknown schema id, bytes
    that are not the message, another message than the reader's, a field written with another
    type). KafkaSyncFormatError (the registry cannot be asked, a descriptor cannot be built)
    fails the read."""
    import pyarrow as pa

    messages = _messages(options)
    columns = messages.columns()
    payload_of = options.payload

    def column(records: list) -> DecodedColumn:
        rows: list[Optional[dict]] = []
        undecodable: list[Undecodable] = []
        for index, record in enumerate(records):
            payload = payload_of(record)
            row = None
            if payload is not None:
                schema_ref = None
                try:
                    parsed = messages.parse(payload, reader_only=True)
                    schema_ref = parsed.schema_id
                    row = columns.row(parsed.message)
                except InvalidTime as why:
                    undecodable.append(Undecodable(index, _kind(why), str(why), schema_id_or_none(payload)))
                except ConversionError as why:
                    undecodable.append(Undecodable(index, MALFORMED, str(why), schema_ref))
            rows.append(row)
        return DecodedColumn(pa.array(rows, type=arrow_type), tuple(undecodable))
    return column
