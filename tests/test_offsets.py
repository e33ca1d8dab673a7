"""The offset JSON: round trip, deterministic serialisation, clear errors on foreign input."""

import json

import pytest

from kafkasync_source.planning.offsets import KafkaSyncOffsetError, PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import TopicPartition


def test_round_trip_keeps_positions_partition_times_and_counters():
    offset = SyncOffset(
        {TopicPartition("b", 10): PartitionOffset(7, 1_000), TopicPartition("b", 2): PartitionOffset(3)},
        stream_time=900, enforced_processing_total=4, late_records_total=2,
        time_source="eventTime.jsonPath='$.ts' as epochMillis",
    )
    assert SyncOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset


def test_serialisation_is_deterministic_whatever_the_insertion_order():
    parts = {TopicPartition("b", 10): PartitionOffset(1), TopicPartition("a", 2): PartitionOffset(2),
             TopicPartition("b", 9): PartitionOffset(3)}
    reversed_parts = dict(reversed(list(parts.items())))
    one, two = SyncOffset(parts).to_json(), SyncOffset(reversed_parts).to_json()
    assert json.dumps(one) == json.dumps(two)
    assert list(one["topics"]) == ["a", "b"] and list(one["topics"]["b"]) == ["9", "10"]


@pytest.mark.parametrize("foreign", [{"orders": {"0": 12}}, [], {"topics": {"t": {"0": {}}}}])
def test_foreign_or_malformed_offsets_fail_clearly(foreign):
    with pytest.raises(KafkaSyncOffsetError, match="kafkasync offset"):
        SyncOffset.from_json(foreign)


def test_newer_offset_versions_are_refused():
    with pytest.raises(KafkaSyncOffsetError, match="version 99"):
        SyncOffset.from_json({"version": 99, "topics": {}})


def test_a_checkpoint_from_before_the_time_source_was_recorded_was_planned_on_kafka_timestamps():
    written_by_the_previous_release = {"version": 1, "topics": {"t": {"0": {"offset": 5, "partitionTime": 70}}},
                                       "streamTime": 70, "enforcedProcessingTotal": 1, "lateRecordsTotal": 0}
    assert SyncOffset.from_json(written_by_the_previous_release).time_source == "kafkaTimestamp"


def test_another_time_source_keeps_positions_and_counters_and_forgets_the_times():
    """Stream time and partition times measured on the write time would cap (or release) a
    query synchronizing on a payload's time by the wrong clock."""
    offset = SyncOffset({TopicPartition("t", 0): PartitionOffset(5, 70), TopicPartition("t", 1): PartitionOffset(9, 80)},
                        stream_time=70, enforced_processing_total=1, late_records_total=3)
    assert offset.on_time_source("kafkaTimestamp") is offset
    payload_time = "eventTime.jsonPath='$.ts' as epochMillis"
    rebased = offset.on_time_source(payload_time)
    assert rebased == SyncOffset({TopicPartition("t", 0): PartitionOffset(5), TopicPartition("t", 1): PartitionOffset(9)},
                                 enforced_processing_total=1, late_records_total=3, time_source=payload_time)
    assert rebased.to_json()["timeSource"] == payload_time


def test_the_reader_schemas_records_were_decoded_with_are_kept_and_only_written_where_there_are_some():
    """Issue 61: the checkpoint holds each part's reader schema, so a restart can notice another."""
    plain = SyncOffset({TopicPartition("orders", 0): PartitionOffset(5)})
    assert "readerSchemas" not in plain.to_json()
    read = plain.read_as({"value": {"subject": "orders-value", "version": 2, "id": 7},
                          "key": {"subject": "orders-key", "version": 1, "id": 3}})
    written = json.loads(json.dumps(read.to_json()))
    assert written["readerSchemas"] == {"key": {"subject": "orders-key", "version": 1, "id": 3},
                                        "value": {"subject": "orders-value", "version": 2, "id": 7}}
    assert list(written["readerSchemas"]) == ["key", "value"]
    assert SyncOffset.from_json(written) == read
    assert SyncOffset.from_json(plain.to_json()).reader_schemas == {}


@pytest.mark.parametrize("recorded", [[], {"value": {"subject": "s", "version": "2", "id": 7}},
                                      {"value": {"version": 2, "id": 7}}, {"value": {"subject": "s", "version": 2}}])
def test_malformed_reader_schemas_fail_clearly(recorded):
    data = {**SyncOffset({TopicPartition("t", 0): PartitionOffset(1)}).to_json(), "readerSchemas": recorded}
    with pytest.raises(KafkaSyncOffsetError, match="Malformed kafkasync offset"):
        SyncOffset.from_json(data)
