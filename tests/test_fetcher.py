"""The driver fetcher against the embedded Kafka cluster: bounded buffers, lag, gaps."""

import json
import threading
import time

import numpy as np
import pytest

from kafkasync_dev.testing import Record
from kafkasync_source.driver.fetcher import DriverFetcher, KafkaSyncFetchError, readable_end
from kafkasync_source.event_time import EventTimeOptions, RecordTime, record_time
from kafkasync_source.planning.planner import TopicPartition

BASE_TS = 1_700_000_000_000


def wait_for(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_bounded_buffers_deliver_every_record_once_in_order(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(2_000)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=True)
    try:
        starts = {tp: 0 for tp in tps}
        seen = {tp: [] for tp in tps}
        fetcher.position_at(starts)
        while any(starts[tp] < 1_000 for tp in tps):
            states = wait_for(lambda: {tp: s for tp, s in fetcher.snapshot({}).items() if len(s.offsets)}
                              or None)
            assert max(fetcher.buffered().values()) <= 100
            for tp, state in states.items():
                seen[tp].extend(state.offsets.tolist())
                starts[tp] = state.position
            fetcher.position_at(starts)
        for tp in tps:
            assert seen[tp] == list(range(1_000))
    finally:
        fetcher.close()


def test_lag_reaches_zero_past_a_trailing_transaction_marker(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(3)])
    tp = TopicPartition(topic, 0)
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 1_000, fail_on_data_loss=True)
    try:
        fetcher.position_at({tp: 0})
        state = wait_for(lambda: (s := fetcher.snapshot({})[tp]).end_offset == s.position == 4 and s)
        assert state.offsets.tolist() == [0, 1, 2]
        assert state.timestamps.tolist() == [BASE_TS, BASE_TS + 1, BASE_TS + 2]
        # Repositioning inside the buffer drops what was emitted; outside it re-fetches.
        fetcher.position_at({tp: 2})
        assert fetcher.snapshot({})[tp].offsets.tolist() == [2]
        fetcher.position_at({tp: 0})
        refetched = wait_for(lambda: (s := fetcher.snapshot({})[tp]).position == 4 and s)
        assert np.array_equal(refetched.offsets, [0, 1, 2])
    finally:
        fetcher.close()


def test_unknown_end_offset_until_the_first_fetch_answers(fresh_cluster):
    fresh_cluster.create_topic("slow", 1)
    fresh_cluster.produce("slow", [Record(0, BASE_TS, None, b"v")])
    tp = TopicPartition("slow", 0)
    for broker in (1, 2, 3):  # position_at only queues work: the first answer is >= 3 round trips away
        fresh_cluster.set_rtt(broker, 500)
    fetcher = DriverFetcher({"bootstrap.servers": fresh_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 10, fail_on_data_loss=True)
    try:
        fetcher.position_at({tp: 0})
        first = fetcher.snapshot({})[tp]
        assert first.end_offset is None and len(first.offsets) == 0
        arrived = wait_for(lambda: (s := fetcher.snapshot({})[tp]).end_offset == 1 and len(s.offsets) and s,
                           timeout=30)
        assert arrived.offsets.tolist() == [0]
    finally:
        fetcher.close()


def test_read_committed_lag_is_measured_against_the_last_stable_offset():
    """An open transaction from offset 8 on: the high watermark is 414, but a read_committed
    fetch ends at 8 (the LSO, reported by the end-of-partition event). The embedded cluster
    has no LSO of its own (its fetch answers LSO = high watermark and does not filter aborted
    records), so this is tested on the rule; integration/ tests it on a real broker."""
    stalled = dict(eof_offset=8, position=8, high_watermark=414)
    assert readable_end(read_committed=True, **stalled) == 8
    assert readable_end(read_committed=False, **stalled) == 414
    # Records fetched past the last end-of-partition event: the LSO moved on.
    assert readable_end(read_committed=True, eof_offset=8, position=20, high_watermark=414) == 414
    # Nothing known yet, or only the cached high watermark.
    assert readable_end(read_committed=True, eof_offset=None, position=0, high_watermark=-1) is None
    assert readable_end(read_committed=True, eof_offset=None, position=0, high_watermark=5) == 5


class _TimeOf(RecordTime):
    """A seam for these tests: ``time_of`` as given."""

    def __init__(self, time_of) -> None:
        self._time_of = time_of

    def time_of(self, record) -> int:
        return self._time_of(record)


def test_whatever_ends_the_fetch_thread_fails_the_next_snapshot_naming_the_record(kafka_cluster, topic_factory):
    """A fetch thread that dies of an exception nobody expected (here from taking a time) must
    fail the next trigger with its cause and the record it was at, never leave planning waiting
    for records that will not come."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(5)])
    tp = TopicPartition(topic, 0)

    def breaks_at_offset_3(message):
        if message.offset() == 3:
            raise MemoryError("no room for this one")
        return message.timestamp()[1]

    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=True,
                            record_time=_TimeOf(breaks_at_offset_3))
    try:
        fetcher.position_at({tp: 0})
        with pytest.raises(KafkaSyncFetchError, match=rf"stopped at {topic}-0 offset 3: MemoryError: no room") as failed:
            wait_for(lambda: fetcher.snapshot({}) and False, timeout=15)
        assert isinstance(failed.value.__cause__, MemoryError)
        with pytest.raises(KafkaSyncFetchError):  # and every trigger after it
            fetcher.snapshot({})
    finally:
        fetcher.close()


def test_a_slow_time_does_not_hold_the_planners_snapshot(kafka_cluster, topic_factory):
    """Records' times are taken outside the fetcher's lock: while a (Python) extractor is busy
    with a consume batch, latestOffset's snapshot answers at once."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(3)])
    tp = TopicPartition(topic, 0)
    extracting, release = threading.Event(), threading.Event()

    def waits_for_release(message):
        extracting.set()
        release.wait(30)
        return message.timestamp()[1]

    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=True,
                            record_time=_TimeOf(waits_for_release))
    try:
        fetcher.position_at({tp: 0})
        assert extracting.wait(15), "the fetcher took no record's time"
        answered = threading.Event()
        threading.Thread(target=lambda: (fetcher.snapshot({}), answered.set()), daemon=True).start()
        assert answered.wait(5), "snapshot() waited for the record's time to be taken"
        release.set()
        assert wait_for(lambda: fetcher.snapshot({})[tp].offsets.tolist() == [0, 1, 2])
    finally:
        release.set()
        fetcher.close()


def test_records_skipped_for_an_invalid_time_leave_their_partition_empty_and_caught_up(
    kafka_cluster, topic_factory
):
    """eventTime.onInvalid=skip: a partition holding only records without a valid time (heart-
    beats) is empty to the planner, with its position past them (lag 0, so it can idle), as
    Kafka Streams' LogAndSkipOnInvalidTimestamp leaves its queue empty; records with a time
    around skipped ones are buffered as usual."""
    topic = topic_factory(2)
    heartbeats = [Record(0, BASE_TS + i, None, b'{"beat": 1}') for i in range(4)]
    timed = [Record(1, BASE_TS, None, json.dumps({"ts": BASE_TS + i} if i != 1 else {}).encode())
             for i in range(3)]
    kafka_cluster.produce(topic, heartbeats + timed)
    beats, orders = TopicPartition(topic, 0), TopicPartition(topic, 1)
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=True,
                            record_time=record_time(EventTimeOptions("jsonPath", "$.ts", on_invalid="skip")))
    try:
        fetcher.position_at({beats: 0, orders: 0})
        states = wait_for(lambda: (s := fetcher.snapshot({})) and s[beats].end_offset == 4
                          and s[orders].end_offset == 3 and s[beats].position == 4 and s[orders].position == 3
                          and s)
        assert states[beats].offsets.tolist() == [] and states[beats].timestamps.tolist() == []
        assert states[orders].offsets.tolist() == [0, 2]
        assert states[orders].timestamps.tolist() == [BASE_TS, BASE_TS + 2]
    finally:
        fetcher.close()
