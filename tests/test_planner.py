"""Tests for the pure planner: one unit test per rule, then properties against Kafka Streams.

The property tests compare ``plan_batch`` with a small reference model of Kafka Streams'
record-at-a-time loop (KIP-353): per-partition queues; repeatedly process the head record with the
smallest timestamp among the non-empty queues; a task stops being processable when a queue runs
empty. What they establish:

(a) distinct timestamps (in-order or out-of-order partitions): one cut is exactly what the reference
    processes before the first queue runs empty;
(b) ties allowed: for *every* tie-breaking order the reference's processed records are, per
    partition, a prefix of the cut; the cut's extra records in a partition start with a record whose
    timestamp equals T and none is newer than T; and the cut's prefix of a partition is exactly
    the longest prefix any tie-breaking order processes (breaking ties in that partition's favour),
    i.e. the cut is the union over tie-breaking orders of what Kafka Streams processes;
(c) driving the planner with max.task.idle.ms = 0 over fully fetched logs emits every record once,
    in offset order: first what the reference processes until a queue runs empty, then, enforced,
    everything else (Kafka Streams gives up on caught-up queues at once);
(d) in-order partitions, random fetch chunks, WAIT_FOREVER: no record of a later batch is older
    than an earlier batch's stream time.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples

from kafkasync_source.planning.planner import (
    NEVER_WAIT,
    NO_TIMESTAMP,
    WAIT_FOREVER,
    BatchLimits,
    Cut,
    PartitionDecision,
    PartitionState,
    PartitionStatus,
    TopicPartition,
    plan_batch,
)

NOW = 1_000_000
_POSITION = object()  # default end_offset: equal to the position (lag 0)


def tp(partition: int, topic: str = "t") -> TopicPartition:
    """A topic-partition of the test topic."""
    return TopicPartition(topic, partition)


def state(
    timestamps: Sequence[int],
    *,
    start: int = 0,
    offsets: Optional[Sequence[int]] = None,
    position: Optional[int] = None,
    end_offset: object = _POSITION,
    partition_time: int = NO_TIMESTAMP,
    stop_offset: Optional[int] = None,
    fetch_horizon: Optional[int] = None,
    buffer_full: bool = False,
) -> PartitionState:
    """A partition state; by default offsets are contiguous from start and the lag is 0."""
    if offsets is None:
        offsets = range(start, start + len(timestamps))
    offsets = list(offsets)
    if position is None:
        position = offsets[-1] + 1 if offsets else start
    return PartitionState(
        start=start,
        offsets=np.array(offsets, dtype=np.int64),
        timestamps=np.array(timestamps, dtype=np.int64),
        position=position,
        end_offset=position if end_offset is _POSITION else end_offset,
        partition_time=partition_time,
        stop_offset=stop_offset,
        fetch_horizon=fetch_horizon,
        buffer_full=buffer_full,
    )


def plan(
    partitions: dict[TopicPartition, PartitionState],
    *,
    now_ms: int = NOW,
    max_task_idle_ms: int = 0,
    idle_since: Optional[dict[TopicPartition, int]] = None,
    limits: BatchLimits = BatchLimits(),
) -> Cut:
    """plan_batch with test defaults."""
    return plan_batch(
        partitions, now_ms=now_ms, max_task_idle_ms=max_task_idle_ms, idle_since=idle_since or {},
        limits=limits,
    )


def records_of(cut: Cut) -> dict[TopicPartition, int]:
    """Records contributed per partition."""
    return {p: decision.records for p, decision in cut.partitions.items()}


def assert_no_batch(cut: Cut, partitions: dict[TopicPartition, PartitionState]) -> None:
    """No batch: nothing emitted, nothing advanced, nothing enforced."""
    assert not cut.has_batch
    assert cut.records == 0
    assert cut.stream_time is None
    assert cut.enforced is False
    assert cut.given_up == ()
    assert cut.end_offsets == {p: s.start for p, s in partitions.items()}
    for p, decision in cut.partitions.items():
        assert decision.partition_time == partitions[p].partition_time


# --------------------------------------------------------------------------------------------
# Ready partitions: the cut itself
# --------------------------------------------------------------------------------------------


def test_cut_stops_each_partition_before_its_first_record_newer_than_stream_time():
    partitions = {tp(0): state([10, 20, 30, 40]), tp(1): state([15, 25], start=100)}
    cut = plan(partitions)
    assert cut.stream_time == 25  # min(40, 25)
    assert records_of(cut) == {tp(0): 2, tp(1): 2}
    assert cut.end_offsets == {tp(0): 2, tp(1): 102}
    assert cut.partitions[tp(0)].partition_time == 20
    assert cut.partitions[tp(1)].partition_time == 25
    assert cut.records == 4 and cut.has_batch
    assert cut.enforced is False and cut.given_up == () and cut.blocking == {}
    assert cut.idle_since == {}
    assert all(d.status is PartitionStatus.READY for d in cut.partitions.values())
    assert all(d.idle_deadline is None for d in cut.partitions.values())


def test_out_of_order_partition_contributes_only_a_prefix():
    # Record 5 at offset 2 is older than T but sits behind 30 > T: never skip or reorder.
    partitions = {tp(0): state([10, 30, 5]), tp(1): state([20])}
    cut = plan(partitions)
    assert cut.stream_time == 20
    assert records_of(cut) == {tp(0): 1, tp(1): 1}
    assert cut.end_offsets[tp(0)] == 1


def test_stream_time_uses_max_not_last_timestamp_of_out_of_order_partition():
    partitions = {tp(0): state([50, 10]), tp(1): state([20, 60])}
    cut = plan(partitions)
    assert cut.stream_time == 50
    assert records_of(cut) == {tp(0): 2, tp(1): 1}
    assert cut.partitions[tp(0)].partition_time == 50


def test_ready_partition_can_contribute_nothing_and_ends_before_its_first_record():
    partitions = {
        tp(0): state([100], start=5, offsets=[7], position=8),
        tp(1): state([1, 2]),
    }
    cut = plan(partitions)
    assert cut.stream_time == 2
    assert cut.partitions[tp(0)].records == 0
    # Offsets 5 and 6 hold no records (the buffer covers [start, position)), so ending at 7 is safe.
    assert cut.partitions[tp(0)].end == 7
    assert cut.partitions[tp(0)].status is PartitionStatus.READY
    assert cut.partitions[tp(0)].partition_time == NO_TIMESTAMP


def test_full_contribution_ends_at_position_so_trailing_gaps_are_committed():
    # Offsets 3..9 are transaction markers / compacted away: the next batch must not wait on them.
    partitions = {tp(0): state([1, 2, 3], offsets=[0, 1, 2], position=10, end_offset=10)}
    cut = plan(partitions)
    assert cut.partitions[tp(0)].end == 10
    assert cut.partitions[tp(0)].lag == 0


def test_partial_contribution_ends_at_the_first_excluded_record_across_gaps():
    partitions = {
        tp(0): state([1, 2, 9], offsets=[0, 4, 8], position=12),
        tp(1): state([5]),
    }
    cut = plan(partitions)
    assert cut.partitions[tp(0)].records == 2
    assert cut.partitions[tp(0)].end == 8


def test_equal_timestamps_are_all_taken():
    partitions = {tp(0): state([5, 5, 7]), tp(1): state([5])}
    cut = plan(partitions)
    assert cut.stream_time == 5
    assert records_of(cut) == {tp(0): 2, tp(1): 1}


def test_lag_is_reported_and_capped_at_zero_for_stale_end_offsets():
    partitions = {
        tp(0): state([1], position=1, end_offset=50),
        tp(1): state([2], position=1, end_offset=0),  # end offset older than our position
    }
    cut = plan(partitions)
    assert cut.partitions[tp(0)].lag == 49
    assert cut.partitions[tp(1)].lag == 0


def test_outputs_are_plain_ints_for_the_offset_json():
    cut = plan({tp(0): state([3, 4]), tp(1): state([], position=0), tp(2): state([9])})
    payload = {
        "ends": list(cut.end_offsets.values()),
        "times": [d.partition_time for d in cut.partitions.values()],
        "records": [d.records for d in cut.partitions.values()],
        "stream_time": cut.stream_time,
    }
    json.dumps(payload)
    assert all(type(v) is int for v in payload["ends"] + payload["times"] + payload["records"])


# --------------------------------------------------------------------------------------------
# Empty partitions: waiting for metadata and fetches (KIP-695)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_task_idle_ms", [0, 100, WAIT_FOREVER])
def test_unknown_end_offset_blocks(max_task_idle_ms):
    partitions = {tp(0): state([1, 2]), tp(1): state([], start=3, end_offset=None)}
    cut = plan(partitions, max_task_idle_ms=max_task_idle_ms)
    assert_no_batch(cut, partitions)
    assert cut.partitions[tp(1)].status is PartitionStatus.WAITING_FOR_END_OFFSET
    assert cut.partitions[tp(1)].lag is None
    assert cut.partitions[tp(0)].status is PartitionStatus.READY
    assert list(cut.blocking) == [tp(1)]
    assert cut.idle_since == {}


@pytest.mark.parametrize("lag", [1, 5])
@pytest.mark.parametrize("max_task_idle_ms", [0, 100, WAIT_FOREVER])
def test_positive_lag_blocks_until_fetched(max_task_idle_ms, lag):
    partitions = {tp(0): state([1, 2]), tp(1): state([], start=3, end_offset=3 + lag)}
    cut = plan(partitions, max_task_idle_ms=max_task_idle_ms, now_ms=10**12)
    assert_no_batch(cut, partitions)
    assert cut.partitions[tp(1)].status is PartitionStatus.WAITING_FOR_FETCH
    assert cut.partitions[tp(1)].lag == lag
    assert cut.partitions[tp(1)].idle_deadline is None
    assert list(cut.blocking) == [tp(1)]


def test_lag_counts_from_position_not_from_last_offset():
    # Nothing buffered, position 10 == end offset 10 after a gap: lag 0, so idle (not fetching).
    partitions = {tp(0): state([1]), tp(1): state([], start=4, position=10, end_offset=10)}
    cut = plan(partitions, max_task_idle_ms=0)
    assert cut.partitions[tp(1)].lag == 0
    assert cut.partitions[tp(1)].status is PartitionStatus.IDLE


# --------------------------------------------------------------------------------------------
# Idle partitions and max.task.idle.ms
# --------------------------------------------------------------------------------------------


def test_idle_with_zero_is_given_up_at_once_and_enforced():
    partitions = {tp(0): state([1, 2]), tp(1): state([], start=3, position=6)}
    cut = plan(partitions, max_task_idle_ms=0)
    assert cut.has_batch and cut.enforced
    assert cut.given_up == (tp(1),)
    assert cut.stream_time == 2
    idle = cut.partitions[tp(1)]
    assert idle.status is PartitionStatus.IDLE
    assert idle.idle_deadline == NOW
    assert idle.end == 6  # progress over the gap is recorded
    assert idle.records == 0
    assert cut.idle_since == {tp(1): NOW}
    assert cut.blocking == {}


@pytest.mark.parametrize(
    ("now_ms", "status", "has_batch"),
    [
        (NOW + 499, PartitionStatus.IDLE_WAITING, False),
        (NOW + 500, PartitionStatus.IDLE, True),
        (NOW + 10_000, PartitionStatus.IDLE, True),
    ],
    ids=["before-deadline", "at-deadline", "after-deadline"],
)
def test_idle_waits_until_the_deadline(now_ms, status, has_batch):
    partitions = {tp(0): state([1, 2]), tp(1): state([], start=3)}
    cut = plan(partitions, now_ms=now_ms, max_task_idle_ms=500, idle_since={tp(1): NOW})
    idle = cut.partitions[tp(1)]
    assert idle.status is status
    assert idle.idle_deadline == NOW + 500
    assert cut.has_batch is has_batch
    assert cut.enforced is has_batch
    assert cut.idle_since == {tp(1): NOW}
    if has_batch:
        assert cut.given_up == (tp(1),)
    else:
        assert_no_batch(cut, partitions)
        assert list(cut.blocking) == [tp(1)]


def test_first_seen_idle_is_now_when_not_carried():
    partitions = {tp(0): state([1]), tp(1): state([], start=3)}
    cut = plan(partitions, now_ms=NOW + 400, max_task_idle_ms=500)
    assert cut.idle_since == {tp(1): NOW + 400}
    assert cut.partitions[tp(1)].idle_deadline == NOW + 900
    assert cut.partitions[tp(1)].status is PartitionStatus.IDLE_WAITING


def test_idle_since_is_carried_across_calls():
    partitions = {tp(0): state([1]), tp(1): state([], start=3)}
    first = plan(partitions, now_ms=NOW, max_task_idle_ms=500)
    second = plan(partitions, now_ms=NOW + 400, max_task_idle_ms=500, idle_since=first.idle_since)
    third = plan(partitions, now_ms=NOW + 500, max_task_idle_ms=500, idle_since=second.idle_since)
    assert not first.has_batch and not second.has_batch
    assert second.idle_since == {tp(1): NOW}
    assert third.has_batch and third.enforced
    assert third.idle_since == {tp(1): NOW}


def test_idle_since_survives_a_batch_that_proceeded_without_the_partition():
    partitions = {tp(0): state([1, 2]), tp(1): state([], start=3)}
    first = plan(partitions, now_ms=NOW, max_task_idle_ms=0)
    assert first.enforced
    partitions[tp(0)] = state([3], start=2)
    second = plan(partitions, now_ms=NOW + 50, max_task_idle_ms=0, idle_since=first.idle_since)
    assert second.idle_since == {tp(1): NOW}
    assert second.partitions[tp(1)].idle_deadline == NOW


def test_idle_since_is_cleared_when_data_arrives():
    idle_since = {tp(0): NOW - 1_000, tp(1): NOW - 1_000}
    partitions = {tp(0): state([7]), tp(1): state([8])}
    cut = plan(partitions, max_task_idle_ms=5_000, idle_since=idle_since)
    assert cut.idle_since == {}
    assert cut.has_batch and not cut.enforced


def test_idle_since_is_cleared_while_waiting_for_fetch_or_metadata():
    # As Kafka Streams' PartitionGroup: the idle clock only runs while the lag is known to be 0.
    idle_since = {tp(1): NOW - 1_000, tp(2): NOW - 1_000, tp(3): NOW - 1_000}
    partitions = {
        tp(0): state([1]),
        tp(1): state([], end_offset=None),
        tp(2): state([], end_offset=4),
    }
    cut = plan(partitions, max_task_idle_ms=5_000, idle_since=idle_since)
    assert cut.idle_since == {}  # tp(3) is not an input partition any more


def test_wait_forever_never_gives_up():
    partitions = {tp(0): state([1]), tp(1): state([], start=3)}
    cut = plan(partitions, now_ms=2**62, max_task_idle_ms=WAIT_FOREVER, idle_since={tp(1): 0})
    assert_no_batch(cut, partitions)
    assert cut.partitions[tp(1)].status is PartitionStatus.IDLE_WAITING
    assert cut.partitions[tp(1)].idle_deadline == WAIT_FOREVER


def test_huge_idle_time_saturates_instead_of_overflowing():
    partitions = {tp(0): state([1]), tp(1): state([], start=3)}
    cut = plan(partitions, now_ms=2**62, max_task_idle_ms=2**62)
    assert cut.partitions[tp(1)].idle_deadline == WAIT_FOREVER
    assert cut.partitions[tp(1)].status is PartitionStatus.IDLE_WAITING


def test_all_empty_and_idle_is_no_batch_even_when_given_up():
    partitions = {tp(0): state([], start=4), tp(1): state([], start=9, position=12)}
    cut = plan(partitions, max_task_idle_ms=0)
    assert_no_batch(cut, partitions)
    assert {d.status for d in cut.partitions.values()} == {PartitionStatus.IDLE}
    assert cut.blocking == {}  # nobody holds it back: there is simply nothing to process
    assert cut.idle_since == {tp(0): NOW, tp(1): NOW}


def test_all_empty_and_waiting_reports_who_blocks():
    partitions = {tp(0): state([], start=4), tp(1): state([], end_offset=None)}
    cut = plan(partitions, max_task_idle_ms=100)
    assert_no_batch(cut, partitions)
    assert set(cut.blocking) == {tp(0), tp(1)}
    assert cut.idle_since == {tp(0): NOW}


def test_empty_input_is_no_batch():
    cut = plan({})
    assert cut.partitions == {} and cut.idle_since == {}
    assert not cut.has_batch and cut.stream_time is None and not cut.enforced
    assert cut.all_finished  # vacuously


# --------------------------------------------------------------------------------------------
# max.task.idle.ms = -1: never wait
# --------------------------------------------------------------------------------------------


def test_never_wait_takes_everything_up_to_the_horizon_and_never_waits_for_producers():
    partitions = {
        tp(0): state([10, 50, 20]),
        tp(1): state([30], start=5, position=9),
        tp(2): state([], start=2, position=5),  # idle: lag 0
        tp(3): state([40, 60], fetch_horizon=1),  # fetched past the horizon: left for later
    }
    cut = plan(partitions, max_task_idle_ms=NEVER_WAIT, idle_since={tp(2): NOW - 10})
    assert cut.has_batch and not cut.enforced and cut.given_up == ()
    assert cut.stream_time == 50
    assert records_of(cut) == {tp(0): 3, tp(1): 1, tp(2): 0, tp(3): 1}
    assert cut.end_offsets == {tp(0): 3, tp(1): 9, tp(2): 5, tp(3): 1}
    statuses = {p: d.status for p, d in cut.partitions.items()}
    assert statuses[tp(2)] is PartitionStatus.IDLE
    assert cut.partitions[tp(2)].idle_deadline == NOW - 10
    assert cut.idle_since == {tp(2): NOW - 10}
    assert cut.blocking == {}


@pytest.mark.parametrize(
    "waiting, status",
    [
        (state([], start=2, end_offset=None), PartitionStatus.WAITING_FOR_END_OFFSET),
        (state([30], end_offset=None), PartitionStatus.WAITING_FOR_END_OFFSET),
        (state([], start=2, position=4, end_offset=7), PartitionStatus.WAITING_FOR_FETCH),
        (state([30], end_offset=7), PartitionStatus.WAITING_FOR_FETCH),
    ],
)
def test_never_wait_waits_for_the_fetch_of_records_the_broker_has(waiting, status):
    """Like format("kafka"), -1 reads what exists when the batch is planned: it waits for
    those records' fetch (so the batch does not depend on fetch progress), never for producers."""
    partitions = {tp(0): state([10, 50]), tp(1): waiting}
    cut = plan(partitions, max_task_idle_ms=NEVER_WAIT)
    assert_no_batch(cut, partitions)
    assert cut.partitions[tp(1)].status is status
    assert set(cut.blocking) == {tp(1)}


def test_never_wait_with_a_full_buffer_stops_at_the_buffer_end():
    partitions = {
        tp(0): state([10, 50], end_offset=100, buffer_full=True),
        tp(1): state([30, 31, 32]),
    }
    cut = plan(partitions, max_task_idle_ms=NEVER_WAIT)
    assert cut.end_offsets == {tp(0): 2, tp(1): 3}


@pytest.mark.parametrize(
    "starts, ends, limit, expected",
    [
        # 600 remaining, 200 allowed: shares 100, 66.67 -> 66, 33.33 -> 33 (floored)
        ([0, 0, 0], [300, 200, 100], 200, [100, 66, 33]),
        # a share below 1 is rounded up, not starved; the total may then exceed the limit
        ([0, 0], [1000, 1], 10, [9, 1]),
        # never past the end; nothing remaining keeps its end
        ([5, 7], [6, 7], 100, [6, 7]),
        ([0, 10], [1, 20], 3, [1, 12]),
    ],
)
def test_never_wait_with_max_records_splits_the_cap_like_spark(starts, ends, limit, expected):
    partitions = {
        tp(p): state(list(range(end - start)), start=start)
        for p, (start, end) in enumerate(zip(starts, ends))
    }
    cut = plan(partitions, max_task_idle_ms=NEVER_WAIT, limits=BatchLimits(max_records=limit))
    assert [cut.end_offsets[tp(p)] for p in range(len(starts))] == expected


def test_never_wait_respects_stop_offset():
    partitions = {tp(0): state([1, 2, 3, 4], stop_offset=2), tp(1): state([9])}
    cut = plan(partitions, max_task_idle_ms=NEVER_WAIT)
    assert records_of(cut) == {tp(0): 2, tp(1): 1}
    assert cut.end_offsets[tp(0)] == 2
    assert cut.stream_time == 9


def test_never_wait_with_nothing_buffered_is_no_batch():
    partitions = {tp(0): state([], start=3, end_offset=5), tp(1): state([], start=1, position=4)}
    cut = plan(partitions, max_task_idle_ms=NEVER_WAIT)
    assert_no_batch(cut, partitions)


def test_max_task_idle_ms_below_never_wait_is_rejected():
    with pytest.raises(ValueError):
        plan({tp(0): state([1])}, max_task_idle_ms=-2)


# --------------------------------------------------------------------------------------------
# Records without timestamps
# --------------------------------------------------------------------------------------------


def test_untimestamped_records_travel_with_their_neighbours():
    # Effective timestamps: 10, 10, 20, 20, 40 -> T = 30 cuts before 40 only.
    partitions = {
        tp(0): state([10, NO_TIMESTAMP, 20, NO_TIMESTAMP, 40]),
        tp(1): state([30]),
    }
    cut = plan(partitions)
    assert cut.stream_time == 30
    assert cut.partitions[tp(0)].records == 4
    assert cut.partitions[tp(0)].partition_time == 20


def test_untimestamped_records_never_advance_partition_time():
    partitions = {tp(0): state([NO_TIMESTAMP, NO_TIMESTAMP], partition_time=70), tp(1): state([80])}
    cut = plan(partitions)
    assert cut.stream_time == 70  # tp(0)'s max effective timestamp is its partition time
    assert cut.partitions[tp(0)].records == 2
    assert cut.partitions[tp(0)].partition_time == 70
    assert cut.partitions[tp(1)].records == 0


@pytest.mark.parametrize(
    ("timestamps", "records"),
    [([NO_TIMESTAMP, 5], 0), ([5, NO_TIMESTAMP, 6], 1)],
    ids=["leading", "after-a-late-record"],
)
def test_untimestamped_records_are_held_back_when_their_partition_is_ahead(timestamps, records):
    partitions = {tp(0): state(timestamps, partition_time=100), tp(1): state([50])}
    cut = plan(partitions)
    assert cut.stream_time == 50  # min(max(100, 6), 50)
    assert cut.partitions[tp(0)].records == records  # effective timestamp 100 > 50


def test_partition_of_only_untimestamped_records_still_makes_progress():
    partitions = {tp(0): state([NO_TIMESTAMP] * 3), tp(1): state([NO_TIMESTAMP, 5, 6])}
    cut = plan(partitions)
    assert cut.stream_time == NO_TIMESTAMP
    assert records_of(cut) == {tp(0): 3, tp(1): 1}
    assert cut.partitions[tp(0)].partition_time == NO_TIMESTAMP
    assert cut.has_batch


def test_never_wait_stream_time_of_untimestamped_batch_is_partition_time():
    cut = plan({tp(0): state([NO_TIMESTAMP], partition_time=42)}, max_task_idle_ms=NEVER_WAIT)
    assert cut.stream_time == 42
    assert cut.partitions[tp(0)].partition_time == 42


# --------------------------------------------------------------------------------------------
# stop_offset (Trigger.AvailableNow)
# --------------------------------------------------------------------------------------------


def test_stop_offset_hides_later_records_and_caps_position_and_lag():
    partitions = {
        tp(0): state([1, 2, 3, 4], position=4, end_offset=100, stop_offset=2),
        tp(1): state([10]),
    }
    cut = plan(partitions)
    decision = cut.partitions[tp(0)]
    assert decision.records == 2
    assert decision.end == 2  # capped position, not 4
    assert decision.lag == 0  # min(100, 2) - min(4, 2)
    # Everything up to its stop offset is buffered: nothing more will come, so tp(0) does not
    # bound stream time and tp(1)'s record is processed in the same batch.
    assert cut.stream_time == 10 and cut.partitions[tp(1)].records == 1


def test_stop_offset_inside_a_gap_ends_the_partition_at_the_stop_offset():
    partitions = {tp(0): state([1, 2], offsets=[0, 9], position=10, stop_offset=5)}
    cut = plan(partitions)
    assert cut.partitions[tp(0)].records == 1
    assert cut.partitions[tp(0)].end == 5


def test_waiting_for_fetch_below_the_stop_offset():
    partitions = {tp(0): state([1]), tp(1): state([], start=3, end_offset=100, stop_offset=6)}
    cut = plan(partitions)
    assert cut.partitions[tp(1)].status is PartitionStatus.WAITING_FOR_FETCH
    assert cut.partitions[tp(1)].lag == 3
    assert not cut.has_batch


@pytest.mark.parametrize("max_task_idle_ms", [NEVER_WAIT, 0, 100, WAIT_FOREVER])
def test_finished_partitions_never_block_and_are_never_idle(max_task_idle_ms):
    partitions = {
        tp(0): state([1, 2]),
        tp(1): state([7, 8], start=5, position=7, stop_offset=5),  # only records at/after stop
        tp(2): state([], start=9, position=9, stop_offset=4),  # already past its stop offset
        tp(3): state([], start=2, position=6, end_offset=None, stop_offset=6),
    }
    cut = plan(partitions, max_task_idle_ms=max_task_idle_ms, idle_since={tp(1): 0})
    for p in (tp(1), tp(2), tp(3)):
        decision = cut.partitions[p]
        assert decision.status is PartitionStatus.FINISHED
        assert decision.idle_deadline is None and decision.records == 0
    assert cut.has_batch and not cut.enforced and cut.given_up == ()
    assert cut.idle_since == {}
    # Empty partitions record their progress up to their (capped) position, never backwards.
    assert cut.end_offsets == {tp(0): 2, tp(1): 5, tp(2): 9, tp(3): 6}
    assert cut.partitions[tp(3)].lag is None
    assert not cut.all_finished


def test_all_finished():
    partitions = {
        tp(0): state([], start=5, stop_offset=5),
        tp(1): state([3], start=0, offsets=[8], position=9, stop_offset=8),
    }
    cut = plan(partitions, max_task_idle_ms=WAIT_FOREVER)
    assert cut.all_finished
    assert_no_batch(cut, partitions)
    assert cut.blocking == {}


# --------------------------------------------------------------------------------------------
# Input validation and a non-timed sanity run at scale
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(start=0, offsets=[0, 1], timestamps=[1], position=2, end_offset=2),
        dict(start=5, offsets=[4], timestamps=[1], position=6, end_offset=6),
        dict(start=0, offsets=[0, 2], timestamps=[1, 1], position=2, end_offset=2),
        dict(start=0, offsets=[1, 0], timestamps=[1, 1], position=2, end_offset=2),
        dict(start=0, offsets=[0, 0], timestamps=[1, 1], position=2, end_offset=2),
        dict(start=3, offsets=[], timestamps=[], position=2, end_offset=2),
        dict(start=0, offsets=[0], timestamps=[-5], position=1, end_offset=1),
        dict(start=0, offsets=[0], timestamps=[1], position=1, end_offset=1, stop_offset=-1),
        dict(start=0, offsets=[0], timestamps=[1], position=1, end_offset=1, partition_time=-2),
    ],
    ids=[
        "length-mismatch",
        "offset-before-start",
        "offset-at-position",
        "descending",
        "duplicate-offset",
        "position-before-start",
        "bad-timestamp",
        "negative-stop",
        "bad-partition-time",
    ],
)
def test_inconsistent_states_are_rejected(kwargs):
    with pytest.raises(ValueError):
        PartitionState(**kwargs)


def test_inputs_are_converted_to_int64_arrays_and_python_ints():
    converted = PartitionState(
        start=np.int64(0),
        offsets=[0, 1],
        timestamps=[5, 6],
        position=np.int64(4),
        end_offset=np.int64(4),
        partition_time=np.int64(3),
        stop_offset=np.int64(9),
    )
    assert converted.offsets.dtype == np.int64 and converted.timestamps.dtype == np.int64
    scalars = [converted.start, converted.position, converted.end_offset, converted.partition_time]
    assert all(type(value) is int for value in scalars + [converted.stop_offset])
    cut = plan({tp(0): converted}, now_ms=np.int64(NOW))
    assert type(cut.partitions[tp(0)].end) is int


def test_sanity_at_512_partitions_of_1000_records():
    rng = np.random.default_rng(7)
    partitions = {}
    for p in range(512):
        offsets = np.cumsum(rng.integers(1, 3, 1_000)).astype(np.int64)
        timestamps = 1_700_000_000_000 + np.cumsum(rng.integers(0, 50, 1_000))
        partitions[tp(p)] = PartitionState(
            start=0,
            offsets=offsets,
            timestamps=timestamps,
            position=int(offsets[-1]) + 1,
            end_offset=int(offsets[-1]) + 1,
        )
    cut = plan(partitions)
    expected_stream_time = min(int(s.timestamps.max()) for s in partitions.values())
    assert cut.stream_time == expected_stream_time
    for p, s in partitions.items():
        assert cut.partitions[p].records == int(np.count_nonzero(s.timestamps <= cut.stream_time))
    assert 0 < cut.records <= 512_000


# --------------------------------------------------------------------------------------------
# Reference model: Kafka Streams' record-at-a-time loop
# --------------------------------------------------------------------------------------------

TieBreak = Callable[[list[int]], int]


def lowest_partition(tied: list[int]) -> int:
    """Break timestamp ties in favour of the lowest partition index."""
    return tied[0]


def favouring(partition: int) -> TieBreak:
    """Break timestamp ties in favour of one partition, otherwise the lowest index."""
    return lambda tied: partition if partition in tied else tied[0]


def reference_until_a_queue_runs_empty(
    queues: Sequence[Sequence[int]], tie_break: TieBreak
) -> list[int]:
    """Records Kafka Streams processes per queue (all non-empty) before the first one runs empty."""
    heads = [0] * len(queues)
    while True:
        candidates = [p for p, queue in enumerate(queues) if heads[p] < len(queue)]
        smallest = min(queues[p][heads[p]] for p in candidates)
        chosen = tie_break([p for p in candidates if queues[p][heads[p]] == smallest])
        heads[chosen] += 1
        if heads[chosen] == len(queues[chosen]):
            return heads


def reference_with_enforcement(queues: Sequence[Sequence[int]]) -> list[list[int]]:
    """Enforced processing (keep processing the non-empty queues) split at queue-empty events.

    Returns one list of per-queue record counts per segment. Timestamps must be distinct.
    """
    heads = [0] * len(queues)
    segments: list[list[int]] = []
    segment = [0] * len(queues)
    while any(heads[p] < len(queue) for p, queue in enumerate(queues)):
        candidates = [p for p, queue in enumerate(queues) if heads[p] < len(queue)]
        chosen = min(candidates, key=lambda p: queues[p][heads[p]])
        heads[chosen] += 1
        segment[chosen] += 1
        if heads[chosen] == len(queues[chosen]):
            segments.append(segment)
            segment = [0] * len(queues)
    return segments


@dataclass
class Log:
    """One partition's full log: record offsets (with gaps) and timestamps, and its end offset."""

    offsets: list[int]
    timestamps: list[int]
    end: int


@st.composite
def logs(
    draw: st.DrawFn,
    *,
    distinct: bool,
    min_records: int = 1,
    max_partitions: int = 5,
    max_records: int = 8,
) -> list[Log]:
    """Partition logs with offset gaps; distinct timestamps or many ties; in-order or not."""
    sizes = draw(
        st.lists(st.integers(min_records, max_records), min_size=1, max_size=max_partitions)
    )
    total = sum(sizes)
    if distinct:
        pool = draw(st.lists(st.integers(0, 10_000), min_size=total, max_size=total, unique=True))
    else:
        pool = draw(st.lists(st.integers(0, 4), min_size=total, max_size=total))
    in_order = draw(st.booleans())
    result = []
    for size in sizes:
        timestamps, pool = pool[:size], pool[size:]
        if in_order:
            timestamps = sorted(timestamps)
        first = draw(st.integers(0, 3))
        gaps = draw(st.lists(st.integers(1, 3), min_size=size, max_size=size))
        offsets = list(np.cumsum([first] + gaps[1:])) if size else []
        end = (offsets[-1] + 1 if offsets else first) + draw(st.integers(0, 2))
        result.append(Log([int(o) for o in offsets], timestamps, int(end)))
    return result


def fully_fetched(partition_logs: Sequence[Log]) -> dict[TopicPartition, PartitionState]:
    """Every record buffered, position at the log end, lag 0."""
    return {
        tp(p): PartitionState(
            start=0,
            offsets=np.array(log.offsets, dtype=np.int64),
            timestamps=np.array(log.timestamps, dtype=np.int64),
            position=log.end,
            end_offset=log.end,
        )
        for p, log in enumerate(partition_logs)
    }


def after(partition_state: PartitionState, decision: PartitionDecision) -> PartitionState:
    """The partition's state once the batch has been emitted."""
    return replace(
        partition_state,
        start=decision.end,
        offsets=partition_state.offsets[decision.records :],
        timestamps=partition_state.timestamps[decision.records :],
        partition_time=decision.partition_time,
    )


@settings(max_examples=examples(500), deadline=None)
@given(partition_logs=logs(distinct=True), max_task_idle_ms=st.sampled_from([0, 7, WAIT_FOREVER]))
def test_a_distinct_timestamps_cut_equals_kafka_streams_until_a_queue_runs_empty(
    partition_logs, max_task_idle_ms
):
    queues = [log.timestamps for log in partition_logs]
    expected = reference_until_a_queue_runs_empty(queues, lowest_partition)
    cut = plan(fully_fetched(partition_logs), max_task_idle_ms=max_task_idle_ms)
    assert [cut.partitions[tp(p)].records for p in range(len(queues))] == expected
    assert cut.stream_time == min(max(queue) for queue in queues)
    assert not cut.enforced


@settings(max_examples=examples(500), deadline=None)
@given(partition_logs=logs(distinct=False), tie_seed=st.integers(0, 2**32))
def test_b_with_ties_the_cut_is_the_union_over_tie_breaking_orders(partition_logs, tie_seed):
    queues = [log.timestamps for log in partition_logs]
    cut = plan(fully_fetched(partition_logs))
    stream_time = cut.stream_time
    taken = [cut.partitions[tp(p)].records for p in range(len(queues))]

    # Any tie-breaking order processes, per partition, a prefix of the cut ...
    tie_random = random.Random(tie_seed)
    processed = reference_until_a_queue_runs_empty(queues, tie_random.choice)
    for queue, done, count in zip(queues, processed, taken):
        assert done <= count
        extras = queue[done:count]
        # ... and what the cut adds starts exactly at T and is never newer than T.
        if extras:
            assert extras[0] == stream_time
            assert max(extras) <= stream_time

    # Breaking ties in a partition's favour processes exactly its part of the cut.
    for p in range(len(queues)):
        assert reference_until_a_queue_runs_empty(queues, favouring(p))[p] == taken[p]


@settings(max_examples=examples(300), deadline=None)
@given(partition_logs=logs(distinct=True, min_records=0))
def test_c_enforced_batches_match_kafka_streams_split_at_queue_empty_events(partition_logs):
    """With max.task.idle.ms=0 Kafka Streams never stops for a caught-up queue: the first batch
    ends where the first queue runs empty (as without enforcement), and the enforced batch after
    it takes all the rest, which Kafka Streams processes in one go (every further queue that
    runs empty is caught up and given up on at once)."""
    queues = [log.timestamps for log in partition_logs]
    segments = reference_with_enforcement(queues)
    def total(parts: list[list[int]]) -> list[int]:
        return [sum(column) for column in zip(*parts)]
    if any(not queue for queue in queues):  # enforced from the start: one batch
        expected_segments = [total(segments)] if segments else []
    else:
        expected_segments = segments[:1] + ([total(segments[1:])] if segments[1:] else [])
    partitions = fully_fetched(partition_logs)
    emitted: dict[TopicPartition, list[int]] = {p: [] for p in partitions}
    batches: list[list[int]] = []
    idle_since: dict[TopicPartition, int] = {}
    for call in range(len(queues) + 1):
        cut = plan(partitions, now_ms=NOW + call, max_task_idle_ms=0, idle_since=idle_since)
        if not cut.has_batch:
            break
        assert cut.enforced == any(s.offsets.size == 0 for s in partitions.values())
        batches.append([cut.partitions[tp(p)].records for p in range(len(queues))])
        for p, decision in cut.partitions.items():
            emitted[p].extend(partitions[p].offsets[: decision.records].tolist())
            partitions[p] = after(partitions[p], decision)
        idle_since = cut.idle_since
    assert not cut.has_batch
    assert batches == expected_segments
    for p, log in enumerate(partition_logs):
        assert emitted[tp(p)] == log.offsets  # each record once, in offset order
        if batches:  # the last batch also commits every partition's trailing gap
            assert partitions[tp(p)].start == log.end


@settings(max_examples=examples(300), deadline=None)
@given(partition_logs=logs(distinct=False, min_records=0))
def test_c_with_ties_and_untimestamped_records_everything_is_emitted_once(partition_logs):
    for log in partition_logs:  # turn timestamp 0 into "no timestamp"
        log.timestamps = [NO_TIMESTAMP if t == 0 else t for t in log.timestamps]
    partitions = fully_fetched(partition_logs)
    emitted: dict[TopicPartition, list[int]] = {p: [] for p in partitions}
    idle_since: dict[TopicPartition, int] = {}
    for call in range(sum(len(log.offsets) for log in partition_logs) + 1):
        cut = plan(partitions, now_ms=NOW + call, max_task_idle_ms=0, idle_since=idle_since)
        if not cut.has_batch:
            break
        for p, decision in cut.partitions.items():
            emitted[p].extend(partitions[p].offsets[: decision.records].tolist())
            partitions[p] = after(partitions[p], decision)
        idle_since = cut.idle_since
    assert not cut.has_batch
    for p, log in enumerate(partition_logs):
        assert emitted[tp(p)] == log.offsets
        valid = [t for t in log.timestamps if t != NO_TIMESTAMP]
        assert partitions[tp(p)].partition_time == max(valid, default=NO_TIMESTAMP)


@st.composite
def fetch_schedules(draw: st.DrawFn) -> list[list[tuple[int, int, bool]]]:
    """Per step and partition: (records produced, records fetched, end offset refreshed?)."""
    partitions = draw(st.integers(1, 4))
    step = st.tuples(st.integers(0, 3), st.integers(0, 4), st.booleans())
    return draw(
        st.lists(st.lists(step, min_size=partitions, max_size=partitions), min_size=1, max_size=25)
    )


@settings(max_examples=examples(400), deadline=None)
@given(
    partition_logs=logs(distinct=False, min_records=0, max_partitions=4, max_records=12),
    schedule=fetch_schedules(),
    bounded=st.booleans(),
)
def test_d_without_enforcement_no_later_record_is_older_than_an_earlier_stream_time(
    partition_logs, schedule, bounded
):
    """Producers append, the fetcher catches up in random chunks, end offsets refresh lazily."""
    for log in partition_logs:
        log.timestamps = sorted(log.timestamps)
    count = len(partition_logs)
    schedule = [row[:count] + [(0, 0, False)] * (count - len(row)) for row in schedule]
    produced = [0] * count  # records produced so far
    fetched = [0] * count  # records fetched so far
    known_end: list[Optional[int]] = [None] * count
    emitted: list[list[int]] = [[] for _ in range(count)]
    partitions = {tp(p): state([], end_offset=None) for p in range(count)}
    if bounded:
        partitions = {
            p: replace(s, stop_offset=log.end)
            for (p, s), log in zip(partitions.items(), partition_logs)
        }
    highest_stream_time = NO_TIMESTAMP
    idle_since: dict[TopicPartition, int] = {}

    def log_offset(p: int, records: int) -> int:
        """Offset just after the first `records` records of partition p (the log end when all)."""
        log = partition_logs[p]
        return log.end if records == len(log.offsets) else log.offsets[records]

    def refresh(p: int, newly_produced: int, newly_fetched: int, refresh_end: bool) -> None:
        produced[p] = min(produced[p] + newly_produced, len(partition_logs[p].offsets))
        new_fetched = min(fetched[p] + newly_fetched, produced[p])
        if refresh_end:
            known_end[p] = log_offset(p, produced[p])
        current = partitions[tp(p)]
        log = partition_logs[p]
        arrived = slice(fetched[p], new_fetched)
        partitions[tp(p)] = replace(
            current,
            offsets=np.concatenate([current.offsets, np.array(log.offsets[arrived], np.int64)]),
            timestamps=np.concatenate(
                [current.timestamps, np.array(log.timestamps[arrived], np.int64)]
            ),
            position=max(current.start, log_offset(p, new_fetched)),
            end_offset=known_end[p],
        )
        fetched[p] = new_fetched

    def run(now_ms: int) -> Cut:
        nonlocal highest_stream_time, idle_since
        cut = plan(partitions, now_ms=now_ms, max_task_idle_ms=WAIT_FOREVER, idle_since=idle_since)
        idle_since = cut.idle_since
        assert not cut.enforced
        for p, decision in cut.partitions.items():
            new_records = partitions[p].timestamps[: decision.records].tolist()
            assert all(t >= highest_stream_time for t in new_records)
            emitted[p.partition].extend(partitions[p].offsets[: decision.records].tolist())
            partitions[p] = after(partitions[p], decision)
        if cut.has_batch:
            assert cut.stream_time >= highest_stream_time
            highest_stream_time = cut.stream_time
        return cut

    for step, row in enumerate(schedule):
        for p, (newly_produced, newly_fetched, refresh_end) in enumerate(row):
            refresh(p, newly_produced, newly_fetched, refresh_end)
        run(NOW + step)

    # Producers finish, the fetcher catches up, metadata is fresh: drain what can be drained.
    for p in range(count):
        refresh(p, len(partition_logs[p].offsets), len(partition_logs[p].offsets), True)
    for step in range(sum(len(log.offsets) for log in partition_logs) + 1):
        if not run(NOW + len(schedule) + step).has_batch:
            break
    for p, log in enumerate(partition_logs):
        assert emitted[p] == log.offsets[: len(emitted[p])]
    if bounded:  # finished partitions never block, so a bounded run drains completely
        assert all(emitted[p] == log.offsets for p, log in enumerate(partition_logs))
        assert plan(partitions, max_task_idle_ms=WAIT_FOREVER).all_finished


# --------------------------------------------------------------------------------------------
# Same data, same batches: the cut never depends on fetch progress
# --------------------------------------------------------------------------------------------


def test_partly_fetched_partition_that_would_give_everything_waits_for_its_fetch():
    partitions = {tp(0): state([1, 2, 3]), tp(1): state([1, 2], end_offset=9)}
    cut = plan(partitions)
    assert_no_batch(cut, partitions)
    assert cut.partitions[tp(1)].status is PartitionStatus.WAITING_FOR_FETCH
    assert set(cut.blocking) == {tp(1)}


def test_partly_fetched_partition_is_fine_when_the_cut_stops_inside_its_buffer():
    partitions = {tp(0): state([1, 2, 3]), tp(1): state([1, 5], end_offset=9)}
    cut = plan(partitions)
    assert records_of(cut) == {tp(0): 3, tp(1): 1}
    assert cut.stream_time == 3


@pytest.mark.parametrize(
    "partial",
    [
        state([1, 2], end_offset=9, fetch_horizon=2),  # fetched up to the horizon
        state([1, 2], end_offset=9, buffer_full=True),  # the buffer is full
    ],
)
def test_horizon_reached_or_full_buffer_makes_a_partition_complete(partial):
    cut = plan({tp(0): state([1, 2, 3]), tp(1): partial})
    assert cut.stream_time == 2
    assert records_of(cut) == {tp(0): 2, tp(1): 2}


def test_horizon_never_lies_past_what_can_be_read_now():
    # An open transaction: the readable end (last stable offset, 2) is below the horizon taken
    # from the high watermark (9); the partition is caught up with what it can read.
    cut = plan({tp(0): state([1, 2, 3]), tp(1): state([1, 2], end_offset=2, fetch_horizon=9)})
    assert cut.has_batch and records_of(cut) == {tp(0): 2, tp(1): 2}
    never_wait = plan(
        {tp(0): state([1, 2, 3]), tp(1): state([1, 2], end_offset=2, fetch_horizon=9)},
        max_task_idle_ms=NEVER_WAIT,
    )
    assert never_wait.end_offsets == {tp(0): 3, tp(1): 2}


@settings(max_examples=examples(400), deadline=None)
@given(
    partition_logs=logs(distinct=False, max_records=10),
    fetched=st.lists(st.integers(0, 10), min_size=5, max_size=5),
    max_records=st.none() | st.integers(1, 12),
    step=st.none() | st.integers(1, 3),
    never_wait=st.booleans(),
)
def test_every_cut_made_while_fetching_equals_the_cut_over_the_fully_fetched_log(
    partition_logs, fetched, max_records, step, never_wait
):
    """Whatever the fetcher has buffered when the planner is asked, a batch it cuts is the one
    it cuts once everything below the horizon is fetched: re-runs give the same batches."""
    if never_wait:
        step = None
    limits = BatchLimits(max_records=max_records, max_stream_time_step_ms=step)
    idle_ms = NEVER_WAIT if never_wait else 0
    complete = fully_fetched(partition_logs)
    partial = {}
    for (p, full), log, count in zip(complete.items(), partition_logs, fetched):
        count = min(count, len(log.offsets))
        position = log.end if count == len(log.offsets) else log.offsets[count]
        partial[p] = replace(
            full, offsets=full.offsets[:count], timestamps=full.timestamps[:count],
            position=position, fetch_horizon=log.end,
        )
    expected = plan(complete, max_task_idle_ms=idle_ms, limits=limits)
    cut = plan(partial, max_task_idle_ms=idle_ms, limits=limits)
    if cut.has_batch:
        assert cut.end_offsets == expected.end_offsets
        assert cut.stream_time == expected.stream_time
    else:
        assert cut.blocking


# --------------------------------------------------------------------------------------------
# Rate limits in Kafka Streams' order
# --------------------------------------------------------------------------------------------


def reference_first_records(queues: Sequence[Sequence[int]], limit: int) -> list[int]:
    """Kafka Streams' loop, stopped after ``limit`` records or when a queue runs empty."""
    heads = [0] * len(queues)
    for _ in range(limit):
        candidates = [p for p, queue in enumerate(queues) if heads[p] < len(queue)]
        chosen = min(candidates, key=lambda p: queues[p][heads[p]])
        heads[chosen] += 1
        if heads[chosen] == len(queues[chosen]):
            break
    return heads


@settings(max_examples=examples(500), deadline=None)
@given(partition_logs=logs(distinct=True), limit=st.integers(1, 30))
def test_a_capped_batch_is_the_first_n_records_kafka_streams_processes(partition_logs, limit):
    queues = [log.timestamps for log in partition_logs]
    cut = plan(fully_fetched(partition_logs), limits=BatchLimits(max_records=limit))
    taken = [cut.partitions[tp(p)].records for p in range(len(queues))]
    assert taken == reference_first_records(queues, limit)
    assert cut.records <= limit
    processed = [t for queue, n in zip(queues, taken) for t in queue[:n]]
    assert cut.stream_time == max(processed)


def test_capped_batch_takes_the_smallest_heads_first_and_ties_go_to_the_lower_partition():
    partitions = {tp(0): state([5, 6, 7, 8]), tp(1): state([1, 5, 9]), tp(2): state([5, 5, 10])}
    cut = plan(partitions, limits=BatchLimits(max_records=4))
    # Order: t1@1, then ties at 5: t0@5, t1@5, t2@5 (lower partition first)
    assert records_of(cut) == {tp(0): 1, tp(1): 2, tp(2): 1}
    assert cut.stream_time == 5


def test_capped_batch_keeps_an_out_of_order_record_behind_the_larger_one_before_it():
    partitions = {tp(0): state([9, 1, 2]), tp(1): state([3, 4, 20])}
    cut = plan(partitions, limits=BatchLimits(max_records=2))
    # Kafka Streams compares heads: 3 and 4 go first, the 1 waits behind the 9.
    assert records_of(cut) == {tp(0): 0, tp(1): 2}


def test_stream_time_step_bounds_each_batch_and_jumps_gaps_in_event_time():
    partitions = {tp(0): state([100, 105, 110, 200]), tp(1): state([101, 130, 250])}
    limits = BatchLimits(max_stream_time_step_ms=10, previous_stream_time=100)
    cut = plan(partitions, limits=limits)
    assert records_of(cut) == {tp(0): 3, tp(1): 1} and cut.stream_time == 110
    # Nothing between 110 and 130: the next slice starts at the next record, not at 110.
    after_first = {p: after(partitions[p], cut.partitions[p]) for p in partitions}
    cut = plan(after_first, limits=replace(limits, previous_stream_time=110))
    assert records_of(cut) == {tp(0): 0, tp(1): 1} and cut.stream_time == 130


@settings(max_examples=examples(300), deadline=None)
@given(partition_logs=logs(distinct=False), step=st.integers(1, 2000), previous=st.integers(-1, 5000))
def test_stream_time_step_is_never_exceeded(partition_logs, step, previous):
    partitions = fully_fetched(partition_logs)
    limits = BatchLimits(max_stream_time_step_ms=step, previous_stream_time=previous)
    cut = plan(partitions, limits=limits)
    heads = [int(s.timestamps[0]) for s in partitions.values()]
    assert cut.has_batch
    assert cut.stream_time <= max(previous, min(heads)) + step
    natural = plan(partitions)
    for p, decision in cut.partitions.items():
        assert decision.records <= natural.partitions[p].records


def test_limits_are_validated():
    with pytest.raises(ValueError):
        BatchLimits(max_records=0)
    with pytest.raises(ValueError):
        BatchLimits(max_stream_time_step_ms=0)
    with pytest.raises(ValueError, match="synchronized"):
        plan({tp(0): state([1])}, max_task_idle_ms=NEVER_WAIT,
             limits=BatchLimits(max_stream_time_step_ms=5))
