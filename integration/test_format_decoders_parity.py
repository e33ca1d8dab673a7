"""kafkasync's decoded columns beside Spark's own decoders, on the same records of a real broker.

Records are written by confluent-kafka's own serializers through the real registry (Apicurio,
``schema_registry_url``), read by kafkasync with ``value.decode=true``, and by ``format("kafka")``
as its users decode Confluent-framed values: the framing cut off by ``substring`` and the
schema given by hand.

* Avro: ``from_avro(substring(value, 6), <writer schema>, {"avroSchema": <reader schema>})``
  per writer schema id: spark-avro's ``avroSchema`` option is "an evolved schema, which is
  compatible but different with the actual Avro schema; the deserialization schema will be
  consistent with the evolved schema" (Spark's Avro data source documentation), i.e. Avro's
  resolution from the writer (``jsonFormatSchema``) to the reader, which is what kafkasync does
  with the subject's latest version. The writers are Debezium envelopes v1 -> v2 (a field added
  with a default) -> v3 (a field renamed through an alias).
* JSON Schema: ``from_json(cast(substring(value, 6) as string), <kafkasync's derived type>)``:
  Spark has no JSON Schema reader, so the comparison is of the values for the same type; some
  records are framed by hand with properties that do not fit their types (the serializer
  validates documents, a producer without validation does not).
* Protobuf: ``from_protobuf(substring(value, 7), <message>, binaryDescriptorSet=...)`` (the
  single index byte ``0`` after the header), where spark-protobuf is on the classpath.

Spark types and values must be equal, but where docs/formats.md's table "Where kafkasync differs
from from_avro, from_protobuf and from_json" says otherwise.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import pytest
from conftest import SPARK_CONNECTOR_PROBLEM, SPARK_PROTOBUF_PROBLEM
from test_format_kafka_parity import format_kafka, skip_without_connector  # noqa: F401 - the fixture

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.spark import has_spark_avro, has_spark_protobuf

T0 = 1_700_000_000_000

pytest.importorskip("fastavro", reason="the registry extra (pip install 'kafkasync[registry]') is not installed")


def kafkasync_read(spark, bootstrap: str, topic: str, registry_url: str, value_format: str, **options) -> Any:
    reader = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("value.format", value_format).option("schema.registry.url", registry_url)
              .option("value.decode", "true"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().select("offset", "valueDecoded")


def raw(spark, bootstrap: str, topic: str) -> Any:
    return spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()


def by_offset(frame: Any) -> dict[int, Any]:
    return {row[0]: row[1] for row in frame.collect()}


def plain(value: Any) -> Any:
    """A collected value as comparable Python: rows as dicts, binaries as bytes."""
    if hasattr(value, "asDict"):
        return {key: plain(item) for key, item in value.asDict().items()}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def differences(kafkasync: dict[int, Any], spark: dict[int, Any]) -> list[str]:
    found = []
    for offset in sorted(spark):
        ours, theirs = plain(kafkasync.get(offset)), plain(spark[offset])
        if not same(ours, theirs):
            found.append(f"offset {offset}: kafkasync {ours!r} != Spark {theirs!r}")
    return found


# --- Avro -----------------------------------------------------------------------------------------

def test_avro_evolving_writers_decode_as_from_avro_with_the_reader_as_avro_schema(
        format_kafka, bootstrap_servers, schema_registry_url):  # noqa: F811 - the fixture
    if not has_spark_avro(format_kafka):
        skip_without_connector("Spark's from_avro (org.apache.spark:spark-avro_2.13) is not on the classpath: "
                               + ("; ".join(SPARK_CONNECTOR_PROBLEM) or "see kafkasync_dev/testing/spark.py"))
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from kafkasync_dev.testing.debezium import VALUE_VERSIONS, envelope_schema, evolving_topic

    spark = format_kafka
    topic = f"kafkasync-it-parity-avro-{uuid.uuid4().hex[:8]}"
    with KafkaBroker(bootstrap_servers) as broker:
        evolution = evolving_topic(broker, schema_registry_url, topic, per_version=3, start_ms=T0)
    reader = envelope_schema(VALUE_VERSIONS[-1])
    ours = kafkasync_read(spark, bootstrap_servers, topic, schema_registry_url, "avro-confluent")
    theirs: dict[int, Any] = {}
    spark_type = None
    for version, schema_ref in sorted(evolution.schema_ids.items()):
        writer = envelope_schema(VALUE_VERSIONS[version - 1])
        frame = (raw(spark, bootstrap_servers, topic)
                 .where(F.expr("substring(value, 2, 4)") == F.lit(schema_ref.to_bytes(4, "big")))
                 .select("offset", from_avro(F.expr("substring(value, 6)"), writer, {"avroSchema": reader})
                         .alias("v")))
        spark_type = frame.schema["v"].dataType
        theirs.update(by_offset(frame))
    assert len(theirs) == len(evolution.records) == 9
    ours_type = ours.schema["valueDecoded"].dataType
    found = differences(by_offset(ours), theirs)
    print(f"\nAvro, {len(theirs)} records of 3 writer versions: kafkasync's type "
          f"{'equals' if ours_type == spark_type else 'differs from'} from_avro's; {len(found)} values differ")
    assert ours_type == spark_type, f"kafkasync {ours_type.simpleString()} != from_avro {spark_type.simpleString()}"
    assert found == []


CARD = {"type": "record", "name": "Card", "fields": [{"name": "number", "type": "string"}]}
IBAN = {"type": "record", "name": "Iban", "fields": [{"name": "iban", "type": "string"}]}
AVRO_CASES = {
    # issue 61 item 3: a union's branch is the one written, whatever Python type a value has
    "unions": ({"type": "record", "name": "Pay", "fields": [
        {"name": "id", "type": "long"}, {"name": "pay", "type": ["null", CARD, IBAN]},
        {"name": "n", "type": ["int", "long", "string"]},
        {"name": "d", "type": ["null", "float", "double", "string"]}]},
        None,
        [{"id": 1, "pay": ("Iban", {"iban": "DE00"}), "n": ("long", 2**40), "d": ("double", 0.1)},
         {"id": 2, "pay": ("Card", {"number": "4111"}), "n": ("int", 5), "d": ("float", 2.5)},
         {"id": 3, "pay": None, "n": ("string", "x"), "d": ("string", "s")}]),
    # items 2 and the defaults: a logical type added by the reader, defaults of logical and bytes types
    "evolved": ({"type": "record", "name": "Evt", "fields": [{"name": "id", "type": "long"},
                                                             {"name": "ts", "type": "long"}]},
                {"type": "record", "name": "Evt", "fields": [
                    {"name": "id", "type": "long"},
                    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                    {"name": "note", "type": "string", "default": "n/a"},
                    {"name": "since", "type": {"type": "long", "logicalType": "timestamp-millis"},
                     "default": 1_700_000_000_000},
                    {"name": "raw", "type": "bytes", "default": "\u00ffA"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": ["a"]}]},
                [{"id": 1, "ts": 1_700_000_000_123}, {"id": 2, "ts": 0}]),
}
"""Generated-by-hand evolutions the outside differential of issue 61 found wrong: (writer schema,
reader schema registered after it as the subject's latest, or None: the writer is the reader;
records, unions as (branch name, value) tuples, as fastavro writes a named branch)."""


@pytest.mark.parametrize("case", sorted(AVRO_CASES))
def test_avro_unions_and_evolutions_decode_as_from_avro(format_kafka, bootstrap_servers, schema_registry_url,  # noqa: F811
                                                        topic_factory, case):
    if not has_spark_avro(format_kafka):
        skip_without_connector("Spark's from_avro (org.apache.spark:spark-avro_2.13) is not on the classpath: "
                               + ("; ".join(SPARK_CONNECTOR_PROBLEM) or "see kafkasync_dev/testing/spark.py"))
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from kafkasync_dev.testing.debezium import avro_serializer

    spark = format_kafka
    writer, reader, records = AVRO_CASES[case]
    topic = topic_factory(1)
    encode = avro_serializer(schema_registry_url, json.dumps(writer))
    written = [encode(value, topic) for value in records]
    if reader is not None:
        SchemaRegistryClient({"url": schema_registry_url}).register_schema(f"{topic}-value",
                                                                           Schema(json.dumps(reader), "AVRO"))
    with KafkaBroker(bootstrap_servers) as broker:
        broker.produce(topic, [Record(0, T0 + i, None, value) for i, value in enumerate(written)])
    frame = raw(spark, bootstrap_servers, topic).select(
        "offset", from_avro(F.expr("substring(value, 6)"), json.dumps(writer),
                            {"avroSchema": json.dumps(reader or writer)}).alias("v"))
    ours = kafkasync_read(spark, bootstrap_servers, topic, schema_registry_url, "avro-confluent")
    theirs = by_offset(frame)
    try:
        found = differences(by_offset(ours), theirs)
    except Exception as err:  # noqa: BLE001 - a query that fails is a difference too; say which
        found = [f"kafkasync's read failed: {str(err)[-800:]}"]
    ours_type, spark_type = ours.schema["valueDecoded"].dataType, frame.schema["v"].dataType
    print(f"\nAvro {case}: kafkasync's type {'equals' if ours_type == spark_type else 'differs from'} from_avro's"
          f" ({ours_type.simpleString()} / {spark_type.simpleString()}); {len(found)} of {len(theirs)} values differ"
          + "".join(f"\n  {d}" for d in found))
    assert ours_type == spark_type and found == []


# --- JSON Schema ----------------------------------------------------------------------------------

JSON_ORDER = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "ParityOrder", "type": "object",
    "properties": {
        "id": {"type": "string"}, "qty": {"type": "integer"}, "amount": {"type": "number"},
        "paid": {"type": "boolean"}, "code": {"type": ["string", "integer"]},
        "payment": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {"iban": {"type": "string"}}}]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "flags": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "price": {"type": "object", "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}}}}}
VALID = [
    {"id": "o1", "qty": 2, "amount": 9.5, "paid": True, "code": 17, "payment": {"iban": "DE00 1"},
     "tags": ["a", "b"], "flags": {"gift": False}, "price": {"amount": 1e2, "currency": "EUR"}},
    {"id": "o2", "qty": -9007199254740993, "amount": 3, "code": "A-7", "payment": "card", "tags": []},
    {"id": "é😀", "amount": -0.0, "price": {}},
]
UNVALIDATED = [  # as a producer without schema validation writes them, framed by hand
    b'{"id": 5, "qty": "many", "amount": "NaN", "paid": "yes", "tags": ["a", 1, {"b": [true]}],'
    b' "flags": {"x": 1}, "price": {"amount": "cheap", "currency": "EUR"}}',
    b'{"id": "o4", "qty": 1.0, "amount": "-INF", "code": [1, 2], "payment": {"iban" : "X",  "n": null}}',
    b'{"id":"o5","qty":123456789012345678901234567890,"amount":1e400,"price":{"amount":{"v":1}}}',
    b'{"id": "o6", "code": 1.50, "payment": {"a": [1e2, 0.0001, -0.0, 12345678.9, -0], "s": "x\\u0001\\ud83d'
    b'\\ude00/\\"\\t"}, "tags": [true, null, 1e400]}',
]


def test_json_schema_values_decode_as_from_json_with_the_derived_type(
        format_kafka, bootstrap_servers, schema_registry_url, topic_factory):  # noqa: F811 - the fixture
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyspark.sql import functions as F

    from kafkasync_dev.testing.debezium import SERIALIZER_CONF

    spark = format_kafka
    topic = topic_factory(1)
    serializer = JSONSerializer(json.dumps(JSON_ORDER), SchemaRegistryClient({"url": schema_registry_url}),
                                conf=SERIALIZER_CONF)
    written = [serializer(document, SerializationContext(topic, MessageField.VALUE)) for document in VALID]
    header = written[0][:5]
    written += [header + body for body in UNVALIDATED]
    with KafkaBroker(bootstrap_servers) as broker:
        broker.produce(topic, [Record(0, T0 + i, None, value) for i, value in enumerate(written)])
    ours = kafkasync_read(spark, bootstrap_servers, topic, schema_registry_url, "json-schema-confluent")
    derived = ours.schema["valueDecoded"].dataType
    frame = raw(spark, bootstrap_servers, topic).select(
        "offset", F.from_json(F.expr("cast(substring(value, 6) as string)"), derived).alias("v"))
    partial = spark.sql("SET spark.sql.json.enablePartialResults").collect()[0].value
    print(f"\nJSON Schema, Spark {spark.version}: spark.sql.json.enablePartialResults={partial}")
    theirs = by_offset(frame)
    found = differences(by_offset(ours), theirs)
    print(f"JSON Schema, {len(theirs)} records: {len(found)} values differ" + "".join(f"\n  {d}" for d in found))
    assert frame.schema["v"].dataType == derived
    assert len(theirs) == len(written) and found == []


# --- Protobuf -------------------------------------------------------------------------------------

def parity_order_file() -> Any:
    """A proto3 ``parity.Order``: unsigned and signed integers, a Timestamp, a Duration, an enum,
    repeated, a map, a nested message, an ``optional`` and a oneof."""
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="parity/order.proto", package="parity", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/duration.proto"])
    proto.enum_type.add(name="Kind").value.add(name="NONE", number=0)
    proto.enum_type[0].value.add(name="RETAIL", number=1)
    order = proto.message_type.add(name="Order")  # first: its message indexes are [0], one byte
    line = proto.message_type.add(name="Line")
    line.field.add(name="sku", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=field.TYPE_SINT32, label=field.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=field.TYPE_UINT64, label=field.LABEL_OPTIONAL)
    order.oneof_decl.add(name="payment")
    for name, number, type_, type_name, label in [
            ("id", 1, field.TYPE_STRING, None, field.LABEL_OPTIONAL),
            ("count", 2, field.TYPE_UINT32, None, field.LABEL_OPTIONAL),
            ("total", 3, field.TYPE_UINT64, None, field.LABEL_OPTIONAL),
            ("amount", 4, field.TYPE_DOUBLE, None, field.LABEL_OPTIONAL),
            ("at", 5, field.TYPE_MESSAGE, ".google.protobuf.Timestamp", field.LABEL_OPTIONAL),
            ("took", 6, field.TYPE_MESSAGE, ".google.protobuf.Duration", field.LABEL_OPTIONAL),
            ("kind", 7, field.TYPE_ENUM, ".parity.Kind", field.LABEL_OPTIONAL),
            ("lines", 8, field.TYPE_MESSAGE, ".parity.Line", field.LABEL_REPEATED),
            ("attrs", 9, field.TYPE_MESSAGE, ".parity.Order.AttrsEntry", field.LABEL_REPEATED),
            ("tags", 10, field.TYPE_FIXED64, None, field.LABEL_REPEATED),
            ("card", 11, field.TYPE_STRING, None, field.LABEL_OPTIONAL),
            ("iban", 12, field.TYPE_STRING, None, field.LABEL_OPTIONAL),
            ("note", 13, field.TYPE_STRING, None, field.LABEL_OPTIONAL)]:
        added = order.field.add(name=name, number=number, type=type_, label=label,
                                **({"type_name": type_name} if type_name else {}))
        if name in ("card", "iban"):
            added.oneof_index = 0
        if name == "note":
            added.proto3_optional, added.oneof_index = True, 1
    order.oneof_decl.add(name="_note")
    return proto


def test_protobuf_values_decode_as_from_protobuf(format_kafka, bootstrap_servers, schema_registry_url,  # noqa: F811
                                                 topic_factory):
    if not has_spark_protobuf(format_kafka):
        pytest.skip("Spark's from_protobuf (org.apache.spark:spark-protobuf_2.13) is not on the classpath: "
                    + ("; ".join(SPARK_PROTOBUF_PROBLEM) or "see kafkasync_dev/testing/spark.py"))
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2
    from pyspark.sql import functions as F
    from pyspark.sql.protobuf.functions import from_protobuf

    from kafkasync_dev.testing.debezium import SERIALIZER_CONF

    spark = format_kafka
    topic = topic_factory(1)
    proto = parity_order_file()
    pool = descriptor_pool.DescriptorPool()
    for known in (timestamp_pb2, duration_pb2):
        pool.AddSerializedFile(known.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    Order = message_factory.GetMessageClass(pool.FindMessageTypeByName("parity.Order"))
    serializer = ProtobufSerializer(Order, SchemaRegistryClient({"url": schema_registry_url}),
                                    {"use.deprecated.format": False, **SERIALIZER_CONF})
    first = Order(id="o1", count=2**32 - 1, total=2**64 - 1, amount=-0.0, kind=1, tags=[2**63, 1], card="4111",
                  note="")
    first.at.seconds, first.at.nanos = 1_700_000_000, 123_456_789
    first.took.seconds, first.took.nanos = -2, -500_000
    first.lines.add(sku="a", qty=-3)
    first.lines.add()
    first.attrs["k"] = 2**63 + 5
    second = Order(id="", count=0, kind=7, iban="")  # proto3 zeros, an enum number Kind lacks, a oneof's ""
    second.at.SetInParent()
    context = SerializationContext(topic, MessageField.VALUE)
    written = [serializer(message, context) for message in (first, second, Order())]
    assert all(value[5] == 0 for value in written)  # message indexes [0]: one byte
    with KafkaBroker(bootstrap_servers) as broker:
        broker.produce(topic, [Record(0, T0 + i, None, value) for i, value in enumerate(written)])
    files = descriptor_pb2.FileDescriptorSet()
    for known in (timestamp_pb2, duration_pb2):
        files.file.add().ParseFromString(known.DESCRIPTOR.serialized_pb)
    files.file.append(proto)
    frame = raw(spark, bootstrap_servers, topic).select(
        "offset", from_protobuf(F.expr("substring(value, 7)"), "parity.Order",
                                binaryDescriptorSet=files.SerializeToString()).alias("v"))
    ours = kafkasync_read(spark, bootstrap_servers, topic, schema_registry_url, "protobuf-confluent",
                          **{"value.record.name": "parity.Order"})
    theirs = by_offset(frame)
    found = differences(by_offset(ours), theirs)
    ours_type, spark_type = ours.schema["valueDecoded"].dataType, frame.schema["v"].dataType
    print(f"\nProtobuf, {len(theirs)} records: kafkasync's type {'equals' if ours_type == spark_type else 'differs'}"
          f" ({ours_type.simpleString()} / {spark_type.simpleString()}); {len(found)} values differ"
          + "".join(f"\n  {d}" for d in found))
    assert ours_type == spark_type and found == []
