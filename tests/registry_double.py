"""A Schema Registry client double for the decoders' unit tests: it answers ``get_schema`` as the
real registry does (Apicurio 3.3.3, which the integration tests run): a Protobuf schema as the
base64 ``FileDescriptorProto`` confluent-kafka's ``ProtobufSerializer`` registers
(``common/protobuf.py`` ``_schema_to_str``), a JSON Schema as its text, and an id it does not
know as HTTP 404 (``SchemaRegistryError``, error code 40403, what confluent-kafka's client
raises). A subject's version (``get_version``, the schemas a Protobuf file imports) likewise, and
``format=serialized`` for a stored Protobuf descriptor as Apicurio does: HTTP 500 ("Syntax error
in ....proto", measured on Apicurio 3.3.3). The real registry answers the same in
``integration/`` (tests/test_formats_registry.py).
"""

from __future__ import annotations

import base64
import itertools
from typing import Any, Optional

from confluent_kafka import Message
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaReference
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kafkasync_source.formats.options import FormatOptions
from kafkasync_source.formats.registry import RegistrySettings, registry

_DOUBLES = itertools.count()


class RegistryDouble:
    """Schemas by id, registered in order from id 1."""

    def __init__(self) -> None:
        self.schemas: dict[int, Schema] = {}
        self.versions: dict[tuple[str, int], int] = {}
        """(subject, version) -> schema id."""
        self.asked: list[int] = []
        self.unreachable = 0
        """How many of the next asks fail as a registry that cannot be reached does."""
        self.settings = RegistrySettings(f"http://registry-double-{next(_DOUBLES)}.invalid")
        self.install()

    def install(self) -> None:
        """Makes this double the decoders' process-wide client for its settings. Again before each
        use: ``registry()`` keeps the 16 clients used last, so a double made at import (a module's
        shared one) is dropped once a test session has made more, and its settings would get a
        real client, which asks ``*.invalid`` (and retries) for every schema id."""
        registry(self.settings)._client = self

    def add(self, schema: Schema) -> int:
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = schema
        return schema_id

    def add_protobuf(self, file_descriptor: Any, references: Optional[list[SchemaReference]] = None,
                     subject: Optional[str] = None) -> int:
        """A ``.proto`` file as confluent-kafka's ``ProtobufSerializer`` registers it (under
        ``subject``, version 1, for a file others import: the serializer names that subject after
        the file)."""
        encoded = base64.standard_b64encode(file_descriptor.serialized_pb).decode("ascii")
        schema_id = self.add(Schema(encoded, "PROTOBUF", references or []))
        if subject is not None:
            self.versions[(subject, 1)] = schema_id
        return schema_id

    def get_schema(self, schema_id: int, subject_name: Optional[str] = None, fmt: Optional[str] = None,
                   reference_format: Optional[str] = None) -> Schema:
        self.asked.append(schema_id)
        self._reach()
        if schema_id not in self.schemas:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return self._formatted(self.schemas[schema_id], fmt)

    def get_version(self, subject_name: str, version: int, deleted: bool = False,
                    fmt: Optional[str] = None) -> RegisteredSchema:
        self._reach()
        schema_id = self.versions.get((subject_name, version))
        if schema_id is None:
            raise SchemaRegistryError(404, 40402, "Version not found")
        return RegisteredSchema(subject_name, version, schema_id, None, self._formatted(self.schemas[schema_id], fmt))

    def _reach(self) -> None:
        if self.unreachable:
            self.unreachable -= 1
            raise ConnectionError("the registry double is unreachable")

    @staticmethod
    def _formatted(schema: Schema, fmt: Optional[str]) -> Schema:
        if fmt == "serialized" and schema.schema_type == "PROTOBUF":
            raise SchemaRegistryError(500, 0, "java.lang.IllegalStateException: Syntax error in Money.proto:1:1")
        return schema

    def options(self, fmt: str, reader_id: Optional[int], *, record_name: Optional[str] = None,
                decode: bool = True, part: str = "value") -> FormatOptions:
        """``value.format`` options reading with ``reader_id`` pinned (None: each record as its writer's)."""
        self.install()
        return FormatOptions(fmt, self.settings, part, "topic-value" if reader_id else None, reader_id, decode,
                             record_name)


def framed(schema_id: int, body: bytes, indexes: Optional[bytes] = None) -> bytes:
    """Confluent's framing: magic byte, the 4-byte id, then (Protobuf) the message indexes."""
    return b"\x00" + schema_id.to_bytes(4, "big") + (indexes if indexes is not None else b"") + body


def record(value: Optional[bytes], offset: int = 0) -> Message:
    return Message(topic="t", partition=0, offset=offset, value=value, timestamp=(1, 0))
