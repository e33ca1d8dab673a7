"""Data for the benchmark, produced into the embedded Kafka cluster (librdkafka's mock).

The mock keeps at most 5 MiB and about 100,000 messages per partition and silently drops the
oldest beyond that, so every topic is checked after producing: low watermark 0, high
watermark = what was produced. A benchmark over silently truncated data would be worthless.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkasync_dev.testing import MockKafkaCluster, Record

BASE_TS = 1_704_096_000_000  # 2024-01-01 08:00:00 UTC
VALUE_BYTES = 100


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    records_per_partition: int

    @property
    def records(self) -> int:
        return self.partitions * self.records_per_partition


def produce_uniform(
    cluster: MockKafkaCluster, name: str, partitions: int, per_partition: int,
    *, value_bytes: int = VALUE_BYTES, step_ms: int = 10,
) -> Topic:
    """``per_partition`` records on each partition: 8-byte key, ``value_bytes`` value, and
    in-order timestamps ``BASE_TS + i * step_ms + p`` (partitions interleave in event time)."""
    cluster.create_topic(name, partitions)
    value = b"v" * value_bytes
    cluster.produce(
        name,
        (
            Record(p, BASE_TS + i * step_ms + p, b"k%07d" % i, value)
            for i in range(per_partition)
            for p in range(partitions)
        ),
    )
    topic = Topic(name, partitions, per_partition)
    check_complete(cluster, topic)
    return topic


def check_complete(cluster: MockKafkaCluster, topic: Topic) -> None:
    """Fail unless every partition holds exactly what was produced, from offset 0."""
    marks = cluster.end_offsets(topic.name)
    bad = {
        p: (low, high)
        for p, (low, high) in marks.items()
        if low != 0 or high != topic.records_per_partition
    }
    if len(marks) != topic.partitions or bad:
        raise RuntimeError(
            f"topic {topic.name}: the embedded cluster does not hold all produced records "
            f"(partition: (low, high) watermarks {bad}, expected (0, "
            f"{topic.records_per_partition})). It keeps at most 5 MiB / ~100,000 messages per "
            "partition and drops the oldest beyond that: use fewer or smaller records."
        )
