"""Backfill shapes where a rate-limited ``format("kafka")`` loses records behind the watermark.

Spark's Kafka source splits ``maxOffsetsPerTrigger`` across partitions in proportion to each
partition's remaining offsets (``KafkaMicroBatchStream.rateLimit``), not to event time. When the
partitions' backlogs cover different spans or densities of event time, one partition's slice of
a batch reaches further in event time than another's, the watermark follows the furthest, and
the other partition's later batches fall behind it. Two such shapes, used by the demo and the
tests (kafkasync's ``max.task.idle.ms=-1`` reproduces Spark's split, so the same happens there):

* :func:`spans` — topic ``orders`` (2 partitions) holds 12 h of event time, one record a
  minute; topic ``payments`` (1 partition) only the last 2 h, one record every 20 s. 1,800
  records.
* :func:`density` — topic ``orders`` (2 partitions) uniform over 6 h, 600 records each; topic
  ``payments`` (1 partition) 1,000 records, 80% of them in the first 30 minutes. 2,200 records.

Topics are named ``{prefix}-orders`` / ``{prefix}-payments`` (just the name without a prefix).

Timestamps end an hour before ``now`` (a real Kafka >= 4 broker rejects records stamped more
than an hour ahead); values are small JSON objects that carry the event time too
(``{"id": ..., "ts": <epoch ms>}``). Producing goes through :meth:`MockKafkaCluster.produce`,
which checks every delivery report.

``republished=True`` writes a shape as a copy job re-publishes it: topic after topic, partition
after partition, each record stamped with its *write* time (one millisecond apart, ending an
hour before ``now``), the event time only in the value's ``ts``. Synchronizing on the Kafka
timestamp then protects nothing (``eventTime.jsonPath=$.ts`` does, see docs/event-time.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from kafkasync_dev.testing.mock_cluster import Record

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


@dataclass(frozen=True)
class Backfill:
    """Two topics produced for one shape: names and how many records each got."""

    topics: dict[str, int]
    """Topic name -> record count."""
    timestamps: dict[tuple[str, int], list[int]]
    """(topic, partition) -> its records' event times in offset order (offsets start at 0): their
    Kafka timestamps too, unless the shape was re-published."""

    @property
    def first_timestamp_ms(self) -> int:
        return min(min(stamps) for stamps in self.timestamps.values())

    @property
    def records(self) -> int:
        return sum(self.topics.values())

    @property
    def subscribe(self) -> str:
        return ",".join(sorted(self.topics))


def _end_ms(now_ms: Optional[int]) -> int:
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return (now - HOUR_MS) // MINUTE_MS * MINUTE_MS


def _produce(cluster: Any, prefix: str, shape: dict[str, list[list[int]]], republished: bool = False) -> Backfill:
    """``shape``: topic -> per partition, its event times. Creates and fills the topics on a
    :class:`MockKafkaCluster` or a :class:`~kafkasync_dev.testing.broker.KafkaBroker`."""
    topics, timestamps = {}, {}
    total = sum(len(stamps) for partitions in shape.values() for stamps in partitions)
    written = _end_ms(None) - total  # a copy job's clock: one record a millisecond
    for suffix, partitions in shape.items():
        name = f"{prefix}-{suffix}" if prefix else suffix
        cluster.create_topic(name, len(partitions))
        records = []
        for partition, stamps in enumerate(partitions):
            for i, event_time in enumerate(stamps):
                value = json.dumps({"id": f"{suffix}-{partition}-{i}", "ts": event_time, "amount": 42})
                records.append(Record(partition, written if republished else event_time,
                                      f"{suffix}-{partition}-{i}".encode(), value.encode()))
                written += 1
        cluster.produce(name, records)
        topics[name] = len(records)
        timestamps.update({(name, partition): stamps for partition, stamps in enumerate(partitions)})
    return Backfill(topics, timestamps)


def spans(
    cluster: Any, prefix: str, *, now_ms: Optional[int] = None, scale: int = 1, republished: bool = False
) -> Backfill:
    """orders: 2 partitions x 12 h, one a minute; payments: 1 partition, the last 2 h, every
    20 s. ``scale`` multiplies every rate (the benchmark reads 20 x 1,800 records)."""
    end = _end_ms(now_ms)
    a = [end - 12 * HOUR_MS + i * MINUTE_MS // scale for i in range(720 * scale)]
    b = [end - 2 * HOUR_MS + i * 20_000 // scale for i in range(360 * scale)]
    shift = 30_000 // scale
    return _produce(cluster, prefix, {"orders": [a, [t + shift for t in a]], "payments": [b]}, republished)


def density(cluster: Any, prefix: str, *, now_ms: Optional[int] = None, republished: bool = False) -> Backfill:
    """orders: 2 partitions uniform over 6 h; payments: 1,000 records, 800 in the first 30 min."""
    end = _end_ms(now_ms)
    start = end - 6 * HOUR_MS
    a = [start + i * 36_000 for i in range(600)]
    dense = [start + i * (30 * MINUTE_MS // 800) for i in range(800)]
    sparse_step = (5 * HOUR_MS + 30 * MINUTE_MS) // 200
    sparse = [start + 30 * MINUTE_MS + i * sparse_step for i in range(200)]
    return _produce(cluster, prefix, {"orders": [a, [t + 18_000 for t in a]], "payments": [dense + sparse]},
                    republished)


SHAPES: dict[str, Callable[..., Backfill]] = {"spans": spans, "density": density}
