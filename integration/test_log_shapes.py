"""What a real log holds besides records, on the default planning path (time index).

Transaction markers are entries of the log stamped with the broker's clock when a transaction
ends, and aborted records stay in the log; the broker's time index and max-timestamp answers
count both (kafkasync_source/planning/index_planner.py, "What the index counts that no consumer
reads"). On a transactional backfill of old event times the default path once dropped 1,232
of 1,800 records behind a watermark. Each shape here is read with ``maxOffsetsPerTrigger`` and
must give: every readable record once, no batch holding a record older than an earlier batch's
newest (so no watermark drops one), and the same batches on a re-run.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_kafkasync_broker import produce
from test_time_index_broker import BASE_TS, HOUR_MS, assert_every_record_once, assert_never_behind_stream_time, run

from kafkasync_dev.testing import Record, produce_confirmed
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.spark.source import register


def spans(partitions: dict[int, tuple[int, int]], count: int) -> list[tuple[int, int, bytes]]:
    """``count`` records per partition, evenly over ``(first ms, span ms)``: the demo's shape
    has two partitions over 12 h and one over the last 2 h of them."""
    return [(p, first + i * span // count, f"{p}-{i}".encode())
            for p, (first, span) in partitions.items() for i in range(count)]


SPANS = {0: (BASE_TS - 12 * HOUR_MS, 12 * HOUR_MS), 1: (BASE_TS - 12 * HOUR_MS, 12 * HOUR_MS),
         2: (BASE_TS - 2 * HOUR_MS, 2 * HOUR_MS)}


def produce_in_transactions(bootstrap: str, topic: str, records: list[tuple[int, int, bytes]],
                            per_transaction: int, aborts) -> list[tuple[int, int, bytes]]:
    """Writes each partition's records in transactions of ``per_transaction``; transaction
    number ``n`` of a partition is aborted where ``aborts(n)``. Returns the committed records;
    every delivery report is checked."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"it-{uuid.uuid4().hex}",
                         "enable.idempotence": True, "linger.ms": 5})
    producer.init_transactions(30)
    committed = []
    for partition in sorted({p for p, _, _ in records}):
        mine = [r for r in records if r[0] == partition]
        for number, first in enumerate(range(0, len(mine), per_transaction)):
            chunk = mine[first:first + per_transaction]
            producer.begin_transaction()
            produce_confirmed(producer, topic, [Record(p, ts, None, v) for p, ts, v in chunk], 30)
            if aborts(number):
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                committed += chunk
    return committed


def read_twice(spark, bootstrap: str, topic: str, tmp_path, **options) -> dict:
    """The batches of two runs from fresh checkpoints, asserted equal; returns the first."""
    register(spark)
    first, _ = run(spark, bootstrap, topic, tmp_path / "first", trigger={"availableNow": True}, **options)
    again, _ = run(spark, bootstrap, topic, tmp_path / "again", trigger={"availableNow": True}, **options)
    assert [sorted(first[b]) for b in sorted(first)] == [sorted(again[b]) for b in sorted(again)]
    return first


@pytest.mark.compat
@pytest.mark.parametrize("per_transaction,aborts", [
    (40, lambda n: n == 3),        # one aborted transaction per partition
    (20, lambda n: n % 2 == 1),    # every other transaction aborted
], ids=["one-abort-per-partition", "abort-heavy"])
def test_a_transactional_backfill_is_synchronized_on_the_default_path(
    spark, bootstrap_servers, topic_factory, tmp_path, per_transaction, aborts
):
    topic = topic_factory(3)
    committed = produce_in_transactions(bootstrap_servers, topic, spans(SPANS, 600), per_transaction, aborts)
    batches = read_twice(spark, bootstrap_servers, topic, tmp_path, maxOffsetsPerTrigger=200,
                         **{"kafka.isolation.level": "read_committed"})
    assert_every_record_once(batches, len(committed))
    assert_never_behind_stream_time(batches)
    assert len(batches) >= len(committed) // 200  # rate-limited: many batches, not one


def test_transactional_and_plain_partitions_in_one_query(spark, bootstrap_servers, topic_factory, tmp_path):
    topic = topic_factory(3)
    records = spans(SPANS, 400)
    committed = produce_in_transactions(bootstrap_servers, topic, [r for r in records if r[0] < 2], 25,
                                        lambda n: n == 2)
    plain = [r for r in records if r[0] == 2]
    produce(bootstrap_servers, topic, plain)
    batches = read_twice(spark, bootstrap_servers, topic, tmp_path, maxOffsetsPerTrigger=150,
                         **{"kafka.isolation.level": "read_committed"})
    assert_every_record_once(batches, len(committed) + len(plain))
    assert_never_behind_stream_time(batches)


def test_read_uncommitted_reads_aborted_records_in_their_place(spark, bootstrap_servers, topic_factory, tmp_path):
    topic = topic_factory(3)
    records = spans(SPANS, 300)
    produce_in_transactions(bootstrap_servers, topic, records, 30, lambda n: n % 3 == 1)
    batches = read_twice(spark, bootstrap_servers, topic, tmp_path, maxOffsetsPerTrigger=120,
                         **{"kafka.isolation.level": "read_uncommitted"})
    assert_every_record_once(batches, len(records))
    assert_never_behind_stream_time(batches)


def test_a_log_append_time_topic(spark, bootstrap_servers, admin, tmp_path):
    topic = f"kafkasync-it-append-time-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 2, 1, config={"message.timestamp.type": "LogAppendTime",
                                                       "retention.ms": "-1"})])[topic].result(30)
    try:
        produce(bootstrap_servers, topic, [(i % 2, BASE_TS + i, b"v") for i in range(600)])
        batches = read_twice(spark, bootstrap_servers, topic, tmp_path, maxOffsetsPerTrigger=100)
        assert_every_record_once(batches, 600)
        assert_never_behind_stream_time(batches)
    finally:
        admin.delete_topics([topic])


def test_a_compacted_topic_after_cleaning(spark, bootstrap_servers, admin, tmp_path):
    """The cleaner leaves offset gaps where older values of a key were: 50 keys written 6
    times each, every segment rolled after 100 ms so that the cleaner may clean them."""
    topic = f"kafkasync-it-compacted-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 2, 1, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "retention.ms": "-1"})])[topic].result(30)
    try:
        producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
        for round_ in range(6):
            produce_confirmed(producer, topic, [
                Record(key % 2, BASE_TS + round_ * 1_000 + key, f"k{key}".encode(), f"{round_}".encode())
                for key in range(50)], 30)
            time.sleep(0.3)
        consumer_view = _wait_for_cleaning(bootstrap_servers, topic, total=300)
        batches = read_twice(spark, bootstrap_servers, topic, tmp_path, maxOffsetsPerTrigger=40)
        assert_every_record_once(batches, consumer_view)
        assert_never_behind_stream_time(batches)
    finally:
        admin.delete_topics([topic])


def _wait_for_cleaning(bootstrap: str, topic: str, total: int, timeout: float = PATIENCE_S) -> int:
    """Waits until the cleaner removed some records (offset gaps), returns how many remain."""
    deadline = time.monotonic() + timeout
    while True:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"it-{uuid.uuid4().hex}",
                             "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        count, eof = 0, set()
        while len(eof) < 2:
            message = consumer.poll(5)
            if message is None:
                break
            if message.error():
                eof.add(message.partition())
            else:
                count += 1
        consumer.close()
        if count < total:
            return count
        if time.monotonic() > deadline:
            pytest.fail(f"the log cleaner did not compact {topic} within {timeout:.0f} s")
        time.sleep(2)


def test_a_log_start_moved_by_delete_records_under_a_running_query(spark, bootstrap_servers, topic_factory,
                                                                   tmp_path):
    """Records already read are deleted (the log start moves up to the query's position) while
    the query runs: the index's by-time answers no longer see them; nothing else changes."""
    register(spark)
    topic = topic_factory(3)
    records = spans(SPANS, 400)
    produce(bootstrap_servers, topic, records)
    rows: dict[int, list] = {}

    def sink(frame, batch_id):
        rows[batch_id] = [(r.partition, r.offset, int(r.timestamp.timestamp() * 1000))
                          for r in frame.select("partition", "offset", "timestamp").collect()]

    query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "100").load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + PATIENCE_S
        while len(rows) < 3:
            assert query.exception() is None and time.monotonic() < deadline, "no three batches"
            time.sleep(0.2)
        taken = [row for batch in list(rows.values()) for row in batch]
        moved = {p: max(o for q, o, _ in taken if q == p) + 1 for p in {q for q, _, _ in taken}}
        admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        for future in admin.delete_records([TopicPartition(topic, p, o) for p, o in moved.items()]).values():
            future.result(30)
        while sum(len(batch) for batch in list(rows.values())) < len(records):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline + 120, "the query did not read every record"
            time.sleep(0.3)
    finally:
        query.stop()
    assert_every_record_once(rows, len(records))
    assert_never_behind_stream_time(rows)
