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

from kafkasync_source.formats.decoded import DecodedColumn
from kafkasync_source.formats.registry import EXTRA, KafkaSyncFormatError, RegistrySettings, UnknownSchema, registry

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


FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"
DECODE_MODES = (FAILFAST, PERMISSIVE)
"""``<part>.decode.mode``, as ``from_avro``/``from_protobuf``'s ``mode`` option (Spark's
``ParseMode``): ``FAILFAST``, their default, fails the query at a record that cannot be decoded;
``PERMISSIVE`` makes it null, with its reason in ``<part>DecodeError`` (formats/decoded.py)."""
LATEST = "latest"


@dataclass(frozen=True)
class ReaderPin:
    """The reader schema a query reads as: a version of a subject, and the id that names it for
    good (a subject's versions can be deleted and its latest moves; an id means one schema)."""

    subject: str
    version: int
    schema_id: int

    def describe(self) -> str:
        return f"subject {self.subject!r} version {self.version} (schema id {self.schema_id})"

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "version": self.version, "id": self.schema_id}

    @classmethod
    def from_json(cls, data: Any) -> "ReaderPin":
        """Raises ValueError for anything but :meth:`to_json`'s form."""
        if not isinstance(data, dict) or not isinstance(data.get("subject"), str) or not all(
                isinstance(data.get(key), int) and not isinstance(data.get(key), bool) for key in ("version", "id")):
            raise ValueError(f"not a reader schema: {str(data)[:200]!r}")
        return cls(data["subject"], data["version"], data["id"])


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
    """The subject whose version (``subject_version``, the latest by default) is the reader
    schema; None: each record is read with its writer schema as it is."""
    reader_schema_id: Optional[int] = None
    """That version's id, pinned once per query (at ``load()``, carried to every later process
    of the query: spark/schema.py), so that the driver and every executor read with the same
    schema whatever is registered meanwhile."""
    decode: bool = False
    """``value.decode``: add the decoded value as a struct column."""
    record_name: Optional[str] = None
    """``value.record.name``: the record's full name, as the record subject name strategies take
    it; for Protobuf also which message of the reader schema's file is read (a ``.proto`` file
    may define several; without it the first)."""
    subject_version: Optional[int] = None
    """``<part>.subject.version``: the subject's version to read as; None: its latest when the
    query starts. Naming the version a checkpoint recorded keeps a restarted query's reader."""
    reader_version: Optional[int] = None
    """The pinned version's number (shown with the id; the id is what is read with)."""
    decode_mode: str = FAILFAST
    """``<part>.decode.mode``: one of :data:`DECODE_MODES`."""

    @property
    def pin(self) -> Optional[ReaderPin]:
        """The pinned reader schema, None without one."""
        if self.subject is None or self.reader_schema_id is None or self.reader_version is None:
            return None
        return ReaderPin(self.subject, self.reader_version, self.reader_schema_id)

    @property
    def version_option(self) -> str:
        return f"{self.part}.subject.version"

    @property
    def error_column(self) -> bool:
        """Whether the decoded column has a ``<part>DecodeError`` beside it (``PERMISSIVE``)."""
        return self.decode and self.decode_mode == PERMISSIVE

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

    def column_decoder(self, arrow_type: Any) -> Callable[[list], DecodedColumn]:
        """``records -> DecodedColumn``: their values as ``arrow_type``, and the rows that could
        not be decoded, null there (formats/decoded.py; executor/decode_policy.py applies the mode)."""
        return self._codec().column_decoder(self, arrow_type)

    def describe_reader(self) -> str:
        """``value.format=avro-confluent read as subject 'orders-value' version 2 (schema id 7)``,
        for messages and the live report (never the registry's URL: it may hold credentials)."""
        pin = self.pin
        return f"{self.describe()} " + (f"read as {pin.describe()}" if pin else "read with each record's writer schema")

    def reader_schema(self) -> Optional[Any]:
        """The pinned reader schema (``confluent_kafka.schema_registry.Schema``), or None. The
        process's registry learns that records are read as the subject (a writer id of no version
        of it is warned about once, formats/registry.py). KafkaSyncFormatError naming the pin where
        the registry no longer has it: a process that starts after the reader was deleted for good
        cannot read as it (and a record's unknown id, an invalid time, is another matter)."""
        if self.reader_schema_id is None:
            return None
        known = registry(self.registry)
        if self.subject is not None:
            known.reading(self.subject)
        try:
            return known.schema(self.reader_schema_id)
        except UnknownSchema:
            pin = self.pin
            raise KafkaSyncFormatError(
                f"kafkasync: the reader schema of {self.describe()}, "
                + (pin.describe() if pin is not None else f"schema id {self.reader_schema_id}")
                + f", pinned when the query was loaded, is no longer in the Schema Registry at "
                f"{self.registry.display_url}: load the query again to read as the subject's version now, or "
                f"name one with '{self.version_option}'.") from None

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


def pin_reader_schema(options: FormatOptions, *, required: bool, carried: Optional[ReaderPin] = None) -> FormatOptions:
    """``options`` with its reader schema pinned: ``carried``, the pin an earlier process of the
    query made (spark/schema.py), as it is; else the subject's ``subject_version`` (its latest
    by default), asked of the registry now. The registry must then answer (a query does not start
    against a registry it cannot reach); a subject without versions is an error when ``required``
    (a decoded column needs its type) or a version is named, else each record is read with its
    writer schema."""
    if carried is not None:
        return _carried(options, carried)
    client = registry(options.registry)
    client.check()
    if options.subject is None:
        if required:
            raise ValueError(
                f"Option '{options.part}.decode' needs one reader schema: subscribe to one topic, or name "
                f"the subject with '{options.part}.subject'."
            )
        if options.subject_version is not None:
            raise ValueError(f"Option '{options.version_option}' needs a subject: subscribe to one topic, "
                             f"or name the subject with '{options.part}.subject'.")
        return options
    found = client.version(options.subject, "latest" if options.subject_version is None else options.subject_version)
    if found is None:
        if options.subject_version is not None:
            raise ValueError(
                f"Option '{options.version_option}={options.subject_version}': the Schema Registry at "
                f"{options.registry.display_url} has no version {options.subject_version} of subject "
                f"{options.subject!r} (deleted, or never registered); '{LATEST}' reads as the latest."
            )
        if required:
            raise ValueError(
                f"the Schema Registry at {options.registry.display_url} has no version of subject "
                f"{options.subject!r}, whose latest version is the reader schema of '{options.part}.decode'."
            )
        return replace(options, subject=None)
    expected = _REGISTRY_TYPE[options.format]
    schema_type = getattr(found.schema, "schema_type", None) or "AVRO"
    if schema_type != expected:
        raise ValueError(
            f"Option '{options.option}={options.format}': subject {options.subject!r} holds a {schema_type} "
            f"schema, not {expected}."
        )
    return replace(options, reader_schema_id=found.schema_id, reader_version=found.version)


def _carried(options: FormatOptions, carried: ReaderPin) -> FormatOptions:
    """``options`` pinned to the reader an earlier process of the query pinned: the same options
    at ``load()``, so the same subject and version; anything else is a schema that was not
    made for these options (one copied from another query with ``.schema(...)``)."""
    if options.subject != carried.subject or options.subject_version not in (None, carried.version):
        wanted = f"subject {options.subject!r}" + (
            "" if options.subject_version is None else f" version {options.subject_version}")
        raise ValueError(
            f"the schema given to this {options.option}={options.format} read was made for the reader schema "
            f"{carried.describe()}, and the options name {wanted}: give no schema (the source pins the reader "
            "when the query is loaded), or one made with these options."
        )
    return replace(options, reader_schema_id=carried.schema_id, reader_version=carried.version)
