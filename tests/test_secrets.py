"""Secrets (keys, passwords, JAAS lines, OAuth secrets) never appear in explain(), errors,
progress or the checkpoint's offsets."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kafkasync_dev.testing import Record
from kafkasync_source.config.client_config import scrub
from kafkasync_source.config.options import parse_options
from kafkasync_source.spark.source import register

BASE_TS = 1_700_000_000_000
# Values without "secret"/"password" in them: Spark's own patterns also match option values.
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
SECRETS = {
    "kafka.ssl.key.pem": PEM,
    "kafka.ssl.key.password": "hunter2-key",
    "kafka.sasl.oauthbearer.client.secret": "oauth-val-7781",
    "kafka.sasl.oauthbearer.config": "principal=svc scope=all extension_k=oauth-ext-991",
    "kafka.sasl.jaas.config": 'PlainLoginModule required password="jaas-pw-5521" username="svc";',
}
FRAGMENTS = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "hunter2-key", "oauth-val-7781",
             "oauth-ext-991", "jaas-pw-5521")


def assert_no_secret(text: str) -> None:
    leaked = [fragment for fragment in FRAGMENTS if fragment in text]
    assert not leaked, f"secret(s) {leaked} in: {text[:2000]}"


@pytest.fixture(scope="module")
def kafkasync_registered(spark):
    """The Spark tests read through format("kafkasync"); the others need no Spark."""
    register(spark)


def reader(spark, bootstrap, **options):
    stream = spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
    for key, value in {**SECRETS, **options}.items():
        stream = stream.option(key, value)
    return stream


def test_explain_masks_every_secret_option(kafkasync_registered, spark, capsys):
    frame = reader(spark, "127.0.0.1:1", subscribe="t").load()
    frame.explain(extended=True)
    printed = capsys.readouterr().out
    assert "kafka.ssl.key.pem=*********(redacted)" in printed
    assert "kafka.bootstrap.servers=127.0.0.1:1" in printed  # not a secret: still shown
    assert_no_secret(printed)


def test_errors_name_the_option_not_the_secret(kafkasync_registered, spark):
    with pytest.raises(Exception) as failure:
        reader(spark, "127.0.0.1:1", subscribe="t", startingOffsets='{"t":{"0":1.5}}').load()
    assert "startingOffsets" in str(failure.value)
    assert_no_secret(str(failure.value))


def test_scrub_masks_secret_values_in_client_messages():
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **SECRETS},
                           streaming=True).client_config
    message = f"Failed: ssl.key.pem={PEM}; sasl.password=jaas-pw-5521; bootstrap h:1"
    scrubbed = scrub(message, config)
    assert_no_secret(scrubbed)
    assert "bootstrap h:1" in scrubbed


def test_progress_and_offsets_hold_no_secret(kafkasync_registered, spark, kafka_cluster, topic_factory, tmp_path):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(5)])
    checkpoint = tmp_path / "cp"
    # The plaintext mock ignores SSL/SASL settings; the ones that would switch them on are
    # left out, the secret values are passed all the same.
    secrets = {k: v for k, v in SECRETS.items() if k != "kafka.ssl.key.pem"}
    stream = spark.readStream.format("kafkasync").option("kafka.bootstrap.servers",
                                                         kafka_cluster.bootstrap_servers)
    for key, value in {**secrets, "subscribe": topic, "startingOffsets": "earliest"}.items():
        stream = stream.option(key, value)
    query = (stream.load().writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            p["numInputRows"] for p in query.recentProgress
        ):
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        progress = "\n".join(p.json for p in query.recentProgress)
    finally:
        query.stop()
    assert sum(p["numInputRows"] for p in map(json.loads, progress.splitlines())) == 5
    assert_no_secret(progress)
    offsets = "".join(p.read_text() for p in Path(checkpoint, "offsets").iterdir() if p.name.isdigit())
    assert topic in offsets
    assert_no_secret(offsets)


def test_a_range_readers_repr_holds_no_secret():
    """Spark pickles the reader into every task; a repr of it lands in logs and tracebacks."""
    from kafkasync_source.executor.range_reader import RangeReader
    from kafkasync_source.spark.schema import kafka_schema

    options = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **SECRETS,
                             "kafka.sasl.password": "sasl-pw-4410"}, streaming=True)
    shown = repr(RangeReader.from_options(options, kafka_schema(False)))
    assert_no_secret(shown)
    assert "sasl-pw-4410" not in shown
    assert "poll_timeout_ms" in shown  # the rest is still shown


def test_a_keystores_contents_repr_holds_no_key():
    from kafkasync_source.config.java_keystores import StoreContents

    shown = repr(StoreContents(("-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n",), PEM))
    assert_no_secret(shown)
    assert "MIIBcert" in shown


def test_nothing_the_reader_schema_pin_or_the_decode_mode_shows_holds_the_registrys_credentials(caplog):
    """Issue 61, item 6: the registry's URL user info, basic auth and bearer token never reach the
    schema's metadata, the offsets' readerSchemas, the live report, a decode error (FAILFAST's
    message, PERMISSIVE's column and log), the restart check's message, the registry's warnings
    or a repr. The registry is the client double: every message is what kafkasync builds."""
    import io
    import logging
    import uuid

    import fastavro
    from confluent_kafka import Message
    from pyspark.sql.types import _parse_datatype_json_string

    from kafkasync_dev.testing.registry_double import RegistryDouble, avro_schema, serving
    from kafkasync_source.config.errors import KafkaSyncOptionError
    from kafkasync_source.executor.decode_policy import DecodePolicy
    from kafkasync_source.formats.registry import KafkaSyncFormatError, RegistrySettings, registry
    from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
    from kafkasync_source.planning.planner import TopicPartition
    from kafkasync_source.spark.schema import arrow_schema
    from kafkasync_source.spark.source import KafkaSyncDataSource

    fragments = ("url-pw-3107", "auth-pw-3108", "bearer-tok-3109")
    url = f"http://svc:url-pw-3107@127.0.0.1:1/{uuid.uuid4().hex}"
    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders", "value.format": "avro-confluent",
               "schema.registry.url": url, "schema.registry.basic.auth.user.info": "svc:auth-pw-3108",
               "schema.registry.bearer.auth.token": "bearer-tok-3109", "value.decode": "true",
               "eventTime.field": "id", "eventTime.onInvalid": "skip"}
    settings = RegistrySettings(url, tuple(sorted((key[len("schema.registry."):], value) for key, value in options.items()
                                                  if key.startswith("schema.registry.") and key != "schema.registry.url")))
    order = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
    shown: list[str] = []
    double = RegistryDouble()
    with serving(double, settings), caplog.at_level(logging.DEBUG):
        v1 = double.register_schema("orders-value", avro_schema(json.dumps(order)))
        schema = _parse_datatype_json_string(KafkaSyncDataSource(options).schema().json())
        shown.append(schema.json())
        foreign = double.register_schema("other-value", avro_schema(json.dumps({**order, "doc": "another subject's"})))
        body = io.BytesIO()
        fastavro.schemaless_writer(body, fastavro.parse_schema(order), {"id": 1})
        values = [b"\x00" + foreign.to_bytes(4, "big") + body.getvalue(), b"{}", b"\x00\x00\x00\x0f\xff\x02"]
        records = [Message(topic="orders", partition=0, offset=i, value=v, timestamp=(1, 0)) for i, v in enumerate(values)]
        for mode in ("FAILFAST", "PERMISSIVE"):
            source = KafkaSyncDataSource({**options, "value.decode.mode": mode})
            reader = source.streamReader(_parse_datatype_json_string(source.schema().json()))
            value_format = reader._options.value_format
            policy = DecodePolicy(value_format, arrow_schema(reader._schema).field("valueDecoded").type)
            shown += [repr(reader._options), repr(value_format), repr(registry(settings)), value_format.describe_reader()]
            try:
                shown += [str(column.to_pylist()) for column in policy(records)]
            except KafkaSyncFormatError as failure:
                shown.append(str(failure))
            shown.append(json.dumps(SyncOffset({TopicPartition("orders", 0): PartitionOffset(1)})
                                    .read_as(reader._read_as).to_json()))
        double.register_schema("orders-value", avro_schema(json.dumps({**order, "fields": [
            *order["fields"], {"name": "note", "type": "string", "default": ""}]})))
        double.delete_version("orders-value", 1)
        double.delete_version("orders-value", 1, permanent=True)
        restarted = KafkaSyncDataSource(options).streamReader(_parse_datatype_json_string(
            KafkaSyncDataSource(options).schema().json()))
        recorded = SyncOffset({TopicPartition("orders", 0): PartitionOffset(1)}).read_as(
            {"value": {"subject": "orders-value", "version": 1, "id": v1}}).to_json()
        with pytest.raises(KafkaSyncOptionError) as gone:
            restarted._offset(recorded)
        shown.append(str(gone.value))
        double.down = True
        with pytest.raises(KafkaSyncFormatError) as down:
            registry(settings).schema(4242)
        shown.append(str(down.value))
    shown += [record.getMessage() for record in caplog.records]
    text = "\n".join(shown)
    assert "no longer in the registry at http://127.0.0.1:1/" in text, text[-3000:]
    assert "not-framed" in text and "unknown-schema" in text and "the value cannot be decoded" in text
    assert "cannot fetch schema id 4242 from the registry at http://127.0.0.1:1/" in text
    assert "is no version of the subject records are read as" in text
    leaked = [fragment for fragment in fragments if fragment in text]
    assert not leaked, f"secret(s) {leaked} in: {text[:3000]}"
