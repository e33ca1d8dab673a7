"""Timestamp options against a real broker, whose ListOffsets by time finds real offsets (the
embedded cluster answers -1 to every look-up by time; tests/test_timestamps.py covers that case).
Records are stamped hours in the past (a Kafka >= 4 broker rejects records more than 1 h ahead),
topics have retention.ms=-1 (topic_factory), and every delivery report is checked."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.errors import StreamingQueryException
from test_kafkasync_broker import produce

from kafkasync_source.driver.stop_offset_store import DONE, read_stop_offsets
from kafkasync_source.spark.source import register

HOUR_MS = 3_600_000
BASE_TS = int(time.time() * 1000) - 6 * HOUR_MS
STEP_MS = (1_000, 3_000, 7_000)  # three partitions, three rates: 10, 30 and 70 minutes of data


def produce_three_rates(bootstrap: str, topic: str) -> None:
    produce(bootstrap, topic, [(p, BASE_TS + i * STEP_MS[p], b"%d-%d" % (p, i))
                               for p in range(3) for i in range(600)])


def broker_offsets_at(bootstrap: str, topic: str, timestamp: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "it-offsets-for-times"})
    try:
        answers = consumer.offsets_for_times(
            [KafkaTopicPartition(topic, p, timestamp) for p in range(3)], timeout=30)
        return {a.partition: a.offset for a in answers}
    finally:
        consumer.close()


@pytest.mark.compat
def test_a_stream_starts_every_partition_at_the_brokers_offset_for_the_time(
    spark, bootstrap_servers, topic_factory, tmp_path
):
    register(spark)
    topic = topic_factory(3)
    produce_three_rates(bootstrap_servers, topic)
    start_at = BASE_TS + 5 * 60_000  # 5 minutes in: offsets 300, 100, 43 (every partition differs)
    expected = broker_offsets_at(bootstrap_servers, topic, start_at)
    assert all(offset >= 0 for offset in expected.values())
    firsts = {}

    def sink(frame, _batch_id):
        for row in frame.groupBy("partition").min("offset").collect():
            firsts.setdefault(row[0], row[1])

    query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
             .option("subscribe", topic).option("startingTimestamp", str(start_at)).load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert firsts == expected


def test_a_batch_read_between_two_times_returns_exactly_that_interval(spark, bootstrap_servers, topic_factory):
    register(spark)
    topic = topic_factory(3)
    produce_three_rates(bootstrap_servers, topic)
    begin, end = BASE_TS + 2 * 60_000, BASE_TS + 8 * 60_000  # partition 0 holds 10 minutes
    rows = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic).option("startingTimestamp", str(begin))
            .option("endingTimestamp", str(end)).load()
            .selectExpr("partition", "unix_millis(timestamp) AS ts").collect())
    expected = sorted((p, BASE_TS + i * STEP_MS[p]) for p in range(3) for i in range(600)
                      if begin <= BASE_TS + i * STEP_MS[p] < end)
    assert sorted((r.partition, r.ts) for r in rows) == expected


def test_an_available_now_run_ending_at_a_time_stops_there_and_a_restart_stops_at_the_same_offsets(
    spark, bootstrap_servers, topic_factory, tmp_path
):
    """Issue 13 item 2, durable: the first run fails after its first batch; the restart (same
    checkpoint, same autostop.key) ends exactly at the offsets the broker gave for the time,
    every record below them read once, even though records were written in between."""
    register(spark)
    topic, store = topic_factory(3), topic_factory(1)
    produce_three_rates(bootstrap_servers, topic)
    until = BASE_TS + 5 * 60_000
    stops = broker_offsets_at(bootstrap_servers, topic, until)
    assert stops == {0: 300, 1: 100, 2: 43}, "the broker's ListOffsets by time"
    batches: dict[int, list[tuple[int, int]]] = {}
    fail_batch = {"id": 1}

    def sink(frame, batch_id):
        rows = [(r.partition, r.offset) for r in frame.select("partition", "offset").collect()]
        if batch_id == fail_batch["id"]:
            raise RuntimeError("deliberate failure after the first batch")
        batches[batch_id] = rows  # a replayed batch overwrites: an idempotent sink

    def run():
        return (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("endingTimestamp", str(until)).option("maxOffsetsPerTrigger", "150")
                .option("autostop.offsets", "durable").option("autostop.key", f"it-{topic}")
                .option("autostop.topic", store).load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True).start())

    failed = run()
    # PySpark's awaitTermination() raises the query's exception (StreamingQueryException).
    with pytest.raises(StreamingQueryException, match="deliberate failure"):
        failed.awaitTermination(180)
    assert failed.exception() is not None and "deliberate failure" in str(failed.exception())
    # Written between the failure and the restart, stamped before the time: they lie past the
    # stop offsets, so the restarted run must not read them.
    produce(bootstrap_servers, topic, [(p, BASE_TS + 1_000, b"late") for p in range(3)])
    fail_batch["id"] = -1
    restarted = run()
    restarted.awaitTermination(180)
    assert restarted.exception() is None
    read = sorted(pair for rows in batches.values() for pair in rows)
    assert read == sorted((p, o) for p, stop in stops.items() for o in range(stop)), \
        "every record before the time once, none at or after it, none written after the start"
    stored = read_stop_offsets({"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic,
                                "autostop.key": f"it-{topic}", "autostop.topic": store})
    assert stored.state == DONE and stored.ending_time == until
    assert {tp.partition: offset for tp, offset in stored.stop_offsets.items()} == stops
