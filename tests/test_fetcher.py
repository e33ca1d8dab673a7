"""The driver fetcher against the embedded Kafka cluster: bounded buffers, lag, gaps."""

import json
import linecache
import sys
import threading
import time

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.driver import fetcher as fetcher_module
from kafkasync_source.driver.fetcher import DriverFetcher, KafkaSyncFetchError, readable_end
from kafkasync_source.event_time import EventTimeOptions, RecordTime, record_time
from kafkasync_source.planning.planner import TopicPartition

BASE_TS = 1_700_000_000_000


def wait_for(condition, timeout=PATIENCE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _read_through(fetcher, tps, end, capacity):
    """Take every buffered record, as batches do, until each partition is at ``end``: what
    was seen, per partition."""
    starts = {tp: 0 for tp in tps}
    seen = {tp: [] for tp in tps}
    fetcher.position_at(starts)
    while any(starts[tp] < end for tp in tps):
        states = wait_for(lambda: {tp: s for tp, s in fetcher.snapshot({}).items() if len(s.offsets)}
                          or None)
        assert max(fetcher.buffered().values()) <= capacity
        for tp, state in states.items():
            seen[tp].extend(state.offsets.tolist())
            starts[tp] = state.position
        fetcher.position_at(starts)
    return seen


def test_bounded_buffers_deliver_every_record_once_in_order(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(2_000)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=True)
    try:
        seen = _read_through(fetcher, tps, 1_000, capacity=100)
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
                           timeout=PATIENCE_S)
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
        with pytest.raises(KafkaSyncFetchError,
                           match=rf"stopped at {topic}-0 offset 3: MemoryError: no room") as failed:
            wait_for(lambda: fetcher.snapshot({}) and False)
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


def _in_consume(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside the fetcher's consume() call right now (its innermost
    Python frame is the line that calls it: consume() itself is C, with the GIL released)."""
    frame = sys._current_frames().get(thread.ident or 0)
    if frame is None or frame.f_code.co_name != "_fetch_once":
        return False
    return ".consume(" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def test_a_resume_during_an_inflight_consume_loses_no_record(kafka_cluster, topic_factory, monkeypatch):
    """The interleaving of issue 51: one partition's backlog overflows its buffer (paused),
    another is caught up, so the fetch thread waits inside consume(). The driver then takes
    records from the full buffer, which resumes it and restarts its fetch at the buffer's
    position. Before confluent-kafka 2.16, Consumer_consume only releases the GIL and
    Consumer_assign/pause/resume/seek take no lock of the handle (src/confluent_kafka/src/
    Consumer.c, v2.15.0), so a restart made by the driver thread lands inside that consume()
    call, which returns the restarted partition's records; the fetcher then dropped them as
    stale with the consumer already past them, and the partition never filled again (seen with
    2.15.0: "the backlog stopped at offset 100"). From 2.16 the consumer's gate makes the
    driver's call wait for the consume() instead (Handle_serialize_enter), so on 2.16 this test
    passes either way and test_only_the_fetch_thread_moves_the_consumer guards the design.
    A long consume timeout holds the call open so that the driver's move lands inside it."""
    monkeypatch.setattr(fetcher_module, "_CONSUME_TIMEOUT_S", 1.0)
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(300)]
                          + [Record(1, BASE_TS, None, b"v")])
    backlog, live = TopicPartition(topic, 0), TopicPartition(topic, 1)
    # A caught-up partition's fetch waits up to fetch.wait.max.ms at the broker, and the
    # restarted partition's first fetch waits behind it: keep it short of the consume call.
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers, "fetch.wait.max.ms": "10"},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=True)
    try:
        starts = {backlog: 0, live: 0}
        fetcher.position_at(starts)
        seen: list = []
        while starts[backlog] < 300:
            deadline = time.monotonic() + PATIENCE_S
            while not ((states := fetcher.snapshot({}))[backlog].buffer_full
                       and states[live].end_offset == states[live].position == 1):
                assert time.monotonic() < deadline, (
                    f"the backlog stopped at offset {states[backlog].position} with "
                    f"{len(states[backlog].offsets)} records buffered, after offsets {seen[:1]}..{seen[-1:]}")
                time.sleep(0.05)
            seen.extend(states[backlog].offsets.tolist())
            starts[backlog] = states[backlog].position
            wait_for(lambda: _in_consume(fetcher._thread))
            fetcher.position_at(starts)  # frees the buffer: its partition restarts mid-consume()
        assert seen == list(range(300))
    finally:
        fetcher.close()


def _noting_the_thread(call: str):
    def moves(self, *args, **kwargs):
        self.moves.append((call, threading.current_thread().name))
        return getattr(super(_ThreadRecordingConsumer, self), call)(*args, **kwargs)
    return moves


class _ThreadRecordingConsumer(Consumer):
    """The real consumer, noting which thread makes each call that moves it."""

    moves: list = []
    assign = _noting_the_thread("assign")
    incremental_assign = _noting_the_thread("incremental_assign")
    pause = _noting_the_thread("pause")
    resume = _noting_the_thread("resume")
    seek = _noting_the_thread("seek")


def test_only_the_fetch_thread_moves_the_consumer(kafka_cluster, topic_factory, monkeypatch):
    """Whatever the driver asks (overflowed buffers resumed, a replay, a partition dropped),
    every assign/pause/resume/seek is made by the fetch thread, between its consume() calls:
    the driver thread never races a consume() in flight, whichever confluent-kafka runs."""
    monkeypatch.setattr(fetcher_module, "Consumer", _ThreadRecordingConsumer)
    monkeypatch.setattr(_ThreadRecordingConsumer, "moves", [])
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(400)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 50, fail_on_data_loss=True)
    try:
        _read_through(fetcher, tps, 200, capacity=50)
        fetcher.position_at({tps[0]: 10})  # a replay of one partition only
        assert wait_for(lambda: fetcher.snapshot({})[tps[0]].offsets.tolist()[:1] == [10])
    finally:
        fetcher.close()
    moves = _ThreadRecordingConsumer.moves
    assert {call for call, _ in moves} >= {"assign", "pause", "resume"}
    assert {thread for _, thread in moves} == {"kafkasync-fetcher"}, moves


def test_a_consumer_call_that_fails_in_the_fetch_thread_fails_the_next_snapshot_with_its_cause(
    kafka_cluster, topic_factory
):
    """The fetch thread now makes the calls that move the consumer; one that raises there must
    reach the query as the fetcher's error, with the consumer's exception as its cause (here
    librdkafka refuses a logical start offset it does not know: rd_kafka_assignment_add)."""
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 10, fail_on_data_loss=True)
    try:
        fetcher.position_at({tp: -3})
        with pytest.raises(KafkaSyncFetchError,
                           match="fetch loop: KafkaException: .*Failed to set assignment") as failed:
            wait_for(lambda: fetcher.snapshot({}) and False)
        assert isinstance(failed.value.__cause__, KafkaException)
    finally:
        fetcher.close()


def test_a_buffer_of_a_log_that_moved_back_is_not_kept_when_repositioned_inside_it(kafka_cluster, unique_topic):
    """failOnDataLoss=false, topic recreated while its old records are still buffered (none
    emitted yet): the driver restarts the partition at the new log's start, an offset the old
    buffer covers. The old log's records must go with it, and the fetch restart there: keeping
    the buffer planned the new log's batch on the old log's times, and reported the move back
    again at every trigger."""
    topic = unique_topic()
    tp = TopicPartition(topic, 0)
    kafka_cluster.create_topic(topic, 1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"old") for i in range(30)])
    fetcher = DriverFetcher({"bootstrap.servers": kafka_cluster.bootstrap_servers},
                            buffer_capacity=lambda partitions: 100, fail_on_data_loss=False)
    try:
        fetcher.position_at({tp: 0})
        wait_for(lambda: fetcher.snapshot({})[tp].position == 30)
        kafka_cluster.delete_topic(topic)
        kafka_cluster.create_topic(topic, 1)
        kafka_cluster.produce(topic, [Record(0, BASE_TS + 1_000 + i, None, b"new") for i in range(10)])
        assert wait_for(fetcher.logs_moved_back) == {tp: (30, 0)}
        fetcher.position_at({tp: 0})
        assert fetcher.logs_moved_back() == {}
        state = wait_for(lambda: (s := fetcher.snapshot({})[tp]).position == 10 and s)
        assert state.timestamps.tolist() == [BASE_TS + 1_000 + i for i in range(10)]
    finally:
        fetcher.close()
