"""kafkasync against a real Apache Kafka broker (see integration/conftest.py for how one is
found). Records are stamped in the recent past: Kafka >= 4.0 rejects records stamped more than
1 h ahead (log.message.timestamp.after.max.ms) together with their whole producer batch, and a
real broker's time-based retention judges record timestamps (the topics are created with
retention.ms=-1 as well). Every producer checks its delivery reports."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer

from kafkasync_dev.testing import Record, produce_confirmed
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.planning.planner import WAIT_FOREVER
from kafkasync_source.spark.source import register

# Six hours back: the far "end" sentinels (BASE_TS + 10**7 ms, 2.8 h later) stay in the past.
BASE_TS = int(time.time() * 1000) - 6 * 3_600_000


def produce(bootstrap: str, topic: str, records: list[tuple[int, int, bytes]]) -> None:
    """records: (partition, timestamp ms, value); fails loudly unless every one is delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    produce_confirmed(producer, topic, [Record(p, ts, None, value) for p, ts, value in records], 30)


def open_transaction(bootstrap: str, topic: str, records: list[tuple[int, int, bytes]]) -> Producer:
    """Begin a transaction, write ``records`` (delivery checked) and leave it open: the
    caller commits or aborts it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"it-{uuid.uuid4().hex}",
                         "enable.idempotence": True})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_confirmed(producer, topic, [Record(p, ts, None, value) for p, ts, value in records], 30)
    return producer


@pytest.mark.compat
def test_stream_is_aligned_and_reads_every_record_once(spark, bootstrap_servers, topic_factory, tmp_path):
    register(spark)
    orders, payments = topic_factory(2), topic_factory(1)
    produce(bootstrap_servers, orders,
            [(p, BASE_TS + i * (7 + 3 * p), b"o") for i in range(300) for p in range(2)])
    produce(bootstrap_servers, payments, [(0, BASE_TS + i * 50, b"p") for i in range(60)])
    # A last record far ahead on every partition lets the query drain the rest unenforced.
    produce(bootstrap_servers, orders, [(p, BASE_TS + 10**7, b"end") for p in range(2)])
    produce(bootstrap_servers, payments, [(0, BASE_TS + 10**7, b"end")])
    total = 2 * 301 + 61
    batches: dict[int, list[tuple]] = {}

    def sink(frame, batch_id):
        batches[batch_id] = [tuple(r) for r in frame.collect()]

    query = (
        spark.readStream.format("kafkasync")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", f"{orders},{payments}")
        .option("startingOffsets", "earliest")
        .option("max.task.idle.ms", str(WAIT_FOREVER))
        .option("buffered.records.per.partition", "60")
        .load()
        .selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ts")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        deadline = time.monotonic() + PATIENCE_S
        while sum(len(rows) for rows in batches.values()) < total and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
        data_batches = sorted(b for b, rows in batches.items() if rows)
        while time.monotonic() < deadline and not any(
            p["batchId"] == data_batches[-1] for p in query.recentProgress
        ):
            time.sleep(0.2)
        ends = {p["batchId"]: p["sources"][0]["endOffset"] for p in query.recentProgress}
    finally:
        query.stop()

    keys = [(t, p, o) for rows in batches.values() for t, p, o, _ in rows]
    assert len(keys) == total and Counter(keys).most_common(1)[0][1] == 1
    ends = {b: json.loads(e) if isinstance(e, str) else e for b, e in ends.items()}
    for earlier, later in zip(data_batches, data_batches[1:]):
        assert min(ts for *_, ts in batches[later]) >= ends[earlier]["streamTime"]
    assert all(end["enforcedProcessingTotal"] == 0 for end in ends.values())


def test_batch_read_returns_exactly_the_requested_offsets(spark, bootstrap_servers, topic_factory):
    register(spark)
    topic = topic_factory(2)
    produce(bootstrap_servers, topic, [(p, BASE_TS + i, b"v%d" % i) for i in range(50) for p in range(2)])
    rows = (
        spark.read.format("kafkasync")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", f'{{"{topic}":{{"0":10,"1":-2}}}}')
        .option("endingOffsets", f'{{"{topic}":{{"0":20,"1":5}}}}')
        .load()
        .select("partition", "offset", "value")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in rows) == (
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
    )
    assert {bytes(r.value) for r in rows if r.partition == 0} == {b"v%d" % i for i in range(10, 20)}


def stream_rows(spark, bootstrap, topic, checkpoint, **options):
    """Start a kafkasync query into memory; returns (query, rows read so far)."""
    rows: list[tuple] = []
    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS v")
             .writeStream.foreachBatch(lambda frame, _: rows.extend(tuple(r) for r in frame.collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds")
             .start())
    return query, rows


def wait_until(query, condition, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError("condition not reached in time")


@pytest.mark.compat
def test_an_open_transaction_does_not_stall_read_committed(spark, bootstrap_servers, topic_factory, tmp_path):
    """Under read_committed a fetch stops at the last stable offset: partition 1's lag must be
    measured against it, or the open transaction holds every batch back (issue 12, item 1)."""
    register(spark)
    topic = topic_factory(2)
    produce(bootstrap_servers, topic, [(p, BASE_TS + i, b"before") for i in range(10) for p in range(2)])
    transaction = open_transaction(bootstrap_servers, topic, [(1, BASE_TS + 20 + i, b"open") for i in range(5)])
    try:
        produce(bootstrap_servers, topic, [(p, BASE_TS + 40 + i, b"after") for i in range(20) for p in range(2)])
        query, rows = stream_rows(spark, bootstrap_servers, topic, tmp_path / "cp",
                                  **{"kafka.isolation.level": "read_committed"})
        try:
            # Partition 0 is read to its end while the transaction on partition 1 is open;
            # partition 1 up to the transaction only.
            wait_until(query, lambda: sum(1 for p, *_ in rows if p == 0) == 30)
            assert sorted(o for p, o, _ in rows if p == 1) == list(range(10))
            transaction.abort_transaction(30)
            wait_until(query, lambda: sum(1 for p, *_ in rows if p == 1) == 30)
        finally:
            query.stop()
    finally:
        transaction.flush(5)
    assert "open" not in {v for *_, v in rows}, "aborted records are not read under read_committed"
    assert Counter((p, o) for p, o, _ in rows).most_common(1)[0][1] == 1


@pytest.mark.compat
def test_isolation_level_decides_whether_aborted_records_are_read(spark, bootstrap_servers, topic_factory):
    register(spark)
    topic = topic_factory(1)
    produce(bootstrap_servers, topic, [(0, BASE_TS + i, b"plain") for i in range(3)])
    open_transaction(bootstrap_servers, topic, [(0, BASE_TS + 10 + i, b"aborted") for i in range(4)]
                     ).abort_transaction(30)
    produce(bootstrap_servers, topic, [(0, BASE_TS + 20 + i, b"plain") for i in range(3)])

    def values(**options):
        reader = spark.read.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
        for key, value in {"subscribe": topic, **options}.items():
            reader = reader.option(key, value)
        return Counter(str(r.v) for r in reader.load().selectExpr("CAST(value AS STRING) AS v").collect())

    # Default read_uncommitted, as format("kafka")'s Java consumer: aborted records are returned.
    assert values() == {"plain": 6, "aborted": 4}
    assert values(**{"kafka.isolation.level": "read_committed"}) == {"plain": 6}
