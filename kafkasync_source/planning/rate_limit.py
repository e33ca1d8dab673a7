"""Rate limits with ``format("kafka")``'s names and meanings, as pure functions.

``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` mean what they mean
for Spark's Kafka source, so a migrated query keeps its options. Where kafkasync must behave
*exactly* like Spark (``max.task.idle.ms=-1`` reproduces ``format("kafka")``'s admission), the
algorithms here follow Spark's ``KafkaMicroBatchStream`` (connector/kafka-0-10-sql,
``rateLimit`` and ``delayBatch``), re-written from its documented behaviour:

* :func:`proportional_ends` — the cap is split across partitions in proportion to each
  partition's remaining offsets; a share is floored, but a share below 1 is rounded *up*
  ("don't completely starve small topicpartitions"); no end goes past the partition's end.
* :class:`TriggerDelay` — a batch is skipped while fewer than ``minOffsetsPerTrigger`` new
  offsets are available, unless ``maxTriggerDelay`` has passed since the last batch. As in
  Spark, the clock of the last batch starts at 0, so the first batch is never delayed.

The synchronized cap (the first N records in Kafka Streams' processing order) is part of the
cut itself and lives in :mod:`kafkasync_source.planning.planner`. What it counts depends on
what the path planning the batch sees: the fetch path counts the records it buffered (those
taking part in synchronization); the time-index and record-probe paths count offsets, as
``format("kafka")`` does, since counting records would need every entry of the range read
(:mod:`kafkasync_source.planning.index_planner`, "Where this path differs from the fetch
path"). :func:`proportional_ends` counts offsets on every path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Mapping, TypeVar

__all__ = ["proportional_ends", "TriggerDelay"]

Partition = TypeVar("Partition", bound=Hashable)


def proportional_ends(
    limit: int, starts: Mapping[Partition, int], ends: Mapping[Partition, int]
) -> dict[Partition, int]:
    """Spark's ``KafkaMicroBatchStream.rateLimit``: at most about ``limit`` offsets, split in
    proportion to each partition's remaining offsets ``ends[tp] - starts[tp]``.

    Every partition of ``ends`` gets an end offset; a partition with nothing remaining (or
    missing from ``starts``, which Spark resolves to earliest before calling it) keeps its end.
    The result can exceed ``limit`` by up to one offset per partition (the round-up of small
    shares), exactly as in Spark.
    """
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    sizes = {
        tp: end - starts[tp]
        for tp, end in ends.items()
        if tp in starts and end - starts[tp] > 0
    }
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(ends)
    result = {}
    for tp, end in ends.items():
        size = sizes.get(tp)
        if size is None:
            result[tp] = end
            continue
        share = limit * (size / total)  # a double, as in Spark
        whole = math.floor(share) if share >= 1 else math.ceil(share)
        result[tp] = min(end, starts[tp] + whole)
    return result


@dataclass
class TriggerDelay:
    """``minOffsetsPerTrigger`` / ``maxTriggerDelay``: Spark's ``delayBatch``
    (``KafkaMicroBatchStream``), with the clock passed in. As in Spark the clock starts at 0,
    so the first trigger is never delayed, and it restarts (``lastTriggerMillis``) at every
    trigger let through with the offsets at hand. Spark's source always has them; kafkasync's
    planner may let a trigger through and still cut no batch (records awaiting their
    partitions' turn, or not fetched yet), so the caller restarts the clock when a batch runs
    or when a trigger let through had nothing to read — not when records wait, which would
    hold them for another ``maxTriggerDelay``."""

    min_offsets: int
    max_delay_ms: int
    last_batch_ms: int = 0

    def should_delay(self, available_offsets: int, now_ms: int) -> bool:
        """Whether to hold the batch: fewer than ``min_offsets`` new offsets are available and
        ``max_delay_ms`` has not passed since the last batch."""
        return (
            now_ms - self.last_batch_ms < self.max_delay_ms
            and available_offsets < self.min_offsets
        )

    def restart(self, now_ms: int) -> None:
        self.last_batch_ms = now_ms

    def deadline_ms(self) -> int:
        """When a held batch runs at the latest (for the live report)."""
        return self.last_batch_ms + self.max_delay_ms
