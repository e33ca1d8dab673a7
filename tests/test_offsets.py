"""The offset JSON: round trip, deterministic serialisation, clear errors on foreign input."""

import json

import pytest

from kafkasync_source.offsets import KafkaSyncOffsetError, PartitionOffset, SyncOffset
from kafkasync_source.planner import TopicPartition


def test_round_trip_keeps_positions_partition_times_and_counters():
    offset = SyncOffset(
        {TopicPartition("b", 10): PartitionOffset(7, 1_000), TopicPartition("b", 2): PartitionOffset(3)},
        stream_time=900, enforced_processing_total=4, late_records_total=2,
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
