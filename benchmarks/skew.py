"""The demo's skew scenario at a larger scale: records dropped behind the watermark.

``orders`` (6 partitions, one record every 8 s each) and ``payments`` (2 partitions, one every
2 s each) cover the same 24 hours of event time: 151,200 records. The same watermarked
windowed count runs over the whole backlog twice, synchronized (``max.task.idle.ms=0``, the
default) and ``-1`` (every batch takes everything buffered, like ``format("kafka")``), with
the default bound of 10,000 buffered records per partition.

Dropped records are counted as the demo counts them (:mod:`kafkasync_source.demo`): records
read minus records the aggregation's output accounts for, cross-checked against a prediction
from every batch's offset ranges and the watermark Spark applied to it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field

from benchmarks.workloads import (
    SKEW_TOPICS,
    SKEW_WATERMARK_DELAY,
    SKEW_WINDOW,
    SKEW_WINDOW_MS,
    Topic,
    produce_skew,
    skew_timestamps,
)
from kafkasync_source import demo

TRIGGER = "250 milliseconds"  # as the demo: the first batch is planned once the source fetched


@dataclass
class SkewRun:
    max_task_idle_ms: int
    read: int
    counted: int
    dropped: int
    predicted_dropped: int
    batches: list = field(repr=False)  # demo.Batch
    seconds: float = 0.0

    def per_batch(self) -> list[dict]:
        """Per data batch: partition times (ms), stream time, the watermark applied, rows."""
        return [
            {
                "batch": b.batch_id,
                "partition_times": {f"{t}-{p}": ms for (t, p), ms in sorted(b.end.partition_times.items())},
                "stream_time": b.end.stream_time,
                "watermark": b.late_watermark_ms,
                "rows": b.input_rows,
            }
            for b in self.batches
        ]


def run_skew(spark, listener, bootstrap: str, topics: dict[str, Topic], max_task_idle_ms: int) -> SkewRun:
    from pyspark.sql import functions as F

    names = {topic.name: base for base, topic in topics.items()}
    total = sum(t.records for t in topics.values())
    events = (
        spark.readStream.format("kafkasync")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(t.name for t in topics.values()))
        .option("startingOffsets", "earliest")
        .option("max.task.idle.ms", str(max_task_idle_ms))
        .load()
    )
    counts = (
        events.withWatermark("timestamp", SKEW_WATERMARK_DELAY)
        .groupBy(F.window("timestamp", SKEW_WINDOW), "topic")
        .count()
    )
    window_counts: dict = {}

    def collect(frame, _batch_id):  # update mode: the latest count of every changed window
        for row in frame.collect():
            window_counts[(row["window"].start, names[row["topic"]])] = row["count"]

    started = time.monotonic()
    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="kafkasync-bench-skew-"))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    try:
        deadline = time.monotonic() + 300
        while listener.rows(query.id) < total:
            if query.exception() is not None:
                raise RuntimeError(f"skew run -1={max_task_idle_ms}: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"skew run: {listener.rows(query.id)} of {total} rows read")
            time.sleep(0.05)
    finally:
        query.stop()
    time.sleep(0.2)
    progress = listener.progress(query.id)
    batches = demo.batches_from_progress(progress)
    stamps = {base: skew_timestamps(every) for base, _, every in SKEW_TOPICS}
    predicted = sum(
        sum(demo.predicted_drops(b, lambda tp: stamps[names[tp[0]]], SKEW_WINDOW_MS).values())
        for b in batches
    )
    read = sum(demo.records_per_topic(batches).values())
    counted = sum(window_counts.values())
    return SkewRun(
        max_task_idle_ms=max_task_idle_ms,
        read=read,
        counted=counted,
        dropped=read - counted,
        predicted_dropped=predicted,
        batches=batches,
        seconds=time.monotonic() - started,
    )


def produce(cluster) -> dict[str, Topic]:
    return produce_skew(cluster, suffix="-skew")
