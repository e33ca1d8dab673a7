"""Pooled range-reader consumers fetch only while a task reads with them (consumer_pool.py):
between tasks a live stream's broker answered every pooled consumer's fetch on every produce."""

import time

from confluent_kafka import Consumer

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
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


class _MovesNoted(Consumer):
    """The real consumer, noting each pause and resume (partitions) and seek (partition, offset)."""

    moves: list = []

    def pause(self, partitions):
        self.moves.append(("pause", [p.partition for p in partitions]))
        return super().pause(partitions)

    def resume(self, partitions):
        self.moves.append(("resume", [p.partition for p in partitions]))
        return super().resume(partitions)

    def seek(self, partition):
        self.moves.append(("seek", (partition.partition, partition.offset)))
        return super().seek(partition)


def test_a_consumer_taken_from_the_pool_fetches_where_it_stopped_and_is_woken_by_a_seek(
        kafka_cluster, topic_factory, monkeypatch):
    """A resume alone left librdkafka's fetcher asleep until its next wake-up, up to a second:
    the resume is followed by a seek to where the consumer stands, which wakes it. How soon the
    records then come is the machine's speed as much as the code's: benchmarks/pool_latency.py
    measures it (target 0.1 s; a test asserted 0.45 s and failed on a loaded machine, issue 64)."""
    from kafkasync_source.executor import range_reader

    POOL.close_all()
    monkeypatch.setattr(_MovesNoted, "moves", [])
    monkeypatch.setattr(range_reader, "_new_consumer",
                        lambda settings: _MovesNoted(range_reader.with_python_logging(dict(settings))))
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(10)])
    reader = _reader(kafka_cluster, topic)
    assert _offsets(reader, KafkaRange(topic, 0, 0, 10)) == list(range(10))
    consumer = _only_pooled_consumer()
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"y") for i in range(10, 20)])
    del _MovesNoted.moves[:]
    set_fetching(consumer, True)
    assert _MovesNoted.moves == [("resume", [0]), ("seek", (0, 10))]
    offsets: list[int] = []
    deadline = time.monotonic() + PATIENCE_S
    while len(offsets) < 10 and time.monotonic() < deadline:
        offsets += [m.offset() for m in consumer.consume(num_messages=10 - len(offsets), timeout=0.05)
                    if m.error() is None]
    assert offsets == list(range(10, 20))
    set_fetching(consumer, False)
    POOL.close_all()


def test_a_pooled_consumer_whose_prefetch_reached_the_log_end_reads_the_next_ranges(
    kafka_cluster, topic_factory, monkeypatch
):
    """Its prefetch reached the log end, where the broker holds a fetch until records arrive
    or fetch.wait.max.ms passes; that fetch is still in flight when a task takes the consumer
    again, and the fetch from the next range's start waits for it. At librdkafka's default
    (500 ms) each of these ranges took half a second (510 ms on Kafka 4.3.1 too): the reader
    sets its own, which this shows; how long four such ranges take, benchmarks/pool_latency.py
    (target 0.5 s; a test asserted 1 s and failed on a loaded machine, issue 64)."""
    from kafkasync_source.executor import range_reader

    POOL.close_all()
    created: list[dict] = []
    real = range_reader._new_consumer
    monkeypatch.setattr(range_reader, "_new_consumer", lambda settings: created.append(dict(settings)) or real(settings))
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(300)])
    reader = _reader(kafka_cluster, topic)
    assert _offsets(reader, KafkaRange(topic, 0, 0, 100)) == list(range(100))
    reused_before = POOL.reused
    for start in (100, 150, 200, 250):
        assert _offsets(reader, KafkaRange(topic, 0, start, start + 50)) == list(range(start, start + 50))
    assert POOL.reused - reused_before == 4  # one consumer, taken from the pool for each range
    (settings,) = created
    assert int(settings["fetch.wait.max.ms"]) <= 50, "a fetch held at the log end delays the next range that long"
    POOL.close_all()


def test_a_short_ranges_consumer_fetches_an_eighth_of_it_once_its_queue_is_empty():
    """Issue 53, item 1. What a range's reader fetched past its end is kept for the next range
    (range_tails.py), but a fetch in flight when the consumer is paused for the pool is dropped,
    and librdkafka sends one as soon as its queue falls below ``queued.max.messages.kbytes``
    while the tail is taken: 19 of 64 capped ranges lost one with a 64 KiB queue, 3 with 1 KiB
    (Kafka 4.3.1, its debug log). What a fetch lost so costs is bounded by the range: about an
    eighth of it (a power of two), within 128 KiB and 1 MiB."""
    from kafkasync_source.executor.consumer_settings import prefetch_settings

    def empty_queue(fetch: int) -> tuple[int, dict[str, int]]:
        return 1024 + fetch, {"queued.max.messages.kbytes": 1, "max.partition.fetch.bytes": fetch}

    kib = 1024
    assert prefetch_settings(6_250, 1_016, {}) == empty_queue(512 * kib)  # a capped backfill's range of 1 KB records
    assert prefetch_settings(6_250, 216, {}) == empty_queue(128 * kib)  # ... of 200 B records: an eighth is 165 KiB
    assert prefetch_settings(10, 100.0, {}) == empty_queue(128 * kib)  # a live stream's
    assert prefetch_settings(32_000, None, {}) == empty_queue(1024 * kib)  # not read yet here: 1 KiB a record assumed
    # 32 producer batches or more are fetched 8 MiB at a time within a queue of 16 MiB, as before:
    # the read goes on while the reader builds its batches.
    assert prefetch_settings(400_000, 1_016, {}) == (
        24 * 1024 * 1024, {"queued.max.messages.kbytes": 16_384, "max.partition.fetch.bytes": 8 * 1024 * 1024})
    assert prefetch_settings(400_000, 1_016, {"max.partition.fetch.bytes": "1000"}) == (
        24 * 1024 * 1024, {"queued.max.messages.kbytes": 16_384})
    assert prefetch_settings(400_000, 1_016, {"max.partition.fetch.bytes": "1", "queued.max.messages.kbytes": "1"}
                             ) == (0, {})


def test_the_users_queue_and_fetch_settings_win_over_the_sizing_and_defaults(kafka_cluster, topic_factory, monkeypatch):
    """kafka.queued.max.messages.kbytes and kafka.fetch.queue.backoff.ms were silently
    overridden by the range reader's own values."""
    from kafkasync_source.executor import range_reader

    POOL.close_all()
    created: list[dict] = []
    real = range_reader._new_consumer
    monkeypatch.setattr(range_reader, "_new_consumer",
                        lambda settings: created.append(dict(settings)) or real(settings))
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(p, BASE_TS + i, None, b"x") for p in (0, 1) for i in range(10)])
    options = parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                             "kafka.queued.max.messages.kbytes": "2048", "kafka.fetch.queue.backoff.ms": "50",
                             "kafka.fetch.wait.max.ms": "20"}, streaming=True)
    reader = RangeReader.from_options(options, kafka_schema(options.include_headers))
    assert _offsets(reader, KafkaRange(topic, 0, 0, 10)) == list(range(10))
    (settings,) = created
    assert settings["queued.max.messages.kbytes"] == "2048"
    assert settings["fetch.queue.backoff.ms"] == "50"
    assert settings["fetch.wait.max.ms"] == "20"
    assert settings["max.partition.fetch.bytes"] == 128 * 1024  # not set by the user: sized to the range (10 records)
    defaults = _reader(kafka_cluster, topic)
    assert _offsets(defaults, KafkaRange(topic, 1, 0, 10)) == list(range(10))
    assert created[1]["fetch.queue.backoff.ms"] == 1 and created[1]["queued.max.messages.kbytes"] == 1
    POOL.close_all()


def test_a_pooled_consumer_sized_for_another_range_is_replaced(kafka_cluster, topic_factory):
    """A consumer created for a long range prefetches far past the end of a short one (and one
    created for a short range reads a long one in needlessly many fetches): it is replaced."""
    from kafkasync_source.executor.consumer_pool import prefetch_fits

    assert prefetch_fits(100, 100) and prefetch_fits(0, 0)
    assert prefetch_fits(200, 100) and not prefetch_fits(201, 100)  # oversized: more than 2x
    assert prefetch_fits(25, 100) and not prefetch_fits(24, 100)  # undersized: less than 1/4
    assert not prefetch_fits(0, 100) and not prefetch_fits(100, 0)  # the user's settings fix one, not the other
    POOL.close_all()
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x" * 100) for i in range(40_100)])
    reader = _reader(kafka_cluster, topic)
    # Nothing read of the topic yet: 1 KiB a record assumed, 40 MB: a 16 MiB queue and 8 MiB fetches.
    assert _offsets(reader, KafkaRange(topic, 0, 0, 40_000)) == list(range(40_000))
    reused, resized = POOL.reused, POOL.resized
    # 100-byte records learned: 50 of them want 1 MiB fetches from an empty queue, far under 24 MiB.
    assert _offsets(reader, KafkaRange(topic, 0, 40_000, 40_050)) == list(range(40_000, 40_050))
    assert (POOL.reused - reused, POOL.resized - resized) == (0, 1)
    assert _offsets(reader, KafkaRange(topic, 0, 40_050, 40_100)) == list(range(40_050, 40_100))  # the same size
    assert (POOL.reused - reused, POOL.resized - resized) == (1, 1)
    POOL.close_all()
