"""Schema Registry formats against a real registry (Apicurio, ``schema_registry_url``) and the
embedded cluster, with records written by confluent-kafka's own serializers
(kafkasync_dev/testing/debezium.py: ``AvroSerializer``, ``ProtobufSerializer``, ``JSONSerializer``).

* A Debezium topic whose writers move v1 -> v2 (a field added with a default) -> v3 (a field
  renamed through an alias) keeps flowing: every record's ``eventTime`` is its ``source.ts_ms``
  and its ``valueDecoded`` what a reader of v3 makes of it; the offsets record the time source.
* An incompatible writer fails the query naming topic, partition, offset, schema id and field.
* A record that is not framed, or whose schema id the registry does not know, is an invalid
  time under ``onInvalid`` and a null decoded value, the records around it read.
* Protobuf (``google.protobuf.Timestamp``) and JSON Schema values: the time and the columns.
* Credentials never show: not in the plan, the progress, the checkpoint, nor an error; a
  registry that does not answer at start fails within seconds naming the URL only.
* A registry that goes down mid-stream: schema ids already fetched keep being read; a new one
  is retried, then fails naming the id and the URL (``slow``: a registry of its own).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Message
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.debezium import (
    JSON_SCHEMA,
    PROTOBUF,
    VALUE_V1,
    VALUE_V2,
    FramedWriter,
    avro_serializer,
    change_event,
    envelope_schema,
    evolving_topic,
    incompatible_writer,
)
from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.options import parse_options
from kafkasync_source.event_time import record_time
from kafkasync_source.spark.source import register

T = 1_700_000_000_000
USER_INFO = "svc:registry-pw-4417"
"""Sent as basic auth; Apicurio without authentication ignores it. It must never be shown."""


@pytest.fixture
def spark_with_kafkasync(spark):
    """The shared session with kafkasync registered (the tests without Spark start none)."""
    register(spark)
    return spark


def read_all(spark, bootstrap, topic, registry_url, checkpoint: Path, **options):
    """The topic read with trigger(availableNow=True) into a memory table: (rows by offset, query)."""
    name = f"formats_{abs(hash(str(checkpoint)))}"
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("value.format", "avro-confluent").option("schema.registry.url", registry_url))
    for key, value in options.items():
        stream = stream.option(key, str(value))
    query = (stream.load().writeStream.format("memory").queryName(name)
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
    # before comes first in Debezium's envelope and holds the same row type: the first field that fails.
    assert f"writer schema id {bad_id}" in message and "'before.amount' is a string in the writer schema" in message


def test_records_not_framed_or_of_an_unknown_schema_id_are_invalid_times_and_null_values(
        spark_with_kafkasync, kafka_cluster, topic_factory, schema_registry_url, tmp_path):
    spark = spark_with_kafkasync
    topic = topic_factory(1)
    encode = avro_serializer(schema_registry_url, envelope_schema(VALUE_V1))
    good = [encode(change_event({"id": f"o{i}", "customer": "c", "amount": 1.0}, T + i * 1000, T + 10**9), topic)
            for i in range(3)]
    strays = [b"{\"ts\": 1}", b"\x00\x00\x00", b"\x00\x7f\xff\xff\xf0" + good[0][5:]]  # JSON, too short, unknown id
    kafka_cluster.produce(topic, [Record(0, T + 10**9, None, value) for value in [good[0], *strays, good[1], good[2]]])
    rows, _ = read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "skip",
                       **{"eventTime.field": "source.ts_ms", "eventTime.onInvalid": "skip", "value.decode": "true"})
    assert [(offset, ms(row.eventTime) if row.eventTime else None, row.valueDecoded is not None)
            for (_, offset), row in sorted(rows.items())] == [
        (0, T, True), (1, None, False), (2, None, False), (3, None, False), (4, T + 1000, True), (5, T + 2000, True)]
    with pytest.raises(StreamingQueryException, match=f"no event time for {topic}-0 offset 1 .*not Confluent's magic"):
        read_all(spark, kafka_cluster.bootstrap_servers, topic, schema_registry_url, tmp_path / "fail",
                 **{"eventTime.field": "source.ts_ms"})


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
