"""Logs that move back under a running query, on a real broker (failOnDataLoss=false): what the
driver remembers of the records it read (planning/record_facts.py) must go with the log.

* A topic deleted and recreated under its name while a capped query is mid-backfill: the new
  log starts below the query's position (the driver restarts the partition at 0), then grows
  past it. Every record of the new log is read once, in batches within the cap.
* A partition truncated by ``DeleteRecords`` past the query's position: the records left are
  read once each, the deleted ones are reported lost, the query goes on.

These check the restart paths end to end; they do not show a stale fact. With
``RecordFacts.forget`` disabled the recreated-topic test still passed (Kafka 4.3.1, batches
``[100, 0, 50, 100 x 9, 50]``): one partition's rows and cap-sized batches do not depend on the
stale answers. What a stale answer does to a cut is shown on the model broker in
tests/test_record_facts.py, which fails without the forget.

Each sink performs the log's change between two batches, so the order of events is fixed.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition
from test_kafkasync_broker import produce

from kafkasync_dev.testing.broker import create_topic
from kafkasync_source.spark.source import register

NOW = int(time.time() * 1000)
OLD = NOW - 6 * 3_600_000
"""The old log's times: six hours back, all below the new log's."""
NEW = NOW - 3_600_000
PATHS = {
    "recordProbes": {"eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"},
    "timeIndex": {},
}


def records(generation: str, first: int, count: int, base: int) -> list[tuple[int, int, bytes]]:
    """Partition 0, one second apart from ``base``, the time in the payload and the timestamp."""
    return [(0, base + i * 1000, json.dumps({"ts": base + i * 1000, "gen": generation, "i": i}).encode())
            for i in range(first, first + count)]


def run_until(spark, bootstrap: str, topic: str, checkpoint: str, sink, done, options: dict,
              timeout: float = 120.0) -> None:
    """A kafkasync query into ``sink(rows, batch_id)`` until ``done()``; its failure is raised."""
    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("failOnDataLoss", "false").option("maxOffsetsPerTrigger", "100"))
    for key, value in options.items():
        reader = reader.option(key, value)
    failures: list[BaseException] = []

    def batch(frame, batch_id: int) -> None:
        # What the sink raises is kept here: a long Python traceback handed back to the JVM
        # overflowed its stack (regular expressions over it) instead of failing the query.
        try:
            sink([tuple(r) for r in frame.collect()], batch_id)
        except BaseException as err:
            failures.append(err)

    query = (reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS v")
             .writeStream.foreachBatch(batch).option("checkpointLocation", checkpoint).start())
    try:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            if failures:
                raise failures[0]
            time.sleep(0.2)
        assert query.exception() is None, query.exception()
        progress = query.lastProgress
        assert done(), (f"not every record was read in {timeout:.0f} s; the last batch: "
                        f"{progress and progress['batchId']}, {progress and progress['sources'][0]['endOffset']}")
    finally:
        query.stop()


def recreate(admin, topic: str, timeout: float = 30.0) -> None:
    """Delete ``topic`` and create it again under its name, once the broker let it go."""
    admin.delete_topics([topic], operation_timeout=timeout)[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            create_topic(admin, topic, 1)
            return
        except Exception:  # still being deleted (TOPIC_ALREADY_EXISTS)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("path", PATHS)
def test_a_topic_recreated_under_a_running_query_is_read_from_its_new_log(
        spark, bootstrap_servers, admin, topic_factory, tmp_path, path):
    register(spark)
    topic = topic_factory(1)
    produce(bootstrap_servers, topic, records("old", 0, 1_000, OLD))
    read: list[tuple[str, int]] = []
    regrown: list[bool] = []
    batches: list[int] = []

    def sink(rows: list[tuple], batch_id: int) -> None:
        values = [json.loads(v) for _, _, v in rows]
        read.extend((value["gen"], value["i"]) for value in values)
        batches.append(len(values))
        if batch_id == 0:
            # The first batch read [0, 100) of the old log, and the driver read the old log's
            # last record (offset 999) and searched its window. The new log starts shorter.
            recreate(admin, topic)
            produce(bootstrap_servers, topic, records("new", 0, 50, NEW))
        elif not regrown and any(value["gen"] == "new" for value in values):
            regrown.append(True)  # the query reads the new log: it now grows past 100
            produce(bootstrap_servers, topic, records("new", 50, 950, NEW))

    def done() -> bool:
        return sum(gen == "new" for gen, _ in read) >= 1_000

    run_until(spark, bootstrap_servers, topic, str(tmp_path / "checkpoint"), sink, done, PATHS[path])
    print(f"\nrecords per batch ({path}): {batches}")
    assert max(batches) <= 100, f"maxOffsetsPerTrigger=100: {batches}"
    assert sorted(i for gen, i in read if gen == "old") == list(range(100)), "the old log's first batch"
    assert sorted(i for gen, i in read if gen == "new") == list(range(1_000)), "the new log, each record once"


@pytest.mark.parametrize("path", PATHS)
def test_a_partition_truncated_past_the_query_is_read_from_where_its_log_starts(
        spark, bootstrap_servers, admin, topic_factory, tmp_path, path):
    register(spark)
    topic = topic_factory(1)
    produce(bootstrap_servers, topic, records("log", 0, 400, OLD))
    read: list[int] = []

    def sink(rows: list[tuple], batch_id: int) -> None:
        read.extend(json.loads(v)["i"] for _, _, v in rows)
        if batch_id == 0:  # [0, 100) read; the records below 250 are deleted
            deleted = admin.delete_records([KafkaTopicPartition(topic, 0, 250)], operation_timeout=30)
            for future in deleted.values():
                future.result(30)

    run_until(spark, bootstrap_servers, topic, str(tmp_path / "checkpoint"), sink,
              lambda: 399 in read, PATHS[path])
    assert sorted(read) == [*range(100), *range(250, 400)], "each record left once, the deleted ones lost"
