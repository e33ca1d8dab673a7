"""PySpark 4.0/4.1 call ``latestOffset()`` without a start, and before ``initialOffset()`` on a
fresh query. Drive the stream reader through that call sequence on the embedded cluster (CI
runs PySpark 4.3; a manual run on 4.1.1 showed the same: fresh query and restart after an
uncommitted batch work)."""

import time

import pytest

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.planning.offsets import SyncOffset
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.source import KafkaSyncDataSource


def stream_reader(cluster, topic):
    source = KafkaSyncDataSource(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic,
         "startingOffsets": "earliest", "max.task.idle.ms": "-1"}
    )
    return source.streamReader(source.schema())


def latest_with_data(reader, timeout=PATIENCE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        end = reader.latestOffset()
        if any(SyncOffset.from_json(end).next_offsets().values()):
            return end
        time.sleep(0.1)
    raise AssertionError("no batch planned")


def test_fresh_query_without_start_begins_at_starting_offsets(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, 1_000 + i, None, b"v") for i in range(5)])
    reader = stream_reader(kafka_cluster, topic)
    try:
        end = latest_with_data(reader)
        initial = reader.initialOffset()  # what Spark 4.0/4.1 asks only now
        [task] = reader.partitions(initial, end)
        [kafka_range] = task.ranges
        assert (kafka_range.start, kafka_range.end) == (0, 5)
        assert reader.latestOffset() == end  # nothing new: the same offset back
    finally:
        reader.stop()


def test_restart_that_planned_from_the_wrong_start_fails_clearly(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, 1_000 + i, None, b"v") for i in range(5)])
    first = stream_reader(kafka_cluster, topic)
    try:
        checkpointed = latest_with_data(first)  # batch 0 ends at offset 5, committed
        first.partitions(first.initialOffset(), checkpointed)
    finally:
        first.stop()
    kafka_cluster.produce(topic, [Record(0, 2_000 + i, None, b"v") for i in range(5)])
    restarted = stream_reader(kafka_cluster, topic)  # knows nothing of the checkpoint
    try:
        planned = latest_with_data(restarted)
        with pytest.raises(RuntimeError, match=r"PySpark 4\.0/4\.1.*PySpark >= 4\.2"):
            restarted.partitions(checkpointed, planned)
    finally:
        restarted.stop()
    assert SyncOffset.from_json(checkpointed).next_offsets() == {TopicPartition(topic, 0): 5}
