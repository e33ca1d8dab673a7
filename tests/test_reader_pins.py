"""One reader schema per query (issue 61, item 1 and deliverable 5), without Spark: the data
source's own methods called as Spark's Python workers call them, the schema passed between them
as JSON as the JVM passes it (``StructType.json()`` out of ``schema()``, ``_parse_datatype_json_string``
into ``streamReader(schema)``; pyspark/sql/worker/create_data_source.py,
pyspark/sql/streaming/python_streaming_source_runner.py), the registry the client double.
tests/test_formats_registry.py runs the same through Spark and a real registry.

* The reader pinned at ``load()`` is the one ``streamReader()`` / ``reader()`` read with, though a
  newer version was registered in between; the registry is not asked again.
* A schema the user gives carries no pin: the reader is pinned then, and a decoded column of
  another type is refused naming it.
* A restart noticing that its checkpoint recorded another reader fails naming both and the
  option, keeps the old reader with ``value.subject.version`` set to it, and moves to the new
  one with the new version named; a recorded id gone from the registry is named.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_json_string

from kafkasync_dev.testing.registry_double import RegistryDouble, avro_schema, serving
from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.formats.options import ReaderPin
from kafkasync_source.formats.registry import RegistrySettings
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.schema import READER_SCHEMA_KEY
from kafkasync_source.spark.source import KafkaSyncDataSource

V1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                              {"name": "amount", "type": "double"}]})
V2 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                              {"name": "price", "type": "double", "default": 0.0}]})


@pytest.fixture
def scene():
    url = f"http://127.0.0.1:1/{uuid.uuid4().hex}"
    double = RegistryDouble()
    with serving(double, RegistrySettings(url)):
        options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders", "value.format": "avro-confluent",
                   "schema.registry.url": url, "value.decode": "true", "eventTime.field": "id",
                   "eventTime.onInvalid": "skip", "startingOffsets": "earliest"}
        yield double, options


def through_the_jvm(schema: StructType) -> StructType:
    """The schema as the JVM hands it to the next Python worker: its JSON, parsed."""
    return _parse_datatype_json_string(schema.json())


def test_the_reader_pinned_at_load_is_the_one_every_later_reader_reads_with(scene):
    double, options = scene
    v1 = double.register_schema("orders-value", avro_schema(V1))
    schema = through_the_jvm(KafkaSyncDataSource(options).schema())
    assert schema["valueDecoded"].dataType.simpleString() == "struct<id:bigint,amount:double>"
    assert schema["valueDecoded"].metadata == schema["eventTime"].metadata == {
        READER_SCHEMA_KEY: {"part": "value", "subject": "orders-value", "version": 1, "id": v1}}
    double.register_schema("orders-value", avro_schema(V2))  # between load() and start()
    asked = sum(double.calls.values())
    stream = KafkaSyncDataSource(options).streamReader(schema)
    batch = KafkaSyncDataSource(options).reader(schema)
    for reader in (stream, batch):
        assert reader._options.value_format.pin == ReaderPin("orders-value", 1, v1)
        assert reader._options.event_time.value_format.pin == ReaderPin("orders-value", 1, v1)
    assert sum(double.calls.values()) == asked, "the registry is not asked for the latest again"


def without_pins(schema: StructType) -> StructType:
    """A schema as a user writes it for ``.schema(...)``: the same columns, no metadata."""
    return StructType([StructField(f.name, f.dataType, f.nullable) for f in schema.fields])


def test_a_schema_the_user_gives_is_pinned_at_start_and_its_decoded_column_checked(scene):
    double, options = scene
    double.register_schema("orders-value", avro_schema(V1))
    given = without_pins(KafkaSyncDataSource(options).schema())
    double.register_schema("orders-value", avro_schema(V2))
    mismatch = (r"the schema given has valueDecoded struct<id:bigint,amount:double>, and value.format=avro-confluent "
                r"read as subject 'orders-value' version 2 \(schema id 2\) decodes into struct<id:bigint,price:double>")
    with pytest.raises(KafkaSyncOptionError, match=mismatch):
        KafkaSyncDataSource(options).reader(given)
    with pytest.raises(KafkaSyncOptionError, match=mismatch):
        KafkaSyncDataSource({**options, "value.subject.version": "2"}).streamReader(given)
    reader = KafkaSyncDataSource({**options, "value.subject.version": "1"}).streamReader(given)
    assert reader._options.value_format.pin == ReaderPin("orders-value", 1, 1)


@pytest.mark.parametrize("decode", ["true", "false"])
def test_a_stream_given_a_schema_without_pins_names_its_readers_version(scene, decode):
    """A schema the user gives carries no pin, and a stream's source runner and its read planner
    each parse the options in their own process when the query starts: under 'latest', a version
    registered in between was read with by one and not the other (the offsets recording one id,
    the executors decoding with another; with eventTime.field alone, no column type to catch it).
    A batch read pins in one process, and takes the latest."""
    double, options = scene
    options = {**options, "value.decode": decode}
    double.register_schema("orders-value", avro_schema(V1))
    given = without_pins(KafkaSyncDataSource(options).schema())
    with pytest.raises(KafkaSyncOptionError) as failure:
        KafkaSyncDataSource(options).streamReader(given)
    assert str(failure.value) == (
        "kafkasync: the schema given to this stream (readStream.schema(...)) carries no reader schema for the value, "
        "and 'value.subject.version' is latest: the query's processes each take the subject's latest when they "
        "start, and could read as different versions. Name the version with 'value.subject.version' (now 1), or give "
        "no schema (the source pins the reader when the query is loaded), or a loaded DataFrame's (df.schema "
        "carries its pin).")
    assert KafkaSyncDataSource({**options, "value.subject.version": "1"}).streamReader(given)._options.reader_pins == {
        "value": ReaderPin("orders-value", 1, 1)}
    assert KafkaSyncDataSource(options).reader(given)._options.reader_pins == {"value": ReaderPin("orders-value", 1, 1)}


def recorded(pin: dict) -> dict:
    """An offset from a checkpoint whose values were decoded with ``pin``."""
    return SyncOffset({TopicPartition("orders", 0): PartitionOffset(5)}).read_as({"value": pin}).to_json()


def test_a_restart_on_a_newer_reader_fails_naming_both_and_the_option_that_chooses(scene):
    double, options = scene
    v1 = double.register_schema("orders-value", avro_schema(V1))
    checkpoint = recorded({"subject": "orders-value", "version": 1, "id": v1})
    v2 = double.register_schema("orders-value", avro_schema(V2))
    reader = KafkaSyncDataSource(options).streamReader(through_the_jvm(KafkaSyncDataSource(options).schema()))
    with pytest.raises(KafkaSyncOptionError) as failure:
        reader._offset(checkpoint)
    assert str(failure.value) == (
        f"kafkasync: this checkpoint's values were decoded with the reader schema subject 'orders-value' version 1 "
        f"(schema id {v1}), and this query was loaded with subject 'orders-value' version 2 (schema id {v2}), the "
        "subject's latest (its columns have that version's types). Set 'value.subject.version' to 1 to read as the "
        "checkpoint did, or to 2 to move the query to the new version (docs/formats.md, 'Moving a running query to "
        "a new reader schema').")


def test_naming_the_recorded_version_keeps_the_old_reader_and_naming_the_new_one_moves_the_query(scene, caplog):
    double, options = scene
    v1 = double.register_schema("orders-value", avro_schema(V1))
    checkpoint = recorded({"subject": "orders-value", "version": 1, "id": v1})
    v2 = double.register_schema("orders-value", avro_schema(V2))
    for version, pinned in (("1", v1), ("2", v2)):
        chosen = {**options, "value.subject.version": version}
        reader = KafkaSyncDataSource(chosen).streamReader(through_the_jvm(KafkaSyncDataSource(chosen).schema()))
        with caplog.at_level(logging.WARNING, logger="kafkasync_source.spark.stream_reader"):
            assert reader._offset(checkpoint).reader_schemas["value"]["id"] == v1  # as recorded, until the next batch
            reader._offset(checkpoint)
        assert reader._read_as == {"value": {"subject": "orders-value", "version": int(version), "id": pinned}}
    assert [record.getMessage() for record in caplog.records if "moves this query" in record.getMessage()] == [
        f"kafkasync: value.subject.version=2 moves this query's value from the reader schema its checkpoint "
        f"recorded, subject 'orders-value' version 1 (schema id {v1}), to subject 'orders-value' version 2 (schema "
        f"id {v2}); the checkpoint records it from the next batch."]


def test_a_restart_whose_recorded_reader_is_gone_from_the_registry_names_it(scene):
    double, options = scene
    v1 = double.register_schema("orders-value", avro_schema(V1))
    checkpoint = recorded({"subject": "orders-value", "version": 1, "id": v1})
    double.register_schema("orders-value", avro_schema(V2))
    double.delete_version("orders-value", 1)
    double.delete_version("orders-value", 1, permanent=True)
    reader = KafkaSyncDataSource(options).streamReader(through_the_jvm(KafkaSyncDataSource(options).schema()))
    with pytest.raises(KafkaSyncOptionError, match=rf"version 1 \(schema id {v1}\) \(schema id {v1} is no longer in "
                                                   rf"the registry at {options['schema.registry.url']}\), and this"):
        reader._offset(checkpoint)


def test_a_reader_deleted_for_good_after_load_fails_the_readers_naming_it_the_querys_reader(scene):
    """The pin outlives the registry's copy: a process that starts after the reader's version was
    deleted for good (an executor, the source runner) cannot fetch it. It fails naming the pinned
    reader and what to do, not as if a record's id were unknown (before: ``UnknownSchema: the
    registry at ... has no schema id 1``, an invalid time's error with no word of the reader)."""
    from kafkasync_source.executor.decode_policy import DecodePolicy
    from kafkasync_source.formats.registry import KafkaSyncFormatError
    from kafkasync_source.spark.schema import arrow_schema

    double, options = scene
    v1 = double.register_schema("orders-value", avro_schema(V1))
    schema = through_the_jvm(KafkaSyncDataSource(options).schema())
    double.register_schema("orders-value", avro_schema(V2))
    double.delete_version("orders-value", 1)
    double.delete_version("orders-value", 1, permanent=True)
    settings = RegistrySettings(options["schema.registry.url"])
    expected = (f"kafkasync: the reader schema of value.format=avro-confluent, subject 'orders-value' version 1 "
                f"(schema id {v1}), pinned when the query was loaded, is no longer in the Schema Registry at "
                f"{settings.display_url}: load the query again to read as the subject's version now, or name one "
                "with 'value.subject.version'.")
    with serving(double, settings):  # a process that starts now: nothing fetched yet
        reader = KafkaSyncDataSource(options).streamReader(schema)
        value_format = reader._options.value_format
        with pytest.raises(KafkaSyncFormatError) as decoding:
            DecodePolicy(value_format, arrow_schema(schema).field("valueDecoded").type)
        with pytest.raises(KafkaSyncFormatError) as asked:
            value_format.reader_schema()  # what every reader of the value asks first
    assert str(decoding.value) == str(asked.value) == expected


@pytest.mark.parametrize("scene_change, advice", [
    ("gone", "The checkpoint's reader can no longer be read as: set 'value.subject.version' to 2 to move the query "
             "to subject 'orders-value' version 2 (schema id 2)"),
    ("other subject", "Set 'value.subject' to 'orders-value' and 'value.subject.version' to 1 to read as the "
                      "checkpoint did, or 'value.subject.version' to 1 to move the query to subject 'orders-next' "
                      "version 1 (schema id 2)"),
    ("other registry", "Version 1 of subject 'orders-value' is another schema than when the checkpoint was written "
                       "(another registry, or the subject deleted and registered again), so no version reads as the "
                       "checkpoint did: set 'value.subject.version' to 1 to move the query to subject 'orders-value' "
                       "version 1 (schema id 2)"),
])
def test_a_restart_on_another_reader_advises_only_what_can_be_done(scene, scene_change, advice):
    """The restart's message names what reads as the checkpoint did, and that must exist: before,
    it always said 'set value.subject.version to <the checkpoint's version>', which fails where
    the recorded version is gone, reads another subject's version where the subject changed, and
    names the new schema again where the same version number is another schema now."""
    double, options = scene
    if scene_change == "other registry":  # the checkpoint was written against a registry whose ids differ
        other = double.register_schema("payments-value", avro_schema(V1.replace("Order", "Payment")))
        double.register_schema("orders-value", avro_schema(V1))
        checkpoint = recorded({"subject": "orders-value", "version": 1, "id": other})
    else:
        v1 = double.register_schema("orders-value", avro_schema(V1))
        checkpoint = recorded({"subject": "orders-value", "version": 1, "id": v1})
    if scene_change == "gone":
        double.register_schema("orders-value", avro_schema(V2))
        double.delete_version("orders-value", 1)
        double.delete_version("orders-value", 1, permanent=True)
    elif scene_change == "other subject":
        double.register_schema("orders-next", avro_schema(V2))
        options = {**options, "value.subject": "orders-next"}
    reader = KafkaSyncDataSource(options).streamReader(through_the_jvm(KafkaSyncDataSource(options).schema()))
    with pytest.raises(KafkaSyncOptionError) as failure:
        reader._offset(checkpoint)
    assert advice in str(failure.value)


@pytest.mark.parametrize("mode, column, message", [
    ("PERMISSIVE", None, "has column 10 none, where the source gives valueDecodeError string"),
    ("FAILFAST", StructField("valueDecodeError", StringType()), "has column 10 valueDecodeError string, where the "
                                                                "source gives none"),
])
def test_a_schema_given_must_hold_the_decode_error_column_exactly_where_the_mode_adds_it(scene, mode, column, message):
    """Under PERMISSIVE the executors add ``valueDecodeError`` beside ``valueDecoded``; a schema
    given without it (or with it under FAILFAST) was taken, and each batch then failed on the
    executors with Arrow's 'Schema and number of arrays unequal', naming neither option nor column."""
    double, options = scene
    options = {**options, "value.decode.mode": mode, "value.subject.version": "1"}
    double.register_schema("orders-value", avro_schema(V1))
    loaded = without_pins(KafkaSyncDataSource({**options, "value.decode.mode": "FAILFAST"}).schema())
    given = StructType([*loaded.fields, *([column] if column else [])])
    with pytest.raises(KafkaSyncOptionError, match=f"the schema given {message}"):
        KafkaSyncDataSource(options).reader(given)


def test_a_schema_given_must_hold_the_sources_columns_in_its_order(scene):
    """Spark takes a Python source's columns by position: a schema given with ``valueDecoded``
    before ``keyDecoded`` (one type: key and value written with one schema) was taken, and every
    row then held the key's decoded value as valueDecoded and the value's as keyDecoded."""
    double, options = scene
    options = {**options, "key.format": "avro-confluent", "key.decode": "true", "value.subject.version": "1",
               "key.subject.version": "1"}
    double.register_schema("orders-value", avro_schema(V1))
    double.register_schema("orders-key", avro_schema(V1))
    loaded = {field.name: field for field in without_pins(KafkaSyncDataSource(options).schema()).fields}
    order = [*(name for name in loaded if not name.endswith("Decoded")), "valueDecoded", "keyDecoded"]
    with pytest.raises(KafkaSyncOptionError) as failure:
        KafkaSyncDataSource(options).reader(StructType([loaded[name] for name in order]))
    assert str(failure.value) == (
        "kafkasync: the schema given has column 9 valueDecoded struct<id:bigint,amount:double>, where the source gives "
        "keyDecoded struct<id:bigint,amount:double>: Spark takes a source's columns by position, so a schema given must "
        "be the source's columns in its order (key, value, topic, partition, offset, timestamp, timestampType, "
        "eventTime, keyDecoded, valueDecoded). Give no schema, or a loaded DataFrame's df.schema.")
