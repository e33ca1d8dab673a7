"""kafkasync against a real Apache Kafka broker (see integration/conftest.py for how one is
found). Records are stamped near the present: a real broker's time-based retention judges
record timestamps, and the topics are created with retention.ms=-1 as well."""

from __future__ import annotations

import json
import time
from collections import Counter

from confluent_kafka import Producer

from kafkasync_source.planner import WAIT_FOREVER
from kafkasync_source.source import register

BASE_TS = int(time.time() * 1000) - 3_600_000


def produce(bootstrap: str, topic: str, records: list[tuple[int, int, bytes]]) -> None:
    """records: (partition, timestamp ms, value)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, timestamp, value in records:
        producer.produce(topic, value=value, partition=partition, timestamp=timestamp)
    assert producer.flush(30) == 0


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
        deadline = time.monotonic() + 120
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
