"""End-to-end: rate limits (issue 9) on the embedded cluster, read back from the offset log.

* Both backfill shapes of :mod:`kafkasync_dev.testing.backfills` with maxOffsetsPerTrigger=400
  and a 10-minute watermark: synchronized drops nothing and no batch exceeds 400 records; ``-1``
  drops records, and every batch ends where Spark's proportional split says.
* maxEventTimePerTrigger bounds each batch's stream-time step; minOffsetsPerTrigger holds a batch
  until maxTriggerDelay; bad values fail at query start naming the option.
* Same data, same batches: three runs over one finished backlog with a 100 ms broker round trip
  cut identical batches.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

import pytest
from pyspark.sql import functions as F

from kafkasync_dev.testing import ApiKey, Record
from kafkasync_dev.testing.backfills import MINUTE_MS, SHAPES
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.planning.rate_limit import proportional_ends
from kafkasync_source.spark.source import register

WATERMARK = "10 minutes"
WINDOW = "5 minutes"
# Five or six batches per backfill (1,800 / 2,200 records): a cap well below the backlog is the
# point, not its size; each batch of a watermarked aggregation costs a fraction of a second.
CAP = 400


@pytest.fixture(scope="module", autouse=True)
def kafkasync_registered(spark):
    register(spark)


def logged_batches(checkpoint) -> list[dict]:
    """Every batch's kafkasync end offset from the checkpoint's offset log, in batch order."""
    folder = os.path.join(str(checkpoint), "offsets")
    batches = sorted(int(name) for name in os.listdir(folder) if name.isdigit())
    ends = []
    for batch in batches:
        with open(os.path.join(folder, str(batch))) as log:
            source = log.read().splitlines()[2]  # version, batch metadata, then our source
        ends.append(json.loads(source))
    return ends


def next_offsets(offset: dict) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(partition)): entry["offset"]
        for topic, partitions in offset["topics"].items()
        for partition, entry in partitions.items()
    }


def run_windowed_count(spark, bootstrap, topics, checkpoint, trigger=None, **options):
    """A watermarked 5-minute window count per topic; returns (rows dropped, progress list)."""
    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    counts = (reader.load().withWatermark("timestamp", WATERMARK)
              .groupBy(F.window("timestamp", WINDOW), "topic").count())
    query = (counts.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(checkpoint))
             .trigger(**(trigger or {"availableNow": True})).start())
    query.awaitTermination(PATIENCE_S)
    assert not query.isActive, "the bounded run did not finish"
    progress = [json.loads(p.json) for p in query.recentProgress]
    dropped = sum(op.get("numRowsDroppedByWatermark", 0)
                  for p in progress for op in p.get("stateOperators", []))
    return dropped, progress


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_synchronized_cap_drops_nothing_and_never_exceeds_the_cap(
    spark, kafka_cluster, unique_topic, tmp_path, shape
):
    backfill = SHAPES[shape](kafka_cluster, unique_topic(shape))
    dropped, progress = run_windowed_count(
        spark, kafka_cluster.bootstrap_servers, backfill.subscribe, tmp_path / "cp",
        maxOffsetsPerTrigger=CAP,
    )
    rows = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sum(rows) == backfill.records
    assert max(rows) <= CAP and len(rows) >= backfill.records // CAP
    assert dropped == 0


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_never_wait_splits_the_cap_like_format_kafka_and_loses_records(
    spark, kafka_cluster, unique_topic, tmp_path, shape
):
    backfill = SHAPES[shape](kafka_cluster, unique_topic(shape))
    checkpoint = tmp_path / "cp"
    dropped, _ = run_windowed_count(
        spark, kafka_cluster.bootstrap_servers, backfill.subscribe, checkpoint,
        maxOffsetsPerTrigger=CAP, **{"max.task.idle.ms": -1},
    )
    log_ends = {
        TopicPartition(topic, partition): high
        for topic in backfill.topics
        for partition, (_, high) in kafka_cluster.end_offsets(topic).items()
    }
    start = {tp: 0 for tp in log_ends}
    for end in map(next_offsets, logged_batches(checkpoint)):
        assert end == proportional_ends(CAP, start, log_ends)
        start = end
    assert start == log_ends
    assert dropped > 0, "format(\"kafka\")'s split races one partition ahead on this shape"


def test_max_event_time_per_trigger_bounds_each_batch_and_drops_nothing(
    spark, kafka_cluster, unique_topic, tmp_path
):
    backfill = SHAPES["spans"](kafka_cluster, unique_topic("spans"))
    checkpoint = tmp_path / "cp"
    dropped, progress = run_windowed_count(
        spark, kafka_cluster.bootstrap_servers, backfill.subscribe, checkpoint,
        maxEventTimePerTrigger="1 hour",
    )
    assert dropped == 0
    assert sum(p["numInputRows"] for p in progress) == backfill.records
    stream_times = [batch["streamTime"] for batch in logged_batches(checkpoint)]
    # 12 h of event time in steps of at most an hour (topic b starts 10 h in: no gap to jump).
    assert len(stream_times) >= 12
    first = backfill.first_timestamp_ms
    steps = [b - a for a, b in zip([first] + stream_times, stream_times)]
    assert max(steps) <= 60 * MINUTE_MS


def test_min_offsets_per_trigger_holds_a_batch_until_max_trigger_delay(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(1)
    base = int(time.time() * 1000) - 3_600_000
    kafka_cluster.produce(topic, [Record(0, base + i, None, b"v") for i in range(20)])
    batches: dict[int, tuple[float, int]] = {}

    def sink(frame, batch_id):
        batches[batch_id] = (time.time(), frame.count())

    query = (spark.readStream.format("kafkasync")
             .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("minOffsetsPerTrigger", "1000").option("maxTriggerDelay", "2s")
             .load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not any(rows for _, rows in batches.values()):
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.1)
        first = max(batch for batch, (_, rows) in batches.items() if rows)  # never held: the first batch
        kafka_cluster.produce(topic, [Record(0, base + 100 + i, None, b"v") for i in range(10)])
        while sum(rows for _, rows in batches.values()) < 30:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.1)
        second_at = max(at for at, rows in batches.values() if rows)
        # The delay runs from the first batch's planning, which comes after its trigger began
        # (the progress' timestamp), and the second batch's rows reach the sink after it is
        # planned: 2 s at least however long each batch took. (From the first batch's rows in
        # the sink, a first batch slower than the second by half a second made it 1.5 s.)
        first_trigger = next(p for p in query.recentProgress if p.batchId == first).timestamp
        first_began = datetime.fromisoformat(first_trigger.replace("Z", "+00:00")).timestamp()
        assert second_at - first_began >= 2.0, "10 < 1000 new offsets: held for maxTriggerDelay"
    finally:
        query.stop()


@pytest.mark.parametrize(
    "option, value",
    [("maxOffsetsPerTrigger", "0"), ("maxOffsetsPerTrigger", "-5"), ("maxOffsetsPerTrigger", "many"),
     ("minOffsetsPerTrigger", "1.5"), ("maxTriggerDelay", "soon"), ("maxTriggerDelay", "-1s"),
     ("maxEventTimePerTrigger", "0 minutes"), ("maxEventTimePerTrigger", "3 fortnights"),
     ("driver.buffer.bytes", "12"), ("buffered.records.per.partition", "1e12")],
)
def test_bad_rate_limit_values_fail_at_query_start_naming_the_option(spark, kafka_cluster, option, value):
    reader = (spark.readStream.format("kafkasync")
              .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
              .option("subscribe", "t").option(option, value))
    with pytest.raises(Exception, match=f"'{option}'"):
        reader.load().writeStream.format("noop").start().stop()


@pytest.mark.mock_brokers(1)
@pytest.mark.parametrize(
    "trigger, options",
    [({"processingTime": "0 seconds"}, {"buffered.records.per.partition": 60}),
     ({"availableNow": True}, {"maxOffsetsPerTrigger": 90})],
    ids=["streaming-full-buffers", "available-now-capped"],
)
def test_same_data_same_batches_with_a_slow_broker(spark, fresh_cluster, tmp_path, trigger, options):
    """Three runs over one finished backlog, fetches answered in 100 ms: identical batch
    boundaries (before, the cut depended on how much the background fetch had buffered)."""
    fresh_cluster.create_topic("slow", 2)
    base = int(time.time() * 1000) - 3_600_000
    fresh_cluster.produce("slow", [
        Record(p, base + i * (1_000 if p == 0 else 2_500), None, b"x" * 1_000)
        for i in range(200) for p in range(2)
    ])
    # Only fetches are slow: what the driver has buffered at a trigger depends on them, and
    # other requests at 100 ms each (metadata, list offsets) only made each run seconds longer.
    # Three runs send a few hundred fetches; what is left over dies with the cluster.
    for _ in range(10):
        fresh_cluster.push_broker_request_error_rtts(1, ApiKey.FETCH, *[(0, 100)] * 500)
    runs = []
    for run in range(3):
        checkpoint = tmp_path / f"cp{run}"
        query = (spark.readStream.format("kafkasync")
                 .option("kafka.bootstrap.servers", fresh_cluster.bootstrap_servers)
                 .option("subscribe", "slow").option("startingOffsets", "earliest")
                 .options(**{k: str(v) for k, v in options.items()})
                 .load().writeStream.format("noop")
                 .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())
        deadline = time.monotonic() + PATIENCE_S
        while sum(p["numInputRows"] for p in map(lambda q: json.loads(q.json), query.recentProgress)) < 400:
            assert time.monotonic() < deadline and query.exception() is None
            if "availableNow" in trigger and not query.isActive:
                break
            time.sleep(0.1)
        query.stop()
        runs.append([next_offsets(batch) for batch in logged_batches(checkpoint)])
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) > 3, "the backlog was cut into several batches"
