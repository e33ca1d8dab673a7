"""Data for the benchmark, produced into the embedded Kafka cluster (librdkafka's mock).

The mock keeps at most 5 MiB and about 100,000 messages per partition and silently drops the
oldest beyond that, so every topic is checked after producing: low watermark 0, high
watermark = what was produced. A benchmark over silently truncated data would be worthless.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkasync_source.testing import MockKafkaCluster, Record

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


# ----------------------------------------------------------------------- skew scenario
#
# The demo's scenario (kafkasync_source.demo) at a larger scale: two topics cover the same
# 24 hours of event time, but "payments" has four times as many records per hour and
# partition as "orders". With the default bound of 10,000 buffered records per partition, a
# batch that takes everything buffered (max.task.idle.ms=-1, what format("kafka") does)
# covers ~22 hours of orders but only ~5.5 hours of payments: the watermark follows orders
# and the payments read afterwards are behind it.

SKEW_SPAN_MS = 24 * 3600 * 1000
SKEW_TOPICS = (("orders", 6, 8_000), ("payments", 2, 2_000))  # (name, partitions, every_ms)
SKEW_WATERMARK_DELAY = "10 minutes"
SKEW_WINDOW = "5 minutes"
SKEW_WINDOW_MS = 5 * 60 * 1000


def skew_timestamps(every_ms: int) -> list[int]:
    return [BASE_TS + i * every_ms for i in range(SKEW_SPAN_MS // every_ms)]


def produce_skew(cluster: MockKafkaCluster, suffix: str) -> dict[str, Topic]:
    """Create and fill the two skew topics (names get ``suffix``); returns them by base name."""
    topics = {}
    for base, partitions, every_ms in SKEW_TOPICS:
        name = f"{base}{suffix}"
        stamps = skew_timestamps(every_ms)
        cluster.create_topic(name, partitions)
        cluster.produce(
            name,
            (
                Record(p, ts, f"{base[0]}{p}-{i}".encode(), b'{"amount": 42}')
                for p in range(partitions)
                for i, ts in enumerate(stamps)
            ),
        )
        topic = Topic(name, partitions, len(stamps))
        check_complete(cluster, topic)
        topics[base] = topic
    return topics
