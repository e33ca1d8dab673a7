"""Where to cut the next micro-batch: Kafka Streams' timestamp synchronization as a pure function.

Why this exists
---------------
Spark's built-in Kafka source puts everything fetched into each micro-batch. When partitions are
unevenly behind, one partition's event time races ahead, Spark's watermark follows it, and the
lagging partitions' records arrive behind the watermark and are dropped. Kafka Streams solved the
same problem for record-at-a-time processing (KIP-353, KIP-695): among the buffered partitions it
always processes the head record with the smallest timestamp, and a task is only *processable*
while every partition has buffered records.

A micro-batch is a set of per-partition offset ranges, so the planner cuts each batch exactly where
Kafka Streams would have stopped. With

    T = min over partitions of (max timestamp buffered in that partition)

each partition contributes its buffered records up to, not including, the first one with
timestamp > T. The partition that reaches T is drained completely, every other partition stops just
before its first record newer than T. With distinct timestamps this is *exactly* the set of records
Kafka Streams processes before the first queue runs empty (in-order or out-of-order partitions
alike). With equal timestamps the cut can be larger than that set: it also takes records that merely
tie with T (Kafka Streams would stop at the first queue to drain and take the others next); per
partition the extra records start at a record whose timestamp equals T and none is newer than T, so
no record newer than the batch's stream time is ever emitted early. ``tests/test_planner.py`` checks
both statements against a reference model of Kafka Streams' loop.

Empty partitions (KIP-695, lag-aware idling)
--------------------------------------------
A partition with nothing buffered holds the batch back for as long as Kafka Streams would:

* end offset unknown            -> WAITING_FOR_END_OFFSET (we cannot know whether data exists);
* lag = end offset - position > 0 -> WAITING_FOR_FETCH (the broker has data we have not fetched);
* lag == 0                      -> the partition is idle: wait up to ``max.task.idle.ms`` of
  wall-clock time from when it was first seen idle (IDLE_WAITING), then give up on it (IDLE) and cut
  over the other partitions: *enforced processing*, which the caller counts.

Lag is measured from the fetch *position*, not "last offset + 1", because transaction markers and
compaction leave offset gaps that never fill. For the same reason a partition that contributes all
of its buffered records ends at its position, so the gap after the last record is committed too.

A partition does not bound T where Kafka Streams would not stop when its queue runs empty: in a
bounded run, a partition that has buffered everything up to its stop offset (nothing more will
come); and with ``max.task.idle.ms=0``, in a batch that is already enforced, a partition that is
caught up (lag 0), since its idle deadline would be "now" as well. So a backlog's tail is one
enforced batch rather than one small batch per partition running dry.

``max.task.idle.ms`` keeps Kafka Streams' meaning:

* ``NEVER_WAIT`` (-1): never wait for producers: ``format("kafka")``'s admission. Every partition
  is read up to its horizon (the log end known when planning of the batch began), or, with
  ``maxOffsetsPerTrigger``, up to Spark's proportional split of that cap
  (:func:`kafkasync_source.planning.rate_limit.proportional_ends`). Given the same start and end offsets,
  the same batch ends as Spark's Kafka source. Statuses are still reported; an idle partition's
  deadline is the moment it was first seen idle.
* ``0`` (default): wait for fetches and metadata, never for producers: an idle partition is given
  up on at once.
* ``N > 0``: wait up to N ms for producers.
* ``WAIT_FOREVER`` (Long.MAX), or any value whose deadline overflows a long: never give up, never
  enforce.

The first-seen-idle times (``idle_since``) are state the caller carries from one call to the next.
As in Kafka Streams' ``PartitionGroup``, a partition keeps its first-seen time while it stays idle,
even after batches proceed without it, and loses it as soon as it has buffered data again or has to
wait for a fetch or for its end offset.

Records without a timestamp
---------------------------
Kafka allows records with no timestamp (-1, ``NO_TIMESTAMP``). Such a record takes the *effective
timestamp* of the partition time before it: the largest of the partition's ``partition_time`` and
the valid timestamps preceding it in the buffer, or ``NO_TIMESTAMP`` when there is none. So it
never advances partition time, is never cut off from its neighbours unless its partition is already
ahead of T, and is emitted with them. A partition holding only untimestamped records has a maximum
effective timestamp equal to its partition time (possibly -1); that makes T small, but none of the
partition's records is newer than T, so it drains and the stream makes progress.

Same data, same batches
-----------------------
A cut must depend only on the data and the options, never on how far the background fetch has
got when Spark asks, or re-runs would cut different batches. So a partition's buffer counts as
*complete* only once the fetch position reached its ``fetch_horizon`` (the log end offset the
driver knew when it began planning this batch; records produced later may wait for the next
batch) or the buffer is full (its capacity is an option, so that too is determined). T is the
minimum over *complete* partitions only. A partly fetched partition is fine as long as the cut
stops inside what it has buffered; if the cut would take all of it, more of its records might
belong in the batch, and it holds the batch back as WAITING_FOR_FETCH.

Rate limits
-----------
``BatchLimits.max_stream_time_step_ms`` (``maxEventTimePerTrigger``) lowers T to at most that
much past the previous stream time: a backfill becomes a sequence of bounded event-time slices.
Where no record lies within one step (a gap in event time, or the first batch), the slice starts
at the oldest head record instead, so a gap is jumped rather than stepped through.
``BatchLimits.max_records`` (``maxOffsetsPerTrigger``) then keeps the first N records in Kafka
Streams' processing order (the head with the smallest timestamp first, ties to the lower
topic-partition), so a capped batch is a prefix of what Kafka Streams processes and stream time
stays aligned. Stream time of a batch is the largest effective timestamp it processes.

Bounded runs
------------
``stop_offset`` (Trigger.AvailableNow) hides records at or after it and caps position and end offset
at it. A partition with nothing left before its stop offset is FINISHED: it never blocks and never
counts as idle.

Everything else
---------------
Contributions are always a prefix of the buffer, so records are never skipped, duplicated or
reordered, and a batch is fully described by its start and end offsets (Spark can replay it).
Stream time is T of the batch; it is not forced to be monotonic (out-of-order partitions and
enforced processing can lower it), Spark's watermark is. The planner is pure and cheap: one call per
trigger on the driver, numpy-vectorised per partition, no per-record Python work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from kafkasync_source.planning.cut import (
    NEVER_WAIT,
    NO_LIMITS,
    NO_TIMESTAMP,
    WAIT_FOREVER,
    BatchLimits,
    Cut,
    PartitionDecision,
    PartitionStatus,
    TopicPartition,
    batch_can_proceed,
    check_plan_arguments,
    settle_idle_partitions,
)
from kafkasync_source.planning.rate_limit import proportional_ends

__all__ = [
    "NO_LIMITS",
    "BatchLimits",
    "NEVER_WAIT",
    "NO_TIMESTAMP",
    "WAIT_FOREVER",
    "Cut",
    "PartitionDecision",
    "PartitionState",
    "PartitionStatus",
    "TopicPartition",
    "batch_can_proceed",
    "check_plan_arguments",
    "plan_batch",
    "settle_idle_partitions",
]

@dataclass(frozen=True)
class PartitionState:
    """What the driver knows about one partition at planning time.

    The constructor converts ``offsets`` and ``timestamps`` to int64 arrays (no copy when they
    already are) and the scalars to Python ints (they end up in the offset JSON), and rejects
    states that break the invariants below, because a planner fed a broken buffer would silently
    skip or repeat records.
    """

    start: int
    """Next offset to emit: this batch's start."""
    offsets: np.ndarray
    """int64, strictly ascending, every element in [start, position): fetched, not yet emitted."""
    timestamps: np.ndarray
    """int64, same length as ``offsets``; NO_TIMESTAMP (-1) where a record has none."""
    position: int
    """Fetch position: every existing record in [start, position) is in ``offsets``."""
    end_offset: Optional[int]
    """Log end offset (high watermark) known locally; None while not known yet."""
    partition_time: int = NO_TIMESTAMP
    """Largest timestamp emitted so far (KIP-472); survives restarts through the offset log."""
    stop_offset: Optional[int] = None
    """Bounded run (Trigger.AvailableNow): records at or after it are ignored."""
    fetch_horizon: Optional[int] = None
    """Log end offset captured when planning of this batch began (None: use ``end_offset``).
    The buffer is complete once the fetch position reached it; records that arrive later
    never make the cut wait (see "Same data, same batches" in the module docstring)."""
    buffer_full: bool = False
    """The fetcher's buffer for this partition is at capacity: it is complete for this batch."""
    min_timestamp: int = field(init=False, repr=False, compare=False, default=NO_TIMESTAMP)
    """Smallest buffered timestamp (computed once, for validation and for the planner)."""

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets, dtype=np.int64)
        timestamps = np.asarray(self.timestamps, dtype=np.int64)
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "timestamps", timestamps)
        for name in ("start", "position", "partition_time"):
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("end_offset", "stop_offset", "fetch_horizon"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))
        if offsets.ndim != 1 or offsets.shape != timestamps.shape:
            raise ValueError(
                f"offsets and timestamps must be 1-D and equally long, got shapes "
                f"{offsets.shape} and {timestamps.shape}"
            )
        if self.position < self.start:
            raise ValueError(f"position {self.position} is before start {self.start}")
        if self.partition_time < NO_TIMESTAMP:
            raise ValueError(f"partition_time {self.partition_time} is below NO_TIMESTAMP")
        if self.stop_offset is not None and self.stop_offset < 0:
            raise ValueError(f"stop_offset {self.stop_offset} is negative")
        if offsets.size:
            if offsets[0] < self.start or offsets[-1] >= self.position:
                raise ValueError(
                    f"buffered offsets [{offsets[0]}, {offsets[-1]}] are outside "
                    f"[start, position) = [{self.start}, {self.position})"
                )
            if offsets.size > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
                raise ValueError("buffered offsets are not strictly ascending")
            object.__setattr__(self, "min_timestamp", int(timestamps.min()))
            if self.min_timestamp < NO_TIMESTAMP:
                raise ValueError("timestamps below NO_TIMESTAMP (-1)")


@dataclass(frozen=True)
class _Buffer:
    """One partition's state with the stop offset applied, and its status."""

    start: int
    offsets: np.ndarray
    timestamps: np.ndarray
    position: int
    lag: Optional[int]
    horizon: Optional[int]
    """Offset the fetch must reach for the buffer to be complete; None while unknown."""
    complete: bool
    """Every record below the horizon is buffered, or the buffer is full."""
    exhausted: bool
    """Bounded run: every record below the stop offset is buffered; nothing more will come."""
    status: PartitionStatus
    partition_time: int
    has_untimestamped: bool
    max_effective_timestamp: int
    """Largest effective timestamp in the buffer; NO_TIMESTAMP when the buffer is empty."""

    def head_effective_timestamp(self) -> int:
        """Effective timestamp of the first buffered record (the buffer must not be empty)."""
        first = int(self.timestamps[0])
        return self.partition_time if first == NO_TIMESTAMP else first

    def processing_keys(self, count: int) -> np.ndarray:
        """Kafka Streams' processing order key of the first ``count`` records.

        Kafka Streams always processes the queue whose *head* has the smallest timestamp. A
        record therefore waits for the largest effective timestamp before it in its partition:
        the merge by head equals a stable sort on this running maximum (ties go to the queue
        that comes first), and the keys never decrease within a partition, so any prefix of
        that sorted order is a prefix of every partition.
        """
        timestamps = self.timestamps[:count]
        if self.has_untimestamped:
            timestamps = np.where(timestamps == NO_TIMESTAMP, self.partition_time, timestamps)
        return np.maximum.accumulate(timestamps)


def _apply_stop_offset(
    state: PartitionState,
) -> tuple[np.ndarray, np.ndarray, int, Optional[int], Optional[int]]:
    """Buffer, position, end offset and horizon as a bounded run sees them.

    The cap never goes below ``start``, so a stop offset the partition has already passed cannot
    move an end offset backwards.
    """
    offsets, timestamps = state.offsets, state.timestamps
    position, end_offset = state.position, state.end_offset
    horizon = state.end_offset if state.fetch_horizon is None else state.fetch_horizon
    if horizon is not None and state.end_offset is not None:
        # Never past what can be read now: under read_committed the readable end (the last
        # stable offset) can lie below a horizon taken from the high watermark.
        horizon = min(horizon, state.end_offset)
    if state.stop_offset is None:
        return offsets, timestamps, position, end_offset, horizon
    limit = max(state.stop_offset, state.start)
    if offsets.size and offsets[-1] >= state.stop_offset:
        kept = int(np.searchsorted(offsets, state.stop_offset, side="left"))
        offsets, timestamps = offsets[:kept], timestamps[:kept]
    position = min(position, limit)
    if end_offset is not None:
        end_offset = min(end_offset, limit)
    if horizon is not None:
        horizon = min(horizon, limit)
    return offsets, timestamps, position, end_offset, horizon


def _buffer(state: PartitionState) -> _Buffer:
    """Apply the stop offset and classify the partition (idle partitions are resolved later)."""
    offsets, timestamps, position, end_offset, horizon = _apply_stop_offset(state)
    lag = None if end_offset is None else max(0, end_offset - position)
    complete = state.buffer_full or (horizon is not None and position >= horizon)
    has_untimestamped = False
    max_effective_timestamp: int = NO_TIMESTAMP
    if offsets.size:
        status = PartitionStatus.READY
        # The stop offset may have trimmed the buffer; its minimum only matters untrimmed.
        smallest = state.min_timestamp if offsets.size == state.offsets.size else int(timestamps.min())
        has_untimestamped = smallest == NO_TIMESTAMP
        max_effective_timestamp = int(timestamps.max())
        if has_untimestamped:
            # An untimestamped record's effective timestamp lies between partition_time and the
            # largest valid timestamp before it, so the maximum only needs partition_time added.
            max_effective_timestamp = max(max_effective_timestamp, state.partition_time)
    elif state.stop_offset is not None and position >= state.stop_offset:
        # Also covers start >= stop_offset: the capped position never drops below start.
        status = PartitionStatus.FINISHED
    elif lag is None:
        status = PartitionStatus.WAITING_FOR_END_OFFSET
    elif lag > 0:
        status = PartitionStatus.WAITING_FOR_FETCH
    else:
        status = PartitionStatus.IDLE_WAITING  # IDLE_WAITING or IDLE, settled against the deadline
    return _Buffer(
        start=state.start,
        offsets=offsets,
        timestamps=timestamps,
        position=position,
        lag=lag,
        horizon=horizon,
        complete=complete,
        exhausted=state.stop_offset is not None and position >= state.stop_offset,
        status=status,
        partition_time=state.partition_time,
        has_untimestamped=has_untimestamped,
        max_effective_timestamp=max_effective_timestamp,
    )


def _records_up_to(buffer: _Buffer, stream_time: int) -> int:
    """How many leading buffered records have an effective timestamp <= stream_time.

    A valid timestamp is its own effective timestamp. An untimestamped record's effective timestamp
    exceeds stream_time only if partition_time does (then it is cut) or a valid timestamp before
    it does (then the cut is already earlier), so no running maximum is needed.
    """
    if buffer.max_effective_timestamp <= stream_time:
        return int(buffer.offsets.size)
    newer = buffer.timestamps > stream_time
    if buffer.has_untimestamped and buffer.partition_time > stream_time:
        newer |= buffer.timestamps == NO_TIMESTAMP
    return int(np.argmax(newer))


def _first_in_processing_order(
    buffers: Mapping[TopicPartition, _Buffer], candidates: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Per partition, how many of the first ``limit`` records Kafka Streams would process,
    drawn from the first ``candidates[tp]`` records of each partition (see
    :meth:`_Buffer.processing_keys`; timestamp ties go to the lower topic-partition)."""
    order = sorted(tp for tp, count in candidates.items() if count)
    keys = [buffers[tp].processing_keys(min(candidates[tp], limit)) for tp in order]
    owners = np.repeat(np.arange(len(order)), [k.size for k in keys])
    first = np.argsort(np.concatenate(keys), kind="stable")[:limit]
    counts = np.bincount(owners[first], minlength=len(order))
    taken = {tp: 0 for tp in candidates}
    taken.update({tp: int(counts[i]) for i, tp in enumerate(order)})
    return taken


def _bounds_stream_time(buffer: _Buffer, enforcing_at_once: bool) -> bool:
    """Whether Kafka Streams would stop when this partition's queue runs empty.

    It would not for a partition that has nothing more to come (its bounded run ends with what
    is buffered), nor, while it is already enforcing with ``max.task.idle.ms=0``, for one
    that is caught up (lag 0): that one's deadline is "now" too. A partly fetched partition's
    largest timestamp is not known yet, so it bounds nothing (see ``unfetched`` in plan_batch).
    """
    if not buffer.complete or buffer.exhausted:
        return False
    return not (enforcing_at_once and buffer.lag == 0)


def _synchronized_contributions(
    buffers: Mapping[TopicPartition, _Buffer],
    ready: list[TopicPartition],
    limits: BatchLimits,
    enforcing_at_once: bool,
) -> dict[TopicPartition, int]:
    """How many records each ready partition contributes to a synchronized batch.

    The bound is T = min of the largest effective timestamp over the partitions where Kafka
    Streams would stop (:func:`_bounds_stream_time`), lowered by ``max_stream_time_step_ms``;
    then ``max_records`` keeps the first records in processing order. The caller checks that
    no partly fetched partition gave all it had.
    """
    bounds = [
        buffers[tp].max_effective_timestamp
        for tp in ready if _bounds_stream_time(buffers[tp], enforcing_at_once)
    ]
    step = limits.max_stream_time_step_ms
    if step is not None:
        # From where the stream stands; across a gap with no record within one step (or on
        # the first batch), from the oldest head record instead.
        oldest_head = min(buffers[tp].head_effective_timestamp() for tp in ready)
        previous = limits.previous_stream_time
        base = previous if oldest_head <= previous + step else oldest_head
        bounds.append(base + step)
    bound = min(bounds) if bounds else None
    contributions = {
        tp: int(buffers[tp].offsets.size) if bound is None else _records_up_to(buffers[tp], bound)
        for tp in ready
    }
    if limits.max_records is not None and sum(contributions.values()) > limits.max_records:
        contributions = _first_in_processing_order(buffers, contributions, limits.max_records)
    return contributions


def _never_wait_ends(
    buffers: Mapping[TopicPartition, _Buffer], limits: BatchLimits
) -> tuple[dict[TopicPartition, tuple[int, int]], set[TopicPartition], set[TopicPartition]]:
    """``max.task.idle.ms=-1``: ``format("kafka")``'s admission. Each partition is read up to
    its horizon (the log end when planning began), or with ``max_records`` up to Spark's
    proportional split of it; never waiting for producers, only for the fetch of those records.

    Returns ``(end offset, records)`` per partition, and the partitions whose end offset or
    fetch is awaited.
    """
    untils: dict[TopicPartition, int] = {}
    awaiting_end: set[TopicPartition] = set()
    for tp, buffer in buffers.items():
        if buffer.status is PartitionStatus.FINISHED:
            untils[tp] = buffer.position  # its (capped) position: only offset gaps are left
        elif buffer.horizon is None:
            awaiting_end.add(tp)
        else:
            untils[tp] = max(buffer.horizon, buffer.start)
    starts = {tp: buffer.start for tp, buffer in buffers.items()}
    targets = (
        untils if limits.max_records is None
        else proportional_ends(limits.max_records, starts, untils)
    )
    ends: dict[TopicPartition, tuple[int, int]] = {}
    awaiting_fetch: set[TopicPartition] = set()
    for tp, target in targets.items():
        buffer = buffers[tp]
        if buffer.position >= target:
            ends[tp] = (target, int(np.searchsorted(buffer.offsets, target, side="left")))
        elif buffer.complete:  # full buffer: Spark would read further; the budget stops here
            ends[tp] = (buffer.position, int(buffer.offsets.size))
        else:
            awaiting_fetch.add(tp)
    return ends, awaiting_end, awaiting_fetch


def _contribution_end(buffer: _Buffer, records: int) -> int:
    """Exclusive end offset after the first ``records`` buffered records: the position when all
    are taken (so trailing offset gaps are committed too), else the first record left out."""
    return buffer.position if records == buffer.offsets.size else int(buffer.offsets[records])


def plan_batch(
    partitions: Mapping[TopicPartition, PartitionState],
    *,
    now_ms: int,
    max_task_idle_ms: int,
    idle_since: Mapping[TopicPartition, int],
    limits: BatchLimits = NO_LIMITS,
) -> Cut:
    """Cut the next micro-batch the way Kafka Streams would process it (see the module docstring).

    Args:
        partitions: the driver's view of every assigned partition.
        now_ms: wall-clock reading, used only for idle deadlines.
        max_task_idle_ms: NEVER_WAIT (-1), 0, a positive number of ms, or WAIT_FOREVER.
        idle_since: the ``idle_since`` of the previous call's Cut (empty on the first call).
        limits: rate limits (``maxOffsetsPerTrigger``, ``maxEventTimePerTrigger``).

    Returns:
        The cut: a decision per partition, the batch's stream time, whether it was enforced, and
        the first-seen-idle times to pass into the next call.
    """
    check_plan_arguments(max_task_idle_ms, limits)
    now_ms = int(now_ms)
    buffers = {tp: _buffer(state) for tp, state in partitions.items()}
    statuses, deadlines, next_idle_since = settle_idle_partitions(
        {tp: buffer.status for tp, buffer in buffers.items()},
        now_ms=now_ms, max_task_idle_ms=max_task_idle_ms, idle_since=idle_since,
    )

    # (end offset, records) per contributing partition; empty when there is no batch.
    ends: dict[TopicPartition, tuple[int, int]] = {}
    enforced = False
    if max_task_idle_ms == NEVER_WAIT:
        ends, awaiting_end, awaiting_fetch = _never_wait_ends(buffers, limits)
        statuses.update({tp: PartitionStatus.WAITING_FOR_END_OFFSET for tp in awaiting_end})
        statuses.update({tp: PartitionStatus.WAITING_FOR_FETCH for tp in awaiting_fetch})
        if awaiting_end or awaiting_fetch:
            ends = {}
    else:
        ready = [tp for tp, status in statuses.items() if status is PartitionStatus.READY]
        if batch_can_proceed(statuses):
            enforced = any(status is PartitionStatus.IDLE for status in statuses.values())
            contributions = _synchronized_contributions(
                buffers, ready, limits, enforcing_at_once=enforced and max_task_idle_ms == 0
            )
            # A partly fetched partition that gives all it has may have more to give: wait.
            unfetched = [
                tp for tp in ready
                if not buffers[tp].complete and contributions[tp] == buffers[tp].offsets.size
            ]
            statuses.update({tp: PartitionStatus.WAITING_FOR_FETCH for tp in unfetched})
            if unfetched:
                enforced = False
            else:
                # Partitions without records (idle, finished) move over their offset gaps too.
                ends = {
                    tp: (_contribution_end(buffer, contributions.get(tp, 0)),
                         contributions.get(tp, 0))
                    for tp, buffer in buffers.items()
                }
    moves_over_gap = False
    if not any(records for _, records in ends.values()):
        # Spark's split counts offsets, so a cap can fall on a gap: that batch still runs.
        moves_over_gap = max_task_idle_ms == NEVER_WAIT and any(
            end > partitions[tp].start for tp, (end, _) in ends.items()
        )
        if not moves_over_gap:
            ends = {}
        enforced = False

    decisions: dict[TopicPartition, PartitionDecision] = {}
    stream_time: Optional[int] = None
    for tp, state in partitions.items():
        buffer = buffers[tp]
        end, records = ends.get(tp, (state.start, 0))
        partition_time = state.partition_time
        if records:
            taken = buffer.timestamps[:records]
            everything = records == buffer.offsets.size and not buffer.has_untimestamped
            newest = buffer.max_effective_timestamp if everything else int(taken.max())
            partition_time = max(partition_time, newest)
            # The batch's stream time: the largest effective timestamp it processes (an
            # untimestamped record's is the partition time before it).
            if buffer.has_untimestamped and bool((taken == NO_TIMESTAMP).any()):
                newest = max(newest, state.partition_time)
            stream_time = newest if stream_time is None else max(stream_time, newest)
        decisions[tp] = PartitionDecision(
            status=statuses[tp],
            end=end,
            records=records,
            lag=buffer.lag,
            idle_deadline=deadlines.get(tp),
            partition_time=partition_time,
        )
    return Cut(
        partitions=decisions,
        stream_time=stream_time,
        enforced=enforced,
        idle_since=next_idle_since,
        moves_over_gap=moves_over_gap,
    )
