"""Timestamp options with format("kafka")'s names and meanings (issue 13).

The resolution is tested with injected look-up answers (pure functions); end to end on the
embedded cluster, which answers "no offset" (-1) to every look-up by time, as a real broker does
when no record has a timestamp at or after the time: the strategy then decides.
"""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options
from kafkasync_source.driver.offset_reader import KafkaSyncTopicError, offsets_at_times, timestamps_per_partition
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.source import register

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


@pytest.fixture(scope="module", autouse=True)
def kafkasync_registered(spark):
    register(spark)


def options(**given):
    return parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **given}, streaming=None)


def test_global_timestamp_takes_precedence_over_per_partition_and_offsets():
    parsed = options(startingTimestamp="1000", startingOffsetsByTimestamp='{"a":{"0":5}}',
                     startingOffsets="earliest")
    assert parsed.timestamps.starting == 1000
    assert options(startingOffsetsByTimestamp='{"a":{"0":5}}').timestamps.starting == {"a": {0: 5}}


def test_a_per_partition_json_must_name_every_partition_as_spark_requires():
    assert timestamps_per_partition({"a": {0: 5, 1: 7}}, [A0, A1], option="o") == {A0: 5, A1: 7}
    assert timestamps_per_partition(9, [A0, A1], option="o") == {A0: 9, A1: 9}
    with pytest.raises(KafkaSyncTopicError, match=r"'o'.*missing: a-1"):
        timestamps_per_partition({"a": {0: 5}}, [A0, A1], option="o")
    with pytest.raises(KafkaSyncTopicError, match=r"not subscribed or not existing: b-0"):
        timestamps_per_partition({"a": {0: 5, 1: 5}, "b": {0: 1}}, [A0, A1], option="o")


def test_found_offsets_are_used_and_no_match_follows_the_strategy():
    times, latest = {A0: 100, A1: 200}, {A1: 42}
    found = {A0: 7, A1: -1}
    assert offsets_at_times(times, found, latest, option="o", is_start=True, strategy="latest") == {A0: 7, A1: 42}
    assert offsets_at_times(times, found, latest, option="o", is_start=False, strategy="error") == {A0: 7, A1: 42}
    with pytest.raises(KafkaSyncTopicError, match=r"'o': no record of a-1 has a timestamp at or after 200"):
        offsets_at_times(times, found, latest, option="o", is_start=True, strategy="error")


@pytest.mark.parametrize("given, option", [
    ({"startingTimestamp": "-5"}, "startingTimestamp"),
    ({"startingTimestamp": "soon"}, "startingTimestamp"),
    ({"startingOffsetsByTimestamp": '{"a":{"0":-1}}'}, "startingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestamp": '{"a":{"0":1.5}}'}, "startingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestampStrategy": "skip"}, "startingOffsetsByTimestampStrategy"),
    ({"endingTimestamp": "x"}, "endingTimestamp"),
])
def test_bad_timestamp_values_name_the_option(given, option):
    with pytest.raises(KafkaSyncOptionError, match=f"'{option}'"):
        options(**given)


def _stream(spark, cluster, topic, tmp_path, trigger=None, **extra):
    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
              .option("subscribe", topic))
    for key, value in {"startingTimestamp": "1700000000000", **extra}.items():
        if value is not None:  # None: leave the option out
            reader = reader.option(key, value)
    rows = []
    query = (reader.load().writeStream.foreachBatch(lambda frame, _: rows.extend(frame.collect()))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(**(trigger or {"availableNow": True})).start())
    return query, rows


def test_an_available_now_run_ending_at_a_time_no_record_reaches_reads_to_the_captured_end(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, 1_700_000_000_000 + i, None, b"v") for i in range(10)])
    query, rows = _stream(spark, kafka_cluster, topic, tmp_path, startingOffsets="earliest",
                          startingTimestamp=None, endingTimestamp="1800000000000")
    query.awaitTermination(PATIENCE_S)
    assert query.exception() is None and len(rows) == 10


def test_an_ending_timestamp_with_a_trigger_that_never_stops_fails_at_start_naming_it(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(1)
    query, rows = _stream(spark, kafka_cluster, topic, tmp_path, trigger={"processingTime": "1 second"},
                          startingOffsets="earliest", startingTimestamp=None,
                          endingOffsetsByTimestamp=f'{{"{topic}":{{"0":1800000000000}}}}')
    with pytest.raises(StreamingQueryException, match=r"Option 'endingOffsetsByTimestamp' bounds a "
                       r"streaming query run with trigger\(availableNow=True\)"):
        query.awaitTermination(PATIENCE_S)
    assert rows == []


def test_no_record_at_the_time_fails_naming_partition_and_time_with_strategy_error(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, 1_700_000_000_000 + i, None, b"v") for i in range(3)])
    query, _ = _stream(spark, kafka_cluster, topic, tmp_path)
    with pytest.raises(StreamingQueryException, match=rf"no record of {topic}-0 has a timestamp at or after 1700000000000"):
        query.awaitTermination(PATIENCE_S)


def test_no_record_at_the_time_starts_at_the_latest_offset_with_strategy_latest(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, 1_700_000_000_000 + i, None, b"v") for i in range(3)])
    query, rows = _stream(spark, kafka_cluster, topic, tmp_path, startingOffsetsByTimestampStrategy="latest")
    query.awaitTermination(PATIENCE_S)
    assert query.exception() is None and rows == []  # started at the latest offset: nothing old


def test_batch_read_ending_at_a_time_with_no_record_after_it_reads_to_the_latest_offset(
    spark, kafka_cluster, topic_factory
):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, 1_700_000_000_000 + i, None, b"v") for i in range(10)])
    frame = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", topic).option("endingTimestamp", "1800000000000").load())
    assert frame.count() == 10
