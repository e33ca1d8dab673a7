"""A Schema Registry client double for the decoders' unit tests: it answers ``get_schema`` as the
real registry does (Apicurio 3.3.3, which the integration tests run): a Protobuf schema as the
base64 ``FileDescriptorProto`` confluent-kafka's ``ProtobufSerializer`` registers
(``common/protobuf.py`` ``_schema_to_str``), a JSON Schema as its text, and an id it does not
know as HTTP 404 (``SchemaRegistryError``, error code 40403, what confluent-kafka's client
raises). The real registry answers the same in ``integration/`` (tests/test_formats_registry.py).
"""

from __future__ import annotations

import base64
import itertools
from typing import Any, Optional

from confluent_kafka import Message
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kafkasync_source.formats.options import FormatOptions
from kafkasync_source.formats.registry import RegistrySettings, registry

_DOUBLES = itertools.count()


class RegistryDouble:
    """Schemas by id, registered in order from id 1."""

    def __init__(self) -> None:
        self.schemas: dict[int, Schema] = {}
        self.asked: list[int] = []
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

    def add_protobuf(self, file_descriptor: Any) -> int:
        """A ``.proto`` file as confluent-kafka's ``ProtobufSerializer`` registers it."""
        return self.add(Schema(base64.standard_b64encode(file_descriptor.serialized_pb).decode("ascii"), "PROTOBUF"))

    def get_schema(self, schema_id: int, subject_name: Optional[str] = None, fmt: Optional[str] = None,
                   reference_format: Optional[str] = None) -> Schema:
        self.asked.append(schema_id)
        if schema_id not in self.schemas:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return self.schemas[schema_id]

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
