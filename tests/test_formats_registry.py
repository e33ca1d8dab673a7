"""Schema Registry formats against a real registry (Apicurio, ``schema_registry_url``) and the
embedded cluster, with records written by confluent-kafka's own serializers
(kafkasync_dev/testing/debezium.py: ``AvroSerializer``, ``ProtobufSerializer``, ``JSONSerializer``).

* A Debezium topic whose writers move v1 -> v2 (a field added with a default) -> v3 (a field
  renamed through an alias) keeps flowing: every record's ``eventTime`` is its ``source.ts_ms``
  and its ``valueDecoded`` what a reader of v3 makes of it; the offsets record the time source.
* An incompatible writer fails the query naming topic, partition, offset, schema id and field.
* A record that is not framed, or whose schema id the registry does not know, is an invalid
  time under ``onInvalid``; its decoded value fails the query (``value.decode.mode=FAILFAST``,
  the default) or is null with its reason in ``valueDecodeError`` and counted per kind by
  ``observe_decode_errors`` (``PERMISSIVE``), the records around it read.
* One reader schema per query: a version registered between ``load()`` and ``start()`` is not
  read with; a restart after a new version fails naming both until ``value.subject.version``
  keeps the old one or moves to the new one, which the checkpoint then records.
* Protobuf (``google.protobuf.Timestamp``) and JSON Schema values: the time and the columns.
* Credentials never show: not in the plan, the progress, the checkpoint, nor an error; a
  registry that does not answer at start fails within seconds naming the URL only.
* A registry that goes down mid-stream: schema ids already fetched keep being read; a new one
  is retried, then fails naming the id and the URL (``slow``: a registry of its own).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.debezium import (
    DEBEZIUM_AVRO,
    JSON_SCHEMA,
    PROTOBUF,
    VALUE_V1,
    VALUE_V2,
    Change,
    FramedWriter,
    avro_serializer,
    change_event,
    envelope_schema,
    evolving_topic,
    incompatible_writer,
    record_named_writers,
    referencing_writers,
)
from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.options import parse_options
from kafkasync_source.event_time import record_time
from kafkasync_source.formats.registry import KafkaSyncFormatError, Registry, RegistrySettings
from kafkasync_source.metrics.decode_errors import observe_decode_errors
from kafkasync_source.spark.source import register

T = 1_700_000_000_000
USER_INFO = "svc:registry-pw-4417"
"""Sent as basic auth; Apicurio without authentication ignores it. It must never be shown."""


@pytest.fixture
def spark_with_kafkasync(spark):
    """The shared session with kafkasync registered (the tests without Spark start none)."""
    register(spark)
    return spark


def memory_table(checkpoint: Path) -> str:
    """The memory table :func:`read_all` writes for this checkpoint (its columns: the source's schema)."""
    return f"formats_{abs(hash(str(checkpoint)))}"


def read_all(spark, bootstrap, topic, registry_url, checkpoint: Path, transform=None, **options):
    """The topic read with trigger(availableNow=True) into a memory table: (rows by offset, query).
    ``value.format`` is ``avro-confluent`` unless given (None: not set); ``transform``: applied to
    the loaded DataFrame before it is written."""
    return read_loaded(spark, load(spark, bootstrap, topic, registry_url, **options), checkpoint, transform)


def load(spark, bootstrap, topic, registry_url, **options):
    """The topic's stream, loaded (the reader schema is pinned here), from the earliest offset."""
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("schema.registry.url", registry_url))
    for key, value in {"value.format": "avro-confluent", **options}.items():
        if value is not None:
            stream = stream.option(key, str(value))
    return stream.load()


def read_loaded(spark, frame, checkpoint: Path, transform=None):
    """``frame`` written with trigger(availableNow=True) into a memory table: (rows by offset, query)."""
    name = memory_table(checkpoint)
    query = ((transform(frame) if transform else frame).writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(240)
    finally:
        query.stop()
    rows = spark.sql(f"select * from {name}").collect()
    return {(row.partition, row.offset): row for row in rows}, query


def ms(moment) -> int:
    return int(moment.timestamp() * 1000)


def test_an_incompatible_writer_fails_naming_topic_partition_offset_schema_id_and_field(
        spark_with_kafkasync, kafka_cluster, unique_topic, schema_registry_url, tmp_path):
    spark = spark_with_kafkasync
    evolution = evolving_topic(kafka_cluster, schema_registry_url, unique_topic("incompatible"), per_version=2,
                               start_ms=T)
    bad_id = incompatible_writer(kafka_cluster, schema_registry_url, evolution.topic, event_ms=T + 10 * 60_000)
    with pytest.raises(StreamingQueryException) as failure:
        read_all(spark, kafka_cluster.bootstrap_servers, evolution.topic, schema_registry_url, tmp_path / "c",
                 **{"eventTime.field": "source.ts_ms", "value.decode": "true"})
    message = str(failure.value)
    assert f"{evolution.topic}-0 offset 6" in message, message[-3000:]
    # The field the record holds: before is null in it, and (as Java's resolution) a union branch no
    # record takes fails nothing; after holds the string amount. before and after share the record
    # Value, so the field is named by the record's full name, true at either path.
    assert f"(schema id {bad_id})" in message, message[-3000:]
    assert "'dbserver1.public.orders.Value.amount' is a string in the writer schema" in message, message[-3000:]


def test_records_not_framed_or_of_an_unknown_schema_id_fail_the_query_or_are_counted_nulls_under_permissive(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    """Stray records among framed ones: their time is invalid (``eventTime.onInvalid``); their
    decoded value fails the query by default (FAILFAST, as from_avro; before: a silent null), and
    under PERMISSIVE is null with the reason beside it, counted per kind by observe_decode_errors
    in the batch's progress."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    encode = avro_serializer(schema_registry_url, envelope_schema(VALUE_V1))
    good = [encode(change_event({"id": f"o{i}", "customer": "c", "amount": 1.0}, T + i * 1000, T + 10**9), topic)
            for i in range(3)]
    strays = [b"{\"ts\": 1}", b"\x00\x00\x00", b"\x00\x7f\xff\xff\xf0" + good[0][5:]]  # JSON, too short, unknown id
    kafka_cluster.produce(topic, [Record(0, T + 10**9, None, value) for value in [good[0], *strays, good[1], good[2]]])
    options = {"eventTime.field": "source.ts_ms", "eventTime.onInvalid": "skip", "value.decode": "true",
               "schema.registry.basic.auth.user.info": USER_INFO}
    with pytest.raises(StreamingQueryException) as failure:
        read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "failfast", **options)
    assert (f"kafkasync: {topic}-0 offset 1: the value cannot be decoded (value.format=avro-confluent read as subject "
            f"'{topic}-value' version 1 (schema id {int.from_bytes(good[0][1:5], 'big')})): not-framed: the payload "
            "starts with byte 123, not Confluent's magic byte 0. Set 'value.decode.mode=PERMISSIVE'") in str(failure.value)
    rows, query = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "permissive",
                           transform=observe_decode_errors, **options, **{"value.decode.mode": "PERMISSIVE"})
    assert [(offset, ms(row.eventTime) if row.eventTime else None, row.valueDecoded is not None, row.valueDecodeError)
            for (_, offset), row in sorted(rows.items())] == [
        (0, T, True, None),
        (1, None, False, "not-framed: the payload starts with byte 123, not Confluent's magic byte 0"),
        (2, None, False, "not-framed: a payload of 3 bytes is too short for Confluent's framing (5 bytes at least)"),
        (3, None, False, f"unknown-schema: the registry at {schema_registry_url} has no schema id 2147483632 "
                         "(schema id 2147483632)"),
        (4, T + 1000, True, None), (5, T + 2000, True, None)]
    observed = [json.loads(p.json)["observedMetrics"]["kafkasync_decode_errors"] for p in query.recentProgress
                if p.numInputRows]
    assert {name: sum(batch[name] for batch in observed) for name in observed[0]} == {
        "valueNotFramed": 2, "valueUnknownSchema": 1, "valueMalformed": 0, "valueIncompatible": 0,
        "valueUndecodable": 3}
    with pytest.raises(StreamingQueryException, match=f"no event time for {topic}-0 offset 1 .*not Confluent's magic"):
        read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "fail",
                 **{"eventTime.field": "source.ts_ms"})


# -- one reader schema per query -------------------------------------------------------------------

ORDER_V1 = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]})
ORDER_V2 = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "price", "type": "double", "default": 0.0}]})
"""Issue 61's example: v2 drops ``amount`` and adds ``price`` with a default (BACKWARD compatible)."""


def offsets_of(query) -> list[dict]:
    """The end offsets of the query's batches that read records."""
    ends = [json.loads(p.json)["sources"][0]["endOffset"] for p in query.recentProgress if p.numInputRows]
    return [json.loads(end) if isinstance(end, str) else end for end in ends]


def test_a_version_registered_between_load_and_start_is_not_read_with(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    """Issue 61, item 1: v1 ``{id, amount}`` is latest at ``load()``, v2 ``{id, price default
    0.0}`` is registered before ``start()``. Every process of the query reads as v1, the pin
    carried in the decoded column's metadata from ``schema()`` to the source runner (the offsets
    it writes record v1) and to the executors (``amount`` is 99.5). Before, the runner and the
    executors took the subject's latest again: ``{id: 7, amount: 0.0}``."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    client = SchemaRegistryClient({"url": schema_registry_url})
    written = avro_serializer(schema_registry_url, ORDER_V1)({"id": 7, "amount": 99.5}, topic)
    kafka_cluster.produce(topic, [Record(0, T, None, written)])
    v1 = int.from_bytes(written[1:5], "big")
    frame = load(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url,
                 **{"value.decode": "true", "schema.registry.basic.auth.user.info": USER_INFO})
    assert frame.schema["valueDecoded"].metadata == {
        "kafkasync.readerSchema": {"part": "value", "subject": f"{topic}-value", "version": 1, "id": v1}}
    v2 = client.register_schema(f"{topic}-value", Schema(ORDER_V2, "AVRO"))
    assert v2 != v1 and client.get_latest_version(f"{topic}-value").schema_id == v2
    rows, query = read_loaded(spark, frame, tmp_path / "c")
    assert rows[(0, 0)].valueDecoded.asDict() == {"id": 7, "amount": 99.5}
    assert [end["readerSchemas"] for end in offsets_of(query)] == [
        {"value": {"subject": f"{topic}-value", "version": 1, "id": v1}}]
    assert "registry-pw-4417" not in json.dumps([json.loads(p.json) for p in query.recentProgress])


ORDER_V2_NOTED = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "double"},
    {"name": "note", "type": "string", "default": "-"}]})
"""A second version each version reads (FULL compatible): a field added with a default."""


def test_a_restart_after_a_new_version_fails_naming_both_and_the_option_then_keeps_or_moves_as_asked(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    """Issue 61, deliverable 5: a checkpoint written while v1 was the latest, then v2 registered
    (written by a producer). A restart loads v2 (Spark types the columns at load(), before the
    source sees the checkpoint) and fails at its first trigger naming both versions and ids and
    ``value.subject.version``. With it set to 1 the query reads on as v1, and the checkpoint
    still says v1; set to 2 it moves to v2, and the checkpoint records v2, so that a restart on the
    latest (v2) then reads on without being asked."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    secret_url = schema_registry_url.replace("//", "//svc:url-pw-6610@")
    v1_writer = avro_serializer(schema_registry_url, ORDER_V1)
    v2_writer = avro_serializer(schema_registry_url, ORDER_V2_NOTED)
    kafka_cluster.produce(topic, [Record(0, T, None, v1_writer({"id": 1, "amount": 1.5}, topic))])
    checkpoint = tmp_path / "c"

    def restart(**options):
        """A run of the query on the checkpoint, into foreachBatch (the memory sink does not
        recover from a checkpoint): the rows of this run by offset, and the query."""
        frame = load(spark, kafka_cluster.bootstrap_servers, topic, secret_url, **{"value.decode": "true", **options})
        rows: list = []
        query = (frame.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            query.awaitTermination(240)
        finally:
            query.stop()
        return {(row.partition, row.offset): row for row in rows}, query

    def decoded(rows):
        return [rows[key].valueDecoded.asDict() for key in sorted(rows)]

    rows, query = restart()
    assert decoded(rows) == [{"id": 1, "amount": 1.5}]
    (v1,) = {end["readerSchemas"]["value"]["id"] for end in offsets_of(query)}
    later = v2_writer({"id": 2, "amount": 2.5, "note": "b"}, topic)
    v2 = int.from_bytes(later[1:5], "big")
    kafka_cluster.produce(topic, [Record(0, T, None, later)])

    with pytest.raises(StreamingQueryException) as failure:
        restart()
    message = str(failure.value)
    assert (f"this checkpoint's values were decoded with the reader schema subject '{topic}-value' version 1 "
            f"(schema id {v1}), and this query was loaded with subject '{topic}-value' version 2 (schema id {v2}), "
            "the subject's latest (its columns have that version's types). Set 'value.subject.version' to 1 to read "
            "as the checkpoint did, or to 2 to move the query to the new version") in message
    assert "url-pw-6610" not in message

    rows, query = restart(**{"value.subject.version": "1"})
    assert decoded(rows) == [{"id": 2, "amount": 2.5}]  # the v2 record, read as v1
    assert [end["readerSchemas"]["value"] for end in offsets_of(query)] == [
        {"subject": f"{topic}-value", "version": 1, "id": v1}]

    kafka_cluster.produce(topic, [Record(0, T, None, v2_writer({"id": 3, "amount": 3.5, "note": "c"}, topic))])
    rows, query = restart(**{"value.subject.version": "2"})
    assert decoded(rows) == [{"id": 3, "amount": 3.5, "note": "c"}]
    assert [end["readerSchemas"]["value"] for end in offsets_of(query)] == [
        {"subject": f"{topic}-value", "version": 2, "id": v2}]

    kafka_cluster.produce(topic, [Record(0, T, None, v1_writer({"id": 4, "amount": 4.5}, topic))])
    rows, _ = restart()
    assert decoded(rows) == [{"id": 4, "amount": 4.5, "note": "-"}]
    checkpoint_text = "".join(path.read_text(errors="replace") for path in checkpoint.rglob("*") if path.is_file())
    assert "url-pw-6610" not in checkpoint_text and f'"readerSchemas":{{"value":{{"subject":"{topic}-value"' in \
        checkpoint_text.replace(" ", "")


def test_an_evolving_debezium_topic_keeps_flowing_and_reads_every_writer_as_the_latest(
        spark_with_kafkasync, kafka_cluster, unique_topic, schema_registry_url, tmp_path):
    spark = spark_with_kafkasync
    evolution = evolving_topic(kafka_cluster, schema_registry_url, unique_topic("evolving"), per_version=6,
                               start_ms=T, partitions=2)
    assert len(set(evolution.schema_ids.values())) == 3
    rows, query = read_all(spark, kafka_cluster.bootstrap_servers, evolution.topic, schema_registry_url,
                           tmp_path / "checkpoint", **{"eventTime.field": "source.ts_ms", "value.decode": "true",
                                                       "schema.registry.basic.auth.user.info": USER_INFO,
                                                       "maxOffsetsPerTrigger": 5})
    assert len(rows) == len(evolution.records) == 18
    for written in evolution.records:
        row = rows[(written.partition, written.offset)]
        assert ms(row.eventTime) == written.event_ms  # the field's time, not the copy job's write time
        assert ms(row.timestamp) != written.event_ms
        after = row.valueDecoded.after.asDict()
        assert after == written.after_as_latest, written.version  # v1: currency's default; v1, v2: buyer by alias
        assert row.valueDecoded.source.ts_ms == written.event_ms and row.valueDecoded.op == "c"
        assert row.value[0] == 0 and int.from_bytes(row.value[1:5], "big") == written.schema_id  # raw value stays
    # Synchronized on the field: stream time steps through source.ts_ms; the offsets say so.
    progress = [json.loads(p.json) for p in query.recentProgress]
    ends = [json.loads(p["sources"][0]["endOffset"]) if isinstance(p["sources"][0]["endOffset"], str)
            else p["sources"][0]["endOffset"] for p in progress if p["numInputRows"]]
    assert len(ends) >= 3 and all(T <= end["streamTime"] <= T + 18 * 60_000 for end in ends)
    assert [end["streamTime"] for end in ends] == sorted(end["streamTime"] for end in ends)
    assert ends[-1]["timeSource"] == "eventTime.field='source.ts_ms' of value.format=avro-confluent as epochMillis"
    # The credentials are nowhere: progress, the checkpoint's files, the plan.
    shown = json.dumps(progress) + "".join(path.read_text(errors="replace")
                                           for path in (tmp_path / "checkpoint").rglob("*") if path.is_file())
    assert "registry-pw-4417" not in shown


@pytest.mark.parametrize("fmt, option, field", [(PROTOBUF, "protobuf-confluent", "updated_at"),
                                                 (PROTOBUF, "protobuf-confluent", "ts_ms"),
                                                 (JSON_SCHEMA, "json-schema-confluent", "ts_ms")])
def test_protobuf_and_json_schema_values_give_their_time_and_columns(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path, fmt, option, field):
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    writer = FramedWriter(kafka_cluster, schema_registry_url, fmt)
    events = [T + i * 61_000 for i in range(4)]
    writer.produce(topic, [Record(0, T + 10**9, None, json.dumps({"id": f"o{i}", "ts": t, "amount": i + 0.5}))
                           for i, t in enumerate(events)])
    rows, _ = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "c",
                       **{"value.format": option, "eventTime.field": field, "value.decode": "true"})
    assert [ms(rows[(0, i)].eventTime) for i in range(4)] == events
    decoded = [rows[(0, i)].valueDecoded for i in range(4)]
    assert [(d.id, d.amount, d.ts_ms) for d in decoded] == [(f"o{i}", i + 0.5, t) for i, t in enumerate(events)]
    if fmt == PROTOBUF:
        assert [ms(d.updated_at) for d in decoded] == events  # Timestamp: a Spark timestamp, as from_protobuf


def test_a_registry_that_does_not_answer_fails_the_query_at_start_naming_the_url_only(spark_with_kafkasync):
    spark = spark_with_kafkasync
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("subscribe", "t").option("value.format", "avro-confluent").option("value.decode", "true")
         .option("schema.registry.url", "http://svc:url-pw-9921@127.0.0.1:1/apis/ccompat/v7")
         .option("schema.registry.max.retries", "1").load())
    assert time.monotonic() - started < 20
    message = str(failure.value)
    assert "the Schema Registry at http://127.0.0.1:1/apis/ccompat/v7 does not answer" in message
    assert "url-pw-9921" not in message


def test_the_plan_masks_the_registrys_credentials(spark_with_kafkasync, capsys, schema_registry_url):
    spark = spark_with_kafkasync
    frame = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", "127.0.0.1:1")
             .option("subscribe", "t").option("value.format", "avro-confluent")
             .option("schema.registry.url", schema_registry_url)
             .option("schema.registry.basic.auth.user.info", USER_INFO).load())
    frame.explain(extended=True)
    printed = capsys.readouterr().out
    assert "registry-pw-4417" not in printed and "schema.registry.basic.auth.user.info" in printed


@pytest.mark.slow
def test_a_registry_down_mid_stream_keeps_known_ids_and_fails_a_new_one_naming_it_and_the_url(kafka_cluster):
    """A registry of its own, stopped between two records: the one whose schema was fetched
    before reads on; the other's id, new to the process, is retried and then fails."""
    from kafkasync_dev.testing.schema_registry import start_registry

    with start_registry() as own:
        url = own.url
        topic = "down-mid-stream"
        first = avro_serializer(url, envelope_schema(VALUE_V1))(change_event(
            {"id": "a", "customer": "c", "amount": 1.0}, T, T), topic)
        options = parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                                 "value.format": "avro-confluent", "schema.registry.url": url,
                                 "schema.registry.max.retries": "2", "schema.registry.retries.wait.ms": "200",
                                 "schema.registry.basic.auth.user.info": USER_INFO,
                                 "eventTime.field": "source.ts_ms"}, streaming=True)
        seam = record_time(options.event_time)
        assert seam.time_of(Message(topic=topic, partition=0, offset=0, value=first, timestamp=(1, T))) == T
        # A writer's next version, registered after the query started: an id the process has not met.
        second = avro_serializer(url, envelope_schema(VALUE_V2))(change_event(
            {"id": "b", "customer": "c", "amount": 2.0, "currency": "USD"}, T + 1, T + 1), topic)
    # The registry is gone.
    assert seam.time_of(Message(topic=topic, partition=0, offset=1, value=first, timestamp=(1, T))) == T
    started = time.monotonic()
    with pytest.raises(Exception, match=f"{topic}-0 offset 2.*cannot fetch schema id "
                                        f"{int.from_bytes(second[1:5], 'big')} from the registry at {url}") as failure:
        seam.time_of(Message(topic=topic, partition=0, offset=2, value=second, timestamp=(1, T)))
    assert time.monotonic() - started >= 0.2, "retried with backoff before failing"
    assert "registry-pw-4417" not in str(failure.value)


def test_options_name_what_is_missing():
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    with pytest.raises(KafkaSyncOptionError, match="'eventTime.field' names a field of the decoded value: set 'value"):
        parse_options({**base, "eventTime.field": "source.ts_ms"}, streaming=True)
    with pytest.raises(KafkaSyncOptionError, match="needs 'schema.registry.url'"):
        parse_options({**base, "value.format": "avro-confluent"}, streaming=True)
    with pytest.raises(KafkaSyncOptionError, match="'value.decode' needs 'value.format'"):
        parse_options({**base, "value.decode": "true"}, streaming=True)
    with pytest.raises(KafkaSyncOptionError, match="record-name' needs 'value.record.name'"):
        parse_options({**base, "value.format": "avro-confluent", "schema.registry.url": "http://127.0.0.1:1",
                       "value.subject.name.strategy": "record-name"}, streaming=True)


def avro_name(topic: str) -> str:
    """A name for this test's own record types (an Avro name: letters, digits, underscores)."""
    return re.sub(r"\W", "_", f"t_{topic}")


# -- keys ---------------------------------------------------------------------------------------

KEY_SCHEMA = json.dumps({"type": "record", "name": "Key", "namespace": "dbserver1.public.orders",
                         "fields": [{"name": "id", "type": "string"}]})
"""Debezium's key: the row's primary key as a record, registered under ``<topic>-key``."""


def test_framed_keys_and_values_decode_into_their_own_columns(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    """Keys and values both written by ``AvroSerializer`` (the key under ``<topic>-key``):
    ``keyDecoded`` and ``valueDecoded`` hold each, the raw ``key`` and ``value`` stay, and the
    event time is the value's field."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    key_of = avro_serializer(schema_registry_url, KEY_SCHEMA, part="key")
    value_of = avro_serializer(schema_registry_url, envelope_schema(VALUE_V1))
    written = [(key_of({"id": f"o{i}"}, topic), value_of(change_event(
        {"id": f"o{i}", "customer": "c", "amount": i + 0.5}, T + i * 60_000, T + 10**9), topic)) for i in range(4)]
    kafka_cluster.produce(topic, [Record(0, T + 10**9, key, value) for key, value in written])
    checkpoint = tmp_path / "c"
    rows, _ = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, checkpoint,
                       **{"key.format": "avro-confluent", "key.decode": "true", "value.decode": "true",
                          "eventTime.field": "source.ts_ms"})
    assert [(rows[(0, i)].keyDecoded.asDict(), rows[(0, i)].valueDecoded.after.id, ms(rows[(0, i)].eventTime))
            for i in range(4)] == [({"id": f"o{i}"}, f"o{i}", T + i * 60_000) for i in range(4)]
    assert [(bytes(rows[(0, i)].key), bytes(rows[(0, i)].value)) for i in range(4)] == written
    columns = spark.table(memory_table(checkpoint)).schema
    assert columns["keyDecoded"].dataType.simpleString() == "struct<id:string>"  # from_avro's type
    assert [field.name for field in columns][-2:] == ["keyDecoded", "valueDecoded"]


def test_a_key_format_alone_decodes_the_key_and_leaves_the_value_raw(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    """``key.format`` without ``value.format``: JSON values timed by ``eventTime.jsonPath``, Avro
    keys decoded; a record without a key has a null ``keyDecoded``, and so, under
    ``key.decode.mode=PERMISSIVE``, has one whose key is not framed, the reason in ``keyDecodeError``
    (by default it fails the query)."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    key_of = avro_serializer(schema_registry_url, KEY_SCHEMA, part="key")
    keys = [key_of({"id": "a"}, topic), None, b"plain-key", key_of({"id": "d"}, topic)]
    kafka_cluster.produce(topic, [Record(0, T + 10**9, key, json.dumps({"ts": T + i}).encode())
                                  for i, key in enumerate(keys)])
    checkpoint = tmp_path / "c"
    options = {"value.format": None, "key.format": "avro-confluent", "key.decode": "true", "eventTime.jsonPath": "$.ts"}
    with pytest.raises(StreamingQueryException, match=f"{topic}-0 offset 2: the key cannot be decoded .*not-framed"):
        read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "failfast", **options)
    rows, _ = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, checkpoint,
                       **options, **{"key.decode.mode": "PERMISSIVE"})
    assert [(row.keyDecoded.id if row.keyDecoded else None, row.keyDecodeError, ms(row.eventTime),
             row.key and bytes(row.key)) for _, row in sorted(rows.items())] == [
        ("a", None, T, keys[0]), (None, None, T + 1, None),
        (None, "not-framed: the payload starts with byte 112, not Confluent's magic byte 0", T + 2, b"plain-key"),
        ("d", None, T + 3, keys[3])]
    assert spark.table(memory_table(checkpoint)).columns[-2:] == ["keyDecoded", "keyDecodeError"]


# -- record subject name strategies, and evolution in every format ------------------------------

@pytest.mark.parametrize("fmt, option, strategy", [
    (DEBEZIUM_AVRO, "avro-confluent", "record"), (DEBEZIUM_AVRO, "avro-confluent", "topic_record"),
    (PROTOBUF, "protobuf-confluent", "record"), (JSON_SCHEMA, "json-schema-confluent", "topic_record")])
def test_writers_under_a_record_subject_strategy_evolve_and_read_as_that_subjects_latest(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path, fmt, option, strategy):
    """Records written v1 then v2 (``currency`` added) by confluent-kafka's serializers with
    ``subject.name.strategy`` set to ``record_subject_name_strategy`` /
    ``topic_record_subject_name_strategy``, read with the matching
    ``value.subject.name.strategy`` and ``value.record.name``: the reader is that subject's latest
    version (v2, so every row has ``currency``: Avro's default for v1 records, null in Protobuf
    and JSON), and the event time is the field's. There is no ``<topic>-value`` subject to fall
    back on. The Protobuf file defines another message before ``Order`` (message indexes [1])."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    writers = record_named_writers(fmt, schema_registry_url, avro_name(topic), strategy)
    changes = [Change(f"o{i}", i + 0.5, T + i * 61_000, T + 10**9 + i) for i in range(6)]
    kafka_cluster.produce(topic, [Record(0, c.written_ms, None, writers.versions[i // 3](c, topic))
                                  for i, c in enumerate(changes)])
    subject = writers.record_name if strategy == "record" else f"{topic}-{writers.record_name}"
    client = SchemaRegistryClient({"url": schema_registry_url})
    assert len(client.get_versions(subject)) == 2 and f"{topic}-value" not in client.get_subjects()
    rows, _ = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "c",
                       **{"value.format": option, "value.subject.name.strategy": strategy.replace("_", "-") + "-name",
                          "value.record.name": writers.record_name, "eventTime.field": writers.time_field,
                          "value.decode": "true"})
    assert [ms(rows[(0, i)].eventTime) for i in range(6)] == [c.event_ms for c in changes]
    decoded = [rows[(0, i)].valueDecoded for i in range(6)]
    rows_read = [d.after if fmt == DEBEZIUM_AVRO else d for d in decoded]
    v1_currency = "EUR" if fmt == DEBEZIUM_AVRO else None
    assert [(r.id, r.amount, r.currency) for r in rows_read] == [
        (c.id, c.amount, "USD" if i >= 3 else v1_currency) for i, c in enumerate(changes)]


# -- Avro schema references -----------------------------------------------------------------------

def test_avro_writers_that_reference_other_subjects_types_give_their_time_and_columns(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    """Debezium envelopes whose row and ``source`` types live in subjects of their own (schema
    references), v1 then v2 (the referenced row's second version adds ``currency``): the time
    is read through the referenced ``source`` type and every record decodes as the latest."""
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    v1, v2 = referencing_writers(schema_registry_url, avro_name(topic))
    events = [T + i * 61_000 for i in range(6)]
    payloads = [(v1 if i < 3 else v2)(change_event({"id": f"o{i}", "customer": "c", "amount": i + 0.5,
                                                     **({"currency": "USD"} if i >= 3 else {})}, t, T + 10**9), topic)
                for i, t in enumerate(events)]
    assert len({p[1:5] for p in payloads}) == 2  # two writer schema ids
    kafka_cluster.produce(topic, [Record(0, T + 10**9, None, payload) for payload in payloads])
    rows, _ = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "c",
                       **{"eventTime.field": "source.ts_ms", "value.decode": "true"})
    assert [ms(rows[(0, i)].eventTime) for i in range(6)] == events
    assert [(d.after.id, d.after.currency, d.source.ts_ms) for d in (rows[(0, i)].valueDecoded for i in range(6))] \
        == [(f"o{i}", "USD" if i >= 3 else "EUR", t) for i, t in enumerate(events)]


def test_a_referencing_avro_schema_is_made_standalone_with_each_reference_fetched_once(
        schema_registry_url, unique_topic):
    """``Registry.schema`` answers a referencing writer schema with its referenced types written
    in (one schema fastavro parses alone), each referenced subject version fetched once for all
    the writer ids that share it; a schema without references comes back as the registry has it."""
    import fastavro

    topic = unique_topic()
    writers = referencing_writers(schema_registry_url, avro_name(topic))
    ids = [int.from_bytes(write(change_event({"id": "a", "customer": "c", "amount": 1.0, "currency": "USD"},
                                             T, T), topic)[1:5], "big") for write in writers]
    known = Registry(RegistrySettings(schema_registry_url))
    fetched: list[tuple[str, int]] = []
    get_version = known._client.get_version
    known._client.get_version = lambda subject, version, *rest, **kw: (
        fetched.append((subject, version)) or get_version(subject, version, *rest, **kw))
    standalone = [known.schema(schema_ref) for schema_ref in ids]
    assert all(s.references == [] for s in standalone)
    # The row's definition is written in at its first use, ``before`` (``after`` names it).
    row_fields = [[f["name"] for f in fastavro.parse_schema(json.loads(s.schema_str))["fields"][0]["type"][1]["fields"]]
                  for s in standalone]
    assert row_fields == [["id", "customer", "amount"], ["id", "customer", "amount", "currency"]]
    namespace = f"dbserver1.public.{avro_name(topic)}"
    assert sorted(fetched) == [(f"{namespace}.Source", 1), (f"{namespace}.Value", 1), (f"{namespace}.Value", 2)]
    row = SchemaRegistryClient({"url": schema_registry_url}).get_version(f"{namespace}.Value", 1)
    assert known.schema(row.schema_id).schema_str == row.schema.schema_str



@pytest.mark.parametrize("failure, why", [
    (SchemaRegistryError(404, 40402, "Version not found"), "which the registry at {url} does not have"),
    (ConnectionError("connection refused"), "which the registry at {url} cannot give: ConnectionError: connection "
                                            "refused")])
def test_a_reference_the_registry_cannot_give_fails_naming_the_schema_id_subject_version_and_url(failure, why):
    """A registry refuses to register a schema whose reference does not exist, and to delete a
    version that is referenced (tried on Apicurio 3.3.3: HTTP 422, "Unresolved reference" and
    error 42206 "There are subjects referencing", Confluent's code for that refusal), so a
    reference goes missing only when the registry cannot be asked between the schema and its
    reference: the client here answers the schema and then fails as confluent-kafka's client
    does (``SchemaRegistryError`` with the HTTP status, or the transport's error)."""
    url = "http://127.0.0.1:1/apis/ccompat/v7"
    known = Registry(RegistrySettings(url.replace("//", "//svc:ref-pw-5521@")))
    envelope = json.dumps({"type": "record", "name": "E", "fields": [{"name": "row", "type": "shop.Row"}]})

    class Client:
        def get_schema(self, schema_id, fmt=None):
            return Schema(envelope, "AVRO", [SchemaReference("shop.Row", "shop.Row", 3)])

        def get_version(self, subject, version, *rest, **kw):
            raise failure

    known._client = Client()
    with pytest.raises(KafkaSyncFormatError) as raised:
        known.schema(12)
    expected = f"kafkasync: schema id 12 references subject 'shop.Row' version 3, {why.format(url=url)}"
    assert str(raised.value) == expected  # the URL without its credentials


# -- Protobuf against the real registry, without Spark ------------------------------------------

def test_protobuf_from_the_real_registry_is_read_with_the_named_reader_message_by_field_number(
        schema_registry_url, unique_topic):
    """Written by confluent-kafka's ``ProtobufSerializer`` through Apicurio (the file as the
    registry keeps it, ``timestamp.proto`` a known type): the reader file defines ``Audit`` before
    ``Order``, so ``value.record.name`` is needed; an ``Order`` decodes, its uint64 2^64-1 as -1 as
    ``from_protobuf`` gives it; an ``Audit`` of the same file is another message (incompatible); the
    deprecated framing's index is not framed; ``ts_ms`` left 0 is no time."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf.message_factory import GetMessageClass
    from pyspark.sql import types as PT

    from kafkasync_dev.testing.debezium import SERIALIZER_CONF, order_message_class
    from kafkasync_source.event_time.formats import InvalidTime
    from kafkasync_source.formats import decoded
    from kafkasync_source.formats.options import PROTOBUF, FormatOptions
    from kafkasync_source.spark.schema import arrow_schema

    topic = unique_topic()
    package = f"kafkasync.{avro_name(topic)}"
    order_class = order_message_class(package, after="Audit")
    audit_class = GetMessageClass(order_class.DESCRIPTOR.file.pool.FindMessageTypeByName(f"{package}.Audit"))
    client = SchemaRegistryClient({"url": schema_registry_url})
    context = SerializationContext(topic, MessageField.VALUE)
    order = order_class(id="o1", amount=2.5, ts_ms=T)
    order.updated_at.FromMilliseconds(T)
    written = [ProtobufSerializer(order_class, client, {"use.deprecated.format": False, **SERIALIZER_CONF})(m, context)
               for m in (order, order_class(id="o2"))]
    written.append(ProtobufSerializer(audit_class, client, {"use.deprecated.format": False, **SERIALIZER_CONF})(
        audit_class(note="n"), context))
    assert [w[5:7] for w in written[:2]] == [b"\x02\x02"] * 2 and written[2][5] == 0  # indexes [1], [1], [0]
    written.append(written[0][:5] + b"\x01" + written[0][7:])  # a count of -1: the deprecated framing
    reader_id = client.get_latest_version(f"{topic}-value").schema_id
    settings = RegistrySettings(schema_registry_url)
    options = FormatOptions(PROTOBUF, settings, "value", f"{topic}-value", reader_id, True, f"{package}.Order")
    with pytest.raises(ValueError, match="Option 'value.record.name' is needed: .* 2 top-level messages"):
        FormatOptions(PROTOBUF, settings, "value", f"{topic}-value", reader_id, True, None).spark_type()
    arrow_type = arrow_schema(PT.StructType([PT.StructField("v", options.spark_type())])).field("v").type
    records = [Message(topic=topic, partition=0, offset=i, value=v, timestamp=(1, T)) for i, v in enumerate(written)]
    column = options.column_decoder(arrow_type)(records)
    rows = column.values.to_pylist()
    assert (rows[0]["id"], rows[0]["amount"], rows[0]["ts_ms"]) == ("o1", 2.5, T)
    assert rows[1] == {"id": "o2", "customer": None, "amount": None, "updated_at": None, "ts_ms": None}
    assert [(u.row, u.kind) for u in column.undecodable] == [(2, decoded.INCOMPATIBLE), (3, decoded.NOT_FRAMED)]
    read = options.time_reader("ts_ms", "epochMillis")
    assert read(records[0]) == T
    with pytest.raises(InvalidTime, match="ts_ms is not set"):
        read(records[1])


def test_protobuf_that_imports_another_subjects_file_is_read_from_the_real_registry(schema_registry_url, unique_topic):
    """confluent-kafka's ``ProtobufSerializer`` registers an imported file under a subject named
    after it and the importing file with a reference to it. Its resolver then asks each version
    as ``format=serialized``, which Apicurio 3.3.3 answers with HTTP 500 for the descriptor the
    serializer registered: kafkasync, which used it, could read no such file. Now the value
    decodes and the time reads through the imported message."""
    import pyarrow as pa
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    from pyspark.sql import types as PT

    from kafkasync_dev.testing.debezium import SERIALIZER_CONF
    from kafkasync_source.formats.options import PROTOBUF, FormatOptions
    from kafkasync_source.spark.schema import arrow_schema

    topic = unique_topic()
    package = f"kafkasync.{avro_name(topic)}"
    field = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name=f"{package.replace('.', '/')}/money.proto", package=package,
                                               syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    price = money.message_type.add(name="Money")
    price.field.add(name="cents", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    price.field.add(name="at", number=2, type=field.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                    label=field.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(name=f"{package.replace('.', '/')}/order.proto", package=package,
                                               syntax="proto3", dependency=[money.name])
    message = order.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="price", number=2, type=field.TYPE_MESSAGE, type_name=f".{package}.Money",
                      label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    for proto in (descriptor_pb2.FileDescriptorProto.FromString(timestamp_pb2.DESCRIPTOR.serialized_pb), money, order):
        pool.Add(proto)
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))
    client = SchemaRegistryClient({"url": schema_registry_url})
    value = order_class(id="o1")
    value.price.cents = 995
    value.price.at.FromMilliseconds(T)
    written = ProtobufSerializer(order_class, client, {"use.deprecated.format": False, **SERIALIZER_CONF})(
        value, SerializationContext(topic, MessageField.VALUE))
    latest = client.get_latest_version(f"{topic}-value")
    assert [(r.name, r.subject) for r in latest.schema.references] == [(money.name, money.name)]
    options = FormatOptions(PROTOBUF, RegistrySettings(schema_registry_url), "value", f"{topic}-value",
                            latest.schema_id, True, None)
    arrow_type = arrow_schema(PT.StructType([PT.StructField("v", options.spark_type())])).field("v").type
    record = Message(topic=topic, partition=0, offset=0, value=written, timestamp=(1, T))
    column = options.column_decoder(arrow_type)([record])
    assert column.undecodable == ()
    plain = pa.struct([("id", pa.string()), ("price", pa.struct([("cents", pa.int64()), ("at", pa.int64())]))])
    assert column.values.cast(plain).to_pylist() == [{"id": "o1", "price": {"cents": 995, "at": T * 1000}}]
    assert options.time_reader("price.at", "epochMillis")(record) == T

