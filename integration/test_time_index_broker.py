"""Planning from the broker's time index (planningMode), on a real broker.

The embedded cluster answers -1 to every time look-up, so only a real broker shows the index
path. ``planningMode=timeIndex`` fails a query wherever it would have to read records, so a
query that finishes under it was planned from ListOffsets alone. Records are stamped hours in
the past (Kafka >= 4 refuses records more than 1 h ahead), topics keep them (retention.ms=-1),
and every delivery report is checked.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from test_kafkasync_broker import produce

from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.driver.record_probe import ProbedRecords, RecordProbe
from kafkasync_source.driver.time_index import TimeIndexPath, TimeIndexReader
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.source import register

HOUR_MS = 3_600_000
BASE_TS = int(time.time() * 1000) - 6 * HOUR_MS


def skewed_backfill(bootstrap: str, topic: str) -> int:
    """Partition 0: 600 records over 10 minutes; partition 1: 200 over 2 hours; partition 2:
    400 with 80% in its first half hour. format("kafka")'s proportional split lets partition
    0 race ahead on this shape (DESIGN.md: 820 and 1,040 of such records dropped)."""
    records = [(0, BASE_TS + i * 1_000, b"a") for i in range(600)]
    records += [(1, BASE_TS + i * 36_000, b"b") for i in range(200)]
    records += [(2, BASE_TS + (i * 5_600 if i < 320 else 1_800_000 + (i - 320) * 67_500), b"c")
                for i in range(400)]
    produce(bootstrap, topic, records)
    return len(records)


def run(spark, bootstrap: str, topic: str, checkpoint, *, trigger: dict, **options) -> tuple[dict, list]:
    """Runs a query to its end (availableNow) or until it has read ``expected`` rows; returns
    {batch id: [(partition, offset, timestamp ms)]} and the progress' source end offsets."""
    batches: dict[int, list[tuple[int, int, int]]] = {}

    def sink(frame, batch_id):
        batches[batch_id] = [(r.partition, r.offset, int(r.timestamp.timestamp() * 1000))
                             for r in frame.select("partition", "offset", "timestamp").collect()]

    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    ends = [json.loads(p.sources[0].endOffset) for p in query.recentProgress if p.numInputRows]
    return batches, ends


def assert_every_record_once(batches: dict, total: int) -> None:
    counts = Counter((p, o) for rows in batches.values() for p, o, _ in rows)
    assert sum(counts.values()) == total and max(counts.values()) == 1


def assert_never_behind_stream_time(batches: dict) -> None:
    """No record of a later batch is older than an earlier batch's largest timestamp
    (in-order partitions, no enforcement): a watermark never overtakes data to come."""
    reached = None
    for batch_id in sorted(batches):
        rows = batches[batch_id]
        if not rows:
            continue
        if reached is not None:
            assert min(ts for _, _, ts in rows) >= reached, f"batch {batch_id} has records behind {reached}"
        reached = max(ts for _, _, ts in rows)


@pytest.mark.compat
def test_a_skewed_backfill_is_synchronized_from_the_index_alone(spark, bootstrap_servers, topic_factory, tmp_path):
    register(spark)
    topic = topic_factory(3)
    total = skewed_backfill(bootstrap_servers, topic)
    batches, _ = run(spark, bootstrap_servers, topic, tmp_path / "cp", trigger={"availableNow": True},
                     planningMode="timeIndex", maxOffsetsPerTrigger=100)
    assert len([b for b in batches.values() if b]) >= 12
    assert_every_record_once(batches, total)
    assert_never_behind_stream_time(batches)


@pytest.mark.compat
def test_rate_limited_batches_are_the_same_on_every_run_and_on_both_paths(
    spark, bootstrap_servers, topic_factory, tmp_path
):
    register(spark)
    topic = topic_factory(3)
    skewed_backfill(bootstrap_servers, topic)
    ends = {}
    for run_number, mode in enumerate(("timeIndex", "timeIndex", "timeIndex", "fetch")):
        _, ends[run_number] = run(spark, bootstrap_servers, topic, tmp_path / f"cp{run_number}",
                                  trigger={"availableNow": True}, planningMode=mode,
                                  maxOffsetsPerTrigger=150)
    offsets = {n: [e["topics"] for e in run_ends] for n, run_ends in ends.items()}
    assert offsets[0] == offsets[1] == offsets[2], "the index path cut different batches on a re-run"
    # No gaps (no transactions, no compaction): offsets are records, and the paths agree.
    assert [{t: {p: v["offset"] for p, v in parts.items()} for t, parts in batch.items()} for batch in offsets[0]] == \
        [{t: {p: v["offset"] for p, v in parts.items()} for t, parts in batch.items()} for batch in offsets[3]]


@pytest.mark.compat
def test_an_available_now_run_with_and_without_an_ending_time(spark, bootstrap_servers, topic_factory, tmp_path):
    register(spark)
    topic = topic_factory(3)
    total = skewed_backfill(bootstrap_servers, topic)
    batches, _ = run(spark, bootstrap_servers, topic, tmp_path / "all", trigger={"availableNow": True},
                     planningMode="timeIndex")
    assert_every_record_once(batches, total)
    ending = BASE_TS + 30 * 60_000
    batches, _ = run(spark, bootstrap_servers, topic, tmp_path / "until", trigger={"availableNow": True},
                     planningMode="timeIndex", endingTimestamp=ending)
    rows = [row for rows in batches.values() for row in rows]
    assert rows and max(ts for _, _, ts in rows) < ending
    per_partition = Counter(p for p, _, _ in rows)
    assert per_partition == {0: 600, 1: 50, 2: 320}  # every record before the time, none after


def test_a_restart_from_the_checkpoint_can_switch_paths_without_losing_or_repeating_a_record(
    spark, bootstrap_servers, topic_factory, tmp_path
):
    """fetch -> timeIndex -> fetch on one checkpoint, each run stopped part-way."""
    register(spark)
    topic = topic_factory(3)
    total = skewed_backfill(bootstrap_servers, topic)
    checkpoint = tmp_path / "cp"
    seen: dict = {}
    for run_number, (mode, stop_after) in enumerate((("fetch", 300), ("timeIndex", 700), ("fetch", total))):
        batches: dict = {}

        def sink(frame, batch_id, batches=batches):
            batches[batch_id] = [(r.partition, r.offset, 0)
                                 for r in frame.select("partition", "offset").collect()]

        query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("planningMode", mode).option("maxOffsetsPerTrigger", "100").load()
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            deadline = time.monotonic() + PATIENCE_S
            # A batch a stop interrupted is replayed by the next run under the same id: count
            # the union, or a replay would be counted twice and the last run stop early.
            while len(seen.keys() | {(b, i) for b, rows in list(batches.items())
                                     for i in range(len(rows))}) < stop_after:
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, f"run {run_number} ({mode}) stalled"
                time.sleep(0.2)
        finally:
            query.stop()
        # Keyed by batch id: Spark replays a batch whose commit a stop interrupted, with the
        # same offsets (a replay is the same batch, not a duplicate).
        seen.update({(batch_id, i): [row] for batch_id, rows in batches.items()
                     for i, row in enumerate(rows)})
    assert_every_record_once(seen, total)


def test_an_out_of_order_partition_is_cut_like_the_fetch_path_cuts_it(spark, bootstrap_servers, topic_factory, tmp_path):
    register(spark)
    topic = topic_factory(2)
    out_of_order = [BASE_TS + ((i * 7919) % 500) * 1_000 for i in range(500)]
    produce(bootstrap_servers, topic, [(0, ts, b"x") for ts in out_of_order]
            + [(1, BASE_TS + i * 2_000, b"y") for i in range(250)])
    ends = {}
    for mode in ("auto", "fetch"):
        batches, ends[mode] = run(spark, bootstrap_servers, topic, tmp_path / mode,
                                  trigger={"availableNow": True}, planningMode=mode, maxOffsetsPerTrigger=120)
        assert_every_record_once(batches, 750)
    strip = [[{p: v["offset"] for p, v in e["topics"][topic].items()} for e in ends[m]] for m in ("auto", "fetch")]
    assert strip[0] == strip[1]


def test_look_ups_over_many_partitions_and_a_largest_timestamp_asked_again_only_where_the_log_grew(
    bootstrap_servers, topic_factory
):
    """A round over more partitions than one call takes (TimeIndexReader asks in calls of
    512) answers every partition; the next trigger asks max_timestamp only where the
    readable end moved, and sees the new largest record there."""
    partitions = 520
    topic = topic_factory(partitions)
    produce(bootstrap_servers, topic, [(p, BASE_TS + p * 10 + i, b"r") for p in range(partitions) for i in range(2)])
    reader = TimeIndexReader({"bootstrap.servers": bootstrap_servers})
    path = TimeIndexPath(reader, ProbedRecords(RecordProbe({"bootstrap.servers": bootstrap_servers})))
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    start = SyncOffset({tp: PartitionOffset(0) for tp in tps})
    try:
        first = path.observe(start, None)
        assert {tp: (s.end_offset, s.largest) for tp, s in first.items()} == {
            tp: (2, (BASE_TS + tp.partition * 10 + 1, 1)) for tp in tps}
        assert reader.first_offsets({tp: BASE_TS + tp.partition * 10 + 1 for tp in tps}) == {
            tp: (1, BASE_TS + tp.partition * 10 + 1) for tp in tps}
        asked = reader.partitions_asked
        assert path.observe(start, None) == first
        assert reader.partitions_asked - asked == partitions  # latest only
        produce(bootstrap_servers, topic, [(7, BASE_TS + 10**6, b"new")])
        asked = reader.partitions_asked
        grown = path.observe(start, None)
        assert reader.partitions_asked - asked == partitions + 1
        assert grown[tps[7]].end_offset == 3 and grown[tps[7]].largest == (BASE_TS + 10**6, 2)
        assert {tp: s for tp, s in grown.items() if tp != tps[7]} == {tp: s for tp, s in first.items() if tp != tps[7]}
    finally:
        reader.close()
