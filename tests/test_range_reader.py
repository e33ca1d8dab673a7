"""Executor-side range reads against the embedded Kafka cluster (real protocol)."""

import time

import pytest

from kafkasync_source.options import parse_options
from kafkasync_source.range_reader import KafkaRange, KafkaSyncDataLossError, RangeReader
from kafkasync_source.schema import kafka_schema
from kafkasync_source.testing import Record

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
    assert time.monotonic() - started < 10


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
    from kafkasync_source.range_reader import _Columns
    from kafkasync_source.schema import arrow_schema

    schema = arrow_schema(kafka_schema(include_headers=True))
    columns = _Columns("t", include_headers=True)
    # confluent-kafka kinds: 0 not available, 1 CreateTime, 2 LogAppendTime
    columns.extend([_Message(0, 0, -1), _Message(1, 1, BASE_TS), _Message(2, 2, BASE_TS + 1)])
    rows = columns.to_batch(schema).to_pylist()
    assert [r["timestampType"] for r in rows] == [-1, 0, 1]
    assert rows[0]["timestamp"] is None
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows[1:]] == [BASE_TS, BASE_TS + 1]
    assert rows[0]["headers"] == []


def test_range_ending_just_after_a_transaction_marker_stops_at_the_next_record(
    kafka_cluster, topic_factory, monkeypatch
):
    """The range [0, 6) ends with a commit marker (offset 5) and the log goes on: the first
    record at or past the end completes the range, the reader does not read on to the log end."""
    import kafkasync_source.range_reader as range_reader

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
