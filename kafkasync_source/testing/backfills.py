"""Backfill shapes where a rate-limited ``format("kafka")`` loses records behind the watermark.

Spark's Kafka source splits ``maxOffsetsPerTrigger`` across partitions in proportion to each
partition's remaining offsets (``KafkaMicroBatchStream.rateLimit``), not to event time. When the
partitions' backlogs cover different spans or densities of event time, one partition's slice of
a batch reaches further in event time than another's, the watermark follows the furthest, and
the other partition's later batches fall behind it. Two such shapes, used by the demo and the
tests (kafkasync's ``max.task.idle.ms=-1`` reproduces Spark's split, so the same happens there):

* :func:`spans` — topic ``a`` (2 partitions) holds 12 h of event time, one record a minute;
  topic ``b`` (1 partition) only the last 2 h, one record every 20 s. 1,800 records.
* :func:`density` — topic ``a`` (2 partitions) uniform over 6 h, 600 records each; topic ``b``
  (1 partition) 1,000 records, 80% of them in the first 30 minutes. 2,200 records.

Timestamps end an hour before ``now`` (a real Kafka >= 4 broker rejects records stamped more
than an hour ahead); values are small. Producing goes through
:meth:`MockKafkaCluster.produce`, which checks every delivery report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from kafkasync_source.testing.mock_cluster import MockKafkaCluster, Record

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


@dataclass(frozen=True)
class Backfill:
    """Two topics produced for one shape: names and how many records each got."""

    topics: dict[str, int]
    """Topic name -> record count."""
    first_timestamp_ms: int
    last_timestamp_ms: int

    @property
    def records(self) -> int:
        return sum(self.topics.values())

    @property
    def subscribe(self) -> str:
        return ",".join(sorted(self.topics))


def _end_ms(now_ms: Optional[int]) -> int:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return (now - HOUR_MS) // MINUTE_MS * MINUTE_MS


def _produce(
    cluster: MockKafkaCluster, prefix: str, shape: dict[str, list[list[int]]]
) -> Backfill:
    """``shape``: suffix -> per partition, its timestamps. Creates and fills the topics."""
    topics = {}
    stamps = [t for partitions in shape.values() for timestamps in partitions for t in timestamps]
    for suffix, partitions in shape.items():
        name = f"{prefix}-{suffix}"
        cluster.create_topic(name, len(partitions))
        records = [
            Record(partition, timestamp, f"{suffix}{partition}-{i}".encode(), b"x" * 20)
            for partition, timestamps in enumerate(partitions)
            for i, timestamp in enumerate(timestamps)
        ]
        cluster.produce(name, records)
        topics[name] = len(records)
    return Backfill(topics, min(stamps), max(stamps))


def spans(cluster: MockKafkaCluster, prefix: str, *, now_ms: Optional[int] = None) -> Backfill:
    """Topic a: 2 partitions x 12 h, one a minute; topic b: 1 partition, the last 2 h, every 20 s."""
    end = _end_ms(now_ms)
    a = [end - 12 * HOUR_MS + i * MINUTE_MS for i in range(720)]
    b = [end - 2 * HOUR_MS + i * 20_000 for i in range(360)]
    return _produce(cluster, prefix, {"a": [a, [t + 30_000 for t in a]], "b": [b]})


def density(cluster: MockKafkaCluster, prefix: str, *, now_ms: Optional[int] = None) -> Backfill:
    """Topic a: 2 partitions uniform over 6 h; topic b: 1,000 records, 800 in the first 30 min."""
    end = _end_ms(now_ms)
    start = end - 6 * HOUR_MS
    a = [start + i * 36_000 for i in range(600)]
    dense = [start + i * (30 * MINUTE_MS // 800) for i in range(800)]
    sparse_step = (5 * HOUR_MS + 30 * MINUTE_MS) // 200
    sparse = [start + 30 * MINUTE_MS + i * sparse_step for i in range(200)]
    return _produce(cluster, prefix, {"a": [a, [t + 18_000 for t in a]], "b": [dense + sparse]})


SHAPES: dict[str, Callable[..., Backfill]] = {"spans": spans, "density": density}
