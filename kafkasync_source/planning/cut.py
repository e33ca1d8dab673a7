"""The cut: what both planning paths answer, the limits they take, and the rules they share.

A micro-batch is planned on one of two paths — from records the driver fetched
(:func:`kafkasync_source.planning.planner.plan_batch`) or from the brokers' time index
(:func:`kafkasync_source.planning.index_planner.plan_from_index`) — and both must cut the same
batch from the same data (tests/test_paths_differential.py). So what a plan says (:class:`Cut`,
a :class:`PartitionDecision` per partition with its :class:`PartitionStatus`), what it is asked
to respect (:class:`BatchLimits`, ``max.task.idle.ms``) and the rules that do not depend on where
the timestamps came from — which option combinations no plan can honour, when an idle partition
is given up on (KIP-695), when a synchronized batch may proceed — live here, once. What the
statuses mean is in :mod:`kafkasync_source.planning.planner`'s docstring ("Empty partitions").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping, NamedTuple, Optional

from kafkasync_source.event_time.codes import TimeCode

__all__ = [
    "NEVER_WAIT",
    "NO_LIMITS",
    "NO_TIMESTAMP",
    "WAIT_FOREVER",
    "BatchLimits",
    "Cut",
    "PartitionDecision",
    "PartitionStatus",
    "TopicPartition",
    "batch_can_proceed",
    "check_plan_arguments",
    "settle_idle_partitions",
]

TopicPartition = NamedTuple("TopicPartition", [("topic", str), ("partition", int)])

NO_TIMESTAMP = TimeCode.NO_TIME
"""Kafka's "no timestamp" (-1); valid timestamps are >= 0. The event-time seam's code for it
(event_time/codes.py), so that one definition says what -1 means across the package."""

WAIT_FOREVER = 9223372036854775807
"""Long.MAX as ``max.task.idle.ms``: idle partitions are waited for forever."""

NEVER_WAIT = -1
"""``max.task.idle.ms`` that never waits: every batch takes everything buffered."""



class PartitionStatus(str, Enum):
    """Why a partition does or does not take part in the batch."""

    READY = "ready"
    """Has buffered records."""
    WAITING_FOR_END_OFFSET = "waiting-for-end-offset"
    """Empty and its lag is unknown: wait for the end offset."""
    WAITING_FOR_FETCH = "waiting-for-fetch"
    """The broker has records this batch may need that are not fetched yet: empty with lag > 0,
    or (partly fetched) every buffered record would be taken and more lie below the horizon."""
    IDLE_WAITING = "idle-waiting"
    """Empty with lag 0, still within ``max.task.idle.ms``: wait for producers."""
    IDLE = "idle"
    """Empty with lag 0, deadline passed: batches proceed without it (enforced processing)."""
    FINISHED = "finished"
    """Reached its stop offset: never blocks."""


_BLOCKING_STATUSES = frozenset(
    {
        PartitionStatus.WAITING_FOR_END_OFFSET,
        PartitionStatus.WAITING_FOR_FETCH,
        PartitionStatus.IDLE_WAITING,
    }
)


@dataclass(frozen=True)
class PartitionDecision:
    """The planner's verdict on one partition."""

    status: PartitionStatus
    end: int
    """Exclusive end offset of this partition's contribution (== start when none)."""
    records: int
    """How many buffered records it contributes."""
    lag: Optional[int]
    """End offset - position, both capped by stop_offset, never below 0; None if unknown."""
    idle_deadline: Optional[int]
    """Wall-clock ms at which an idle partition is given up on; set for IDLE_WAITING and IDLE."""
    partition_time: int
    """Partition time after this batch."""


@dataclass(frozen=True)
class Cut:
    """The next micro-batch (or the reason there is none)."""

    partitions: dict[TopicPartition, PartitionDecision]
    """A decision for every input partition, in input order."""
    stream_time: Optional[int]
    """T of this batch; None when there is no batch."""
    enforced: bool
    """True when the batch proceeds without idle partitions (enforced-processing counter +1)."""
    idle_since: dict[TopicPartition, int]
    """First-seen-idle wall-clock ms of the idle partitions: pass it into the next call."""
    moves_over_gap: bool = False
    """A batch without records whose end offsets still move forward (NEVER_WAIT only)."""

    @property
    def records(self) -> int:
        """Total number of records in the batch."""
        return sum(decision.records for decision in self.partitions.values())

    @property
    def has_batch(self) -> bool:
        """Whether there is a batch to run: records, or (NEVER_WAIT) offsets that move forward
        over a gap without records, as Spark's proportional split can decide."""
        return self.stream_time is not None or self.moves_over_gap


    @property
    def end_offsets(self) -> dict[TopicPartition, int]:
        """Exclusive end offset per partition (== start for partitions without a contribution)."""
        return {tp: decision.end for tp, decision in self.partitions.items()}

    @property
    def blocking(self) -> dict[TopicPartition, PartitionDecision]:
        """Partitions holding the batch back (WAITING_* / IDLE_WAITING); empty with a batch."""
        if self.has_batch:
            return {}
        return {
            tp: decision
            for tp, decision in self.partitions.items()
            if decision.status in _BLOCKING_STATUSES
        }

    @property
    def given_up(self) -> tuple[TopicPartition, ...]:
        """The IDLE partitions this batch proceeds without; empty unless enforced."""
        if not self.enforced:
            return ()
        return tuple(
            tp
            for tp, decision in self.partitions.items()
            if decision.status is PartitionStatus.IDLE
        )

    @property
    def all_finished(self) -> bool:
        """Whether every partition reached its stop offset (vacuously true for no partitions)."""
        return all(
            decision.status is PartitionStatus.FINISHED for decision in self.partitions.values()
        )


@dataclass(frozen=True)
class BatchLimits:
    """Rate limits on one batch (see :mod:`kafkasync_source.planning.rate_limit` for their origin)."""

    max_records: Optional[int] = None
    """``maxOffsetsPerTrigger``: synchronized, the first N records in Kafka Streams' processing
    order; with NEVER_WAIT, Spark's proportional split of N offsets."""
    max_stream_time_step_ms: Optional[int] = None
    """``maxEventTimePerTrigger``: stream time advances at most this far per batch
    (synchronized only)."""
    previous_stream_time: int = NO_TIMESTAMP
    """Stream time reached by the previous batches: the base of ``max_stream_time_step_ms``."""

    def __post_init__(self) -> None:
        if self.max_records is not None and self.max_records < 1:
            raise ValueError(f"max_records must be positive, got {self.max_records}")
        if self.max_stream_time_step_ms is not None and self.max_stream_time_step_ms < 1:
            raise ValueError(
                f"max_stream_time_step_ms must be positive, got {self.max_stream_time_step_ms}"
            )


NO_LIMITS = BatchLimits()


def _idle_deadline(first_seen_idle: int, max_task_idle_ms: int) -> int:
    """Wall-clock ms at which an idle partition is given up on; WAIT_FOREVER means never."""
    return min(first_seen_idle + max(max_task_idle_ms, 0), WAIT_FOREVER)


def check_plan_arguments(max_task_idle_ms: int, limits: BatchLimits) -> None:
    """Reject option combinations no plan can honour (shared by both planning paths)."""
    if max_task_idle_ms < NEVER_WAIT:
        raise ValueError(
            f"max_task_idle_ms must be -1 (never wait), 0 or positive, got {max_task_idle_ms}"
        )
    if max_task_idle_ms == NEVER_WAIT and limits.max_stream_time_step_ms is not None:
        raise ValueError("max_stream_time_step_ms needs synchronized batches (not NEVER_WAIT)")


def settle_idle_partitions(
    statuses: Mapping[TopicPartition, PartitionStatus],
    *,
    now_ms: int,
    max_task_idle_ms: int,
    idle_since: Mapping[TopicPartition, int],
) -> tuple[dict[TopicPartition, PartitionStatus], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Turn IDLE_WAITING into IDLE where ``max.task.idle.ms`` has passed since the partition
    was first seen idle (KIP-695). Shared by both planning paths: whether a partition is
    empty comes from its buffer or from the broker's index, the waiting rule is the same.

    Returns the settled statuses, the idle deadlines and the first-seen-idle times to carry
    into the next call (see the module docstring)."""
    settled: dict[TopicPartition, PartitionStatus] = {}
    deadlines: dict[TopicPartition, int] = {}
    next_idle_since: dict[TopicPartition, int] = {}
    for tp, status in statuses.items():
        if status is PartitionStatus.IDLE_WAITING:
            first_seen_idle = idle_since.get(tp, now_ms)
            deadline = _idle_deadline(first_seen_idle, max_task_idle_ms)
            if deadline < WAIT_FOREVER and now_ms >= deadline:
                status = PartitionStatus.IDLE
            next_idle_since[tp] = first_seen_idle
            deadlines[tp] = deadline
        settled[tp] = status
    return settled, deadlines, next_idle_since


def batch_can_proceed(statuses: Mapping[TopicPartition, PartitionStatus]) -> bool:
    """A synchronized batch needs a ready partition and none that holds it back."""
    return any(status is PartitionStatus.READY for status in statuses.values()) and not any(
        status in _BLOCKING_STATUSES for status in statuses.values()
    )
