"""``value.format`` / ``key.format`` and the options that go with them, as the decoders take them
(parsed and validated with the other options in config/options.py).

Names follow the conventions users know: Flink's format names (``avro-confluent``,
``protobuf-confluent``; ``json-schema-confluent`` by analogy), confluent-kafka's
``SchemaRegistryClient`` settings under ``schema.registry.*`` (as Kafka Connect's converters
take ``value.converter.schema.registry.*``), and the subject name strategies of Confluent's
serializers: ``topic-name`` (``<topic>-value``, the default), ``record-name`` (the record's full
name), ``topic-record-name`` (``<topic>-<full name>``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from kafkasync_source.formats.registry import EXTRA, RegistrySettings, registry

AVRO, PROTOBUF, JSON_SCHEMA = "avro-confluent", "protobuf-confluent", "json-schema-confluent"
FORMAT_NAMES = (AVRO, PROTOBUF, JSON_SCHEMA)
TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME = "topic-name", "record-name", "topic-record-name"
SUBJECT_NAME_STRATEGIES = (TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME)
_MODULES = {AVRO: ("fastavro",), PROTOBUF: ("google.protobuf",), JSON_SCHEMA: ()}
"""What each format needs beside confluent-kafka's registry client (``httpx``, ``attrs``,
``cachetools``, ``authlib``): all in the ``registry`` extra."""
_MODULE = {AVRO: "avro", PROTOBUF: "protobuf", JSON_SCHEMA: "json_schema"}
_REGISTRY_TYPE = {AVRO: "AVRO", PROTOBUF: "PROTOBUF", JSON_SCHEMA: "JSON"}
"""``schemaType`` as the registry names it (absent for Avro)."""


def require_extra(format_name: str, option: str) -> None:
    """Raise ValueError naming the extra when the decoders are not installed."""
    for module in ("confluent_kafka.schema_registry", *_MODULES[format_name]):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(
                f"Option '{option}={format_name}' needs the optional decoders: pip install '{EXTRA}' "
                f"on the driver and every executor ({err.name or module} is missing)."
            ) from None


@dataclass(frozen=True)
class FormatOptions:
    """How the key or the value is encoded, and the schema it is read as. Hashable and
    picklable: it travels to the executors inside the options, and keys the per-process
    caches of compiled readers."""

    format: str
    registry: RegistrySettings
    part: str = "value"
    """``value`` or ``key``: which bytes of the record."""
    subject: Optional[str] = None
    """The subject whose latest version (at start) is the reader schema; None: each record is
    read with its writer schema as it is."""
    reader_schema_id: Optional[int] = None
    """That latest version's id, pinned when the query starts, so that the driver and every
    executor read with the same schema whatever is registered meanwhile."""
    decode: bool = False
    """``value.decode``: add the decoded value as a struct column."""
    record_name: Optional[str] = None
    """``value.record.name``: the record's full name, as the record subject name strategies take
    it; for Protobuf also which message of the reader schema's file is read (a ``.proto`` file
    may define several; without it the first)."""

    @property
    def option(self) -> str:
        return f"{self.part}.format"

    def describe(self) -> str:
        """``value.format=avro-confluent`` (never the registry's URL: it may hold credentials)."""
        return f"{self.option}={self.format}"

    def payload(self, record: Any) -> Any:
        """The record's bytes this format reads."""
        return record.value() if self.part == "value" else record.key()

    def time_reader(self, path: str, time_format: str) -> Callable[[Any], int]:
        """``record -> epoch ms`` for ``eventTime.field``: raises InvalidTime for a record that has
        no valid time there, KafkaSyncFormatError for one that must fail the query."""
        return self._codec().time_reader(self, path, time_format)

    def batch_time_reader(self, path: str, time_format: str) -> Optional[Callable[[list], Optional[list[int]]]]:
        """The times of a batch from its payloads when all are valid, else None (see the seam)."""
        return self._codec().batch_time_reader(self, path, time_format)

    def spark_type(self) -> Any:
        """The Spark type of the decoded value (``from_avro`` / ``from_protobuf``'s for the reader schema)."""
        return self._codec().spark_type(self)

    def column_decoder(self, arrow_type: Any) -> Callable[[list], Any]:
        """``records -> pyarrow array`` of ``arrow_type`` (null where a record cannot be decoded)."""
        return self._codec().column_decoder(self, arrow_type)

    def reader_schema(self) -> Optional[Any]:
        """The pinned reader schema (``confluent_kafka.schema_registry.Schema``), or None."""
        if self.reader_schema_id is None:
            return None
        return registry(self.registry).schema(self.reader_schema_id)

    def _codec(self) -> Any:
        """The format's module, imported on first use (its decoders are the optional extra)."""
        return importlib.import_module(f"kafkasync_source.formats.{_MODULE[self.format]}")


def subject_of(strategy: str, part: str, topics: tuple[str, ...], record_name: Optional[str]) -> Optional[str]:
    """The reader schema's subject by Confluent's strategies, or None when it cannot be named
    (topic-name over several or unknown topics). ValueError where a needed record name is missing."""
    if strategy in (RECORD_NAME, TOPIC_RECORD_NAME) and not record_name:
        raise ValueError(
            f"Option '{part}.subject.name.strategy={strategy}' needs '{part}.record.name', the record's "
            "full name (namespace.Name), as Confluent's serializers name the subject after it."
        )
    if strategy == RECORD_NAME:
        return record_name
    if len(topics) != 1:
        return None
    return f"{topics[0]}-{part}" if strategy == TOPIC_NAME else f"{topics[0]}-{record_name}"


def pin_reader_schema(options: FormatOptions, *, required: bool) -> FormatOptions:
    """``options`` with the subject's latest version pinned as the reader schema. The registry
    must answer now (a query does not start against a registry it cannot reach); a subject
    without versions is an error when ``required`` (a decoded column needs its type), else each
    record is read with its writer schema."""
    client = registry(options.registry)
    client.check()
    if options.subject is None:
        if required:
            raise ValueError(
                f"Option '{options.part}.decode' needs one reader schema: subscribe to one topic, or name "
                f"the subject with '{options.part}.subject'."
            )
        return options
    latest = client.latest(options.subject)
    if latest is None:
        if required:
            raise ValueError(
                f"the Schema Registry at {options.registry.display_url} has no version of subject "
                f"{options.subject!r}, whose latest version is the reader schema of '{options.part}.decode'."
            )
        return replace(options, subject=None)
    expected = _REGISTRY_TYPE[options.format]
    schema_type = getattr(latest.schema, "schema_type", None) or "AVRO"
    if schema_type != expected:
        raise ValueError(
            f"Option '{options.option}={options.format}': subject {options.subject!r} holds a {schema_type} "
            f"schema, not {expected}."
        )
    return replace(options, reader_schema_id=latest.schema_id)
