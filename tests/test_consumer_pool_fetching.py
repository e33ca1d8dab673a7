"""Pooled range-reader consumers fetch only while a task reads with them (consumer_pool.py):
between tasks a live stream's broker answered every pooled consumer's fetch on every produce."""

import time

from kafkasync_dev.testing import Record
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor.consumer_pool import POOL, set_fetching
from kafkasync_source.executor.range_reader import KafkaRange, RangeReader
from kafkasync_source.spark.schema import kafka_schema

BASE_TS = 1_700_000_000_000


def _reader(cluster, topic):
    options = parse_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic},
                            streaming=True)
    return RangeReader.from_options(options, kafka_schema(options.include_headers))


def _offsets(reader, kafka_range):
    return [offset for batch in reader.read(kafka_range) for offset in batch.column("offset").to_pylist()]


def _only_pooled_consumer():
    assert len(POOL) == 1
    return next(iter(POOL._idle.values())).consumer  # the pool's one idle consumer, as a task would take it


def test_a_pooled_consumer_fetches_nothing_while_it_waits(kafka_cluster, topic_factory):
    POOL.close_all()
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(10)])
    reader = _reader(kafka_cluster, topic)
    assert _offsets(reader, KafkaRange(topic, 0, 0, 10)) == list(range(10))
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"y") for i in range(10, 60)])
    consumer = _only_pooled_consumer()
    # Unpaused, librdkafka would have fetched the 50 new records by now and hand them out here.
    assert consumer.consume(num_messages=100, timeout=1.0) == []
    POOL.close_all()


def test_a_consumer_taken_from_the_pool_fetches_at_once_where_it_stopped(kafka_cluster, topic_factory):
    """A resume alone left librdkafka's fetcher asleep until its next wake-up, up to a second."""
    POOL.close_all()
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(10)])
    reader = _reader(kafka_cluster, topic)
    assert _offsets(reader, KafkaRange(topic, 0, 0, 10)) == list(range(10))
    consumer = _only_pooled_consumer()
    time.sleep(0.1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"y") for i in range(10, 20)])
    started = time.monotonic()
    set_fetching(consumer, True)
    offsets: list[int] = []
    while len(offsets) < 10 and time.monotonic() - started < 5:
        offsets += [m.offset() for m in consumer.consume(num_messages=10 - len(offsets), timeout=0.05)
                    if m.error() is None]
    waited = time.monotonic() - started
    assert offsets == list(range(10, 20))
    assert waited < 0.45, f"{waited:.2f} s to the first records after a resume"
    set_fetching(consumer, False)
    POOL.close_all()


def test_a_pooled_consumer_whose_prefetch_reached_the_log_end_reads_the_next_range_at_once(
    kafka_cluster, topic_factory
):
    """Its prefetch reached the log end, where the broker holds a fetch until records arrive
    or fetch.wait.max.ms passes; that fetch is still in flight when a task takes the consumer
    again, and the fetch from the next range's start waits for it. At librdkafka's default
    (500 ms) each of these ranges took half a second (510 ms on Kafka 4.3.1 too)."""
    POOL.close_all()
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(300)])
    reader = _reader(kafka_cluster, topic)
    assert _offsets(reader, KafkaRange(topic, 0, 0, 100)) == list(range(100))
    reused_before, started = POOL.reused, time.monotonic()
    for start in (100, 150, 200, 250):
        assert _offsets(reader, KafkaRange(topic, 0, start, start + 50)) == list(range(start, start + 50))
    waited = time.monotonic() - started
    assert POOL.reused - reused_before == 4  # one consumer, taken from the pool for each range
    assert waited < 1.0, f"{waited:.2f} s for four 50-record ranges of a pooled consumer"
    POOL.close_all()
