"""Schema Registry data as users have it, written with confluent-kafka's own serializers.

Most production topics hold Confluent-framed values (magic byte 0, a 4-byte schema id, the
encoded record) written by ``AvroSerializer``, ``ProtobufSerializer`` or ``JSONSerializer``;
CDC topics hold Debezium's envelope (``before``, ``after``, ``source{ts_ms, ...}``, ``op``,
``ts_ms``), whose event time is ``source.ts_ms``. The writers here produce exactly that, through
a registry (:mod:`~kafkasync_dev.testing.schema_registry` starts one), so that what kafkasync
decodes is what those serializers wrote, not what a test believes they write.

* :class:`FramedWriter` — a cluster (``MockKafkaCluster`` or
  :class:`~kafkasync_dev.testing.broker.KafkaBroker`) whose ``produce`` re-encodes the JSON
  values that :mod:`~kafkasync_dev.testing.backfills` writes (``{"id", "ts", "amount"}``) in
  one registry format. Every backfill shape is then also an Avro/Protobuf/JSON Schema topic,
  with the same records, partitions, Kafka timestamps and event times::

      spans(FramedWriter(broker, registry_url, DEBEZIUM_AVRO), prefix, republished=True)

  re-publishes :func:`~kafkasync_dev.testing.backfills.spans` as Debezium Avro: the Kafka
  timestamp is the copy job's write time, the event time only in ``source.ts_ms``, and the
  partitions' event-time spans are skewed, so ``format("kafka")`` with ``maxOffsetsPerTrigger``
  drops records behind the watermark as it does on the JSON version (docs/event-time.md).
* :func:`evolving_topic` — one topic whose writers move Debezium envelopes v1 → v2 (a field
  added with a default) → v3 (a field renamed through an alias), each step accepted by the
  registry under BACKWARD compatibility, with what each record reads as under the latest
  schema; :func:`incompatible_writer` adds a record no reader of the latest schema can read.

One serializer per schema, not per record (each keeps its registered id per subject: DESIGN.md,
"Schema Registry formats"). Needs the ``registry`` extra (fastavro, protobuf, jsonschema).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Optional

from kafkasync_dev.testing.mock_cluster import Record

DEBEZIUM_AVRO = "debezium-avro"
"""Debezium's envelope in Avro, as its Avro converter writes it (``avro-confluent`` for kafkasync)."""
PROTOBUF = "protobuf"
"""An ``Order`` message with a ``google.protobuf.Timestamp`` and an epoch-ms field."""
JSON_SCHEMA = "json-schema"
"""An ``Order`` object under a JSON Schema (draft-07)."""

FORMATS = (DEBEZIUM_AVRO, PROTOBUF, JSON_SCHEMA)

CONNECTOR = {"version": "2.7.3.Final", "connector": "postgresql", "name": "dbserver1",
             "db": "inventory", "schema": "public", "table": "orders"}
"""The ``source`` block's constant fields (Debezium's PostgreSQL connector's, trimmed)."""


# ------------------------------------------------------------------ Debezium's Avro envelope

VALUE_V1 = ({"name": "id", "type": "string"}, {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"})
"""The table's row, first version."""
VALUE_V2 = (*VALUE_V1, {"name": "currency", "type": "string", "default": "EUR"})
"""A column added with a default: readers of v2 read v1 records with ``currency="EUR"``."""
VALUE_V3 = (VALUE_V2[0], {"name": "buyer", "type": "string", "aliases": ["customer"]}, *VALUE_V2[2:])
"""``customer`` renamed ``buyer``, the old name kept as an alias: readers of v3 read v1 and v2
records' ``customer`` as ``buyer`` (Avro's resolution matches a reader field's aliases)."""
VALUE_VERSIONS = (VALUE_V1, VALUE_V2, VALUE_V3)

SOURCE_SCHEMA = {
    "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
    "fields": [{"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
               {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
               {"name": "db", "type": "string"}, {"name": "schema", "type": "string"},
               {"name": "table", "type": "string"}],
}


def envelope_schema(value_fields: Iterable[dict], table: str = "orders") -> str:
    """Debezium's Avro envelope for a table whose row has ``value_fields``: ``before`` and
    ``after`` optional rows, ``source`` (``ts_ms``: when the change was committed, the event
    time), ``op`` (``c``, ``u``, ``d``, ``r``), ``ts_ms`` (when the connector processed it)."""
    row = {"type": "record", "name": "Value", "fields": list(value_fields)}
    return json.dumps({
        "type": "record", "name": "Envelope", "namespace": f"dbserver1.public.{table}",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": SOURCE_SCHEMA},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    })


def change_event(row: dict, committed_ms: int, processed_ms: int, op: str = "c") -> dict:
    """One Debezium change: ``row`` created (``op="c"``), committed at ``committed_ms``
    (``source.ts_ms``), seen by the connector at ``processed_ms`` (``ts_ms``)."""
    return {"before": None, "after": row, "source": {**CONNECTOR, "ts_ms": committed_ms},
            "op": op, "ts_ms": processed_ms}


def _serialization_context(topic: str, part: str = "value") -> Any:
    """What a serializer is told it writes: the topic's value, or its key (``part="key"``: the
    topic-name strategy's subject is then ``<topic>-key``)."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.KEY if part == "key" else MessageField.VALUE)


SERIALIZER_CONF = {"subject.name.strategy.type": "TOPIC"}
"""The topic-name strategy (``<topic>-value``), named: confluent-kafka 2.16's default is
ASSOCIATED, which first asks the registry's ``associations`` endpoint (Apicurio answers 404, and
the serializer falls back to the topic name). Once, on a machine loaded 7x its cores, one of
those 404s never reached the client and the producer waited for ever; naming the strategy
skips the request, and what is registered and written is the same."""


def _client(registry_url: str) -> Any:
    """A registry client whose requests time out (confluent-kafka's default is no timeout at
    all; a timed-out request is retried, ``max.retries``)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": registry_url, "timeout": 30})


def avro_serializer(registry_url: str, schema: Any, client: Optional[Any] = None, *, part: str = "value",
                    conf: Optional[dict] = None) -> Callable[[dict, str], bytes]:
    """``encode(record, topic) -> bytes``: confluent-kafka's ``AvroSerializer`` for ``schema``
    (text, or a ``Schema`` with references), registering it at first use per topic under
    ``<topic>-<part>`` (the topic-name strategy), or as ``conf``'s ``subject.name.strategy`` says."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    serializer = AvroSerializer(client or _client(registry_url), schema, conf=conf or SERIALIZER_CONF)
    return lambda record, topic: serializer(record, _serialization_context(topic, part))


# ------------------------------------------------------------------ Protobuf and JSON Schema

def order_json_schema(title: str = "Order", *, currency: bool = False, closed: bool = False) -> str:
    """The ``Order`` JSON Schema; ``currency``: with the property ``currency`` added (a second
    version); ``closed``: ``additionalProperties: false``, the content model in which adding an
    optional property is BACKWARD compatible (in an open one it is not: the added property
    narrows what old documents may hold; Apicurio 3.3.3 answers 409 "Object type property
    schemas narrowed at /propertySchemasAdded", as Confluent's rules do)."""
    properties: dict[str, Any] = {"id": {"type": "string"}, "customer": {"type": "string"},
                                  "amount": {"type": "number"}, "ts_ms": {"type": "integer"},
                                  "updated_at": {"type": "string", "format": "date-time"}}
    if currency:
        properties["currency"] = {"type": "string"}
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": title, "type": "object",
                       **({"additionalProperties": False} if closed else {}),
                       "properties": properties, "required": ["id", "ts_ms"]})


ORDER_JSON_SCHEMA = order_json_schema()
"""``ts_ms``: the event time as epoch milliseconds; ``updated_at``: the same instant, RFC 3339."""


def order_message_class(package: str = "kafkasync.test", *, currency: bool = False,
                        after: Optional[str] = None) -> Any:
    """A Protobuf ``<package>.Order`` class (``id``, ``customer``, ``amount``, ``updated_at`` a
    ``google.protobuf.Timestamp``, ``ts_ms`` an int64; ``currency``: a string field added as
    field 6, a second version), built from a descriptor in a pool of its own: no ``protoc``
    step, no generated code in the repository. ``after``: the name of another message that the
    file defines first (real ``.proto`` files hold several; ``Order``'s message indexes are then
    ``[1]``). ``ProtobufSerializer`` registers its file as users' generated classes do (the
    well-known ``timestamp.proto`` is skipped as a reference: ``skip.known.types``)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(name=f"{package.replace('.', '/')}/order.proto", package=package,
                                               syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    kind = descriptor_pb2.FieldDescriptorProto
    if after:
        proto.message_type.add(name=after).field.add(name="note", number=1, type=kind.TYPE_STRING,
                                                     label=kind.LABEL_OPTIONAL)
    message = proto.message_type.add(name="Order")
    fields = [("id", kind.TYPE_STRING, None), ("customer", kind.TYPE_STRING, None),
              ("amount", kind.TYPE_DOUBLE, None), ("updated_at", kind.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
              ("ts_ms", kind.TYPE_INT64, None)]
    for number, (name, type_, type_name) in enumerate(fields + ([("currency", kind.TYPE_STRING, None)]
                                                                if currency else []), start=1):
        message.field.add(name=name, number=number, type=type_, label=kind.LABEL_OPTIONAL,
                          **({"type_name": type_name} if type_name else {}))
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))


# ------------------------------------------------------------------ the writer


@dataclass(frozen=True)
class Change:
    """What a backfill's JSON record says, for any format: the row's ``id`` and ``amount``, its
    event time ``event_ms``, and the record's Kafka timestamp ``written_ms``."""

    id: str
    amount: float
    event_ms: int
    written_ms: int

    @property
    def customer(self) -> str:
        return f"customer-{sum(self.id.encode()) % 10}"


def _encoder(fmt: str, registry_url: str, *, named: Optional[str] = None, version: int = 1,
             conf: Optional[dict] = None) -> Callable[[Change, str], bytes]:
    """``encode(change, topic) -> bytes`` in ``fmt``, one serializer for all records.

    ``named``: the record types are this writer's own, named after it (Avro namespace
    ``dbserver1.public.<named>``, Protobuf package ``kafkasync.<named>`` in a file whose first
    message is another, JSON title ``Order_<named>`` with a closed content model), so that a
    record-name subject is not shared with other writers on the same registry. ``version=2``:
    the row has ``currency`` ("USD") added. ``conf``: the serializer's subject name strategy."""
    client = _client(registry_url)
    conf = conf or SERIALIZER_CONF
    extra = {"currency": "USD"} if version == 2 else {}
    if fmt == DEBEZIUM_AVRO:
        schema = envelope_schema(VALUE_V2 if version == 2 else VALUE_V1, table=named or "orders")
        avro = avro_serializer(registry_url, schema, client, conf=conf)
        return lambda c, topic: avro(change_event({"id": c.id, "customer": c.customer, "amount": c.amount, **extra},
                                                  c.event_ms, c.written_ms), topic)
    if fmt == PROTOBUF:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        order = order_message_class(f"kafkasync.{named}" if named else "kafkasync.test", currency=version == 2,
                                    after="Audit" if named else None)
        protobuf = ProtobufSerializer(order, client, {"use.deprecated.format": False, **conf})

        def encode_protobuf(c: Change, topic: str) -> bytes:
            message = order(id=c.id, customer=c.customer, amount=c.amount, ts_ms=c.event_ms, **extra)
            message.updated_at.FromMilliseconds(c.event_ms)
            return protobuf(message, _serialization_context(topic))
        return encode_protobuf
    if fmt == JSON_SCHEMA:
        from datetime import datetime, timezone

        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        schema = order_json_schema(f"Order_{named}", currency=version == 2, closed=True) if named \
            else ORDER_JSON_SCHEMA
        serializer = JSONSerializer(schema, client, conf=conf)

        def encode_json(c: Change, topic: str) -> bytes:
            instant = datetime.fromtimestamp(c.event_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
            return serializer({"id": c.id, "customer": c.customer, "amount": c.amount, "ts_ms": c.event_ms,
                               "updated_at": instant.replace("+00:00", "Z"), **extra}, _serialization_context(topic))
        return encode_json
    raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


@dataclass(frozen=True)
class RecordNamed:
    """A format's writers under a record subject name strategy: ``record_name`` is what
    confluent-kafka's serializers pass to the strategy (Avro: the record's full name, fastavro's
    parsed ``name``, ``_sync/avro.py``; Protobuf: the message's ``DESCRIPTOR.full_name``,
    ``_sync/protobuf.py``; JSON Schema: the schema's ``title``, ``_sync/json_schema.py``),
    ``time_field`` the event time's path, ``versions`` the encoders of v1 and v2 (``currency``
    added) in turn."""

    record_name: str
    time_field: str
    versions: tuple[Callable[[Change, str], bytes], ...]


def record_named_writers(fmt: str, registry_url: str, named: str, strategy: str) -> RecordNamed:
    """v1 and v2 writers of ``fmt`` whose types are named after ``named`` (a valid Avro name),
    registering under ``strategy`` (``record`` or ``topic_record``: confluent-kafka's
    ``record_subject_name_strategy`` / ``topic_record_subject_name_strategy``, passed as the
    serializer's ``subject.name.strategy``) at their first record."""
    import confluent_kafka.schema_registry as sr

    conf = {"subject.name.strategy": getattr(sr, f"{strategy}_subject_name_strategy")}
    record_name, time_field = {DEBEZIUM_AVRO: (f"dbserver1.public.{named}.Envelope", "source.ts_ms"),
                               PROTOBUF: (f"kafkasync.{named}.Order", "updated_at"),
                               JSON_SCHEMA: (f"Order_{named}", "ts_ms")}[fmt]
    return RecordNamed(record_name, time_field,
                       tuple(_encoder(fmt, registry_url, named=named, version=v, conf=conf) for v in (1, 2)))


class FramedWriter:
    """A cluster whose records are re-encoded in a registry format on their way in.

    ``produce(topic, records)`` takes records whose values are the backfill shapes' JSON
    (``{"id": str, "ts": epoch ms, "amount": number}``) and produces, for each, the same
    partition, key, headers and Kafka timestamp with the value encoded by ``fmt``'s
    serializer: ``ts`` becomes the format's event time (Debezium's ``source.ts_ms``, the
    Protobuf/JSON ``ts_ms`` and ``updated_at``); the Kafka timestamp is Debezium's ``ts_ms``.
    Invariant: one serializer for all records of the writer (per format, not per record)."""

    def __init__(self, cluster: Any, registry_url: str, fmt: str = DEBEZIUM_AVRO) -> None:
        self._cluster = cluster
        self.format = fmt
        self._encode = _encoder(fmt, registry_url)

    @property
    def bootstrap_servers(self) -> str:
        return self._cluster.bootstrap_servers

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self._cluster.create_topic(name, partitions)

    def produce(self, topic: str, records: Iterable[Record]) -> None:
        self._cluster.produce(topic, [replace(record, value=self._encode(_change(record), topic))
                                      for record in records])


def _change(record: Record) -> Change:
    value = json.loads(record.value or b"{}")
    return Change(str(value["id"]), float(value.get("amount", 0)), int(value["ts"]), record.timestamp_ms)


# ------------------------------------------------------------------ schema evolution


@dataclass(frozen=True)
class Written:
    """One record of :func:`evolving_topic`: where it is, its writer version (1-3) and schema
    id, its event time, and its ``after`` row as a reader of the latest schema (v3) reads it."""

    partition: int
    offset: int
    version: int
    schema_id: int
    event_ms: int
    after_as_latest: dict


@dataclass(frozen=True)
class Evolution:
    topic: str
    records: list[Written] = field(default_factory=list)

    @property
    def schema_ids(self) -> dict[int, int]:
        """Writer version -> the id the registry gave its schema."""
        return {w.version: w.schema_id for w in self.records}


def evolving_topic(cluster: Any, registry_url: str, topic: str, *, per_version: int = 20,
                   start_ms: int, step_ms: int = 60_000, written_ms: Optional[int] = None,
                   partitions: int = 1) -> Evolution:
    """Creates ``topic`` and writes Debezium Avro envelopes through three writer versions in
    turn (``per_version`` records each): v1, v2 (``currency`` added with a default), v3
    (``customer`` renamed ``buyer`` with an alias). Event times (``source.ts_ms``) run from
    ``start_ms`` every ``step_ms`` across the versions, records round-robin over the
    partitions; Kafka timestamps are a copy job's write time, one ms apart from ``written_ms``
    (default: event times end an hour before it). Each version is registered under
    ``<topic>-value`` by its own serializer, so the registry's BACKWARD check accepts it.

    Returns each record with what a reader of v3 makes of it: v1 records get ``currency``
    ``"EUR"`` (the default) and every record's ``customer`` is read as ``buyer``."""
    from confluent_kafka.schema_registry import Schema

    client = _client(registry_url)
    cluster.create_topic(topic, partitions)
    written = written_ms if written_ms is not None else start_ms + 3 * per_version * step_ms + 3_600_000
    evolution = Evolution(topic)
    next_offset = [0] * partitions
    for version, fields in enumerate(VALUE_VERSIONS, start=1):
        schema = envelope_schema(fields)
        encode = avro_serializer(registry_url, schema, client)
        records = []
        for i in range(per_version):
            n = (version - 1) * per_version + i
            event_ms, partition = start_ms + n * step_ms, n % partitions
            row: dict[str, Any] = {"id": f"order-{n}", "amount": float(n)}
            row["buyer" if version == 3 else "customer"] = f"customer-{n % 7}"
            if version >= 2:
                row["currency"] = "USD"
            records.append(Record(partition, written + n, f"order-{n}".encode(),
                                  encode(change_event(row, event_ms, written + n), topic)))
            latest = {"id": row["id"], "buyer": row.get("buyer", row.get("customer")), "amount": row["amount"],
                      "currency": row.get("currency", "EUR")}
            evolution.records.append(Written(partition, next_offset[partition], version, 0, event_ms, latest))
            next_offset[partition] += 1
        cluster.produce(topic, records)
        schema_id = client.lookup_schema(f"{topic}-value", Schema(schema, "AVRO")).schema_id
        evolution.records[-per_version:] = [replace(w, schema_id=schema_id) for w in evolution.records[-per_version:]]
    return evolution


def referencing_writers(registry_url: str, named: str) -> tuple[Callable[[dict, str], bytes], ...]:
    """v1 and v2 ``encode(change, topic)`` of a Debezium envelope that defines neither its row nor
    its ``source``: both are named types of subjects of their own, which the envelope
    references (``Schema(..., references=[SchemaReference(name, subject, version)])``, as
    confluent-kafka registers them, and as Confluent's Java serializers register schemas whose
    types live in other subjects). The types are ``dbserver1.public.<named>.Value`` (v1:
    :data:`VALUE_V1`, v2: :data:`VALUE_V2`, ``currency`` added with a default) and
    ``dbserver1.public.<named>.Source``, each registered under its full name; the envelope of v2
    differs from v1's only in referencing ``Value``'s version 2, and is registered (under
    ``<topic>-value``) as a version of its own."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    client = _client(registry_url)
    namespace = f"dbserver1.public.{named}"
    source, value = f"{namespace}.Source", f"{namespace}.Value"
    def register(subject: str, schema: Any) -> int:
        """The version ``schema`` has under ``subject`` (the register answer has only the id:
        Confluent's API, and Apicurio 3.3.3's, answer ``{"id": N}``)."""
        client.register_schema(subject, schema)
        return int(client.lookup_schema(subject, schema).version)

    source_version = register(source, Schema(json.dumps({**SOURCE_SCHEMA, "namespace": namespace}), "AVRO"))
    envelope = json.dumps({
        "type": "record", "name": "Envelope", "namespace": namespace,
        "fields": [{"name": "before", "type": ["null", value], "default": None},
                   {"name": "after", "type": ["null", value], "default": None},
                   {"name": "source", "type": source}, {"name": "op", "type": "string"},
                   {"name": "ts_ms", "type": ["null", "long"], "default": None}],
    })
    writers = []
    for fields in (VALUE_V1, VALUE_V2):
        row = Schema(json.dumps({"type": "record", "name": "Value", "namespace": namespace, "fields": list(fields)}),
                     "AVRO")
        version = register(value, row)
        writers.append(avro_serializer(registry_url, Schema(envelope, "AVRO", [
            SchemaReference(value, value, version), SchemaReference(source, source, source_version)]), client))
    return tuple(writers)


INCOMPATIBLE_VALUE = (VALUE_V1[0], {"name": "customer", "type": "string"}, {"name": "amount", "type": "string"})
"""``amount`` as a string: no reader whose ``amount`` is a double can read it (Avro promotes
int/long/float to double, never string)."""


def incompatible_writer(cluster: Any, registry_url: str, topic: str, *, event_ms: int,
                        partition: int = 0) -> int:
    """Appends to ``topic`` one Debezium record whose ``after.amount`` is a string, written as a
    producer with another subject name strategy writes (``topic_record_subject_name_strategy``:
    subject ``<topic>-dbserver1.public.orders.Envelope``), so the registry's check on
    ``<topic>-value`` never sees it and that subject's latest version stays what it was.
    Returns the record's schema id. A reader of ``<topic>-value``'s latest schema cannot
    resolve it: the error must name the topic, partition, offset, id and field."""
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer

    serializer = AvroSerializer(_client(registry_url), envelope_schema(INCOMPATIBLE_VALUE),
                                conf={"subject.name.strategy": topic_record_subject_name_strategy})
    value = serializer(change_event({"id": "bad", "customer": "c", "amount": "12.50"}, event_ms, event_ms),
                       _serialization_context(topic))
    cluster.produce(topic, [Record(partition, event_ms, b"bad", value)])
    return int.from_bytes(value[1:5], "big")
