"""Spark side of the benchmark: the session, a progress listener, and kafkasync queries.

Rows are counted with a :class:`StreamingQueryListener` (``recentProgress`` keeps only the
last 100 progress updates by default; the listener sees every one). The stream reader's
driver state lives in a long-lived Spark Python worker; :class:`RssSampler` finds it in
``/proc`` and reads its peak RSS (``VmHWM``) while the query runs.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Optional

STREAM_RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


def _progress_listener_class():
    from pyspark.sql.streaming import StreamingQueryListener

    class ProgressCollector(StreamingQueryListener):
        """Keeps every progress update of every query, by query id (thread-safe)."""

        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._progress: dict[str, list[dict]] = {}
            self._rows: dict[str, int] = {}

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            progress = json.loads(event.progress.json)
            with self._lock:
                query = progress["id"]
                self._progress.setdefault(query, []).append(progress)
                self._rows[query] = self._rows.get(query, 0) + int(progress["numInputRows"])

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

        def rows(self, query_id: str) -> int:
            with self._lock:
                return self._rows.get(query_id, 0)

        def progress(self, query_id: str) -> list[dict]:
            with self._lock:
                return list(self._progress.get(query_id, []))

    return ProgressCollector


def add_listener(spark):
    listener = _progress_listener_class()()
    spark.streams.addListener(listener)
    return listener


class RssSampler:
    """Peak RSS (VmHWM) of the Spark Python worker that runs the stream reader's driver side."""

    def __init__(self, before: set[int]) -> None:
        self._before = before
        self.pid: Optional[int] = None
        self.peak_kb = 0

    @staticmethod
    def runner_pids() -> set[int]:
        pids = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            if STREAM_RUNNER_MODULE.encode() in cmdline:
                pids.add(int(entry))
        return pids

    def sample(self) -> None:
        if self.pid is None:
            new = self.runner_pids() - self._before
            if len(new) != 1:
                return
            self.pid = new.pop()
        try:
            with open(f"/proc/{self.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
        except OSError:
            pass


@dataclass
class QueryRun:
    """What one streaming query did."""

    label: str
    rows: int
    wall_s: float
    """From start() until the listener had seen every expected row."""
    progress: list[dict] = field(default_factory=list)
    peak_rss_mb: Optional[float] = None

    @property
    def data_batches(self) -> list[dict]:
        return [p for p in self.progress if p["numInputRows"] > 0]

    @property
    def processing_s(self) -> float:
        """From the start of the first trigger that returned data to the end of the last one.

        Excludes query start-up (Python worker launch, consumer creation, first metadata
        round trip), which a long-running query pays once.
        """
        batches = self.data_batches
        if not batches:
            return float("nan")
        first = _ts(batches[0]["timestamp"])
        last = batches[-1]
        return _ts(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000 - first

    @property
    def rps(self) -> float:
        """Rows per second of wall time from ``start()``: it includes the driver fetching a
        backlog's offsets and timestamps before the first batch (with one batch per backlog,
        ``processing_s`` would leave that out) and Spark's query start-up, alike for every
        source and mode."""
        return self.rows / self.wall_s


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def run_query(
    spark,
    listener,
    *,
    label: str,
    bootstrap: str,
    topic: str,
    expected_rows: int,
    options: Optional[dict[str, Any]] = None,
    transform: Callable = lambda frame: frame,
    output_mode: str = "append",
    sample_rss: bool = False,
    done: Optional[Callable[[list[dict]], bool]] = None,
    timeout_s: float = 300.0,
    source_format: str = "kafkasync",
) -> QueryRun:
    """Run ``format("kafkasync")`` over ``topic`` into the noop sink until ``expected_rows``
    input rows were processed (and ``done(progress)``, if given, holds). Another
    ``source_format`` gets only ``options``."""
    reader = spark.readStream.format(source_format)
    if source_format == "kafkasync":
        reader = (
            reader.option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
    for key, value in (options or {}).items():
        reader = reader.option(key, str(value))
    frame = transform(reader.load())
    checkpoint = tempfile.mkdtemp(prefix="kafkasync-bench-cp-")
    sampler = RssSampler(RssSampler.runner_pids()) if sample_rss else None
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = started + timeout_s
    try:
        while True:
            if sampler is not None:
                sampler.sample()
            if query.exception() is not None:
                raise RuntimeError(f"{label}: query failed: {query.exception()}")
            if listener.rows(query.id) >= expected_rows and (
                done is None or done(listener.progress(query.id))
            ):
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(
                    f"{label}: {listener.rows(query.id)} of {expected_rows} rows after {timeout_s} s"
                )
            time.sleep(0.02)
        wall = time.perf_counter() - started
        if sampler is not None:
            sampler.sample()
    finally:
        query.stop()
    # The last progress event can reach the listener just after the row count did.
    time.sleep(0.2)
    run = QueryRun(label=label, rows=listener.rows(query.id), wall_s=wall,
                   progress=listener.progress(query.id))
    if sampler is not None:
        if sampler.pid is None:
            raise RuntimeError(f"{label}: could not find the {STREAM_RUNNER_MODULE} worker")
        run.peak_rss_mb = sampler.peak_kb / 1024
    return run


def batch_read_seconds(spark, bootstrap: str, topic, *, source_format: str = "kafkasync",
                       runs: int = 3) -> float:
    """Median seconds of ``spark.read.format(...)...load().count()`` over the whole topic."""
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        rows = (spark.read.format(source_format).option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic.name).option("startingOffsets", "earliest")
                .load().count())
        seconds.append(time.perf_counter() - started)
        if rows != topic.records:
            raise RuntimeError(f"batch read of {topic.name}: {rows} rows, expected {topic.records}")
    return statistics.median(seconds)
