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


def _serialization_context(topic: str) -> Any:
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.VALUE)


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


def avro_serializer(registry_url: str, schema: str, client: Optional[Any] = None) -> Callable[[dict, str], bytes]:
    """``encode(record, topic) -> bytes``: confluent-kafka's ``AvroSerializer`` for ``schema``,
    registering it under ``<topic>-value`` (the topic-name strategy) at first use per topic."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    serializer = AvroSerializer(client or _client(registry_url), schema, conf=SERIALIZER_CONF)
    return lambda record, topic: serializer(record, _serialization_context(topic))


# ------------------------------------------------------------------ Protobuf and JSON Schema

ORDER_JSON_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"id": {"type": "string"}, "customer": {"type": "string"},
                   "amount": {"type": "number"}, "ts_ms": {"type": "integer"},
                   "updated_at": {"type": "string", "format": "date-time"}},
    "required": ["id", "ts_ms"],
})
"""``ts_ms``: the event time as epoch milliseconds; ``updated_at``: the same instant, RFC 3339."""


def order_message_class() -> Any:
    """A Protobuf ``kafkasync.test.Order`` class (``id``, ``customer``, ``amount``,
    ``updated_at`` a ``google.protobuf.Timestamp``, ``ts_ms`` an int64), built from a
    descriptor in a pool of its own: no ``protoc`` step, no generated code in the repository.
    ``ProtobufSerializer`` registers its file as users' generated classes do (the well-known
    ``timestamp.proto`` is skipped as a reference: ``skip.known.types``)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(name="kafkasync/test/order.proto", package="kafkasync.test",
                                               syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    message = proto.message_type.add(name="Order")
    kind = descriptor_pb2.FieldDescriptorProto
    for number, (name, type_, type_name) in enumerate([
            ("id", kind.TYPE_STRING, None), ("customer", kind.TYPE_STRING, None),
            ("amount", kind.TYPE_DOUBLE, None), ("updated_at", kind.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
            ("ts_ms", kind.TYPE_INT64, None)], start=1):
        message.field.add(name=name, number=number, type=type_, label=kind.LABEL_OPTIONAL,
                          **({"type_name": type_name} if type_name else {}))
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kafkasync.test.Order"))


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


def _encoder(fmt: str, registry_url: str) -> Callable[[Change, str], bytes]:
    """``encode(change, topic) -> bytes`` in ``fmt``, one serializer for all records."""
    client = _client(registry_url)
    if fmt == DEBEZIUM_AVRO:
        avro = avro_serializer(registry_url, envelope_schema(VALUE_V1), client)
        return lambda c, topic: avro(change_event({"id": c.id, "customer": c.customer, "amount": c.amount},
                                                  c.event_ms, c.written_ms), topic)
    if fmt == PROTOBUF:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        order = order_message_class()
        protobuf = ProtobufSerializer(order, client, {"use.deprecated.format": False, **SERIALIZER_CONF})

        def encode_protobuf(c: Change, topic: str) -> bytes:
            message = order(id=c.id, customer=c.customer, amount=c.amount, ts_ms=c.event_ms)
            message.updated_at.FromMilliseconds(c.event_ms)
            return protobuf(message, _serialization_context(topic))
        return encode_protobuf
    if fmt == JSON_SCHEMA:
        from datetime import datetime, timezone

        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        serializer = JSONSerializer(ORDER_JSON_SCHEMA, client, conf=SERIALIZER_CONF)

        def encode_json(c: Change, topic: str) -> bytes:
            instant = datetime.fromtimestamp(c.event_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
            return serializer({"id": c.id, "customer": c.customer, "amount": c.amount, "ts_ms": c.event_ms,
                               "updated_at": instant.replace("+00:00", "Z")}, _serialization_context(topic))
        return encode_json
    raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


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
