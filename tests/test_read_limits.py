"""The stream reader's admission control (PySpark >= 4.2), driven directly on the driver side.

Spark asks ``getDefaultReadLimit()`` once and passes a ReadLimit to every ``latestOffset``; it
passes ReadAllAvailable where a trigger must read everything (e.g. Trigger.Once), which must lift
the rate-limit options. These are the calls Spark makes, made here without a query so that each
limit can be checked exactly (end-to-end rate-limit tests are in test_rate_limits.py).
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark.sql.streaming.datasource", reason="admission control needs PySpark >= 4.2")
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from kafkasync_dev.testing import Record  # noqa: E402
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import parse_options  # noqa: E402
from kafkasync_source.planning.offsets import SyncOffset  # noqa: E402
from kafkasync_source.spark.schema import kafka_schema  # noqa: E402
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader  # noqa: E402

BASE_TS = 1_700_000_000_000


def reader_for(cluster, topic, **options) -> KafkaSyncStreamReader:
    """A reader with max.task.idle.ms=-1, so that batch sizes follow the limits alone."""
    parsed = parse_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic,
         "startingOffsets": "earliest", "max.task.idle.ms": "-1",
         **{k: str(v) for k, v in options.items()}},
        streaming=True,
    )
    return KafkaSyncStreamReader(parsed, kafka_schema(False))


def next_batch(reader, start: dict, limit, timeout: float = PATIENCE_S) -> dict:
    """latestOffset until it returns a batch (the driver's first fetch takes a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        end = reader.latestOffset(start, limit)
        if end != start:
            return end
        time.sleep(0.05)
    raise AssertionError(f"no batch within {timeout} s: {reader.reportLatestOffset()}")


def held_with(reader, start: dict, available: int, timeout: float = PATIENCE_S) -> None:
    """latestOffset, each call holding the batch, until the batch held counts ``available``
    offsets: the driver learns new log ends within a trigger or a few. A fixed sleep guessed
    how long, and a loaded machine made the guess wrong."""
    deadline = time.monotonic() + timeout
    while True:
        assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
        delayed = reader.reportLatestOffset().get("delayedBy")
        if delayed is not None and delayed["availableOffsets"] == available:
            return delayed
        assert time.monotonic() < deadline, f"no batch held with {available} offsets: {reader.reportLatestOffset()}"
        time.sleep(0.05)


def records_between(start: dict, end: dict) -> int:
    begin, finish = SyncOffset.from_json(start), SyncOffset.from_json(end)
    return sum(p.next_offset - begin.partitions[tp].next_offset for tp, p in finish.partitions.items())


@pytest.fixture
def backlog(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(100)])
    return topic


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, ReadAllAvailable()),
        ({"maxOffsetsPerTrigger": 7}, ReadMaxRows(7)),
        ({"minOffsetsPerTrigger": 5}, ReadMinRows(5)),
        ({"minOffsetsPerTrigger": 5, "maxOffsetsPerTrigger": 7}, ReadMinRows(5)),
        # No ReadLimit expresses it, but it must not look like "read everything".
        ({"maxEventTimePerTrigger": "1h", "max.task.idle.ms": 0}, ReadMaxRows(9223372036854775807)),
    ],
)
def test_default_read_limit_follows_format_kafka(kafka_cluster, options, expected):
    reader = reader_for(kafka_cluster, "unused", **options)
    assert reader.getDefaultReadLimit() == expected


def test_the_cap_applies_to_the_default_limit_and_read_all_available_lifts_it(kafka_cluster, backlog):
    reader = reader_for(kafka_cluster, backlog, maxOffsetsPerTrigger=30)
    try:
        start = reader.initialOffset()
        capped = next_batch(reader, start, reader.getDefaultReadLimit())
        assert records_between(start, capped) == 30
        everything = next_batch(reader, capped, ReadAllAvailable())
        assert records_between(capped, everything) == 70
    finally:
        reader.stop()


def test_min_offsets_holds_the_batch_and_the_live_report_says_why(kafka_cluster, backlog):
    reader = reader_for(kafka_cluster, backlog, minOffsetsPerTrigger=1_000, maxTriggerDelay="1h")
    try:
        start = reader.initialOffset()
        first = next_batch(reader, start, reader.getDefaultReadLimit())  # never delayed, as Spark
        kafka_cluster.produce(backlog, [Record(0, BASE_TS + 500 + i, None, b"v") for i in range(10)])
        delayed = held_with(reader, first, 10)
        assert delayed["option"] == "minOffsetsPerTrigger" and delayed["minOffsetsPerTrigger"] == 1_000
        # ReadAllAvailable ignores the option.
        assert records_between(first, next_batch(reader, first, ReadAllAvailable())) == 10
    finally:
        reader.stop()


def test_min_offsets_holds_a_trickle_after_a_start_with_nothing_to_read_as_spark_does(kafka_cluster, topic_factory):
    """Spark restarts its maxTriggerDelay clock at every trigger it lets through, the first
    included (KafkaMicroBatchStream.delayBatch): a query starting at "latest" lets its first
    trigger through with nothing to read, and a trickle that follows waits."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"old") for i in range(5)])
    reader = reader_for(kafka_cluster, topic, startingOffsets="latest",
                        minOffsetsPerTrigger=1_000, maxTriggerDelay="1h")
    try:
        start = reader.initialOffset()
        deadline = time.monotonic() + PATIENCE_S
        while reader.reportLatestOffset().get("delayedBy") is None:  # let through, then held
            assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
            assert time.monotonic() < deadline, reader.reportLatestOffset()
            time.sleep(0.05)
        kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"new") for i in range(10)])
        held_with(reader, start, 10)
        assert records_between(start, next_batch(reader, start, ReadAllAvailable())) == 10
    finally:
        reader.stop()


def test_a_batch_let_through_after_being_held_reads_up_to_the_log_ends_known_then(kafka_cluster, topic_factory):
    """format("kafka") plans a batch let through by minOffsetsPerTrigger up to the latest offsets
    of that trigger; the log ends seen while the batch was held do not bound it."""
    topic = topic_factory(2)
    reader = reader_for(kafka_cluster, topic, minOffsetsPerTrigger=50, maxTriggerDelay="1h")
    try:
        start = reader.initialOffset()
        deadline = time.monotonic() + PATIENCE_S

        def ends_known() -> bool:
            partitions = reader.reportLatestOffset().get("partitions", {}).get(topic, {})
            return len(partitions) == 2 and all(p["endOffset"] is not None for p in partitions.values())

        # Let through with nothing to read, the log ends known: the clock restarts.
        while not ends_known():
            assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
            assert time.monotonic() < deadline, reader.reportLatestOffset()
            time.sleep(0.05)
        kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(20)])
        held_with(reader, start, 20)
        kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + 20 + i, None, b"v") for i in range(40)])
        assert records_between(start, next_batch(reader, start, reader.getDefaultReadLimit())) == 60
    finally:
        reader.stop()
