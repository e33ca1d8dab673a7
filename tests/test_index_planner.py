"""The time-index planning path cuts the batches the fetch path cuts, reading no record.

A model broker answers ListOffsets the way Kafka documents and implements it (see
kafkasync_source/planning/index_planner.py for the source references): ``latest`` is the readable end,
``max_timestamp`` the first record with the log's largest timestamp (none when it lies at or
past the readable end, or no record has a timestamp), and ``for_timestamp(t)`` the first
offset of the whole log whose timestamp is >= t (none below the readable end -> None).

The properties: on any log, either the index path says it cannot answer, or its cut equals
:func:`plan_batch`'s over every record up to the readable end — which tests/test_planner.py
proves against a reference model of Kafka Streams. On in-order logs read from their start it
always answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples

from kafkasync_source.planning.index_planner import IndexCannotAnswer, IndexedPartition, plan_from_index
from kafkasync_source.planning.known_answers import KnownFirstOffsets
from kafkasync_source.planning.planner import (
    NEVER_WAIT,
    NO_TIMESTAMP,
    WAIT_FOREVER,
    BatchLimits,
    Cut,
    PartitionState,
    PartitionStatus,
    TopicPartition,
    plan_batch,
)


def tp(partition: int) -> TopicPartition:
    return TopicPartition("t", partition)


RECORD, MARKER, ABORTED, COMPACTED = "record", "marker", "aborted", "compacted"
HEARTBEAT = "heartbeat"
"""A record a consumer reads whose event time is SKIPPED (``eventTime.onInvalid=skip``): the
fetcher does not buffer it and the record probe reads past it (``RecordProbe._read``); the
executors read it (a row with a null ``eventTime``). Its timestamp in the model is SKIPPED."""


@dataclass
class ModelLog:
    """A partition's entries at offsets ``log_start, log_start + 1, ...``: records, and where
    ``kinds`` says so transaction markers (control batches) and records of aborted
    transactions. The broker's index counts every entry: ``LogSegment.append`` raises
    ``maxTimestampSoFar`` and adds time-index entries from each appended batch, control batches
    included; a marker carries the broker's clock when the transaction ended
    (``MemoryRecords.withEndTransactionMarker``). A consumer reads records, and aborted ones
    only under read_uncommitted (``Fetcher``/librdkafka drop control batches, and aborted
    batches under read_committed). A COMPACTED offset holds nothing at all after the log
    cleaner ran (an offset gap): its timestamp is given as -1, which no look-up matches."""

    timestamps: list[int]
    readable: Optional[int] = None
    """Readable end (high watermark, or LSO), counted from the log start; None: every entry."""
    log_start: int = 0
    kinds: Optional[list[str]] = None
    """Per entry RECORD, MARKER, ABORTED, COMPACTED or HEARTBEAT; None: all records."""

    @property
    def end(self) -> int:
        return self.log_start + (len(self.timestamps) if self.readable is None else self.readable)

    def consumed(self, offset: int, read_committed: bool) -> bool:
        """Whether a consumer reads the entry at ``offset``."""
        kind = self.kind(offset)
        return kind in (RECORD, HEARTBEAT) or (kind == ABORTED and not read_committed)

    def kind(self, offset: int) -> str:
        return RECORD if self.kinds is None else self.kinds[offset - self.log_start]

    def timed(self, offset: int, read_committed: bool) -> bool:
        """Whether a consumer reads the entry and it takes part in synchronization."""
        return self.consumed(offset, read_committed) and self.kind(offset) != HEARTBEAT


@dataclass
class ModelBroker:
    logs: dict[TopicPartition, ModelLog]
    rounds: int = 0
    asked: list[dict[TopicPartition, int]] = field(default_factory=list)
    read_committed: bool = True

    def first_records(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """What a consumer reads first from each offset: the next consumed entry below the
        readable end that has a time (the probe reads past heartbeats), None past the range's
        end."""
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        for partition, (offset, until) in ranges.items():
            log = self.logs[partition]
            found = next((o for o in range(max(offset, log.log_start), log.end)
                          if log.timed(o, self.read_committed)), None)
            answers[partition] = (None if found is None or found >= until
                                  else (found, log.timestamps[found - log.log_start]))
        return answers

    def largest(self, partition: TopicPartition) -> Optional[tuple[int, int]]:
        log = self.logs[partition]
        valid = [ts for ts in log.timestamps if ts >= 0]
        if not valid:
            return None
        offset = log.log_start + log.timestamps.index(max(valid))
        return None if offset >= log.end else (max(valid), offset)

    def first_offsets(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        self.rounds += 1
        self.asked.append(dict(times))
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        for partition, time in times.items():
            log = self.logs[partition]
            found = next((log.log_start + i for i, ts in enumerate(log.timestamps) if ts >= time), None)
            answers[partition] = (None if found is None or found >= log.end
                                  else (found, log.timestamps[found - log.log_start]))
        return answers


def indexed(broker: ModelBroker, starts: Mapping[TopicPartition, int],
            partition_times: Mapping[TopicPartition, int],
            stops: Mapping[TopicPartition, Optional[int]]) -> dict[TopicPartition, IndexedPartition]:
    return {
        p: IndexedPartition(start=starts[p], end_offset=log.end, largest=broker.largest(p),
                            partition_time=partition_times[p], stop_offset=stops.get(p))
        for p, log in broker.logs.items()
    }


def fetched(broker: ModelBroker, starts: Mapping[TopicPartition, int],
            partition_times: Mapping[TopicPartition, int],
            stops: Mapping[TopicPartition, Optional[int]]) -> dict[TopicPartition, PartitionState]:
    """The fetch path's view with every record up to the readable end buffered (but
    heartbeats: the fetcher buffers no record whose time is SKIPPED)."""
    states = {}
    for p, log in broker.logs.items():
        offsets = [o for o in range(starts[p], log.end) if log.timed(o, broker.read_committed)]
        states[p] = PartitionState(
            start=starts[p],
            offsets=np.array(offsets, dtype=np.int64),
            timestamps=np.array([log.timestamps[o - log.log_start] for o in offsets], dtype=np.int64),
            position=log.end, end_offset=log.end,
            partition_time=partition_times[p], stop_offset=stops.get(p),
        )
    return states


def readable(broker: ModelBroker, starts: Mapping[TopicPartition, int], cut: Cut) -> dict[TopicPartition, list[int]]:
    """The records a batch holds: a consumer's view of each partition's range."""
    return {p: [o for o in range(starts[p], cut.partitions[p].end)
                if broker.logs[p].consumed(o, broker.read_committed)] for p in cut.partitions}


def assert_same_cut(index_cut: Cut, fetch_cut: Cut) -> None:
    assert index_cut.end_offsets == fetch_cut.end_offsets
    assert {p: d.status for p, d in index_cut.partitions.items()} == {
        p: d.status for p, d in fetch_cut.partitions.items()}
    assert {p: d.idle_deadline for p, d in index_cut.partitions.items()} == {
        p: d.idle_deadline for p, d in fetch_cut.partitions.items()}
    assert index_cut.enforced == fetch_cut.enforced
    assert index_cut.idle_since == fetch_cut.idle_since
    assert index_cut.has_batch == fetch_cut.has_batch
    assert index_cut.records == fetch_cut.records
    assert_same_times(index_cut, fetch_cut)


def assert_same_times(index_cut: Cut, fetch_cut: Cut) -> None:
    if not fetch_cut.has_batch or fetch_cut.stream_time is None:
        return
    # The partition time handed on is the largest time among the records taken, on both paths
    # (tests/test_paths_differential.py follows it batch after batch).
    assert {p: d.partition_time for p, d in index_cut.partitions.items()} == {
        p: d.partition_time for p, d in fetch_cut.partitions.items()}
    assert index_cut.stream_time == fetch_cut.stream_time


@st.composite
def scenarios(draw: st.DrawFn, *, in_order_from_start: bool = False, partitions: int = 4,
              limit_kinds: tuple[str, ...] = ("none", "records", "step", "both"),
              transactional: bool = False) -> dict:
    count = draw(st.integers(1, partitions))
    distinct = in_order_from_start or draw(st.booleans())
    logs, starts, partition_times, stops = {}, {}, {}, {}
    read_committed = draw(st.booleans()) if transactional else True
    # Every partition's size first, then just the timestamps they hold (the same values as a
    # larger pool's first ones: drawing unused ones only cost time).
    sizes = [draw(st.integers(0, 8)) for _ in range(count)]
    pool = iter(draw(st.lists(st.integers(0, 15 * partitions), min_size=sum(sizes),
                              max_size=sum(sizes), unique=distinct)))
    for index, size in enumerate(sizes):
        timestamps = [next(pool) for _ in range(size)]
        if in_order_from_start:
            timestamps.sort()
        elif draw(st.booleans()):
            timestamps = [NO_TIMESTAMP if draw(st.integers(0, 5)) == 0 else ts for ts in timestamps]
        log_start = draw(st.integers(0, 3))
        readable = None if in_order_from_start else draw(st.one_of(st.none(), st.integers(0, size)))
        kinds = None
        if transactional:
            # Markers carry the broker's clock at commit: mostly newer than the records (a
            # backfill of old event times), sometimes among them (a live stream).
            kinds = [draw(st.sampled_from([RECORD, RECORD, MARKER, ABORTED, COMPACTED])) for _ in timestamps]
            timestamps = [draw(st.integers(40, 90)) if kind == MARKER and draw(st.booleans()) else ts
                          for kind, ts in zip(kinds, timestamps)]
            timestamps = [max(ts, 0) if kind == MARKER else NO_TIMESTAMP if kind == COMPACTED else ts
                          for kind, ts in zip(kinds, timestamps)]
        log = ModelLog(timestamps, readable, log_start, kinds)
        start = log_start if in_order_from_start else draw(st.integers(log_start, log.end))
        emitted = [ts for offset, ts in enumerate(timestamps[: start - log_start], log_start)
                   if ts >= 0 and log.consumed(offset, read_committed)]
        logs[tp(index)] = log
        starts[tp(index)] = start
        partition_times[tp(index)] = max(emitted, default=NO_TIMESTAMP)
        if draw(st.integers(0, 3)) == 0:
            stops[tp(index)] = draw(st.integers(log_start, log.end))
    max_task_idle_ms = draw(st.sampled_from([NEVER_WAIT, 0, 7, WAIT_FOREVER]))
    limit_kind = draw(st.sampled_from(limit_kinds))
    if max_task_idle_ms == NEVER_WAIT and limit_kind in ("step", "both"):
        limit_kind = "records"
    previous = max(partition_times.values())
    limits = BatchLimits(
        max_records=draw(st.integers(1, 3 * partitions)) if limit_kind in ("records", "both") else None,
        max_stream_time_step_ms=draw(st.integers(1, 20)) if limit_kind in ("step", "both") else None,
        previous_stream_time=previous,
    )
    idle_since = {p: draw(st.integers(0, 10)) for p in logs if draw(st.booleans())}
    return dict(broker=ModelBroker(logs, read_committed=read_committed), distinct=distinct,
                starts=starts, partition_times=partition_times,
                stops=stops, max_task_idle_ms=max_task_idle_ms, limits=limits,
                idle_since=idle_since, now_ms=draw(st.integers(0, 20)))


def plan_both(scenario: dict, known: Optional[KnownFirstOffsets] = None) -> tuple[Optional[Cut], Cut]:
    """The fetch path's cut and the index path's (None where it cannot answer), its by-time
    look-ups answered through ``known`` when given (what earlier look-ups imply)."""
    broker = scenario["broker"]
    arguments = dict(now_ms=scenario["now_ms"], max_task_idle_ms=scenario["max_task_idle_ms"],
                     idle_since=scenario["idle_since"], limits=scenario["limits"])
    view = (scenario["starts"], scenario["partition_times"], scenario["stops"])
    fetch_cut = plan_batch(fetched(broker, *view), **arguments)
    try:
        first_offsets = (broker.first_offsets if known is None
                         else known.remembering(broker.first_offsets, scenario["starts"]))
        index_cut = plan_from_index(indexed(broker, *view), first_offsets, broker.first_records, **arguments)
    except IndexCannotAnswer as cannot:
        assert cannot.reasons and set(cannot.reasons) <= set(broker.logs)
        return None, fetch_cut
    return index_cut, fetch_cut


@settings(max_examples=examples(1500), deadline=None)
@given(scenario=scenarios())
def test_the_index_cut_equals_the_fetch_cut_or_says_it_cannot(scenario):
    index_cut, fetch_cut = plan_both(scenario)
    if index_cut is not None:
        assert_same_cut(index_cut, fetch_cut)


def assert_same_records(scenario: dict, index_cut: Cut, fetch_cut: Cut) -> None:
    """Where a log holds entries no consumer reads, offsets may differ by them: the batches
    must hold the same records, with the same stream and partition times."""
    broker, starts = scenario["broker"], scenario["starts"]
    assert readable(broker, starts, index_cut) == readable(broker, starts, fetch_cut)
    assert_same_times(index_cut, fetch_cut)


@settings(max_examples=examples(2000), deadline=None)
@given(scenario=scenarios(transactional=True))
def test_on_transactional_logs_the_index_cut_holds_the_fetch_cuts_records_or_says_it_cannot(scenario):
    """Transaction markers (stamped with the broker's clock) and aborted records are entries
    of the index but not records a consumer reads, and compaction leaves offsets with nothing:
    the cut must hold the records the fetch path's does (log starts above 0 and out-of-order
    records are drawn as in the other properties). Synchronized, maxOffsetsPerTrigger counts offsets on the index path and
    records on the fetch path, so there the fetch path is given the number of records the index
    cut took: with distinct timestamps, the first N records in processing order are one set.
    (With max.task.idle.ms=-1 both split offsets as format("kafka") does.)"""
    index_cut, fetch_cut = plan_both(scenario)
    if index_cut is None:
        return
    limits = scenario["limits"]
    if limits.max_records is not None and scenario["max_task_idle_ms"] != NEVER_WAIT:
        if not scenario["distinct"]:
            return
        taken = sum(map(len, readable(scenario["broker"], scenario["starts"], index_cut).values()))
        if not taken:  # the offsets allowed held no record (markers): nothing to compare
            return
        _, fetch_cut = plan_both({**scenario, "limits": BatchLimits(
            taken, limits.max_stream_time_step_ms, limits.previous_stream_time)})
    assert_same_records(scenario, index_cut, fetch_cut)


@settings(max_examples=examples(300), deadline=None)
@given(scenario=scenarios(partitions=24, limit_kinds=("records", "both")))
def test_the_rate_limit_search_over_many_partitions_equals_the_fetch_cut(scenario):
    """The search answers each level from what earlier levels' answers imply where it can, and
    asks the brokers only for the rest: on many partitions the cut stays the fetch path's."""
    index_cut, fetch_cut = plan_both(scenario)
    if index_cut is not None:
        assert_same_cut(index_cut, fetch_cut)
    # Answers remembered within the plan imply others exactly: the same outcome.
    remembered, _ = plan_both(scenario, KnownFirstOffsets())
    assert remembered == index_cut


@settings(max_examples=examples(400), deadline=None)
@given(scenario=scenarios(in_order_from_start=True), remembering=st.booleans())
def test_in_order_logs_read_batch_after_batch_from_their_start_never_need_the_fetch_path(scenario, remembering):
    """Batch after batch until nothing is left, each from the index path's previous end;
    with ``remembering``, by-time answers of earlier batches are reused as a query does."""
    broker = scenario["broker"]
    known = KnownFirstOffsets() if remembering else None
    starts, partition_times = dict(scenario["starts"]), dict(scenario["partition_times"])
    limits, stream_time = scenario["limits"], NO_TIMESTAMP
    for _ in range(60):
        scenario = {**scenario, "starts": starts, "partition_times": partition_times,
                    "limits": BatchLimits(limits.max_records, limits.max_stream_time_step_ms,
                                          stream_time)}
        index_cut, fetch_cut = plan_both(scenario, known)
        assert index_cut is not None, "the index path fell back on an in-order log"
        assert_same_cut(index_cut, fetch_cut)
        if not index_cut.has_batch:
            break
        starts = index_cut.end_offsets
        partition_times = {p: d.partition_time for p, d in index_cut.partitions.items()}
        stream_time = max(stream_time, NO_TIMESTAMP if index_cut.stream_time is None else index_cut.stream_time)
    assert not index_cut.has_batch


@st.composite
def live_transactional_logs(draw: st.DrawFn, partitions: int = 4) -> dict:
    """Transactional partitions written in time order, as a live stream is: every entry,
    markers and aborted records included, no older than the one before (a marker's clock
    reading lies between the records it follows and the next transaction's)."""
    logs, starts, partition_times = {}, {}, {}
    for index in range(draw(st.integers(1, partitions))):
        kinds = draw(st.lists(st.sampled_from([RECORD, RECORD, RECORD, MARKER, ABORTED]), max_size=10))
        timestamps = sorted(draw(st.lists(st.integers(0, 60), min_size=len(kinds), max_size=len(kinds))))
        logs[tp(index)] = ModelLog(timestamps, kinds=kinds)
        starts[tp(index)], partition_times[tp(index)] = 0, NO_TIMESTAMP
    return dict(broker=ModelBroker(logs, read_committed=draw(st.booleans())), distinct=False,
                starts=starts, partition_times=partition_times, stops={},
                max_task_idle_ms=draw(st.sampled_from([0, 7, WAIT_FOREVER])),
                limits=BatchLimits(None, draw(st.one_of(st.none(), st.integers(1, 20))), NO_TIMESTAMP),
                idle_since={}, now_ms=0)


def unreadable_windows(scenario: dict) -> list[TopicPartition]:
    """Partitions whose window holds entries but no record a consumer reads."""
    broker, starts = scenario["broker"], scenario["starts"]
    return [p for p, log in broker.logs.items() if starts[p] < log.end
            and not any(log.consumed(o, broker.read_committed) for o in range(starts[p], log.end))]


@settings(max_examples=examples(600), deadline=None)
@given(scenario=live_transactional_logs())
def test_transactional_logs_written_in_time_order_stay_on_the_index(scenario):
    """A marker holds each partition's largest timestamp, yet the index path finds the
    largest readable one and plans every batch, holding the fetch path's records. It falls
    back only where a window holds markers or aborted records alone (the fetch path sees no
    record there and idles it)."""
    limits, stream_time = scenario["limits"], NO_TIMESTAMP
    for _ in range(60):
        index_cut, fetch_cut = plan_both(scenario)
        if index_cut is None:
            assert unreadable_windows(scenario), "the index path fell back on a time-ordered log"
            return
        assert_same_records(scenario, index_cut, fetch_cut)
        if not index_cut.has_batch:
            return
        stream_time = max(stream_time, NO_TIMESTAMP if index_cut.stream_time is None else index_cut.stream_time)
        scenario = {**scenario, "starts": index_cut.end_offsets,
                    "partition_times": {p: d.partition_time for p, d in index_cut.partitions.items()},
                    "limits": BatchLimits(None, limits.max_stream_time_step_ms, stream_time)}
    raise AssertionError("60 batches did not read the logs")


def test_a_marker_holding_the_largest_timestamp_is_looked_past():
    """Two committed transactions, then one aborted: the largest readable record is the last
    of the second, found by reading back from the final marker, then confirmed."""
    kinds = [RECORD, RECORD, MARKER, RECORD, RECORD, MARKER, ABORTED, ABORTED, MARKER]
    broker = ModelBroker({tp(0): ModelLog([10, 11, 12, 20, 21, 22, 30, 31, 32], kinds=kinds),
                          tp(1): ModelLog([15, 25, 35])})
    states = indexed(broker, {tp(0): 0, tp(1): 0}, {tp(0): -1, tp(1): -1}, {})
    cut = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0,
                          idle_since={})
    # Stream time is partition 0's largest readable timestamp, 21, not its final marker's 32.
    assert cut.stream_time == 21
    assert cut.end_offsets == {tp(0): 9, tp(1): 1}
    assert cut.partitions[tp(0)].partition_time == 21


def test_the_cut_is_the_first_record_above_stream_time_and_its_partition_time_the_largest_taken():
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30, 40]), tp(1): ModelLog([15, 25])})
    states = indexed(broker, {tp(0): 0, tp(1): 0}, {tp(0): -1, tp(1): -1}, {})
    cut = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0, idle_since={})
    assert cut.end_offsets == {tp(0): 2, tp(1): 2}
    assert cut.stream_time == 25
    # Partition 0 gives 10 and 20: its partition time is 20 (KIP-472: the largest timestamp
    # processed), as reading every record says, not the level 25 it was cut at.
    assert [d.partition_time for d in cut.partitions.values()] == [20, 25]
    # By time: the cut (only the partition to cut), then one look-up above the record read
    # just before the cut, to confirm it is the largest the batch takes there.
    assert broker.asked == [{tp(0): 26}, {tp(0): 21}]


def test_out_of_order_partition_is_cut_at_its_first_record_above_stream_time():
    broker = ModelBroker({tp(0): ModelLog([5, 40, 12, 18]), tp(1): ModelLog([10, 20])})
    states = indexed(broker, {tp(0): 0, tp(1): 0}, {tp(0): -1, tp(1): -1}, {})
    cut = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0, idle_since={})
    assert cut.end_offsets == {tp(0): 1, tp(1): 2}


def test_a_largest_record_before_the_position_is_a_reason_to_fall_back():
    broker = ModelBroker({tp(0): ModelLog([50, 10, 20]), tp(1): ModelLog([15])})
    states = indexed(broker, {tp(0): 1, tp(1): 0}, {tp(0): 50, tp(1): -1}, {})
    with pytest.raises(IndexCannotAnswer, match="t-0: its largest timestamp .50. is at offset 0, before the position 1"):
        plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0, idle_since={})


def test_a_broker_that_answers_minus_one_everywhere_is_a_reason_to_fall_back():
    """The embedded librdkafka cluster answers -1 to max_timestamp and to every by-time look-up."""
    states = {tp(0): IndexedPartition(start=0, end_offset=5, largest=None)}
    with pytest.raises(IndexCannotAnswer, match="does not answer timestamp look-ups"):
        plan_from_index(states, lambda times: {p: None for p in times}, lambda ranges: {p: None for p in ranges},
                        now_ms=0,
                        max_task_idle_ms=0, idle_since={})


def test_a_largest_record_past_the_readable_end_is_searched_for():
    """An open transaction holds the log's largest record past the last stable offset."""
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30, 99], readable=3), tp(1): ModelLog([25, 36])})
    states = indexed(broker, {tp(0): 0, tp(1): 0}, {tp(0): -1, tp(1): -1}, {})
    assert states[tp(0)].largest is None
    cut = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0, idle_since={})
    # Partition 0's largest readable timestamp, 30, found by search, is stream time.
    assert cut.end_offsets == {tp(0): 3, tp(1): 1}
    assert cut.stream_time == 30


def test_idle_partition_waits_then_is_given_up_like_the_fetch_path():
    broker = ModelBroker({tp(0): ModelLog([10, 20]), tp(1): ModelLog([])})
    states = indexed(broker, {tp(0): 0, tp(1): 0}, {tp(0): -1, tp(1): -1}, {})
    waiting = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=100, max_task_idle_ms=50, idle_since={})
    assert not waiting.has_batch
    assert waiting.partitions[tp(1)].status is PartitionStatus.IDLE_WAITING
    given_up = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=150, max_task_idle_ms=50,
                               idle_since=waiting.idle_since)
    assert given_up.enforced and given_up.end_offsets == {tp(0): 2, tp(1): 0}


def test_rate_limit_search_takes_the_first_offsets_in_processing_order():
    broker = ModelBroker({tp(0): ModelLog([1, 2, 3, 4, 5, 6]), tp(1): ModelLog([1, 2, 3, 4, 5, 6])})
    states = indexed(broker, {tp(0): 0, tp(1): 0}, {tp(0): -1, tp(1): -1}, {})
    cut = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0, idle_since={},
                          limits=BatchLimits(max_records=5))
    # keys 1,1,2,2,3 (ties to the lower partition): partition 0 gives 3, partition 1 gives 2.
    assert cut.end_offsets == {tp(0): 3, tp(1): 2}


def test_the_rate_limit_search_asks_only_partitions_whose_end_a_level_can_change():
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30, 40]), tp(1): ModelLog([1000, 1001]),
                          tp(2): ModelLog([5, 15, 25, 35, 45])})
    states = indexed(broker, {p: 0 for p in broker.logs}, {p: -1 for p in broker.logs}, {})
    cut = plan_from_index(states, broker.first_offsets, broker.first_records, now_ms=0, max_task_idle_ms=0,
                          idle_since={}, limits=BatchLimits(max_records=3))
    assert cut.end_offsets == {tp(0): 1, tp(1): 0, tp(2): 2}  # 5, 10, 15
    cut_round, first_level, *probes = broker.asked
    assert cut_round == {tp(1): 41, tp(2): 41} and set(first_level) == set(broker.logs)
    # Partition 1 has nothing at or below the stream-time bound (40): no level can change it.
    assert probes and all(tp(1) not in probe for probe in probes)


def test_a_trigger_from_the_same_start_asks_nothing_by_time_that_an_earlier_one_answered():
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30, 40, 50, 60]), tp(1): ModelLog([15, 25, 35]),
                          tp(2): ModelLog([12, 22, 32, 42, 52])})
    starts = {p: 0 for p in broker.logs}
    states = indexed(broker, starts, {p: -1 for p in broker.logs}, {})
    known = KnownFirstOffsets()
    cuts = []
    for _ in range(2):
        cuts.append(plan_from_index(states, known.remembering(broker.first_offsets, starts), broker.first_records,
                                    now_ms=0, max_task_idle_ms=0, idle_since={},
                                    limits=BatchLimits(max_records=5)))
        if len(cuts) == 1:
            asked = len(broker.asked)
    assert cuts[0] == cuts[1] and cuts[0].end_offsets == {tp(0): 2, tp(1): 1, tp(2): 2}  # 10 12 15 20 22
    assert asked > 0 and len(broker.asked) == asked
