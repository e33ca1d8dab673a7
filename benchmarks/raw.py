"""The limit for a Python reader: one confluent-kafka consumer reading a whole topic.

It touches key, value, offset and timestamp of every record (what any reader that hands the
records on must do) and asks ``consume`` for at most the records still expected, so the last
call never waits out its timeout for records that do not exist.
"""

from __future__ import annotations

import statistics
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from benchmarks.workloads import Topic

CONSUME_BATCH = 10_000


def consume_all(bootstrap: str, topic: Topic, **overrides) -> float:
    """Seconds one consumer takes to read every record of ``topic`` from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kafkasync-bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            # librdkafka backs off fetching for 1 s (the default) whenever its prefetch
            # queue is over queued.min.messages (100,000): this reader drains the queue far
            # faster than that, and with the default it stalls once per run (~250k rec/s
            # instead of ~1.4M). The limit for a Python reader is with the stall tuned away.
            "fetch.queue.backoff.ms": 10,
            **overrides,
        }
    )
    try:
        started = time.perf_counter()
        consumer.assign(
            [KafkaTopicPartition(topic.name, p, 0) for p in range(topic.partitions)]
        )
        remaining = topic.records
        while remaining:
            for message in consumer.consume(min(CONSUME_BATCH, remaining), timeout=1.0):
                if message.error() is not None:
                    raise RuntimeError(f"raw consume: {message.error()}")
                message.key()
                message.value()
                message.offset()
                message.timestamp()
                remaining -= 1
        return time.perf_counter() - started
    finally:
        consumer.close()


def raw_consume_rps(bootstrap: str, topic: Topic, runs: int = 5) -> dict:
    """Median records/s over ``runs`` full reads (after one discarded warm-up read)."""
    consume_all(bootstrap, topic)
    seconds = [consume_all(bootstrap, topic) for _ in range(runs)]
    rates = [topic.records / s for s in seconds]
    # For context: the same reader with librdkafka's default 1 s fetch-queue backoff.
    default = statistics.median(
        topic.records / consume_all(bootstrap, topic, **{"fetch.queue.backoff.ms": 1000})
        for _ in range(3)
    )
    return {"rps": statistics.median(rates), "runs_rps": [round(r) for r in rates],
            "default_backoff_rps": default}
