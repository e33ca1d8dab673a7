"""A live stream's latency, kafkasync beside Spark's own ``format("kafka")`` and beside the floors:
what kafkasync adds to a record's time from its producer to its batch, and to a batch.

2,000 records/s of 100 B over 8 partitions for 60 s (:data:`RATE`, :data:`LIVE_SECONDS`), read
by each source in turn in a Spark of its own (a child process), :data:`LIVE_RUNS` times, default
trigger, ``read_committed``, into ``foreachBatch``. Per record, the time from its ``CreateTime``
(stamped by the producer) to its batch's ``foreachBatch``, p50/p99, over the whole run and over
the records produced after its first third (:data:`WARM_UP_SHARE`, past both sources' start-up);
the time to the first row of a new query; per batch the median of each phase Spark reports
(``durationMs``); per Python runner call and task its timing (``harness.runner_trace``), the
tasks' and jobs' timing from Spark's event log, and the CPU each process used per second. Beside
the Kafka sources, Spark's JVM ``rate`` source and Python sources that read nothing
(``harness.floor_source``, plain and with kafkasync's worker fixes): the floors of a batch.

Targets (``side_by_side.TARGETS``): kafkasync's steady p99 at most 100 ms above
``format("kafka")``'s; a batch at most 30 ms above the plain Python floor's. ``make bench`` runs it
from ``benchmarks/side_by_side.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

from benchmarks.harness.backlogs import PARTITIONS, PacedProducer
from benchmarks.harness.children import print_result, run_child
from benchmarks.harness.floor_source import FLOOR, FLOOR_LABEL, TUNED_FLOOR, floor_reader
from benchmarks.harness.queries import (
    arrival_sink,
    event_log_timing,
    phases,
    quantile,
    steady_batches,
    wait_for_a_row,
)
from benchmarks.harness.results import median_of_runs
from benchmarks.harness.runner_trace import TRACE_ENV
from benchmarks.harness.samplers import cpu_seconds_between, cpu_seconds_by_process
from benchmarks.harness.spark import LABELS, SOURCES, compared_options, jvm_pid, kafka_reader, session
from kafkasync_source.spark.input_partitions import default_target_tasks

RATE, LIVE_SECONDS, LIVE_RUNS = 2_000, 60, 3
WARM_UP_SHARE = 1 / 3
"""Latency is also given for records produced after the first third of the live run: both
sources' first batches pay for starting (JIT, consumers, and kafkasync's Python workers)."""
LIVE_SOURCES = ("rate", FLOOR, TUNED_FLOOR, "kafka", "kafkasync")
"""The live comparison: Spark's JVM ``rate`` source and Python sources that do nothing (the
floors), then the two Kafka sources."""
LIVE_LABELS = {"rate": 'format("rate")', FLOOR: "Python source floor", TUNED_FLOOR: FLOOR_LABEL, **LABELS}
PREFILLED = 1_000
"""Records in a live topic when its query starts (from the earliest offset): its first batch
has rows, and start to first ``foreachBatch`` is the time to first row."""
FLOOR_ROWS_PER_TASK = 200
"""About what each of kafkasync's tasks reads of the live stream (2,000 records/s, batches
of about 200 ms, 2 tasks)."""


# -- the child: one Spark, one live source ----------------------------------------------------------

def _reader(spark: Any, source: str, bootstrap: str, topic: str) -> Any:
    """The live stream of one source: a Kafka topic from its beginning (it holds :data:`PREFILLED`
    records when the query starts, for the time to first row), Spark's JVM ``rate`` source, or a
    floor source with as many tasks as kafkasync runs."""
    if source == "rate":
        return (spark.readStream.format("rate").option("rowsPerSecond", RATE)
                .option("numPartitions", default_target_tasks()))
    if source in (FLOOR, TUNED_FLOOR):
        return floor_reader(spark, batches=0, partitions=default_target_tasks(), rows=FLOOR_ROWS_PER_TASK,
                            value_bytes=100, worker_fixes=source == TUNED_FLOOR)
    name = source
    if source == "kafkasync":
        from benchmarks.harness.traced_kafkasync import TracedKafkaSync

        spark.dataSource.register(TracedKafkaSync)
        name = TracedKafkaSync.name()
    return kafka_reader(spark, name, bootstrap, topic, compared_options(source))


def child(spark: Any, source: str, bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    """One source's live stream into ``foreachBatch``: time to first row, then ``seconds`` of
    steady batches (a Kafka source reads ``RATE`` records/s produced meanwhile; ``rate`` makes
    as many; the floor source always has a batch)."""
    arrivals, sink = arrival_sink()
    started = time.time() * 1000
    query = _reader(spark, source, bootstrap, topic).load().writeStream.foreachBatch(sink).start()
    try:
        wait_for_a_row(query, source, arrivals)
        first_row_ms = next(at for at, stamps in list(arrivals) if stamps) - started
        # Every source's run has the producer and the broker at work, so that all run on a
        # machine equally busy; only the Kafka sources read what it writes.
        producer = PacedProducer(bootstrap, topic, RATE, seconds)
        warm_up_s = WARM_UP_SHARE * seconds
        time.sleep(warm_up_s)
        cpu_before = cpu_seconds_by_process(jvm_pid(spark))
        time.sleep(seconds - warm_up_s)
        cpu = {name: used / (seconds - warm_up_s)
               for name, used in cpu_seconds_between(cpu_before, cpu_seconds_by_process(jvm_pid(spark))).items()}
        produced = producer.result()
        deadline = time.monotonic() + 120
        while source in SOURCES and sum(len(stamps) for _, stamps in list(arrivals)) < PREFILLED + produced["records"]:
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{source} read too few records: {query.exception()}")
            time.sleep(0.2)
        progress = query.recentProgress
    finally:
        query.stop()
    began_ms = produced["began_ms"]
    steady_from = began_ms + warm_up_s * 1000
    durations = sorted(p.durationMs.get("triggerExecution", 0) for p in steady_batches(progress, steady_from))
    result: dict[str, Any] = {
        "first_row_ms": first_row_ms, "steady_from_ms": steady_from, "cpu_per_s": cpu,
        "trigger_ms": phases(progress, steady_from),
        "batch_ms_spread": {"batches": len(durations), "p10_ms": durations[len(durations) // 10],
                            "p90_ms": quantile(durations, 0.9)} if durations else {"batches": 0}}
    if source in SOURCES:  # the others' timestamps say nothing of latency (rate's: one batch a second)
        latencies = [(stamp, at - stamp) for at, stamps in arrivals for stamp in stamps if stamp >= began_ms]
        result.update(_quantiles([latency for _, latency in latencies]))
        result["records"] = len(latencies)
        result["steady"] = {**_quantiles([latency for stamp, latency in latencies if stamp >= steady_from]),
                            "after_s": warm_up_s}
    trace_path = os.environ.get(TRACE_ENV)
    if trace_path and os.path.exists(trace_path):
        result["python"] = _python_trace(trace_path, steady_from)
    return result


def _quantiles(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {"p50_ms": ordered[len(ordered) // 2], "p99_ms": quantile(ordered, 0.99), "max_ms": ordered[-1]}


def _python_trace(path: str, steady_from_ms: float) -> dict[str, Any]:
    """Medians of the runner calls and tasks traced after ``steady_from_ms``."""
    calls: dict[str, list[dict]] = {}
    tasks: list[dict] = []
    collections: list[dict] = []
    with open(path) as trace:
        for line in trace:
            record = json.loads(line)
            if record["at"] * 1000 < steady_from_ms:
                continue
            if record["kind"] == "task":
                tasks.append(record)
            elif record["kind"] == "gc":
                collections.append(record)
            else:
                calls.setdefault(record["call"], []).append(record)
    result: dict[str, Any] = {
        call: {"calls": len(records),
               "handler_ms": statistics.median(r["handler_ms"] for r in records),
               **({"source_ms": statistics.median(r["source_ms"] for r in records)}
                  if all(r["source_ms"] is not None for r in records) else {})}
        for call, records in sorted(calls.items())
    }
    if tasks:
        result["tasks"] = {"tasks": len(tasks), "ms": statistics.median(t["ms"] for t in tasks),
                           "p90_ms": sorted(t["ms"] for t in tasks)[int(len(tasks) * 0.9)],
                           "first_batch_ms": statistics.median(t["first_batch_ms"] or 0 for t in tasks),
                           "workers": len({t["pid"] for t in tasks})}
    if collections:
        result["worker_gc"] = {"collections": len(collections),
                               "ms": statistics.median(c["ms"] for c in collections),
                               "tracked_objects": statistics.median(c["tracked"] for c in collections)}
    return result


# -- the parent: a topic per run and source, the medians, the differences -----------------------------

def latency(bootstrap: str, jars: str, seconds: float, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Each live source in a Spark of its own, the sources alternating, ``runs`` times: medians
    over the runs, and each run's figures under ``runs``."""
    from kafkasync_dev.testing.broker import KafkaBroker
    from kafkasync_dev.testing.mock_cluster import Record

    result: dict[str, Any] = {"records_per_second": RATE, "partitions": PARTITIONS, "seconds": seconds,
                              "runs": runs, "tasks_per_batch": default_target_tasks(),
                              "load_average_start": os.getloadavg()}
    measured: dict[str, list[dict[str, Any]]] = {source: [] for source in LIVE_SOURCES}
    for run in range(runs):
        for source in LIVE_SOURCES:
            topic = f"kafkasync-latency-{source}-{run}-{int(time.time())}"
            with KafkaBroker(bootstrap) as broker:
                broker.create_topic(topic, PARTITIONS)
                if source in SOURCES:
                    now_ms = int(time.time() * 1000)
                    broker.produce(topic, (Record(i % PARTITIONS, now_ms, value=b"v" * 100)
                                           for i in range(PREFILLED)))
            log(f"side by side: {LIVE_LABELS[source]} live for {seconds:.0f} s (run {run + 1} of {runs})")
            with tempfile.NamedTemporaryFile(prefix="kafkasync-trace-", suffix=".jsonl") as trace:
                measured[source].append(run_child("benchmarks.live_latency", source, bootstrap, topic, str(seconds),
                                                  jars, trace.name))
    result["load_average_end"] = os.getloadavg()
    for source, source_runs in measured.items():
        result[LIVE_LABELS[source]] = {**median_of_runs(source_runs), "runs": source_runs}
    batch_ms = {source: result[LIVE_LABELS[source]]["trigger_ms"].get("triggerExecution", float("nan"))
                for source in LIVE_SOURCES}
    kafka, kafkasync = result[LIVE_LABELS["kafka"]], result[LIVE_LABELS["kafkasync"]]
    result["steady_p99_extra_ms"] = kafkasync["steady"]["p99_ms"] - kafka["steady"]["p99_ms"]
    result["p99_extra_ms"] = kafkasync["p99_ms"] - kafka["p99_ms"]
    result["first_row_extra_ms"] = kafkasync["first_row_ms"] - kafka["first_row_ms"]
    result["batch_ms_over_floor"] = batch_ms["kafkasync"] - batch_ms[FLOOR]
    result["batch_ms_over_tuned_floor"] = batch_ms["kafkasync"] - batch_ms[TUNED_FLOOR]
    result["floor_batch_ms_over_rate"] = batch_ms[FLOOR] - batch_ms["rate"]
    result["tuned_floor_batch_ms_over_rate"] = batch_ms[TUNED_FLOOR] - batch_ms["rate"]
    return result


if __name__ == "__main__":  # the child (run_child): --child source bootstrap topic seconds jars trace
    _, source, bootstrap, topic, seconds, jars, trace = sys.argv[1:]
    os.environ[TRACE_ENV] = trace  # before Spark starts: its Python processes inherit it
    event_log = tempfile.mkdtemp(prefix="kafkasync-events-")
    spark = session("kafkasync-side-by-side", jars=jars, event_log=event_log)
    try:
        figures = child(spark, source, bootstrap, topic, float(seconds))
    finally:
        spark.stop()
    figures["spark_tasks"] = event_log_timing(event_log, figures.pop("steady_from_ms"))
    shutil.rmtree(event_log, ignore_errors=True)
    print_result(figures)
