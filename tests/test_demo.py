"""The demo's helpers: progress parsing, the dropped-record accounting, and which runs it makes."""

from __future__ import annotations

import json

from kafkasync_dev import demo
from kafkasync_dev.demo import (
    Accounting,
    Batch,
    RunResult,
    SourceOffset,
    batch_table,
    batches_from_progress,
    counted_per_topic,
    differing_windows,
    dropped_per_topic,
    hhmm,
    parse_watermark,
    predicted_drops,
    records_per_topic,
    window_end,
)

MIN = 60_000
T0 = 1_704_096_000_000  # 2024-01-01 08:00 UTC


def offset_json(positions, times, stream_time=-1, enforced=0):
    topics = {}
    for (topic, partition), offset in positions.items():
        topics.setdefault(topic, {})[str(partition)] = {
            "offset": offset,
            "partitionTime": times[(topic, partition)],
        }
    return json.dumps(
        {"version": 1, "topics": topics, "streamTime": stream_time,
         "enforcedProcessingTotal": enforced, "lateRecordsTotal": 0}
    )


def progress(batch_id, start, end, rows, watermark=None, dropped=0):
    return {
        "batchId": batch_id,
        "numInputRows": rows,
        "eventTime": {"watermark": watermark} if watermark else {},
        "stateOperators": [{"numRowsDroppedByWatermark": dropped}],
        "sources": [{"startOffset": start, "endOffset": end}],
    }


def test_hhmm_and_watermark_parsing():
    assert hhmm(T0) == "08:00"
    assert hhmm(T0 + 4 * 60 * MIN - 1) == "11:59"
    assert hhmm(-1) == hhmm(None) == "-"
    assert parse_watermark("2024-01-01T08:10:00.000Z") == T0 + 10 * MIN
    assert parse_watermark("1970-01-01T00:00:00.000Z") == 0
    assert parse_watermark(None) == 0


def test_source_offset_parse():
    raw = offset_json({("orders", 0): 12, ("orders", 1): 7}, {("orders", 0): T0, ("orders", 1): -1},
                      stream_time=T0, enforced=2)
    parsed = SourceOffset.parse(raw)
    assert parsed == SourceOffset.parse(json.loads(raw))
    assert parsed.positions == {("orders", 0): 12, ("orders", 1): 7}
    assert parsed.partition_times[("orders", 1)] == -1
    assert parsed.stream_time == T0 and parsed.enforced_total == 2


def test_window_end():
    assert window_end(T0) == T0 + 5 * MIN  # 08:00 opens a window
    assert window_end(T0 + 5 * MIN - 1) == T0 + 5 * MIN
    assert window_end(T0 + 5 * MIN) == T0 + 10 * MIN


def test_batches_use_the_previous_batchs_watermark_and_skip_empty_batches():
    tp = ("payments", 0)
    off = lambda n: offset_json({tp: n}, {tp: T0 + n * MIN})  # noqa: E731
    reports = [
        progress(0, None, off(0), 0),  # no data: not a batch, but its watermark counts
        progress(1, off(0), off(10), 10, "1970-01-01T00:00:00.000Z"),
        progress(2, off(10), off(30), 20, "2024-01-01T08:05:00.000Z", dropped=3),
        progress(3, off(30), off(35), 5, "2024-01-01T08:20:00.000Z"),
    ]
    batches = batches_from_progress(reports)
    assert [b.batch_id for b in batches] == [1, 2, 3]
    assert [b.late_watermark_ms for b in batches] == [0, 0, T0 + 5 * MIN]
    assert [(b.starts[tp], b.end.positions[tp]) for b in batches] == [(0, 10), (10, 30), (30, 35)]
    assert [b.spark_dropped for b in batches] == [0, 3, 0]
    assert records_per_topic(batches) == {"payments": 35}


def test_first_batch_without_start_offset_reads_from_zero():
    tp = ("orders", 0)
    batches = batches_from_progress([progress(0, None, offset_json({tp: 4}, {tp: T0}), 4)])
    assert batches[0].starts == {tp: 0}


def _batch(starts, ends, late_watermark_ms, batch_id=1):
    end = SourceOffset(dict(ends), {tp: -1 for tp in ends}, -1, 0)
    return Batch(batch_id, dict(starts), end, sum(ends[tp] - starts[tp] for tp in ends),
                 late_watermark_ms, 0)


def test_predicted_drops_counts_records_whose_window_closed():
    # One record a minute from 08:00: offsets 0..59.
    stamps = {("payments", 0): [T0 + i * MIN for i in range(60)],
              ("orders", 0): [T0 + i * MIN for i in range(60)]}
    batch = _batch({("payments", 0): 0, ("orders", 0): 50},
                   {("payments", 0): 20, ("orders", 0): 60}, late_watermark_ms=T0 + 10 * MIN)
    # Windows [08:00, 08:05) and [08:05, 08:10) end at or before 08:10: 10 payments are late.
    # A window ending exactly at the watermark is closed too (Spark: window.end <= watermark).
    assert predicted_drops(batch, stamps.__getitem__) == {"payments": 10, "orders": 0}
    no_watermark = _batch({("payments", 0): 0}, {("payments", 0): 20}, late_watermark_ms=0)
    assert predicted_drops(no_watermark, stamps.__getitem__) == {"payments": 0}


def test_accounting_independent_count_matches_prediction():
    stamps = [T0 + i * MIN for i in range(30)]
    batches = [
        _batch({("payments", 0): 0}, {("payments", 0): 10}, 0, batch_id=1),
        _batch({("payments", 0): 10}, {("payments", 0): 30}, T0 + 15 * MIN, batch_id=2),
    ]
    drops = [predicted_drops(b, lambda tp: stamps) for b in batches]
    # Windows 08:00, 08:05 from batch 1 (10 records); batch 2's 08:10 window (5 records) is
    # late, 08:15-08:25 windows (15 records) are counted.
    window_counts = {(T0, "payments"): 5, (T0 + 5 * MIN, "payments"): 5,
                     (T0 + 15 * MIN, "payments"): 5, (T0 + 20 * MIN, "payments"): 5,
                     (T0 + 25 * MIN, "payments"): 5}
    spec = demo.RunSpec("test", "kafkasync", {}, "test")
    books = Accounting.of(RunResult(spec, batches, window_counts, drops, 0.0))
    assert books.read == {"payments": 30}
    assert books.counted == {"payments": 25}
    assert books.dropped == books.predicted == {"payments": 5}
    assert books.consistent
    lost_more = dict(window_counts)
    del lost_more[(T0 + 25 * MIN, "payments")]
    assert not Accounting.of(RunResult(spec, batches, lost_more, drops, 0.0)).consistent


def test_per_topic_helpers():
    counts = {(T0, "orders"): 3, (T0, "payments"): 4, (T0 + 5 * MIN, "payments"): 1}
    assert counted_per_topic(counts) == {"orders": 3, "payments": 5}
    assert dropped_per_topic({"orders": 3, "payments": 9}, {"orders": 3, "payments": 5}) == {
        "orders": 0, "payments": 4}
    other = {(T0, "orders"): 3, (T0, "payments"): 2}
    assert differing_windows(counts, other) == {"payments": 2}
    assert differing_windows(counts, counts) == {}


def test_batch_table_elides_the_middle():
    batches = [_batch({("orders", 0): i}, {("orders", 0): i + 1}, 0, batch_id=i) for i in range(12)]
    lines = batch_table(batches, [{"orders": 0}] * 12, limit=8)
    assert len(lines) == 1 + 8 + 1  # header, 8 batches, "..."
    assert lines[-2].strip() == "..."
    assert [line.split()[0] for line in lines[1:8]] == [str(i) for i in range(7)]
    assert lines[-1].split()[0] == "11"


def test_format_kafka_offsets_parse_too():
    parsed = SourceOffset.parse('{"orders": {"0": 12, "1": 7}, "payments": {"0": 3}}')
    assert parsed.positions == {("orders", 0): 12, ("orders", 1): 7, ("payments", 0): 3}
    assert parsed.stream_time == -1


def test_runs_compare_the_same_rate_limit_three_ways():
    default, never_wait, spark = demo.RUNS
    assert {run.options["maxOffsetsPerTrigger"] for run in demo.RUNS} == {200}
    assert "max.task.idle.ms" not in default.options and never_wait.options["max.task.idle.ms"] == -1
    assert (default.source, never_wait.source, spark.source) == ("kafkasync", "kafkasync", "kafka")


def test_format_kafka_is_skipped_with_a_reason_without_a_real_broker(spark, monkeypatch):
    monkeypatch.delenv("KAFKASYNC_BOOTSTRAP", raising=False)
    assert "KAFKASYNC_BOOTSTRAP" in demo.format_kafka_unavailable(spark)
    monkeypatch.setenv("KAFKASYNC_BOOTSTRAP", "127.0.0.1:9092")
    reason = demo.format_kafka_unavailable(spark)  # the test session has no Kafka connector
    assert reason is not None and "classpath" in reason


def test_the_picture_shows_the_event_time_each_partition_reached_from_its_offsets(tmp_path):
    """format("kafka")'s offsets carry no partition time: the picture takes each partition's
    largest timestamp up to its end offset from the backfill itself."""
    import pytest

    pytest.importorskip("matplotlib", reason="matplotlib is part of the test extra ('.[test]')")

    class Backfill:
        timestamps = {("orders", 0): [T0 + i * MIN for i in range(30)],
                      ("payments", 0): [T0 + 20 * MIN + i * MIN for i in range(10)]}
        first_timestamp_ms = T0

    batches = [
        _batch({("orders", 0): 0, ("payments", 0): 0}, {("orders", 0): 10, ("payments", 0): 5}, 0, batch_id=1),
        _batch({("orders", 0): 10, ("payments", 0): 5}, {("orders", 0): 30, ("payments", 0): 10},
               T0 + 24 * MIN, batch_id=2),
    ]
    result = RunResult(demo.RunSpec("kafkasync -1", "kafkasync", {}, "t"), batches, {}, [{}, {}], 0.0)
    assert demo.event_time_reached(result, Backfill) == [
        {"partition_times": {"orders-0": T0 + 9 * MIN, "payments-0": T0 + 24 * MIN}, "watermark": 0},
        {"partition_times": {"orders-0": T0 + 29 * MIN, "payments-0": T0 + 29 * MIN},
         "watermark": T0 + 24 * MIN},
    ]
    path = demo.write_picture([result], Backfill, str(tmp_path / "demo.png"))
    assert (tmp_path / "demo.png").stat().st_size > 10_000 and path.endswith("demo.png")
