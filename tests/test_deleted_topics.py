"""Topics deleted (and recreated) under a running query: reported as gone, quickly, naming the
partitions and offsets; with failOnDataLoss=false dropped (or restarted) and the query goes on.

The driver-side tests drive SyncDriver directly (what the stream reader calls for every
trigger): fast and deterministic. The embedded cluster deletes a topic as a broker does:
metadata stops listing it, fetches of it fail and librdkafka tells the application nothing.
"""

from __future__ import annotations

import time

import pytest

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import parse_options
from kafkasync_source.driver.fetcher import KafkaSyncFetchError
from kafkasync_source.driver.sync_driver import SyncDriver
from kafkasync_source.executor.range_reader import KafkaRange, RangeReader
from kafkasync_source.kafka.errors import KafkaSyncDataLossError
from kafkasync_source.planning.planner import NEVER_WAIT, WAIT_FOREVER, TopicPartition
from kafkasync_source.spark.schema import kafka_schema

BASE_TS = 1_700_000_000_000


def driver_for(cluster, **extra):
    """A driver on the fetch path: these tests watch its fetcher's buffers (the time-index
    path, which the embedded cluster cannot serve, is covered in test_planning_mode.py)."""
    options = parse_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "startingOffsets": "earliest",
         "kafka.fetch.wait.max.ms": "20", "planningMode": "fetch",
         **{k: str(v) for k, v in extra.items()}},
        streaming=True,
    )
    return SyncDriver(options)


def advance(driver, start, until, timeout=PATIENCE_S):
    """Call next_offset like Spark does (each end is the next start) until ``until(offset)``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        start = driver.next_offset(start)
        if until(start):
            return start
        time.sleep(0.05)
    raise AssertionError(f"condition not reached; offsets {start.next_offsets()}")


def buffered(driver, tp, count):
    """Until the fetcher has ``count`` records of ``tp`` buffered (seen by the planner)."""
    return lambda _: tp in driver.last_states and len(driver.last_states[tp].offsets) == count


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_deleted_topic_with_unread_records_is_reported_gone(kafka_cluster, topic_factory,
                                                              fail_on_data_loss):
    doomed, empty = topic_factory(1), topic_factory(1)
    kafka_cluster.produce(doomed, [Record(0, BASE_TS + i, None, b"v") for i in range(20)])
    gone = TopicPartition(doomed, 0)
    # The empty topic holds every batch back (wait forever): doomed's records stay unread.
    driver = driver_for(kafka_cluster, subscribe=f"{doomed},{empty}",
                        failOnDataLoss=str(fail_on_data_loss).lower(),
                        partitionDiscoveryIntervalMs=200, **{"max.task.idle.ms": WAIT_FOREVER})
    try:
        start = driver.initial_offset()
        start = advance(driver, start, buffered(driver, gone, 20))
        kafka_cluster.delete_topic(doomed)
        # Reported within seconds (metadata on the discovery cadence, 200 ms), not at librdkafka's
        # next metadata refresh (5 min): a 2 min deadline tells the two apart however busy the
        # machine (a separate 20 s bound was a speed).
        if fail_on_data_loss:
            with pytest.raises(KafkaSyncDataLossError,
                               match=rf"{doomed}-0 \(next offset 0, log end 20\) no longer exist.*"
                                     r"failOnDataLoss=false"):
                advance(driver, start, lambda _: False, timeout=120)
        else:
            start = advance(driver, start, lambda offset: gone not in offset.partitions, timeout=120)
            assert set(start.partitions) == {TopicPartition(empty, 0)}
            kafka_cluster.produce(empty, [Record(0, BASE_TS + i, None, b"v") for i in range(3)])
            start = advance(driver, start, lambda offset: offset.next_offsets()[TopicPartition(empty, 0)] == 3)
    finally:
        driver.close()


def test_a_fully_read_deleted_topic_leaves_the_offsets_without_data_loss(kafka_cluster, topic_factory):
    doomed, kept = topic_factory(1), topic_factory(1)
    for topic in (doomed, kept):
        kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(5)])
    driver = driver_for(kafka_cluster, subscribe=f"{doomed},{kept}", partitionDiscoveryIntervalMs=200,
                        **{"max.task.idle.ms": NEVER_WAIT})
    try:
        start = advance(driver, driver.initial_offset(),
                        lambda offset: set(offset.next_offsets().values()) == {5})
        kafka_cluster.delete_topic(doomed)
        start = advance(driver, start, lambda offset: TopicPartition(doomed, 0) not in offset.partitions)
        assert start.next_offsets() == {TopicPartition(kept, 0): 5}
    finally:
        driver.close()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_recreated_below_the_query_position_is_data_loss(kafka_cluster, unique_topic,
                                                                  fail_on_data_loss):
    topic = unique_topic()
    tp = TopicPartition(topic, 0)
    kafka_cluster.create_topic(topic, 1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"old") for i in range(30)])
    # No partition discovery: this tests the fetch path, not the metadata one.
    driver = driver_for(kafka_cluster, subscribe=topic, failOnDataLoss=str(fail_on_data_loss).lower(),
                        partitionDiscoveryIntervalMs=10**9, **{"max.task.idle.ms": NEVER_WAIT})
    try:
        start = advance(driver, driver.initial_offset(), lambda offset: offset.next_offsets()[tp] == 30)
        kafka_cluster.delete_topic(topic)
        kafka_cluster.create_topic(topic, 1)
        kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"new") for i in range(10)])
        if fail_on_data_loss:
            with pytest.raises(KafkaSyncFetchError,
                               match=rf"{topic}-0 at offset 30: .*no longer in the log.*\[0, 10\)"):
                advance(driver, start, lambda _: False)
            return
        ends = []
        advance(driver, start, lambda offset: ends.append(offset.next_offsets()[tp]) or ends[-1] == 10)
        # Moved back to the new log's start in a batch of its own, then read from there.
        assert 0 in ends and ends.index(0) < ends.index(10)
    finally:
        driver.close()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_reading_a_range_of_a_deleted_topic_ends_in_seconds_not_after_poll_timeout(
    kafka_cluster, topic_factory, fail_on_data_loss
):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(10)])
    kafka_cluster.delete_topic(topic)
    reader = RangeReader(
        client_config={"bootstrap.servers": kafka_cluster.bootstrap_servers},
        arrow_schema=RangeReader.from_options(
            parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": topic}, streaming=True),
            kafka_schema(False),
        ).arrow_schema,
        include_headers=False, include_partition_time=False, fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=120_000,
    )
    began = time.monotonic()
    if fail_on_data_loss:
        with pytest.raises(KafkaSyncDataLossError,
                           match=rf"{topic}-0 no longer exists \(topic deleted\) while offsets \[0, 10\)"):
            list(reader.read(KafkaRange(topic, 0, 0, 10)))
    else:
        assert list(reader.read(KafkaRange(topic, 0, 0, 10))) == []
    assert time.monotonic() - began < 60, "ended by the partition's check, not by the 120 s poll timeout"
