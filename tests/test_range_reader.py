"""Executor-side range reads against the embedded Kafka cluster (real protocol)."""

import gc
import itertools
import time

import pytest

from kafkasync_dev.testing import Record
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor.range_reader import KafkaRange, RangeReader
from kafkasync_source.kafka.errors import KafkaSyncDataLossError
from kafkasync_source.spark.schema import kafka_schema

BASE_TS = 1_700_000_000_000


def reader_for(cluster, topic, **extra):
    options = parse_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic, **extra},
        streaming=True,
    )
    return RangeReader.from_options(options, kafka_schema(options.include_headers))


def read_rows(reader, kafka_range):
    rows = []
    for batch in reader.read(kafka_range):
        assert batch.schema == reader.arrow_schema
        rows.extend(batch.to_pylist())
    return rows


def test_reads_exactly_the_range_with_all_columns(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    kafka_cluster.produce(
        topic,
        [Record(1, BASE_TS + i, f"k{i}".encode(), f"v{i}".encode(), [("h", f"{i}".encode())])
         for i in range(100)],
    )
    rows = read_rows(reader_for(kafka_cluster, topic, includeHeaders="true"), KafkaRange(topic, 1, 10, 25))
    assert [r["offset"] for r in rows] == list(range(10, 25))
    first = rows[0]
    assert (first["key"], first["value"], first["topic"], first["partition"]) == (b"k10", b"v10", topic, 1)
    assert int(first["timestamp"].timestamp() * 1000) == BASE_TS + 10
    assert first["timestampType"] == 0  # CreateTime, as Spark numbers it
    assert first["headers"] == [{"key": "h", "value": b"10"}]


def test_large_range_spans_several_arrow_batches(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(25_000)])
    reader = reader_for(kafka_cluster, topic)
    batches = list(reader.read(KafkaRange(topic, 0, 0, 25_000)))
    assert len(batches) >= 3
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(25_000))


def test_range_ending_in_transaction_marker_gap_does_not_hang(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t%d" % i) for i in range(5)])
    low, high = kafka_cluster.end_offsets(topic)[0]
    assert high == 6, "five records and one commit marker"
    started = time.monotonic()
    rows = read_rows(reader_for(kafka_cluster, topic), KafkaRange(topic, 0, 0, high))
    assert [r["value"] for r in rows] == [b"t0", b"t1", b"t2", b"t3", b"t4"]
    assert time.monotonic() - started < 60, "ended at the marker's gap, not by the 120 s poll timeout"


def test_missing_records_fail_with_the_partition_and_offsets(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS, None, b"x") for _ in range(3)])
    reader = reader_for(kafka_cluster, topic)
    with pytest.raises(KafkaSyncDataLossError, match=rf"{topic}-0 offsets \[3, 9\).*failOnDataLoss"):
        read_rows(reader, KafkaRange(topic, 0, 0, 9))
    lenient = reader_for(kafka_cluster, topic, failOnDataLoss="false")
    assert [r["offset"] for r in read_rows(lenient, KafkaRange(topic, 0, 0, 9))] == [0, 1, 2]


class _Message:
    """A consumed record as confluent-kafka hands it over (only what the column builder reads)."""

    def __init__(self, offset, kind, timestamp):
        self._offset, self._timestamp = offset, (kind, timestamp)

    def key(self):
        return None

    def value(self):
        return b"v"

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def timestamp(self):
        return self._timestamp

    def headers(self):
        return None


def test_records_without_timestamp_get_null_and_spark_type_minus_one():
    from kafkasync_source.executor.record_columns import RecordColumns
    from kafkasync_source.spark.schema import arrow_schema

    schema = arrow_schema(kafka_schema(include_headers=True))
    columns = RecordColumns("t", include_headers=True)
    # confluent-kafka kinds: 0 not available, 1 CreateTime, 2 LogAppendTime
    columns.extend([_Message(0, 0, -1), _Message(1, 1, BASE_TS), _Message(2, 2, BASE_TS + 1)])
    rows = columns.to_batch(schema).to_pylist()
    assert [r["timestampType"] for r in rows] == [-1, 0, 1]
    assert rows[0]["timestamp"] is None
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows[1:]] == [BASE_TS, BASE_TS + 1]
    assert rows[0]["headers"] is None  # no headers: null, as format("kafka") gives


def test_range_ending_just_after_a_transaction_marker_stops_at_the_next_record(
    kafka_cluster, topic_factory, monkeypatch
):
    """The range [0, 6) ends with a commit marker (offset 5) and the log goes on: the first
    record at or past the end completes the range, the reader does not read on to the log end."""
    import kafkasync_source.executor.range_reader as range_reader

    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t%d" % i) for i in range(5)])
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"after") for i in range(5_000)])
    consume_calls = []
    real_consumer = range_reader.Consumer

    class CountingConsumer:
        def __init__(self, config):
            self._consumer = real_consumer(config)

        def consume(self, *args, **kwargs):
            consume_calls.append(1)
            return self._consumer.consume(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._consumer, name)

    monkeypatch.setattr(range_reader, "Consumer", CountingConsumer)
    rows = read_rows(reader_for(kafka_cluster, topic), KafkaRange(topic, 0, 0, 6))
    assert [r["value"] for r in rows] == [b"t0", b"t1", b"t2", b"t3", b"t4"]
    assert len(consume_calls) < 10, f"{len(consume_calls)} consume() calls for a 5-record range"


@pytest.fixture
def pool():
    """The worker's consumer pool, emptied so that counts are this test's own."""
    from kafkasync_source.executor.consumer_pool import POOL

    POOL.close_all()
    POOL.created = POOL.reused = POOL.repositioned = 0
    yield POOL
    POOL.close_all()


def offsets_of(reader, kafka_range):
    return [r["offset"] for r in read_rows(reader, kafka_range)]


def test_the_next_range_of_a_partition_reuses_the_pooled_consumer(kafka_cluster, topic_factory, pool):
    topic = topic_factory(2)
    for p in (0, 1):
        kafka_cluster.produce(topic, [Record(p, BASE_TS + i, None, b"v%d" % i) for i in range(300)])
    reader = reader_for(kafka_cluster, topic)
    # Interleaved ranges of two partitions: one consumer each, each continuing where it was.
    for start, end in ((0, 100), (100, 250), (250, 300)):
        for p in (0, 1):
            assert offsets_of(reader, KafkaRange(topic, p, start, end)) == list(range(start, end))
    assert (pool.created, pool.reused) == (2, 4)
    assert len(pool) == 2


def test_a_range_that_starts_elsewhere_is_re_seeked(kafka_cluster, topic_factory, pool):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(100)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 50)) == list(range(50))
    assert offsets_of(reader, KafkaRange(topic, 0, 20, 30)) == list(range(20, 30))  # back
    assert offsets_of(reader, KafkaRange(topic, 0, 70, 80)) == list(range(70, 80))  # ahead
    assert offsets_of(reader, KafkaRange(topic, 0, 80, 100)) == list(range(80, 100))
    # Back: always assigned afresh. Ahead: paused while pooled (consumer_pool.py), its prefetch
    # was dropped, so it is assigned afresh unless the records fetched since it was resumed
    # already reach offset 70 (a race with librdkafka's fetcher; both read the same records).
    assert (pool.created, pool.reused) == (1, 3)
    assert pool.repositioned in (1, 2)


def test_a_range_ahead_of_a_pooled_consumer_is_reached_through_its_prefetched_records(
    kafka_cluster, topic_factory, pool
):
    """The live-stream case: the range after the next one comes to this worker. The records
    in between were fetched with the first (one produce request, one record batch), so the
    consumer is moved up through them without a new assignment."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(100)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 10)) == list(range(10))
    assert offsets_of(reader, KafkaRange(topic, 0, 40, 60)) == list(range(40, 60))
    assert offsets_of(reader, KafkaRange(topic, 0, 99, 100)) == [99]
    # Paused while pooled (consumer_pool.py): its prefetch is dropped, a range ahead assigned afresh.
    assert (pool.reused, pool.repositioned) == (2, 2)


def test_a_consumer_moved_up_across_a_transaction_marker_keeps_every_prefetched_record(
    kafka_cluster, topic_factory, pool, monkeypatch
):
    """The defect CI found on Kafka 4.3.1 (integration/test_log_shapes.py, re-runs differed): a
    consumer moved up through its prefetched records holds more of them than the range needs;
    a marker's gap within the range took its end record early, and what was held past it was
    dropped, so the next range jumped over them and silently ended short."""
    import kafkasync_source.executor.range_reader as range_reader

    monkeypatch.setattr(range_reader, "ARROW_BATCH_ROWS", 8)  # a few records per consume()
    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t") for i in range(5)])
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"a") for i in range(30)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 2)) == [0, 1]
    assert offsets_of(reader, KafkaRange(topic, 0, 3, 7)) == [3, 4, 6]  # the marker at 5
    assert offsets_of(reader, KafkaRange(topic, 0, 7, 36)) == list(range(7, 36))
    # Paused while pooled (consumer_pool.py): its prefetch is dropped, a range ahead assigned afresh.
    assert (pool.reused, pool.repositioned) == (2, 1)


def test_a_consumer_moved_up_past_end_of_partition_events_reads_the_range_exactly(
    kafka_cluster, topic_factory, pool
):
    """End-of-partition events (and records produced after them) among the prefetched ones:
    whether or not they reach the range, its records are exactly those of the range."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(5)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 2)) == [0, 1]
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"y") for i in range(5)])
    assert offsets_of(reader, KafkaRange(topic, 0, 5, 8)) == [5, 6, 7]
    assert offsets_of(reader, KafkaRange(topic, 0, 9, 10)) == [9]


def test_a_new_query_never_continues_with_an_earlier_querys_consumer(kafka_cluster, topic_factory, pool):
    """The defect seen on Kafka 4.3: a topic deleted and recreated under the same name between
    two queries of one application, and the second query's first range failed on a stale
    "offset out of range" of the first query's pooled consumer. Consumers are now scoped to a
    query run (KafkaRanges.consumer_scope)."""
    from kafkasync_source.spark.input_partitions import KafkaRanges

    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"old") for i in range(100)])
    reader = reader_for(kafka_cluster, topic)
    first = KafkaRanges((KafkaRange(topic, 0, 0, 100),), consumer_scope="query-1")
    assert [r["offset"] for b in reader.read(first) for r in b.to_pylist()] == list(range(100))
    kafka_cluster.delete_topic(topic)
    kafka_cluster.create_topic(topic, 1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"new") for i in range(100)])
    second = KafkaRanges((KafkaRange(topic, 0, 0, 100),), consumer_scope="query-2")
    rows = [r for b in reader.read(second) for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(100)) and {r["value"] for r in rows} == {b"new"}
    assert (pool.created, pool.reused) == (2, 0)
    # Within one query run the consumer is reused, as before.
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 200, None, b"next")])
    more = KafkaRanges((KafkaRange(topic, 0, 100, 101),), consumer_scope="query-2")
    assert [r["offset"] for b in reader.read(more) for r in b.to_pylist()] == [100]
    assert pool.reused == 1


def test_records_past_a_range_end_are_kept_for_the_next_range(kafka_cluster, topic_factory, pool):
    """A transaction marker ends [0, 6) through the record at 6, which is consumed already:
    the next range starts with it, and ranges still stop at gaps."""
    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t%d" % i) for i in range(5)])
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"a%d" % i) for i in range(5)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 6)) == [0, 1, 2, 3, 4]
    assert offsets_of(reader, KafkaRange(topic, 0, 6, 11)) == [6, 7, 8, 9, 10]
    assert pool.reused == 1


def test_a_pooled_consumer_that_saw_the_old_log_end_reads_records_produced_since(
    kafka_cluster, topic_factory, pool
):
    """Its end-of-partition event at the old end is stale, not a truncation (no data loss)."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(5)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 4)) == [0, 1, 2, 3]
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"y") for i in range(5)])
    assert offsets_of(reader, KafkaRange(topic, 0, 4, 10)) == [4, 5, 6, 7, 8, 9]
    assert pool.reused == 1


def test_a_partly_read_range_does_not_pool_its_consumer(kafka_cluster, topic_factory, pool):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(25_000)])
    batches = reader_for(kafka_cluster, topic).read(KafkaRange(topic, 0, 0, 25_000))
    next(batches)
    batches.close()
    assert len(pool) == 0


def test_the_pool_is_bounded_and_closes_idle_consumers():
    from kafkasync_source.executor.consumer_pool import ConsumerPool

    class FakeConsumer:  # the pool only ever closes what it holds
        closed = 0

        def close(self):
            FakeConsumer.closed += 1

    now = [0.0]
    pool = ConsumerPool(capacity=2, idle_timeout_s=60, clock=lambda: now[0])
    for key in "abc":
        pool.release(key, pool.acquire(key, FakeConsumer))
    assert len(pool) == 2 and FakeConsumer.closed == 1  # "a", least recently used
    now[0] = 61
    pool.release("d", pool.acquire("d", FakeConsumer))  # "b" and "c" idle too long
    assert len(pool) == 1 and FakeConsumer.closed == 3


def test_a_timestamp_beyond_spark_timestamps_fails_naming_the_record():
    from kafkasync_source.executor.record_columns import RecordColumns
    from kafkasync_source.spark.schema import arrow_schema

    columns = RecordColumns("t", include_headers=False)
    columns.extend([_Message(7, 1, BASE_TS), _Message(8, 1, 2**62)])
    with pytest.raises(ValueError, match=rf"t-0 offset 8 has timestamp {2**62} ms"):
        columns.to_batch(arrow_schema(kafka_schema(include_headers=False)))


def test_data_loss_names_the_offsets_actually_lost():
    from kafkasync_source.executor.data_loss import lost_offsets

    # Retention deleted [1000, 4000) of the range [1000, 9000): only those are lost.
    assert lost_offsets(1000, 9000, 4000, 12_000) == (1000, 4000, "the log starts at offset 4000")
    assert lost_offsets(1000, 3000, 4000, 12_000) == (1000, 3000, "the log starts at offset 4000")
    # The log was truncated (or recreated) below the range: what lies past its end is lost.
    assert lost_offsets(5, 9, 0, 3) == (5, 9, "the log ends at offset 3")
    assert lost_offsets(1, 9, 0, 3) == (3, 9, "the log ends at offset 3")


def test_a_range_past_a_truncated_log_fails_or_warns_naming_the_lost_offsets(
    kafka_cluster, topic_factory, caplog
):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(3)])
    with pytest.raises(KafkaSyncDataLossError, match=rf"{topic}-0 offsets \[5, 9\) of the range \[5, 9\)"):
        read_rows(reader_for(kafka_cluster, topic), KafkaRange(topic, 0, 5, 9))
    lenient = reader_for(kafka_cluster, topic, failOnDataLoss="false")
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.data_loss"):
        assert read_rows(lenient, KafkaRange(topic, 0, 5, 9)) == []
    assert any(f"{topic}-0 offsets [5, 9)" in r.getMessage() for r in caplog.records)


@pytest.mark.mock_brokers(1)
def test_transient_fetch_errors_are_retried_and_fatal_ones_fail(fresh_cluster, pool, caplog):
    from confluent_kafka import KafkaError, KafkaException

    from kafkasync_dev.testing.mock_cluster import ApiKey

    cluster = fresh_cluster
    cluster.create_topic("t", partitions=1)
    cluster.produce("t", [Record(0, BASE_TS + i, None, b"x") for i in range(50)])
    reader = reader_for(cluster, "t", **{"kafka.fetch.error.backoff.ms": "20"})
    cluster.start_request_tracking()
    cluster.push_request_errors(
        ApiKey.FETCH, KafkaError.REQUEST_TIMED_OUT, KafkaError.UNKNOWN,
        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
    )
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.range_reader"):
        assert offsets_of(reader, KafkaRange("t", 0, 0, 50)) == list(range(50))
    assert len(cluster.requests(ApiKey.FETCH)) >= 5  # four failed fetches, then one that worked

    cluster.push_request_errors(ApiKey.FETCH, *[KafkaError.TOPIC_AUTHORIZATION_FAILED] * 20)
    with pytest.raises(KafkaException) as info:
        offsets_of(reader, KafkaRange("t", 0, 10, 20))  # a re-seek: a new fetch
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.mock_brokers(1)
def test_transient_errors_without_progress_fail_after_the_poll_timeout(fresh_cluster, pool):
    from confluent_kafka import KafkaError

    from kafkasync_dev.testing.mock_cluster import ApiKey

    cluster = fresh_cluster
    cluster.create_topic("t", partitions=1)
    cluster.produce("t", [Record(0, BASE_TS + i, None, b"x") for i in range(5)])
    reader = reader_for(cluster, "t", **{"kafkaConsumer.pollTimeoutMs": "1500",
                                         "kafka.fetch.error.backoff.ms": "20"})
    cluster.push_request_errors(ApiKey.FETCH, *[KafkaError.UNKNOWN] * 10_000)
    with pytest.raises(TimeoutError, match=r"t-0 .*1500 ms.*offsets \[0, 5\); last error"):
        offsets_of(reader, KafkaRange("t", 0, 0, 5))


@pytest.mark.mock_brokers(1)
def test_a_deletion_check_the_cluster_cannot_answer_is_no_deletion(fresh_cluster, monkeypatch):
    """A range that stalls checks whether its partition was deleted. With the broker down
    (restarting) the metadata cannot be had: that says nothing, and the range reads on. It
    failed a query through a broker restart on a real Kafka 4.3.1 (integration/test_broker_faults.py)."""
    from confluent_kafka import KafkaException

    from kafkasync_source.executor.data_loss import partition_gone
    from kafkasync_source.kafka import metadata
    from kafkasync_source.kafka.metadata import partitions_gone

    monkeypatch.setattr(metadata, "METADATA_TIMEOUT_S", 1.0)  # a down broker answers never
    fresh_cluster.create_topic("restarting", 1)
    consumer = fresh_cluster.consumer()
    try:
        assert consumer.list_topics(timeout=10).topics["restarting"].partitions
        kafka_range = KafkaRange("restarting", 0, 0, 10)
        fresh_cluster.broker_down(1)
        with pytest.raises(KafkaException):
            partitions_gone(consumer, [kafka_range.topic_partition])
        assert partition_gone(consumer, kafka_range) is False
        fresh_cluster.broker_up(1)
        assert partition_gone(consumer, kafka_range) is False
    finally:
        consumer.close()


def _requires(cluster, *functions):
    """Skip, saying why, where this librdkafka's mock cluster lacks a fault these tests force."""
    import confluent_kafka

    if not cluster.supports(*functions):
        pytest.skip(f"the mock cluster of librdkafka {confluent_kafka.libversion()[0]} has no "
                    f"{', '.join(functions)} (librdkafka 2.16 has them)")


def _held_back_reader(cluster, topic, **extra):
    """A reader whose consumer fetches again only once it has handed out every record it
    fetched (``queued.min.messages=1``: librdkafka fetches a partition only while fewer records
    than that are queued, rdkafka_fetcher.c ``rd_kafka_toppar_fetch_decide``). One record
    batch per fetch (the mock answers with one message set), and an error of the next fetch
    arrives within one ``consume()`` call (``fetch.wait.max.ms``)."""
    return reader_for(cluster, topic, **{"kafka.queued.min.messages": "1", "kafka.fetch.wait.max.ms": "10",
                                         **extra})


def test_a_consumer_whose_range_retention_deleted_is_closed_not_pooled(
    kafka_cluster, topic_factory, pool, monkeypatch, caplog
):
    """Issue 51 item 5. Records of the range are read, then retention deletes the rest of it
    and more: the next fetch answers OFFSET_OUT_OF_RANGE, which librdkafka with
    auto.offset.reset=error turns into _AUTO_OFFSET_RESET and a partition in state FETCH_NONE
    (rdkafka_offset.c ``rd_kafka_offset_reset``). Nothing is left to read, so nothing re-assigns
    it. Pooled so, the next task's resume seeks it and the seek answers _STATE
    (rdkafka_partition.c ``rd_kafka_toppar_seek``: only a started fetch can seek): a spurious
    task failure, and the consumer was neither pooled nor closed."""
    import kafkasync_source.executor.range_reader as range_reader

    _requires(kafka_cluster, "rd_kafka_mock_partition_delete_records")
    monkeypatch.setattr(range_reader, "ARROW_BATCH_ROWS", 5)  # the reader yields after 5 records
    topic = topic_factory(1)
    # One record batch (MockKafkaCluster.produce): the fetch that brings offset 5 brings 0-4 too.
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"a") for i in range(6)])  # 0-5
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"b") for i in range(6, 20)])
    reader = _held_back_reader(kafka_cluster, topic, failOnDataLoss="false")
    batches = reader.read(KafkaRange(topic, 0, 0, 10))
    assert next(batches).column("offset").to_pylist() == [0, 1, 2, 3, 4]  # offset 5 still queued
    kafka_cluster.delete_records(topic, 0, 15)  # retention: the next fetch, at 6, is out of range
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.data_loss"):
        assert [o for batch in batches for o in batch.column("offset").to_pylist()] == [5]
    assert [r.getMessage() for r in caplog.records if "are gone" in r.getMessage()] == [
        f"kafkasync: {topic}-0 offsets [6, 10) of the range [0, 10) are gone: the log starts at offset 15; "
        "records were lost (retention or log truncation). Skipping them (failOnDataLoss=false)."
    ]
    assert len(pool) == 0, "a consumer left where a data loss put it must not be pooled"
    assert offsets_of(reader, KafkaRange(topic, 0, 15, 20)) == list(range(15, 20))


def test_an_out_of_range_error_after_records_of_the_same_consume_duplicates_none(
    kafka_cluster, topic_factory, pool
):
    """Issue 51 item 6, first part. One consume() returns records and then an out-of-range error
    at the offset after them; the log still holds every offset of the range (a stale error: a
    fetch of a log since replaced), so the reader seeks again. It sought from where it stood
    before those records, and then kept them too: they were read twice. The broker's answer is
    forced (the mock's per-partition error for the second fetch)."""
    from confluent_kafka import KafkaError

    from kafkasync_dev.testing.mock_cluster import ApiKey

    _requires(kafka_cluster, "rd_kafka_mock_partition_push_request_errors")
    topic = topic_factory(1)
    # One record batch (MockKafkaCluster.produce): the fetch that brings offset 5 brings 0-4 too.
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"a") for i in range(6)])  # 0-5
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"b") for i in range(6, 20)])
    kafka_cluster.push_partition_request_errors(topic, 0, ApiKey.FETCH, 0, KafkaError.OFFSET_OUT_OF_RANGE)
    reader = _held_back_reader(kafka_cluster, topic)  # failOnDataLoss=true: nothing is lost
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 20)) == list(range(20))
    # Sought again and read to its end: the consumer stands where the next range starts.
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 20, None, b"c")])
    assert offsets_of(reader, KafkaRange(topic, 0, 20, 21)) == [20]
    assert (pool.created, pool.reused) == (1, 1)


def test_a_consumer_that_met_a_truncated_log_never_serves_the_next_range_from_below_its_start(
    kafka_cluster, topic_factory, pool
):
    """Issue 51 item 6, second part. The range [0, 9) ends past the log's end (3: truncated, or
    the topic recreated, after the driver planned it): offsets [3, 9) are skipped with a warning
    (failOnDataLoss=false). The consumer itself stands at 3, where librdkafka met the log end.
    Pooled as if at 9, it served the next range [9, 13), once the log grew again, from offset 3."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"old") for i in range(3)])
    reader = reader_for(kafka_cluster, topic, failOnDataLoss="false")
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 9)) == [0, 1, 2]
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"new") for i in range(3, 13)])
    assert offsets_of(reader, KafkaRange(topic, 0, 9, 13)) == [9, 10, 11, 12]


def test_a_pooled_consumer_that_cannot_be_resumed_is_closed_and_the_retry_reads(
    kafka_cluster, topic_factory, pool, monkeypatch
):
    """A pooled consumer whose resume fails (a seek answering _STATE, as in issue 51 item 5)
    fails its task, and is closed rather than left unpooled and open: Spark's retry of the
    task then reads the range with a new consumer."""
    from confluent_kafka import KafkaError, KafkaException

    import kafkasync_source.executor.range_reader as range_reader

    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"x") for i in range(10)])
    reader = reader_for(kafka_cluster, topic)
    assert offsets_of(reader, KafkaRange(topic, 0, 0, 5)) == list(range(5))
    resumed = []

    def failing_resume(consumer, fetching):
        if fetching:
            resumed.append(consumer)
            raise KafkaException(KafkaError(KafkaError._STATE, "Failed to seek: Local: Erroneous state"))
        consumer.pause(consumer.assignment())

    monkeypatch.setattr(range_reader, "set_fetching", failing_resume)
    with pytest.raises(KafkaException):
        offsets_of(reader, KafkaRange(topic, 0, 5, 10))
    assert len(resumed) == 1 and len(pool) == 0
    with pytest.raises(RuntimeError, match="closed"):
        resumed[0].assignment()
    monkeypatch.undo()
    assert offsets_of(reader, KafkaRange(topic, 0, 5, 10)) == list(range(5, 10))


def _steps(seen, fail=False):
    """A read's steps as collection_held runs them: records what it saw of the collector."""
    for batch in ("a", "b"):
        seen.append(("read", gc.isenabled()))
        yield batch
    if fail:
        raise RuntimeError("a fetch failed")
    return True


def test_the_collector_is_held_off_while_reading_and_as_found_between_batches():
    from kafkasync_source.executor.garbage_collection import collection_held

    assert gc.isenabled()
    seen: list = []
    steps = collection_held(_steps(seen))
    try:
        while True:
            next(steps)
            seen.append(("consumer", gc.isenabled()))  # Spark's worker and the user's code
    except StopIteration as done:
        assert done.value is True
    assert seen == [("read", False), ("consumer", True), ("read", False), ("consumer", True)]
    assert gc.isenabled()


def test_the_collector_is_restored_when_a_read_fails_or_is_closed_early():
    from kafkasync_source.executor.garbage_collection import collection_held

    failing = collection_held(_steps([], fail=True))
    assert list(itertools.islice(failing, 2)) == ["a", "b"]
    with pytest.raises(RuntimeError, match="a fetch failed"):
        next(failing)
    assert gc.isenabled()
    seen: list = []
    closed = collection_held(_steps(seen))
    next(closed)
    closed.close()  # Spark stopping early (a limit): the read's own cleanup runs, with collection on
    assert gc.isenabled() and seen == [("read", False)]


def test_a_collector_the_user_disabled_stays_disabled():
    from kafkasync_source.executor.garbage_collection import collection_held

    seen: list = []
    gc.disable()
    try:
        for _ in collection_held(_steps(seen)):
            seen.append(("consumer", gc.isenabled()))
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert seen == [("read", False), ("consumer", False), ("read", False), ("consumer", False)]


def test_a_range_read_sets_off_no_collection_of_the_records_it_turns_into_a_batch(kafka_cluster, topic_factory, pool):
    """consume() returns a new Message per record; kept until they become a batch, 5,000 of them
    set off a young-generation collection every 700 allocations (CPython's threshold)."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, b"k", b"v") for i in range(5_000)])
    reader = reader_for(kafka_cluster, topic)
    collections: list[int] = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        batches = list(reader.read(KafkaRange(topic, 0, 0, 5_000)))
    finally:
        gc.callbacks.remove(count)
    assert sum(b.num_rows for b in batches) == 5_000
    # At most one, as the collector is re-enabled for the consumer of the one batch.
    assert len(collections) <= 1, collections


@pytest.fixture
def tails(tmp_path, monkeypatch):
    """The host's kept tails (executor/range_tails.py), in a directory of this test's own."""
    import kafkasync_source.executor.consumer_tails as consumer_tails
    from kafkasync_source.executor.range_tails import RangeTails

    kept = RangeTails(str(tmp_path / "tails"))
    monkeypatch.setattr(consumer_tails, "TAILS", kept)
    return kept


def _scoped_rows(reader, topic, start, end):
    """A streaming task's read of one range: its ranges carry the query run's consumer scope."""
    from kafkasync_source.spark.input_partitions import KafkaRanges

    return [row for batch in reader.read(KafkaRanges((KafkaRange(topic, 0, start, end),), "query-run"))
            for row in batch.to_pylist()]


def test_what_a_capped_range_fetched_past_its_end_is_read_by_the_next_range_in_another_worker(
    kafka_cluster, topic_factory, pool, tails
):
    """Issue 53, item 1. The broker sends a producer batch whole, so a range ending inside one
    has fetched its rest; a pause for the pool drops it, and the next range, in whichever Python
    worker Spark hands it to, fetched the whole batch again. What was fetched past the end is
    kept for it instead, every record as the broker gave it."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, b"k%d" % i, b"v" * 1000, [("h", b"%d" % i)])
                                  for i in range(300)])  # one record batch of 300 KB
    reader = reader_for(kafka_cluster, topic, includeHeaders="true")
    assert [r["offset"] for r in _scoped_rows(reader, topic, 0, 100)] == list(range(100))
    assert tails.kept == 1, "offsets 100-299 came with the first fetch and were kept"
    pool.close_all()  # the next range lands in the other worker: no consumer of the partition there
    rows = _scoped_rows(reader, topic, 100, 200)
    assert [(r["offset"], r["key"], r["value"], r["timestamp"].timestamp() * 1000, r["headers"]) for r in rows] == [
        (i, b"k%d" % i, b"v" * 1000, BASE_TS + i, [{"key": "h", "value": b"%d" % i}]) for i in range(100, 200)]
    assert (tails.taken, tails.refused) == (1, 0)
    # The rest of the tail, kept again, and then the records produced since, fetched from its end.
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"w") for i in range(300, 310)])
    assert [r["offset"] for r in _scoped_rows(reader, topic, 200, 310)] == list(range(200, 310))
    assert (tails.kept, tails.taken) == (2, 2)


def test_a_kept_tail_whose_records_were_deleted_since_is_not_read(kafka_cluster, topic_factory, pool, tails, caplog):
    """Records fetched before ``DeleteRecords`` (or retention) removed them were handed over by
    the next range as if still there, where a fetch finds them gone (the reverted stash, 351324d:
    integration/test_record_facts_broker.py). A tail is read only where the log still holds it."""
    _requires(kafka_cluster, "rd_kafka_mock_partition_delete_records")
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v" * 1000) for i in range(300)])
    reader = reader_for(kafka_cluster, topic, failOnDataLoss="false")
    assert [r["offset"] for r in _scoped_rows(reader, topic, 0, 100)] == list(range(100))
    assert tails.kept == 1
    kafka_cluster.delete_records(topic, 0, 150)
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.data_loss"):
        assert [r["offset"] for r in _scoped_rows(reader, topic, 100, 200)] == list(range(150, 200))
    assert (tails.taken, tails.refused) == (1, 1)
    assert f"{topic}-0 offsets [100, 150) of the range [100, 200) are gone: the log starts at offset 150" in caplog.text
