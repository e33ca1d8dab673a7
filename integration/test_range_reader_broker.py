"""The executors' range reader where a real broker moves the log under it (issue 51, items 5
and 6), with failOnDataLoss=false: records deleted by DeleteRecords (as retention deletes them)
under a consumer in the middle of its range, and a range that ends past the log's end.

tests/test_range_reader.py forces the same on the embedded cluster. What it models, checked
here on Apache Kafka: a fetch below the log start answers OFFSET_OUT_OF_RANGE (Kafka's
``UnifiedLog.checkLogStartOffset``), which librdkafka under ``auto.offset.reset=error`` hands
over as _AUTO_OFFSET_RESET at the fetch offset, leaving the partition unfetched until it is
assigned again (``rd_kafka_offset_reset``, rdkafka_offset.c); a fetch at the log end answers
no records and an end-of-partition event at the high watermark.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor.consumer_pool import POOL
from kafkasync_source.executor.range_reader import KafkaRange, RangeReader
from kafkasync_source.spark.schema import kafka_schema

NOW_MS = int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(bootstrap_servers):
    return KafkaBroker(bootstrap_servers)


@pytest.fixture
def pool():
    """The process's consumer pool, emptied before and after the test."""
    POOL.close_all()
    yield POOL
    POOL.close_all()


def lenient_reader(bootstrap: str, topic: str, **extra: str) -> RangeReader:
    options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                             "failOnDataLoss": "false", **extra}, streaming=True)
    return RangeReader.from_options(options, kafka_schema(options.include_headers))


def offsets(batches) -> list[int]:
    return [offset for batch in batches for offset in batch.column("offset").to_pylist()]


def test_records_deleted_under_a_consumer_in_the_middle_of_its_range(
    bootstrap_servers, broker, admin, topic_factory, pool, monkeypatch, caplog
):
    """Offsets 0-4 of the range [0, 10) are read, 5 waits in librdkafka's queue, and then
    DeleteRecords moves the log start to 15. The consumer's next fetch, at 6, is out of range:
    offset 5 is still read, [6, 10) is named as lost, and the consumer, left unfetched by
    librdkafka, is closed rather than pooled (pooled, the next task's resume failed on it
    with _STATE). The next range reads with a new one."""
    import kafkasync_source.executor.range_reader as range_reader

    monkeypatch.setattr(range_reader, "ARROW_BATCH_ROWS", 5)  # the reader yields after 5 records
    topic = topic_factory(1)
    broker.produce(topic, [Record(0, NOW_MS + i, None, b"a") for i in range(6)])  # one record batch
    broker.produce(topic, [Record(0, NOW_MS + i, None, b"b") for i in range(6, 20)])
    # One record batch per fetch (a broker answers at least the first batch, whatever the limit:
    # KIP-74), and no fetch while a record waits in the queue (queued.min.messages).
    reader = lenient_reader(bootstrap_servers, topic, **{"kafka.max.partition.fetch.bytes": "1",
                                                          "kafka.queued.min.messages": "1"})
    batches = reader.read(KafkaRange(topic, 0, 0, 10))
    assert offsets([next(batches)]) == [0, 1, 2, 3, 4]
    for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
        future.result(30)
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.data_loss"):
        assert offsets(batches) == [5]
    gone = [r.getMessage() for r in caplog.records if "are gone" in r.getMessage()]
    assert len(gone) == 1
    assert f"{topic}-0 offsets [6, 10) of the range [0, 10) are gone: the log starts at offset 15" in gone[0]
    assert len(pool) == 0
    assert offsets(reader.read(KafkaRange(topic, 0, 15, 20))) == list(range(15, 20))


def test_a_range_past_the_log_end_then_the_next_range_once_the_log_grew(bootstrap_servers, broker, topic_factory,
                                                                         pool):
    """The range [0, 9) over a log of 3 records (as after a truncation): [3, 9) is skipped with
    a warning. The consumer stood at 3; pooled as if at 9, it served the next range [9, 13)
    from offset 3 once the log grew again."""
    topic = topic_factory(1)
    broker.produce(topic, [Record(0, NOW_MS + i, None, b"old") for i in range(3)])
    reader = lenient_reader(bootstrap_servers, topic)
    assert offsets(reader.read(KafkaRange(topic, 0, 0, 9))) == [0, 1, 2]
    broker.produce(topic, [Record(0, NOW_MS + i, None, b"new") for i in range(3, 13)])
    assert offsets(reader.read(KafkaRange(topic, 0, 9, 13))) == [9, 10, 11, 12]


def _scoped(bootstrap: str, topic: str, reader: RangeReader, start: int, end: int) -> list[int]:
    """A streaming task's read of partition 0's range (its ranges carry the query run's scope)."""
    from kafkasync_source.spark.input_partitions import KafkaRanges

    return offsets(reader.read(KafkaRanges((KafkaRange(topic, 0, start, end),), "query-run")))


@pytest.mark.compat
def test_what_a_capped_range_fetched_past_its_end_is_kept_while_the_log_holds_it(
    bootstrap_servers, broker, admin, topic_factory, pool, tmp_path, monkeypatch, caplog
):
    """Issue 53, item 1, on Apache Kafka: the broker sends the producer batch holding a range's
    end whole, and its rest, kept (executor/range_tails.py), is where the next range starts, in
    another worker too; once DeleteRecords removed records it holds, it is not read: the range
    reads from the new log start and names what was lost (the stash reverted in 351324d read
    them)."""
    import kafkasync_source.executor.consumer_tails as consumer_tails
    from kafkasync_source.executor.range_tails import RangeTails

    tails = RangeTails(str(tmp_path / "tails"))
    monkeypatch.setattr(consumer_tails, "TAILS", tails)
    topic = topic_factory(1)
    broker.produce(topic, [Record(0, NOW_MS + i, None, b"v" * 1000) for i in range(600)])
    reader = lenient_reader(bootstrap_servers, topic)
    assert _scoped(bootstrap_servers, topic, reader, 0, 100) == list(range(100))
    assert tails.kept == 1, "the rest of the producer batch holding offset 99 was fetched with it"
    pool.close_all()  # the next range in the other Python worker
    assert _scoped(bootstrap_servers, topic, reader, 100, 200) == list(range(100, 200))
    assert (tails.taken, tails.refused) == (1, 0)
    pool.close_all()
    for future in admin.delete_records([TopicPartition(topic, 0, 250)], operation_timeout=30).values():
        future.result(30)
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.data_loss"):
        assert _scoped(bootstrap_servers, topic, reader, 200, 300) == list(range(250, 300))
    assert (tails.taken, tails.refused) == (2, 1)
    assert f"{topic}-0 offsets [200, 250) of the range [200, 300) are gone: the log starts at offset 250" in caplog.text
