"""Where to cut the next micro-batch, from the brokers' time index: the driver reads no record.

Why this exists
---------------
The fetch path (:mod:`kafkasync_source.driver.fetcher` + :func:`kafkasync_source.planning.planner.plan_batch`)
learns every record's timestamp by fetching it on the driver, so the brokers send each record
twice and one Python consumer caps the query. The planner needs three facts per partition,
and a broker answers each with ListOffsets, in one request per leader, without a record
leaving it:

* the readable end: ``latest`` — the high watermark, or the last stable offset under
  read_committed (``Partition.fetchOffsetForTimestamp``: ``lastFetchableOffset``);
* the largest timestamp and its offset: ``max_timestamp`` (KIP-734, Kafka >= 3.0);
* the first offset whose timestamp is >= t: ``for_timestamp(t)``. ``UnifiedLog.
  fetchOffsetByTimestamp`` takes the first segment whose largest timestamp is >= t,
  ``LogSegment.findOffsetByTimestamp`` looks t up in its time index — whose entries say where
  the segment's *running maximum* timestamp rose to a value — and ``FileRecords.
  searchForTimestamp`` scans from there for the first record with timestamp >= t. No record
  before that entry can be >= t (the running maximum was below it), so the answer is the first
  such record in offset order, for out-of-order logs too. ``ReplicaManager.fetchOffset``
  answers -1 when that record lies at or past the readable end.

With ``first(t)`` for that answer, the fetch path's cut at stream time ``T`` (each partition
up to, not including, its first record newer than ``T``) is ``first(T + 1)``, and a
partition's largest timestamp in ``[start, end)`` is the largest ``t`` with
``first(t) < end``. Both only hold where ``first(t) >= start``: the answer searches the
whole log, not from the query's position.

When the index cannot answer (and the caller falls back to the fetch path)
-------------------------------------------------------------------------
:class:`IndexCannotAnswer` names the partition and why, for:

* no largest timestamp although the window holds records: the broker answered -1 (the
  embedded librdkafka cluster always does; a broker without KIP-734; an open transaction
  holding the largest record past the last stable offset);
* the largest-timestamp record lies before the query's position: the window's own largest
  timestamp is then unknown;
* ``first(t) < start`` for a time the cut needs: a record before the position is newer than
  ``t``, so the index cannot tell which records of the window are at or below ``t`` (an
  out-of-order partition behind its own past, or one whose log before the query's start
  holds newer records);
* a rate limit whose search must go below the stream time already reached.

Where this path differs from the fetch path, on purpose
--------------------------------------------------------
* It counts *offsets* where the fetch path counts records: ``maxOffsetsPerTrigger`` caps
  offsets, as ``format("kafka")`` does; transaction markers, aborted records, compaction gaps
  and (on the record-probe path) records without a time (``onInvalid=skip``) count. Counting
  records would need every entry of the range read: the index answers by time, and a probe
  reads one record a step. A capped batch is then (with distinct times) the fetch path's
  capped at the number of records it holds, never more records than the cap
  (tests/test_index_planner.py, tests/test_paths_differential.py).
* ``lateRecordsTotal`` is not counted (the driver sees no record); the executors see every
  record (``includePartitionTime``).

The partition time a batch hands on is the fetch path's: the largest time among the records
it holds (KIP-472), also for a partition cut inside its window, where the cut's level (``T``,
or a rate limit's) lies above the records taken; the largest one taken is searched for from
the cut (:meth:`~kafkasync_source.planning.index_search.IndexSearch.largest_taken`). So is the
batch's stream time, the base of the next ``maxEventTimePerTrigger`` step
(tests/test_paths_differential.py, batch after batch).

What the index counts that no consumer reads
--------------------------------------------
Transaction markers and aborted records: every answer the cut uses is checked against the
records a consumer reads (:mod:`kafkasync_source.planning.index_search` says how and why).

The function is pure: the index is asked through the ``first_offsets`` callable (a model
broker in tests, ListOffsets in :mod:`kafkasync_source.driver.time_index`); no clock, no sleep.
The searches it asks the index are :mod:`~kafkasync_source.planning.index_search`'s, a rate
limit's search for its time level :mod:`~kafkasync_source.planning.index_rate_limit`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from kafkasync_source.planning.cut import (
    NEVER_WAIT,
    NO_LIMITS,
    NO_TIMESTAMP,
    BatchLimits,
    Cut,
    PartitionDecision,
    PartitionStatus,
    TopicPartition,
    batch_can_proceed,
    check_plan_arguments,
    settle_idle_partitions,
)
from kafkasync_source.planning.index_rate_limit import rate_limited
from kafkasync_source.planning.index_search import FirstOffsets, FirstRecords, IndexCannotAnswer, IndexSearch, Window
from kafkasync_source.planning.rate_limit import proportional_ends

__all__ = ["FirstOffsets", "FirstRecords", "IndexCannotAnswer", "IndexedPartition", "plan_from_index"]

@dataclass(frozen=True)
class IndexedPartition:
    """What the brokers said of one partition at planning time."""

    start: int
    """Next offset to emit: this batch's start."""
    end_offset: Optional[int]
    """Readable end (ListOffsets latest); None while unknown."""
    largest: Optional[tuple[int, int]]
    """(timestamp, offset) of the log's largest timestamp (ListOffsets max_timestamp), None
    when the broker gave none."""
    partition_time: int = NO_TIMESTAMP
    """From the start offset (KIP-472), as on the fetch path."""
    stop_offset: Optional[int] = None
    """Bounded run (Trigger.AvailableNow): offsets at or after it are not part of the query."""
    holds_records: bool = True
    """False where the window up to the readable end holds no record that takes part in
    synchronization, only records whose time is SKIPPED (``eventTime.onInvalid=skip``:
    heartbeats) and offsets no consumer reads. As on the fetch path, where the driver buffers
    no such record, the partition counts as empty: it idles, and a batch moves it over them."""


def _window(state: IndexedPartition) -> Window:
    """The window and its status, by the fetch path's rules (``planner._buffer``) for a
    partition whose every record up to the readable end is known."""
    end = state.end_offset
    limit = None if state.stop_offset is None else max(state.stop_offset, state.start)
    if end is not None and limit is not None:
        end = min(end, limit)
    stopped = limit is not None and end is not None and end >= limit
    if end is not None and end > state.start and state.holds_records:
        status = PartitionStatus.READY
    elif stopped and not state.holds_records:
        status = PartitionStatus.FINISHED
    elif limit is not None and state.start >= limit:
        status = PartitionStatus.FINISHED
    elif end is None:
        status = PartitionStatus.WAITING_FOR_END_OFFSET
    else:
        status = PartitionStatus.IDLE_WAITING
    return Window(
        start=state.start,
        end=state.start if end is None else max(end, state.start),
        lag=None if end is None else 0,
        status=status,
        exhausted=stopped,
    )


def _window_maxima(
    states: Mapping[TopicPartition, IndexedPartition],
    windows: Mapping[TopicPartition, Window],
    index: IndexSearch,
) -> dict[TopicPartition, tuple[int, int]]:
    """The largest timestamp in each ready window and the offset of its first entry: the
    log's largest where its record lies in the window; else searched for, above the partition
    time (the log's largest record arrived after the readable end was taken, lies past the
    stop offset, or past the last stable offset, where the broker answers none)."""
    maxima: dict[TopicPartition, tuple[int, int]] = {}
    searched: dict[TopicPartition, Optional[int]] = {}  # the log's largest, when known
    for tp, window in windows.items():
        if window.status is not PartitionStatus.READY:
            continue
        largest = states[tp].largest
        if largest is not None and 0 <= largest[0] and largest[1] < window.start:
            raise IndexCannotAnswer({tp: f"its largest timestamp ({largest[0]}) is at offset "
                                         f"{largest[1]}, before the position {window.start}"})
        if largest is not None and 0 <= largest[0] and largest[1] < window.end:
            maxima[tp] = largest
        else:
            searched[tp] = largest[0] if largest is not None and largest[0] >= 0 else None
    if not searched:
        return index.readable_maxima(maxima, {tp: windows[tp].end for tp in maxima})
    # first(floor) must lie in the window: a record there newer than the partition time.
    floors = {tp: states[tp].partition_time + 1 for tp in searched}
    found = index.ends_at(floors, "the partition time")
    older = {tp: f"no record of offsets [{windows[tp].start}, {windows[tp].end}) is newer than "
                 f"its partition time {states[tp].partition_time} (or the broker does not "
                 "answer timestamp look-ups)"
             for tp in searched if found[tp] >= windows[tp].end}
    if older:
        raise IndexCannotAnswer(older)
    ends = {tp: windows[tp].end for tp in searched}
    ceilings = {tp: largest + 1 for tp, largest in searched.items() if largest is not None}
    unbounded = [tp for tp in searched if tp not in ceilings]
    if unbounded:
        ceilings.update(index.gallop_above({tp: floors[tp] for tp in unbounded}, ends))
        floors.update({tp: max(floors[tp], (ceilings[tp] - 1) // 2) for tp in unbounded})
    maxima.update(index.entries_at(index.largest_before(ends, floors, ceilings)))
    return index.readable_maxima(maxima, {tp: windows[tp].end for tp in maxima})


def _step_base(ready: list[TopicPartition], windows: Mapping[TopicPartition, Window],
               limits: BatchLimits, index: IndexSearch) -> int:
    """``maxEventTimePerTrigger``'s base, as the fetch path's: the previous stream time if a
    head record lies within one step of it, else the oldest head record's timestamp. The head
    records are read, not looked up: a window's first entry can be a transaction marker."""
    assert limits.max_stream_time_step_ms is not None
    reach = limits.previous_stream_time + limits.max_stream_time_step_ms
    heads = [head[1] for head in index.heads(ready).values() if head is not None]
    if not heads or min(heads) <= reach:
        return limits.previous_stream_time
    return min(heads)


def plan_from_index(
    partitions: Mapping[TopicPartition, IndexedPartition],
    first_offsets: FirstOffsets,
    first_records: FirstRecords,
    *,
    now_ms: int,
    max_task_idle_ms: int,
    idle_since: Mapping[TopicPartition, int],
    limits: BatchLimits = NO_LIMITS,
) -> Cut:
    """The cut :func:`kafkasync_source.planning.planner.plan_batch` makes over every record up to the
    readable ends, computed from ListOffsets answers (see the module docstring).

    Raises:
        IndexCannotAnswer: where only reading records can give the exact cut.
    """
    check_plan_arguments(max_task_idle_ms, limits)
    now_ms = int(now_ms)
    windows = {tp: _window(state) for tp, state in partitions.items()}
    statuses, deadlines, next_idle_since = settle_idle_partitions(
        {tp: window.status for tp, window in windows.items()},
        now_ms=now_ms, max_task_idle_ms=max_task_idle_ms, idle_since=idle_since,
    )
    index = IndexSearch(first_offsets, windows, first_records)
    ends: dict[TopicPartition, int] = {}
    times: dict[TopicPartition, int] = {}  # the partition time each contributing one reaches
    enforced = False
    if max_task_idle_ms == NEVER_WAIT:
        if not any(status is PartitionStatus.WAITING_FOR_END_OFFSET for status in statuses.values()):
            untils = {tp: window.end for tp, window in windows.items()}
            starts = {tp: window.start for tp, window in windows.items()}
            ends = (untils if limits.max_records is None
                    else proportional_ends(limits.max_records, starts, untils))
            times = _times_reached(partitions, windows, ends, index)
    elif batch_can_proceed(statuses):
        ready = [tp for tp, status in statuses.items() if status is PartitionStatus.READY]
        enforced = any(status is PartitionStatus.IDLE for status in statuses.values())
        entries = _window_maxima(partitions, windows, index)
        maxima = {tp: largest for tp, (largest, _) in entries.items()}
        # Which partitions bound stream time: planner._bounds_stream_time, for windows known
        # to their end (lag 0): with max.task.idle.ms=0 an enforced batch bounds on none.
        enforcing_at_once = enforced and max_task_idle_ms == 0
        bounds = [maxima[tp] for tp in ready if not windows[tp].exhausted and not enforcing_at_once]
        if limits.max_stream_time_step_ms is not None:
            base = _step_base(ready, windows, limits, index)
            bounds.append(base + limits.max_stream_time_step_ms)
        bound = min(bounds) if bounds else None
        cut = [tp for tp in ready if bound is not None and maxima[tp] > bound]
        ends = {tp: windows[tp].end for tp in ready}
        checks: dict[TopicPartition, tuple[int, int]] = {}
        if bound is not None and cut:
            ends.update(index.ends_at({tp: bound + 1 for tp in cut}, "the stream time"))
            checks = {tp: (ends[tp], bound + 1) for tp in cut}
        # A partition whose end moved below its window's is a cut one: no record it gives is
        # above the level it was cut at (the bound, or a rate limit's).
        levels = {tp: bound for tp in ready if bound is not None}
        if limits.max_records is not None and sum(ends[tp] - windows[tp].start for tp in ready) > limits.max_records:
            top = bound if bound is not None else max(maxima[tp] for tp in ready)
            ends, levels, checks = rate_limited(ends, windows, top, limits, index)
        inside = [tp for tp in ready if windows[tp].start < ends[tp] < windows[tp].end]
        # The last records before each cut first: the records a probe reads come with those
        # after them in the batch the broker sends whole, so the record at the cut, which the
        # check reads, is then known. In the other order each cut cost its producer batch twice
        # (the planning runner's fetches at offsets X and then X - 1, Kafka 4.3.1's debug log).
        taken = index.largest_taken({tp: ends[tp] for tp in inside}, {tp: levels[tp] + 1 for tp in inside})
        # Each largest timestamp bounds stream time, or is a partition time where the
        # partition is read to its end: it must be a readable record's.
        index.check(checks, {tp: (offset, largest, windows[tp].end) for tp, (largest, offset) in entries.items()})
        times = {tp: maxima[tp] for tp in ready if ends[tp] == windows[tp].end}
        times.update({tp: largest for tp, largest in taken.items() if largest is not None})
        ends.update({tp: window.end for tp, window in windows.items() if tp not in ends})
    # A window of records without a time is moved over by a batch, and makes none of its own
    # (planner.plan_batch: a batch needs records), unless nothing waits (NEVER_WAIT).
    if not any(end > windows[tp].start for tp, end in ends.items()
               if partitions[tp].holds_records or max_task_idle_ms == NEVER_WAIT):
        ends, times, enforced = {}, {}, False

    decisions: dict[TopicPartition, PartitionDecision] = {}
    stream_time: Optional[int] = None
    for tp, state in partitions.items():
        end = ends.get(tp, state.start)
        records = end - state.start if state.holds_records else 0
        partition_time = state.partition_time
        if records and tp in times:
            partition_time = max(partition_time, times[tp])
            stream_time = times[tp] if stream_time is None else max(stream_time, times[tp])
        decisions[tp] = PartitionDecision(
            status=statuses[tp], end=end, records=records, lag=windows[tp].lag,
            idle_deadline=deadlines.get(tp), partition_time=partition_time,
        )
    return Cut(
        partitions=decisions,
        stream_time=stream_time,
        enforced=enforced,
        idle_since=next_idle_since,
        # Only windows without a record that takes part move (NEVER_WAIT): a batch all the
        # same, as planner.plan_batch runs one over such gaps.
        moves_over_gap=stream_time is None and any(end > windows[tp].start for tp, end in ends.items()),
    )


def _times_reached(
    states: Mapping[TopicPartition, IndexedPartition], windows: Mapping[TopicPartition, Window],
    ends: Mapping[TopicPartition, int], index: IndexSearch,
) -> dict[TopicPartition, int]:
    """``max.task.idle.ms=-1``: the largest timestamp each partition's range reaches, for its
    partition time and the batch's stream time (the fetch path knows it from the records).
    The ends need no timestamp, but a partition time must not be silently wrong: where the
    index cannot tell it, the fetch path plans the batch."""
    taking = {tp: end for tp, end in ends.items() if end > windows[tp].start}
    entries = _window_maxima(states, {tp: windows[tp] for tp in taking}, index)
    # A window of records without a time (heartbeats) or of markers only has no largest time.
    partial = {tp: end for tp, end in taking.items() if tp in entries and end < windows[tp].end}
    index.check({}, {tp: (offset, largest, windows[tp].end) for tp, (largest, offset) in entries.items()
                     if tp not in partial})
    times = {tp: largest for tp, (largest, _) in entries.items() if tp not in partial}
    taken = index.largest_taken(partial, {tp: entries[tp][0] + 1 for tp in partial})
    times.update({tp: largest for tp, largest in taken.items() if largest is not None})
    return times
