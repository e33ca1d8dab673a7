"""Streaming queries measured as they run: every progress report through a listener, a query
run until it has read what it must, and what a live query's batches and records say afterwards.

Rows are counted with a :class:`StreamingQueryListener` (``recentProgress`` keeps only the last
100 progress updates by default; the listener sees every one).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Optional

from benchmarks.harness.samplers import SourceRunnerPeak
from benchmarks.harness.spark import kafka_reader

TRIGGER_PHASES = ("triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def add_listener(spark: Any, on_progress: Optional[Callable[[Any], None]] = None, *, keep: bool = True) -> Any:
    """A listener, added to ``spark``, that keeps every progress report of every query by query
    id (``rows(id)``, ``progress(id)``: thread-safe; not with ``keep=False``, for a run of hours)
    and hands each to ``on_progress``."""
    from pyspark.sql.streaming import StreamingQueryListener

    class ProgressCollector(StreamingQueryListener):
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._progress: dict[str, list[dict]] = {}
            self._rows: dict[str, int] = {}

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if on_progress is not None:
                on_progress(event.progress)
            if not keep:
                return
            progress = json.loads(event.progress.json)
            with self._lock:
                query = progress["id"]
                self._progress.setdefault(query, []).append(progress)
                self._rows[query] = self._rows.get(query, 0) + int(progress["numInputRows"])

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

        def rows(self, query_id: str) -> int:
            with self._lock:
                return self._rows.get(query_id, 0)

        def progress(self, query_id: str) -> list[dict]:
            with self._lock:
                return list(self._progress.get(query_id, []))

    listener = ProgressCollector()
    spark.streams.addListener(listener)
    return listener


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
        last = batches[-1]
        return (_epoch_s(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
                - _epoch_s(batches[0]["timestamp"]))

    @property
    def rps(self) -> float:
        """Rows per second of wall time from ``start()``: it includes the driver fetching a
        backlog's offsets and timestamps before the first batch (with one batch per backlog,
        ``processing_s`` would leave that out) and Spark's query start-up, alike for every
        source and mode."""
        return self.rows / self.wall_s


def _epoch_s(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def run_query(spark: Any, listener: Any, *, label: str, bootstrap: str, topic: str, expected_rows: int,
              options: Optional[dict[str, Any]] = None, sample_rss: bool = False, timeout_s: float = 300.0,
              source_format: str = "kafkasync") -> QueryRun:
    """``format("kafkasync")`` over ``topic`` into the noop sink until the listener has seen
    ``expected_rows`` input rows; another ``source_format`` gets only ``options``. ``sample_rss``:
    the peak RSS of the query's source runner (where kafkasync's driver side runs)."""
    reader = (kafka_reader(spark, source_format, bootstrap, topic, options) if source_format == "kafkasync"
              else _options(spark.readStream.format(source_format), options))
    checkpoint = tempfile.mkdtemp(prefix="kafkasync-bench-cp-")
    runner = SourceRunnerPeak()
    started = time.perf_counter()
    query = (reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(processingTime="0 seconds").start())
    deadline = started + timeout_s
    try:
        with runner if sample_rss else nullcontext():
            while listener.rows(query.id) < expected_rows:
                if query.exception() is not None:
                    raise RuntimeError(f"{label}: query failed: {query.exception()}")
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"{label}: {listener.rows(query.id)} of {expected_rows} rows "
                                       f"after {timeout_s} s")
                time.sleep(0.02)
            wall = time.perf_counter() - started
    finally:
        query.stop()
    time.sleep(0.2)  # the last progress event can reach the listener just after the row count did
    run = QueryRun(label=label, rows=listener.rows(query.id), wall_s=wall, progress=listener.progress(query.id))
    if sample_rss:
        if not runner.peak:
            raise RuntimeError(f"{label}: found no Python streaming source runner")
        run.peak_rss_mb = runner.peak / 2**20
    return run


def _options(reader: Any, options: Optional[dict[str, Any]]) -> Any:
    for key, value in (options or {}).items():
        reader = reader.option(key, str(value))
    return reader


def batch_read_seconds(spark: Any, bootstrap: str, topic: Any, *, source_format: str = "kafkasync",
                       runs: int = 3) -> float:
    """Median seconds of ``spark.read.format(...)...load().count()`` over the whole topic."""
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        rows = (spark.read.format(source_format).option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic.name).option("startingOffsets", "earliest").load().count())
        seconds.append(time.perf_counter() - started)
        if rows != topic.records:
            raise RuntimeError(f"batch read of {topic.name}: {rows} rows, expected {topic.records}")
    return statistics.median(seconds)


# -- a live query's batches and records -------------------------------------------------------------

def arrival_sink() -> tuple[list[tuple[float, list[float]]], Callable[[Any, int], None]]:
    """A ``foreachBatch`` function that notes, per batch, when it arrived (ms) and each row's
    ``CreateTime`` (ms), and the list it appends to: what a record's latency is taken from."""
    arrivals: list[tuple[float, list[float]]] = []
    lock = threading.Lock()

    def sink(frame: Any, batch_id: int) -> None:
        stamps = [row[0] for row in frame.selectExpr("unix_millis(timestamp)").collect()]
        arrived = time.time() * 1000
        with lock:
            arrivals.append((arrived, stamps))

    return arrivals, sink


def wait_for_a_row(query: Any, source: str, arrivals: list[tuple[float, list[float]]], timeout_s: float = 120) -> None:
    """Until the first row arrived; fails with the query's exception, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not any(stamps for _, stamps in list(arrivals)):
        if query.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{source} gave no row: {query.exception()}")
        time.sleep(0.01)


def steady_batches(progress: list, steady_from_ms: float) -> list:
    """The batches that read records and began after ``steady_from_ms``."""
    return [p for p in progress if p.numInputRows and _epoch_s(p.timestamp) * 1000 >= steady_from_ms]


def phases(progress: list, steady_from_ms: float) -> dict[str, float]:
    """Median ``durationMs`` of the steady batches that read records, per phase: where a
    trigger's time goes (Spark's own accounting, the same for every source)."""
    batches = [p.durationMs for p in steady_batches(progress, steady_from_ms)]
    return {phase: statistics.median(d.get(phase, 0) for d in batches) for phase in TRIGGER_PHASES} if batches else {}


def quantile(ordered: list[float], share: float) -> Optional[float]:
    """The value at ``share`` of a sorted list (None if empty): ``ordered[int(len * share)]``."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else None


def driver_records_read(progress: list) -> int:
    """The records kafkasync's driver read over a run: its last live report (``driverRecordsRead``)."""
    reports = [json.loads(p.json)["sources"][0].get("latestOffset") for p in progress]
    reports = [json.loads(r) if isinstance(r, str) else r for r in reports if r]
    return max((r.get("driverRecordsRead", 0) for r in reports), default=0)


def event_log_timing(directory: str, steady_from_ms: float) -> dict[str, Any]:
    """From Spark's event log, for the jobs submitted after ``steady_from_ms``: jobs per batch,
    a job's duration, the wait from its submission to its first task's launch, and per task its
    duration (launch to finish), deserialization and run time (Spark's task metrics), and the
    tasks there were (Spark writes the log where ``harness.spark.session(event_log=...)`` says)."""
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    tasks: list[dict[str, Any]] = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as log:
            for line in log:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerJobStart":
                    job = jobs.setdefault(event["Job ID"], {})
                    job["submitted"] = event["Submission Time"]
                    job["batch"] = (event.get("Properties") or {}).get("streaming.sql.batchId")
                    for stage in event.get("Stage IDs", []):
                        stage_job[stage] = event["Job ID"]
                elif kind == "SparkListenerJobEnd":
                    jobs.setdefault(event["Job ID"], {})["completed"] = event["Completion Time"]
                elif kind == "SparkListenerTaskEnd":
                    info, metrics = event["Task Info"], event.get("Task Metrics") or {}
                    tasks.append({"job": stage_job.get(event["Stage ID"]), "launched": info["Launch Time"],
                                  "ms": info["Finish Time"] - info["Launch Time"],
                                  "deserialize_ms": metrics.get("Executor Deserialize Time", 0),
                                  "run_ms": metrics.get("Executor Run Time", 0)})
    steady = {job_id: job for job_id, job in jobs.items()
              if job.get("submitted", 0) >= steady_from_ms and "completed" in job}
    steady_tasks = [task for task in tasks if task["job"] in steady]
    if not steady or not steady_tasks:
        return {}
    first_launch: dict[int, int] = {}
    for task in steady_tasks:
        first_launch[task["job"]] = min(first_launch.get(task["job"], task["launched"]), task["launched"])
    batches = {job["batch"] for job in steady.values()}
    return {
        "jobs_per_batch": len(steady) / max(len(batches), 1),
        "tasks": len(steady_tasks),
        "tasks_per_job": len(steady_tasks) / len(steady),
        "job_ms": statistics.median(job["completed"] - job["submitted"] for job in steady.values()),
        "submit_to_launch_ms": statistics.median(first_launch[j] - steady[j]["submitted"] for j in first_launch),
        "task_ms": statistics.median(task["ms"] for task in steady_tasks),
        "task_deserialize_ms": statistics.median(task["deserialize_ms"] for task in steady_tasks),
        "task_run_ms": statistics.median(task["run_ms"] for task in steady_tasks),
    }
