"""Turn a batch's offset ranges into Spark input partitions: fewer, fuller tasks.

Every Spark task costs a fixed amount (scheduling, a Python worker round trip, a consumer
fetching its first records), so a batch of many small ranges is cheaper as a few tasks that
each read several ranges one after another. Large ranges are still split so that no task holds
more than ``maxRecordsPerPartition`` offsets and the work spreads over the cores.

The plan is a pure function of the ranges and the options: Spark may call ``partitions()``
again when it replays a batch, and the replay must read exactly the same records (it does
whatever the grouping, since the ranges themselves never change; being deterministic also
keeps task numbering and the consumer pool's hit rate stable).
"""

from __future__ import annotations

import heapq
import math
import os
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional

from pyspark.sql.datasource import InputPartition

from kafkasync_source.planning.planner import TopicPartition


@dataclass(frozen=True, order=True)
class KafkaRange(InputPartition):
    """The records of ``topic-partition`` in ``[start, end)`` (ordered by topic, partition, offsets)."""

    topic: str
    partition: int
    start: int
    end: int
    partition_time: int = -1
    """The partition's time before ``time_from`` (from the batch's start offset; -1: none),
    where the executor continues its running maximum (``includePartitionTime``,
    ``eventTime.onInvalid=partitionTime``, the check of ``eventTime.order=nonDecreasing``)."""
    time_from: Optional[int] = None
    """Where ``partition_time`` stands: right before this offset (None: before ``start``). Under
    ``eventTime.order=nonDecreasing`` a partition's range splits, and every piece keeps the
    batch's start offset here: the time before a later piece's ``start`` is then the largest of
    ``partition_time`` and the last valid time in ``[time_from, start)``, which its executor
    reads itself (executor/time_before.py)."""

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class KafkaRanges(InputPartition):
    """One Spark input partition: ranges read one after another by one task, in order (ranges
    of one Kafka partition by ascending offset, so a pooled consumer continues where it was)."""

    ranges: tuple[KafkaRange, ...]
    consumer_scope: str = ""
    """Which executors' pooled consumers may read these ranges (consumer_pool.py): one value
    per query run or batch read, so that a new query — after a topic was deleted and
    recreated under the same name, say — never continues with a consumer of an earlier one."""


def default_target_tasks() -> int:
    """Tasks per batch when ``minPartitions`` is not set: the cores of the planning process.

    A batch runs fastest with one task per core that can run it, and Spark's Python Data
    Source API gives a reader no view of the cluster's cores (``partitions()`` runs on the
    driver, without a SparkContext handle). ``os.cpu_count()`` of the driver is exact for
    ``local[*]`` and a fair guess where driver and executors run on similar machines; on a
    larger cluster set ``minPartitions`` to the total executor cores."""
    return os.cpu_count() or 1


def plan_input_partitions(
    ranges: Iterable[tuple[TopicPartition, int, int]],
    max_records: int,
    min_partitions: Optional[int] = None,
    target_tasks: Optional[int] = None,
    *,
    consumer_scope: str = "",
    partition_times: Optional[Mapping[TopicPartition, int]] = None,
    in_time_order: bool = False,
) -> list[KafkaRanges]:
    """Input partitions for one batch.

    1. Empty ranges are dropped.
    2. With ``min_partitions`` set and fewer ranges than that, large ranges are split in
       proportion to their size so that there are about ``min_partitions`` pieces: exactly
       format("kafka")'s ``minPartitions`` (SPARK-23541; ``KafkaOffsetRangeCalculator.getRanges``
       in apache/spark ``connector/kafka-0-10-sql``: a range gets ``max(round(size / total *
       minPartitions), 1)`` parts, computed over the ranges that get more than one).
    3. Every piece is split further into equal parts of at most ``max_records`` offsets
       (``maxRecordsPerPartition``: a cap on the records of one Spark partition, as in
       format("kafka") since Spark 4.0, SPARK-49259).
    4. The pieces are packed into about ``min_partitions`` (default: :func:`default_target_tasks`)
       input partitions, largest piece first onto the least loaded partition, never past
       ``max_records`` offsets per partition. format("kafka") never merges ranges (one task per
       range at least); merging is what makes a batch of many small ranges cheap.

    ``partition_times``: each partition's time at the batch's start, where the executors follow
    it through the records (``SourceOptions.tracks_partition_time``). A later piece's executor
    must then know the running maximum of the records before its start. ``in_time_order``
    (``eventTime.order=nonDecreasing``): that maximum is the last valid time before the piece
    (or the batch's partition time), one record the executor reads itself, so ranges split as
    without partition times. Otherwise it needs every record before: one piece per partition.
    """
    partition_times = partition_times or {}
    pieces = [
        KafkaRange(tp.topic, tp.partition, start, end, partition_times.get(tp, -1),
                   start if partition_times and in_time_order else None)
        for tp, start, end in ranges if end > start
    ]
    if partition_times and not in_time_order:
        # _pack gives an oversized piece a task of its own.
        return _pack(pieces, min_partitions or target_tasks or default_target_tasks(), max_records,
                     consumer_scope)
    pieces.sort()
    if min_partitions is not None and len(pieces) < min_partitions:
        pieces = _split_to_min_partitions(pieces, min_partitions)
    pieces = [part for piece in pieces for part in _split_evenly(piece, math.ceil(piece.size / max_records))]
    return _pack(pieces, min_partitions or target_tasks or default_target_tasks(), max_records,
                 consumer_scope)


def _split_to_min_partitions(pieces: list[KafkaRange], min_partitions: int) -> list[KafkaRange]:
    """format("kafka")'s proportional split (``KafkaOffsetRangeCalculator.getRanges``)."""
    total = sum(piece.size for piece in pieces)

    def part_count(size: int, of_total: int, parts: int) -> int:
        # Scala's math.round rounds halves up, Python's round() to even: floor(x + 0.5).
        return max(math.floor(size / of_total * parts + 0.5), 1)

    unsplit = [piece for piece in pieces if part_count(piece.size, total, min_partitions) == 1]
    split_total = total - sum(piece.size for piece in unsplit)
    split_parts = max(min_partitions - len(unsplit), 1)
    result = []
    for piece in pieces:
        parts = 1 if piece in unsplit else part_count(piece.size, split_total, split_parts)
        result.extend(_split_evenly(piece, parts))
    return result


def _split_evenly(piece: KafkaRange, parts: int) -> list[KafkaRange]:
    """``parts`` consecutive ranges whose sizes differ by at most one (the last ones larger)."""
    if parts <= 1:
        return [piece]
    bounds = [piece.start + piece.size * i // parts for i in range(parts + 1)]
    return [
        replace(piece, start=low, end=high)
        for low, high in zip(bounds, bounds[1:])
        if high > low
    ]


def _pack(pieces: list[KafkaRange], target: int, max_records: int, consumer_scope: str) -> list[KafkaRanges]:
    """Longest-processing-time-first packing into ``target`` bins (a new bin only when a piece
    fits in none); ties broken by range order, so the result is deterministic."""
    bins: list[list[KafkaRange]] = []
    heap: list[tuple[int, int]] = []  # (records, bin index): the least loaded bin first
    for piece in sorted(pieces, key=lambda p: (-p.size, p)):
        if len(bins) < target or heap[0][0] + piece.size > max_records:
            load, index = 0, len(bins)
            bins.append([])
        else:
            load, index = heapq.heappop(heap)
        bins[index].append(piece)
        heapq.heappush(heap, (load + piece.size, index))
    grouped = [KafkaRanges(tuple(sorted(ranges)), consumer_scope) for ranges in bins]
    return sorted(grouped, key=lambda group: group.ranges[0])
