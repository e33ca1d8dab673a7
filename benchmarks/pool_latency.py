"""What a task waits for its pooled range-reader consumer, on the embedded cluster.

Two waits that the range reader keeps short, measured here because how long they take is the
machine's speed as much as the code's: ``make test`` asserted them (0.45 s, 1 s) and failed on
a loaded machine (issue 64); tests/test_consumer_pool_fetching.py keeps what each read returns
and the calls that keep the waits short.

* **resume**: a consumer taken from the pool (``consumer_pool.set_fetching``) reads the records
  produced while it waited there. A resume alone woke librdkafka's fetcher only at its next idle
  wake-up, up to a second later (700 ms every time on Kafka 4.3.1); the seek that follows it
  wakes the fetcher at once (1-2 ms). Seconds from the resume to the 10 new records.
* **ranges at the log end**: four 50-record ranges read one after the other with one pooled
  consumer, whose prefetch reached the log end each time, where the broker holds a fetch until
  records arrive or ``fetch.wait.max.ms`` passes; the next range's fetch waits for that one. At
  librdkafka's default (500 ms) the four took 2 s; the reader's own setting makes it short.
  Seconds for the four.

Each is the median of ``reps`` runs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Optional

from kafkasync_dev.testing import MockKafkaCluster, Record
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor.consumer_pool import POOL, set_fetching
from kafkasync_source.executor.range_reader import KafkaRange, RangeReader
from kafkasync_source.spark.schema import kafka_schema

BASE_TS = 1_700_000_000_000
TARGETS = {"resume_s": 0.1, "four_ranges_at_log_end_s": 0.5}
"""A resume that waited for the fetcher's idle wake-up takes up to 1 s; four ranges that each
waited for a fetch held at the log end, 2 s."""


def _reader(cluster: MockKafkaCluster, topic: str) -> RangeReader:
    options = parse_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic},
                            streaming=True)
    return RangeReader.from_options(options, kafka_schema(options.include_headers))


def _offsets(reader: RangeReader, kafka_range: KafkaRange) -> list[int]:
    return [offset for batch in reader.read(kafka_range) for offset in batch.column("offset").to_pylist()]


def resume_s(cluster: MockKafkaCluster, topic: str) -> float:
    """Seconds from taking the pool's one consumer (read up to offset 10, paused since) to the
    10 records produced while it waited."""
    POOL.close_all()
    cluster.create_topic(topic, 1)
    cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(10)])
    if _offsets(_reader(cluster, topic), KafkaRange(topic, 0, 0, 10)) != list(range(10)):
        raise AssertionError(f"{topic}: the first range did not read offsets 0-9")
    consumer = next(iter(POOL._idle.values())).consumer  # as a task takes it
    cluster.produce(topic, [Record(0, BASE_TS + i, None, b"y") for i in range(10, 20)])
    started = time.perf_counter()
    set_fetching(consumer, True)
    offsets: list[Optional[int]] = []  # confluent-kafka types a Message's offset as optional
    while len(offsets) < 10:
        if time.perf_counter() - started > 60:
            raise AssertionError(f"{topic}: {len(offsets)} of the 10 records after 60 s")
        offsets += [m.offset() for m in consumer.consume(num_messages=10 - len(offsets), timeout=0.01)
                    if m.error() is None]
    waited = time.perf_counter() - started
    if offsets != list(range(10, 20)):
        raise AssertionError(f"{topic}: read {offsets} after the resume")
    set_fetching(consumer, False)
    POOL.close_all()
    return waited


def ranges_at_log_end_s(cluster: MockKafkaCluster, topic: str) -> float:
    """Seconds for four 50-record ranges of a 300-record partition, after a first one of 100,
    with the one pooled consumer."""
    POOL.close_all()
    cluster.create_topic(topic, 1)
    cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(300)])
    reader = _reader(cluster, topic)
    _offsets(reader, KafkaRange(topic, 0, 0, 100))
    reused, started = POOL.reused, time.perf_counter()
    for start in (100, 150, 200, 250):
        if _offsets(reader, KafkaRange(topic, 0, start, start + 50)) != list(range(start, start + 50)):
            raise AssertionError(f"{topic}: the range from {start} did not read its 50 offsets")
    took = time.perf_counter() - started
    if POOL.reused - reused != 4:
        raise AssertionError(f"{topic}: the four ranges did not all take the pooled consumer")
    POOL.close_all()
    return took


def measure(reps: int = 5) -> dict[str, Any]:
    """Both waits, ``reps`` runs each on topics of their own, and their targets."""
    with MockKafkaCluster(brokers=1) as cluster:
        resumes = [resume_s(cluster, f"pool-resume-{rep}") for rep in range(reps)]
        ranges = [ranges_at_log_end_s(cluster, f"pool-log-end-{rep}") for rep in range(reps)]
    figures: dict[str, Any] = {"resume_s": statistics.median(resumes), "resume_runs_s": resumes,
                               "four_ranges_at_log_end_s": statistics.median(ranges),
                               "four_ranges_at_log_end_runs_s": ranges}
    figures["targets"] = {name: {"value": round(figures[name], 3), "target": f"<= {target}",
                                 "met": figures[name] <= target}
                          for name, target in TARGETS.items()}
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(measure(), indent=1))
