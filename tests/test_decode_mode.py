"""``<part>.decode.mode`` on the executors (executor/decode_policy.py), without Spark or Kafka:
records are ``confluent_kafka.Message`` objects as a consumer hands them over, Avro values framed
as confluent-kafka's serializers frame them, the registry the client double
(kafkasync_dev/testing/registry_double.py).

* FAILFAST (the default, as from_avro's): the first record that cannot be decoded fails, naming
  topic, partition, offset, schema id, kind and reason. Before, it was a silent null.
* PERMISSIVE: null in the decoded column, ``kind: reason (schema id N)`` in ``<part>DecodeError``
  (null for a tombstone and for every record that decoded); the first of each kind logged once
  per worker, without the registry's credentials.
"""

from __future__ import annotations

import io
import json
import logging
import uuid

import fastavro
import pytest
from confluent_kafka import Message

from kafkasync_dev.testing.registry_double import RegistryDouble, avro_schema, serving
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor import decode_policy
from kafkasync_source.executor.decode_policy import DecodePolicy
from kafkasync_source.executor.record_columns import RecordColumns
from kafkasync_source.formats.registry import KafkaSyncFormatError, RegistrySettings
from kafkasync_source.spark.schema import arrow_schema, decoded_fields, kafka_schema

T = 1_700_000_000_000
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                      {"name": "amount", "type": "double"}]}
PASSWORD = "url-pw-5150"


@pytest.fixture
def scene(monkeypatch):
    """A registry of its own (a URL no other test uses: the decoders keep compiled readers per
    process and options), one Avro writer registered, and the query's value format."""
    monkeypatch.setattr(decode_policy, "_LOGGED", set())
    url = f"http://svc:{PASSWORD}@127.0.0.1:1/{uuid.uuid4().hex}"
    double = RegistryDouble()
    with serving(double, RegistrySettings(url)):
        schema_id = double.register_schema("orders-value", avro_schema(json.dumps(ORDER)))

        def value_format(mode: str = "FAILFAST"):
            return parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders",
                                  "value.format": "avro-confluent", "schema.registry.url": url,
                                  "value.decode": "true", "value.decode.mode": mode}, streaming=True).value_format
        yield schema_id, value_format


def framed(schema_id: int, record: dict) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(ORDER), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()


def messages(values: list) -> list:
    return [Message(topic="orders", partition=3, offset=100 + i, value=value, timestamp=(1, T))
            for i, value in enumerate(values)]


def arrow_type(value_format):
    return arrow_schema(kafka_schema(False, decoded=decoded_fields(value_format, value_format.spark_type())))


def test_failfast_fails_at_the_first_record_that_cannot_be_decoded_naming_it(scene):
    schema_id, value_format = scene
    options = value_format()
    policy = DecodePolicy(options, arrow_type(options).field("valueDecoded").type)
    good = framed(schema_id, {"id": 1, "amount": 2.5})
    assert policy(messages([good, None]))[0].to_pylist() == [{"id": 1, "amount": 2.5}, None]  # a tombstone is null
    with pytest.raises(KafkaSyncFormatError) as failure:
        policy(messages([good, b"\x00\x00\x7f\xff\xf0" + good[5:], b"{\"id\": 3}"]))
    message = str(failure.value)
    assert message == (
        "kafkasync: orders-3 offset 101: the value cannot be decoded (value.format=avro-confluent read as subject "
        f"'orders-value' version 1 (schema id {schema_id})): unknown-schema: the registry at "
        f"http://127.0.0.1:1/{options.registry.url.rpartition('/')[2]} has no schema id 8388592 (schema id 8388592). "
        "Set 'value.decode.mode=PERMISSIVE' to read such records with a null valueDecoded and the reason in "
        "valueDecodeError.")
    assert PASSWORD not in message


def test_permissive_makes_it_null_and_says_why_beside_it(scene, caplog):
    schema_id, value_format = scene
    options = value_format("PERMISSIVE")
    schema = arrow_type(options)
    assert schema.names[-2:] == ["valueDecoded", "valueDecodeError"]
    good = framed(schema_id, {"id": 1, "amount": 2.5})
    columns = RecordColumns("orders", False, decoders=[DecodePolicy(options, schema.field("valueDecoded").type)])
    with caplog.at_level(logging.WARNING, logger="kafkasync_source.executor.decode_policy"):
        columns.extend(messages([good, None, b"{\"id\": 3}", b"\x00\x00\x7f\xff\xf0" + good[5:], b"\x00\x01"]))
        columns.extend(messages([b"{\"id\": 4}", good]))
    rows = columns.to_batch(schema).to_pylist()
    assert [(row["valueDecoded"], row["valueDecodeError"]) for row in rows] == [
        ({"id": 1, "amount": 2.5}, None),
        (None, None),
        (None, "not-framed: the payload starts with byte 123, not Confluent's magic byte 0"),
        (None, f"unknown-schema: the registry at {options.registry.display_url} has no schema id 8388592 "
               "(schema id 8388592)"),
        (None, "not-framed: a payload of 2 bytes is too short for Confluent's framing (5 bytes at least)"),
        (None, "not-framed: the payload starts with byte 123, not Confluent's magic byte 0"),
        ({"id": 1, "amount": 2.5}, None)]
    logged = [record.getMessage() for record in caplog.records]
    assert [line.split(": the value")[0] for line in logged] == ["kafkasync: orders-3 offset 102",
                                                                 "kafkasync: orders-3 offset 103"]
    assert "not-framed" in logged[0] and "unknown-schema" in logged[1]
    assert not any(PASSWORD in line for line in logged)


def test_a_column_of_records_that_all_decode_has_a_null_error_column(scene):
    schema_id, value_format = scene
    options = value_format("PERMISSIVE")
    policy = DecodePolicy(options, arrow_type(options).field("valueDecoded").type)
    values, errors = policy(messages([framed(schema_id, {"id": i, "amount": 0.5}) for i in range(3)]))
    assert values.to_pylist() == [{"id": i, "amount": 0.5} for i in range(3)] and errors.null_count == 3


def test_failfast_names_the_first_record_that_cannot_be_decoded_whether_its_key_or_its_value(monkeypatch):
    """Key and value both decoded (FAILFAST): the failure names the first record in offset order
    whose key or value cannot be decoded, as from_avro on both columns fails at the first row. Before,
    every key of a consume() batch was decoded before any value, so a bad key at offset 102 was
    named though the value at offset 101 could not be decoded."""
    monkeypatch.setattr(decode_policy, "_LOGGED", set())
    url = f"http://127.0.0.1:1/{uuid.uuid4().hex}"
    double = RegistryDouble()
    with serving(double, RegistrySettings(url)):
        schema_id = double.register_schema("orders-value", avro_schema(json.dumps(ORDER)))
        double.register_schema("orders-key", avro_schema(json.dumps(ORDER)))
        options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders",
                                 "schema.registry.url": url, "value.format": "avro-confluent", "value.decode": "true",
                                 "key.format": "avro-confluent", "key.decode": "true"}, streaming=True)
        schema = arrow_schema(kafka_schema(False, decoded=[field for f in options.decoded_formats
                                                           for field in decoded_fields(f, f.spark_type())]))
        columns = RecordColumns("orders", False, decoders=[DecodePolicy(f, schema.field(f"{f.part}Decoded").type)
                                                       for f in options.decoded_formats])
        good = framed(schema_id, {"id": 1, "amount": 2.5})
        records = [Message(topic="orders", partition=3, offset=100 + i, key=key, value=value, timestamp=(1, T))
                   for i, (key, value) in enumerate([(good, good), (good, b"{}"), (b"{}", good)])]
        with pytest.raises(KafkaSyncFormatError, match=r"^kafkasync: orders-3 offset 101: the value cannot be decoded"):
            columns.extend(records)
