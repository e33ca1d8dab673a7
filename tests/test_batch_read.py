"""Batch reads: spark.read.format("kafkasync") between startingOffsets and endingOffsets."""

from __future__ import annotations

import json

import pytest

from kafkasync_dev.testing import Record
from kafkasync_source.spark.source import register

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module", autouse=True)
def kafkasync_registered(spark):
    register(spark)


@pytest.fixture
def two_topics(kafka_cluster, topic_factory):
    """Topic a: 2 partitions x 10 records; topic b: 1 partition x 5 records."""
    a, b = topic_factory(2), topic_factory(1)
    kafka_cluster.produce(
        a, [Record(p, BASE_TS + 10 * i + p, f"k{p}-{i}", f"a{p}-{i}") for i in range(10) for p in (0, 1)]
    )
    kafka_cluster.produce(b, [Record(0, BASE_TS + i, None, f"b-{i}") for i in range(5)])
    return a, b


def batch_read(spark, cluster, **options):
    reader = spark.read.format("kafkasync").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def keys(frame):
    return sorted((r.topic, r.partition, r.offset) for r in frame.select("topic", "partition", "offset").collect())


def test_returns_exactly_the_records_between_json_offsets(spark, kafka_cluster, two_topics):
    a, b = two_topics
    frame = batch_read(
        spark, kafka_cluster, subscribe=f"{a},{b}",
        startingOffsets={a: {"0": 3, "1": -2}, b: {"0": 4}},
        endingOffsets={a: {"0": 7, "1": -1}, b: {"0": 4}},
    )
    rows = frame.collect()
    got = sorted((r.topic, r.partition, r.offset, bytes(r.key or b""), bytes(r.value)) for r in rows)
    expected = sorted(
        [(a, 0, o, f"k0-{o}".encode(), f"a0-{o}".encode()) for o in range(3, 7)]
        + [(a, 1, o, f"k1-{o}".encode(), f"a1-{o}".encode()) for o in range(10)]
    )
    assert got == expected, "end offsets are exclusive; an empty range (b: 4..4) reads nothing"
    ts = {(r.topic, r.partition, r.offset): r.timestamp.timestamp() * 1000 for r in rows}
    assert ts[(a, 1, 9)] == BASE_TS + 91
    assert {r.timestampType for r in rows} == {0}  # CreateTime


def test_partitions_left_out_of_json_start_at_earliest_and_end_at_latest(spark, kafka_cluster, two_topics):
    a, _ = two_topics
    frame = batch_read(spark, kafka_cluster, subscribe=a,
                       startingOffsets={a: {"1": 8}}, endingOffsets={a: {"0": 2}})
    assert keys(frame) == [(a, 0, 0), (a, 0, 1), (a, 1, 8), (a, 1, 9)]


def test_defaults_read_everything_from_earliest_to_latest(spark, kafka_cluster, two_topics):
    a, b = two_topics
    assert len(keys(batch_read(spark, kafka_cluster, subscribe=f"{a},{b}"))) == 25
    explicit = batch_read(spark, kafka_cluster, subscribe=f"{a},{b}",
                          startingOffsets="earliest", endingOffsets="latest")
    assert len(keys(explicit)) == 25
    pattern = batch_read(spark, kafka_cluster, subscribePattern=b.replace(".", r"\."))
    assert keys(pattern) == [(b, 0, o) for o in range(5)]
    assign = batch_read(spark, kafka_cluster, assign={a: [1]})
    assert keys(assign) == [(a, 1, o) for o in range(10)]


def test_large_ranges_are_split_across_tasks_without_loss_or_duplicates(spark, kafka_cluster, two_topics):
    a, _ = two_topics
    frame = batch_read(spark, kafka_cluster, subscribe=a, maxRecordsPerPartition="3")
    assert frame.rdd.getNumPartitions() == 8  # 2 partitions x ceil(10 / 3)
    assert keys(frame) == [(a, p, o) for p in (0, 1) for o in range(10)]


def test_latest_end_is_resolved_when_the_dataframe_is_first_planned(spark, kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(3)])
    frame = batch_read(spark, kafka_cluster, subscribe=topic)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 3, None, b"before-first-action")])
    assert frame.count() == 4
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 4, None, b"after-first-action")])
    assert frame.count() == 4, "PySpark plans a Python data source's partitions once per DataFrame"
    assert batch_read(spark, kafka_cluster, subscribe=topic).count() == 5


def test_same_schema_as_the_stream(spark, kafka_cluster, two_topics):
    a, _ = two_topics
    for headers in ("false", "true"):
        batch = batch_read(spark, kafka_cluster, subscribe=a, includeHeaders=headers)
        stream = (spark.readStream.format("kafkasync")
                  .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
                  .option("subscribe", a).option("includeHeaders", headers).load())
        assert batch.schema == stream.schema
        assert ("headers" in batch.columns) == (headers == "true")
    assert batch_read(spark, kafka_cluster, subscribe=a).columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_headers_are_read(spark, kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS, None, b"v", headers=[("h", b"1"), ("n", None)])])
    row = batch_read(spark, kafka_cluster, subscribe=topic, includeHeaders="true").collect()[0]
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers] == [("h", b"1"), ("n", None)]


@pytest.mark.parametrize(
    "options, message",
    [
        (lambda a: {"startingOffsets": {a: {"0": 5}}, "endingOffsets": {a: {"0": 2}}},
         r"endingOffsets \(2\) is before startingOffsets \(5\)"),
        (lambda a: {"endingOffsets": {a: {"0": 11}}}, r"endingOffsets.*offset 11 .* past the end"),
        (lambda a: {"startingOffsets": {a + "-other": {"0": 1}}}, r"startingOffsets.*names partition"),
        (lambda a: {"endingOffsets": {a: {"7": 1}}}, r"endingOffsets.*names partition"),
    ],
)
def test_offsets_that_do_not_fit_the_log_fail_naming_the_option(spark, kafka_cluster, two_topics, options, message):
    a, _ = two_topics
    with pytest.raises(Exception, match=message):
        batch_read(spark, kafka_cluster, subscribe=a, **options(a)).collect()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"startingOffsets": "latest"}, r"startingOffsets' cannot be 'latest'"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, r"startingOffsets': -1 \(latest\) is not allowed"),
        ({"endingOffsets": "earliest"}, r"endingOffsets' cannot be 'earliest'"),
        ({"endingOffsets": '{"t":{"0":-2}}'}, r"endingOffsets': -2 \(earliest\) is not allowed"),
        ({"max.task.idle.ms": "5"}, r"max\.task\.idle\.ms' applies to streaming"),
        ({"autostop.offsets": "durable", "autostop.key": "k"}, r"autostop\.key' applies to streaming"),
    ],
)
def test_streaming_only_or_meaningless_options_are_refused(spark, kafka_cluster, options, message):
    with pytest.raises(Exception, match=message):
        batch_read(spark, kafka_cluster, subscribe="t", **options).collect()


def test_missing_topic_is_named(spark, kafka_cluster):
    with pytest.raises(Exception, match="no-such-batch-topic"):
        batch_read(spark, kafka_cluster, subscribe="no-such-batch-topic").collect()
