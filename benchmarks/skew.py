"""The demo's rate-limited backfill at 20 times its scale: records dropped behind the watermark.

``orders`` (2 partitions) hold 12 h of event time, ``payments`` (1 partition) only the last 2 h
(:func:`kafkasync_dev.testing.backfills.spans`, ``scale=20``: 36,000 records). The same
watermarked windowed count reads it with ``maxOffsetsPerTrigger`` twice: synchronized (the
default) and ``-1``, which splits the cap in proportion to each partition's remaining offsets,
as ``format("kafka")`` does.

Dropped records are counted as the demo counts them (:mod:`kafkasync_dev.demo`): records
read minus records the aggregation's output accounts for, cross-checked against a prediction
from every batch's offset ranges and the watermark Spark applied to it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field

from benchmarks.harness.spark import kafka_reader
from kafkasync_dev import demo
from kafkasync_dev.testing.backfills import Backfill, spans

SCALE = 20
MAX_OFFSETS_PER_TRIGGER = 4_000

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

    @property
    def title(self) -> str:
        return ("synchronized (max.task.idle.ms=0, default)" if self.max_task_idle_ms == 0
                else f"max.task.idle.ms={self.max_task_idle_ms} (like format(\"kafka\"))")

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


def run_skew(spark, listener, bootstrap: str, backfill: Backfill, max_task_idle_ms: int) -> SkewRun:
    from pyspark.sql import functions as F

    total = backfill.records
    limits = {"maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER, "max.task.idle.ms": max_task_idle_ms}
    events = kafka_reader(spark, "kafkasync", bootstrap, backfill.subscribe, limits).load()
    counts = (
        events.withWatermark("timestamp", demo.WATERMARK_DELAY)
        .groupBy(F.window("timestamp", demo.WINDOW), "topic")
        .count()
    )
    window_counts: dict = {}

    def collect(frame, _batch_id):  # update mode: the latest count of every changed window
        for row in frame.collect():
            window_counts[(row["window"].start, row["topic"])] = row["count"]

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
    predicted = sum(
        sum(demo.predicted_drops(b, lambda tp: backfill.timestamps[tp]).values()) for b in batches
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


def produce(cluster) -> Backfill:
    return spans(cluster, "bench-skew", scale=SCALE)
