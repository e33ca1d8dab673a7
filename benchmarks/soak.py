"""A long live run: does the memory of kafkasync's planning runner level off, and does a trigger
cost the same at the end as at the start (issue 54)?

Streaming queries run for weeks; a source whose driver-side memory grows with every trigger is
killed by its container's limit in the end. This benchmark runs one live query for
``--minutes`` on a real broker (``testing.local_broker.real_broker``) and samples, every
:data:`SAMPLE_SECONDS`:

* the RSS (``VmRSS``) of Spark's Python streaming source runner
  (``pyspark/sql/streaming/python_streaming_source_runner.py``, the process where kafkasync
  plans: ``latestOffset``, ``partitions``, ``commit``), of the executors' Python workers (the
  ``pyspark.daemon`` and each worker it forked; reused from batch to batch, they keep the
  consumer pool, the stash and Arrow buffers) and of the JVM;
* the trigger cost: ``durationMs["latestOffset"]`` of every batch in the window (Spark's
  progress, from a ``StreamingQueryListener``: the runner's call included), its median, p90 and
  maximum;
* every :data:`HEAP_EVERY` samples, the JVM's heap after a full collection (``jcmd GC.run`` then
  ``GC.heap_info``): outside kafkasync's code, beside ``--source kafka``'s on the same stream.

**Stream.** A producer process (``harness.backlogs.PacedProducer``: idempotent, ``linger.ms`` 5)
writes ``--rate`` records a second of 200-byte JSON (``{"ts": <epoch ms>, "pad": "..."}``, ``ts`` non-decreasing) round
robin over ``--partitions`` partitions of a new topic, for the whole run. The query reads it
from the earliest offset (default trigger, ``read_committed``, ``max.task.idle.ms=0``) into
``foreachBatch``. Variants (``--variant``): ``default`` (the Kafka timestamp), ``json``
(``eventTime.jsonPath=$.ts``), ``json-ordered`` (the same with ``eventTime.order=nonDecreasing``).

**Loss and duplication.** Each batch's ``foreachBatch`` keeps, per partition, its row count, the
distinct offsets and the lowest and highest offset (one small aggregate, not the rows). The
producer's records have contiguous offsets (no transactions), so a batch's range has no gap when
its count is ``max - min + 1`` and no duplicate when its distinct count equals its count; and
the batches' ranges, ordered, must meet end to start, from 0 to the broker's high watermark
after the producer stopped. Anything else is counted as lost or duplicated.

**Targets** (issue 54): after the warm-up (:data:`WARM_UP_MINUTES`, or a third of a shorter
run), runner RSS grows at most :data:`RSS_GROWTH_MIB` MiB to the end, and the median trigger
cost of the last :data:`WINDOW_MINUTES` is at most :data:`COST_GROWTH` x that of the first
:data:`WINDOW_MINUTES` after the warm-up, or at most :data:`COST_SLACK_MS` ms above it.

**What grows.** With ``--tracemalloc PATH`` the query reads through ``format("kafkasync-
tracemalloc")`` (:class:`TracemallocKafkaSync`): kafkasync itself, whose ``latestOffset`` in
the runner starts ``tracemalloc``, takes a baseline snapshot after ``--tracemalloc-every``
triggers (the first ones are warm-up: consumers, imports) and every as many more appends to
``PATH`` the allocations grown since, by source line and by call stack (a JSON line each). It
slows the runner and its own traces take memory: its RSS series is not the target's.

``make bench-soak`` (not in CI: an hour) runs the default variant for 60 minutes at 10,000
records/s; ``python -m benchmarks.soak --minutes 3`` checks the harness.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any, Callable, Optional

import kafkasync_source
from benchmarks.harness.backlogs import JSON_VALUE_BYTES, PacedProducer
from benchmarks.harness.queries import add_listener, quantile
from benchmarks.harness.samplers import descends_from, processes, status_kib
from benchmarks.harness.spark import compared_options, jvm_pid, kafka_reader, session
from kafkasync_source.spark.source import KafkaSyncDataSource
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

SAMPLE_SECONDS = 30.0
HEAP_EVERY = 10
"""A full collection every 10 samples (5 minutes): often enough for a series, rarely enough
not to weigh on the run."""
WARM_UP_MINUTES = 5.0
WINDOW_MINUTES = 5.0
RSS_GROWTH_MIB = 5.0
COST_GROWTH, COST_SLACK_MS = 1.25, 2.0
VARIANTS = {"default": {}, "json": {"eventTime.jsonPath": "$.ts"},
            "json-ordered": {"eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"}}
TRACEMALLOC_ENV, TRACEMALLOC_EVERY_ENV = "KAFKASYNC_TRACEMALLOC", "KAFKASYNC_TRACEMALLOC_EVERY"
TRACEMALLOC_FRAMES = 8
MIB = 1024 * 1024


# -- what grows: tracemalloc in the runner ----------------------------------------------------

class _TracemallocStream(KafkaSyncStreamReader):
    """kafkasync's stream reader whose ``latestOffset`` snapshots the runner's allocations
    (see the module's docstring); without ``KAFKASYNC_TRACEMALLOC`` it is kafkasync's own."""

    _triggers = 0
    _baseline: Optional[tracemalloc.Snapshot] = None

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        path = os.environ.get(TRACEMALLOC_ENV)
        if path:
            self._snapshot(path, int(os.environ.get(TRACEMALLOC_EVERY_ENV, "500")))
        return super().latestOffset(start, limit)

    @classmethod
    def _snapshot(cls, path: str, every: int) -> None:
        cls._triggers += 1
        if cls._triggers == 1:
            tracemalloc.start(TRACEMALLOC_FRAMES)
            return
        if cls._triggers % every:  # the baseline at the first multiple: the first batches are warm-up
            return
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        if cls._baseline is None:
            cls._baseline = snapshot
            return
        since = cls._triggers - every

        def top(key: str, count: int) -> list[dict[str, Any]]:
            assert cls._baseline is not None
            return [{"kib": stat.size_diff / 1024, "bytes_per_trigger": stat.size_diff / since,
                     "blocks": stat.count_diff, "kib_now": stat.size / 1024,
                     "where": [f"{frame.filename}:{frame.lineno}" for frame in stat.traceback]}
                    for stat in snapshot.compare_to(cls._baseline, key)[:count] if stat.size_diff > 0]

        traced, peak = tracemalloc.get_traced_memory()
        with open(path, "a") as out:
            out.write(json.dumps({"at": time.time(), "triggers": cls._triggers, "since_baseline": since,
                                  "traced_mib": traced / MIB, "peak_mib": peak / MIB,
                                  "by_line": top("lineno", 25), "by_stack": top("traceback", 12)}) + "\n")


class TracemallocKafkaSync(KafkaSyncDataSource):
    """``format("kafkasync-tracemalloc")``: kafkasync, its runner's allocations snapshotted."""

    @classmethod
    def name(cls) -> str:
        return "kafkasync-tracemalloc"

    def streamReader(self, schema: Any) -> KafkaSyncStreamReader:
        return _TracemallocStream(self._parse(streaming=True), schema)


# -- what is sampled: processes, trigger cost, the JVM's heap ---------------------------------

def spark_processes(root: int) -> dict[str, list[int]]:
    """This Spark's Python processes under ``root`` (this process): the streaming source
    runner(s), the worker daemon, the workers it forked."""
    table = processes()
    found: dict[str, list[int]] = {"runner": [], "daemon": [], "workers": []}
    for pid, process in table.items():
        if pid == root or not descends_from(table, pid, root):
            continue
        if b"python_streaming_source_runner" in process.command:
            found["runner"].append(pid)
        elif process.command.endswith(b"pyspark.daemon\0pyspark.worker\0"):
            # The daemon forks its workers without exec: they share its command line. (Spark
            # starts other daemons too, for planning a data source's read: not the executors'.)
            parent = table.get(process.parent)
            is_daemon = parent is None or parent.command != process.command
            found["daemon" if is_daemon else "workers"].append(pid)
    return found


def _rss_mib(pids: list[int]) -> list[float]:
    values = []
    for pid in pids:
        try:
            values.append(status_kib(pid, "VmRSS")["VmRSS"] / 1024)
        except (OSError, KeyError):
            continue
    return values


def heap_after_full_gc_mib(jvm_pid: int) -> Optional[float]:
    """The JVM's used heap right after a full collection (``jcmd GC.run``, then
    ``GC.heap_info``'s first ``used``), or None where jcmd is missing or fails."""
    try:
        subprocess.run(["jcmd", str(jvm_pid), "GC.run"], capture_output=True, timeout=120, check=True)
        info = subprocess.run(["jcmd", str(jvm_pid), "GC.heap_info"], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = re.search(r"heap\s+total \d+K, used (\d+)K", info)  # G1's, Parallel's and Serial's first line
    return int(used.group(1)) / 1024 if used else None


class TriggerCosts:
    """Every batch's ``durationMs`` (latestOffset, triggerExecution) and rows, from Spark's
    progress events, taken out window by window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: list[tuple[float, float, int]] = []

    def add(self, progress: Any) -> None:
        with self._lock:
            self._batches.append((float(progress.durationMs.get("latestOffset", 0)),
                                  float(progress.durationMs.get("triggerExecution", 0)), int(progress.numInputRows)))

    def take(self) -> list[tuple[float, float, int]]:
        with self._lock:
            taken, self._batches = self._batches, []
        return taken


def sample(jvm: int, costs: TriggerCosts, started: float, heap: bool) -> dict[str, Any]:
    """One point of the series: RSS by process, the window's trigger costs, maybe the heap."""
    processes = spark_processes(os.getpid())
    batches = costs.take()
    latest = sorted(b[0] for b in batches)
    workers = _rss_mib(processes["workers"])
    point: dict[str, Any] = {
        "minute": round((time.monotonic() - started) / 60, 2),
        "runner_rss_mib": sum(_rss_mib(processes["runner"])) or None,
        "runners": len(processes["runner"]),
        "daemon_rss_mib": sum(_rss_mib(processes["daemon"])) or None,
        "worker_rss_mib": [round(value, 1) for value in sorted(workers)],
        "jvm_rss_mib": sum(_rss_mib([jvm])) or None,
        "batches": len(batches), "rows": sum(b[2] for b in batches),
        "latest_offset_ms": {"p50": quantile(latest, 0.5), "p90": quantile(latest, 0.9),
                             "max": latest[-1] if latest else None},
        "trigger_ms_p50": quantile(sorted(b[1] for b in batches), 0.5),
    }
    if heap:
        point["jvm_heap_after_gc_mib"] = heap_after_full_gc_mib(jvm)
    return point


# -- loss and duplication -------------------------------------------------------------------

class Ledger:
    """Per partition, the offset the next batch must start at, and what was lost or duplicated
    so far: batches come one after another, so each batch's range is checked as it arrives and
    the ledger stays one entry a partition however long the run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.next_offset: dict[int, int] = {}
        self.rows = self.lost = self.duplicated = 0

    def sink(self, frame: Any, batch_id: int) -> None:
        """``foreachBatch``: one aggregate per partition, not the rows."""
        from pyspark.sql import functions as F

        found = frame.groupBy("partition").agg(F.min("offset"), F.max("offset"), F.count("*"),
                                               F.countDistinct("offset")).collect()
        for partition, low, high, rows, distinct in found:
            self.add(partition, low, high, rows, distinct)

    def add(self, partition: int, low: int, high: int, rows: int, distinct: int) -> None:
        """One batch's rows of ``partition``: offsets ``low`` to ``high``, ``distinct`` of them."""
        with self._lock:
            expected = self.next_offset.get(partition, 0)
            self.rows += rows
            self.duplicated += rows - distinct
            self.lost += (high - low + 1) - distinct  # a gap inside the batch's range
            if low > expected:
                self.lost += low - expected
            else:
                self.duplicated += min(expected, high + 1) - low
            self.next_offset[partition] = max(expected, high + 1)

    def check(self, ends: dict[int, int]) -> dict[str, int]:
        """Lost and duplicated records, with each partition's high watermark ``ends`` (its
        offsets 0 to end - 1, contiguous): what no batch reached yet counts as lost."""
        with self._lock:
            unread = sum(max(0, end - self.next_offset.get(partition, 0)) for partition, end in ends.items())
            return {"lost": self.lost + unread, "duplicated": self.duplicated, "rows": self.rows}


# -- the run --------------------------------------------------------------------------------

def _spark(jars: Optional[str]) -> Any:
    spark = session("kafkasync-soak", jars=jars)
    # By its module's name, not __main__'s (``python -m benchmarks.soak``): the runner imports it.
    from benchmarks.soak import TracemallocKafkaSync as importable

    spark.dataSource.register(importable)
    return spark


def _start(reader: Any, ledger: Ledger, attempts: int = 8) -> Any:
    """The query, started again where Spark's source runner did not connect back: Spark gives a
    Python worker it starts 10 s to (``PythonWorkerFactory.createSimpleWorker``, apache/spark
    PR 43023), which importing PySpark and kafkasync can exceed on a loaded machine. Nothing was
    read then (no batch ran), so a new query from the earliest offset reads the same records."""
    query = reader.load().writeStream.foreachBatch(ledger.sink).start()
    for _ in range(attempts - 1):
        while query.isActive and query.lastProgress is None and query.exception() is None:
            time.sleep(1)
        if "failed to connect back" not in str(query.exception()):
            break
        query = reader.load().writeStream.foreachBatch(ledger.sink).start()
    return query


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafkasync_dev.testing.broker import KafkaBroker

    with KafkaBroker(bootstrap) as broker:
        return {partition: high for partition, (_, high) in broker.end_offsets(topic).items()}


def _warm_up_minutes(minutes: float) -> float:
    return min(WARM_UP_MINUTES, minutes / 3)


def targets(series: list[dict[str, Any]], minutes: float) -> dict[str, Any]:
    """Runner RSS growth after the warm-up, and the trigger cost's median first and last."""
    warm_up, window = _warm_up_minutes(minutes), min(WINDOW_MINUTES, minutes / 3)
    after = [p for p in series if p["minute"] >= warm_up and p["runner_rss_mib"]]
    if len(after) < 2:
        return {"skipped": "too few samples after the warm-up"}
    growth = after[-1]["runner_rss_mib"] - after[0]["runner_rss_mib"]
    hours = (after[-1]["minute"] - after[0]["minute"]) / 60
    triggers = sum(p["batches"] for p in after[1:])
    # The target is over an hour's last 55 minutes: a shorter run is judged at its slope.
    over_55 = growth * max(1.0, 55 / 60 / hours) if hours else growth
    first = [p["latest_offset_ms"]["p50"] for p in after if p["minute"] < warm_up + window + 0.01
             and p["latest_offset_ms"]["p50"] is not None]
    last = [p["latest_offset_ms"]["p50"] for p in after if p["minute"] > after[-1]["minute"] - window - 0.01
            and p["latest_offset_ms"]["p50"] is not None]
    cost_first = statistics.median(first) if first else None
    cost_last = statistics.median(last) if last else None
    return {
        "runner_rss_growth_mib": {"value": round(growth, 1), "from_minute": after[0]["minute"],
                                  "to_minute": after[-1]["minute"],
                                  "per_hour": round(growth / hours, 1) if hours else None,
                                  # What grows per trigger grows with the triggers a busy machine runs.
                                  "triggers": triggers, "kib_per_trigger": round(growth * 1024 / triggers, 2)
                                  if triggers else None,
                                  "over_55_minutes": round(over_55, 1),
                                  "target": f"<= {RSS_GROWTH_MIB} over 55 minutes",
                                  "met": over_55 <= RSS_GROWTH_MIB},
        "latest_offset_ms_p50": {
            "first": cost_first, "last": cost_last,
            "target": f"last <= {COST_GROWTH} x first or first + {COST_SLACK_MS} ms",
            "met": None if cost_first is None or cost_last is None
            else cost_last <= max(cost_first * COST_GROWTH, cost_first + COST_SLACK_MS)},
    }


def soak(bootstrap: str, *, source: str = "kafkasync", variant: str = "default", minutes: float = 60.0,
         rate: int = 10_000, partitions: int = 8, jars: Optional[str] = None,
         tracemalloc_path: Optional[str] = None, tracemalloc_every: int = 500,
         log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """One soak (see the module's docstring): the series, loss and duplication, the targets."""
    from kafkasync_dev.testing.broker import create_topic

    if tracemalloc_path:  # the runner inherits the JVM's environment, which inherits ours
        os.environ[TRACEMALLOC_ENV] = tracemalloc_path
        os.environ[TRACEMALLOC_EVERY_ENV] = str(tracemalloc_every)
    spark = _spark(jars)
    topic = f"kafkasync-soak-{variant}-{partitions}-{time.time_ns()}"
    from confluent_kafka.admin import AdminClient

    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, partitions)
    name = TracemallocKafkaSync.name() if tracemalloc_path and source == "kafkasync" else source
    reader = kafka_reader(spark, name, bootstrap, topic,
                          {**compared_options(source), **(VARIANTS[variant] if source == "kafkasync" else {})})
    costs, ledger = TriggerCosts(), Ledger()
    add_listener(spark, costs.add, keep=False)
    series: list[dict[str, Any]] = []
    producer: Optional[PacedProducer] = None
    try:
        # The run's minutes count from the query's first trigger, and the stream starts then: on a
        # loaded machine the first trigger of 4,096 partitions came 10 minutes after the start.
        query = _start(reader, ledger)
        started = time.monotonic()
        producer = PacedProducer(bootstrap, topic, rate, minutes * 60, process=True, partitions=partitions,
                                 json_values=True)
        jvm = jvm_pid(spark)
        while time.monotonic() - started < minutes * 60:
            time.sleep(max(0.0, started + (len(series) + 1) * SAMPLE_SECONDS - time.monotonic()))
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            series.append(sample(jvm, costs, started, heap=len(series) % HEAP_EVERY == HEAP_EVERY - 1))
            log(_line(series[-1]))
        produced = producer.result(lost_ok=True)
        ends = _end_offsets(bootstrap, topic)
        deadline = time.monotonic() + 180
        while ledger.check(ends)["lost"] and time.monotonic() < deadline and query.exception() is None:
            time.sleep(1)
        final = sample(jvm, costs, started, heap=True)
    finally:
        for active in spark.streams.active:
            active.stop()
        if producer is not None:
            producer.kill()
        spark.stop()
    checked = ledger.check(ends)
    return {"source": source, "variant": variant, "commit": _commit(),
            "kafkasync_from": list(kafkasync_source.__path__),
            "options": VARIANTS[variant] if source == "kafkasync" else {},
            "minutes": minutes, "rate": rate, "partitions": partitions, "value_bytes": JSON_VALUE_BYTES,
            "produced": produced, "high_watermarks": sum(ends.values()), **checked,
            "tracemalloc": bool(tracemalloc_path), "series": series, "final": final,
            "targets": targets(series, minutes)}


def _commit() -> Optional[str]:
    """The checkout's commit (what kafkasync's code was, unless its tree had edits), if any."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("KAFKASYNC_SOAK_COMMIT")


def _line(point: dict[str, Any]) -> str:
    def mib(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.1f}"

    cost = point["latest_offset_ms"]
    heap = f", heap after GC {mib(point['jvm_heap_after_gc_mib'])} MiB" if "jvm_heap_after_gc_mib" in point else ""
    return (f"minute {point['minute']:.1f}: runner {mib(point['runner_rss_mib'])} MiB, workers "
            f"{point['worker_rss_mib']} MiB, JVM {mib(point['jvm_rss_mib'])} MiB{heap}; {point['batches']} batches, "
            f"{point['rows']:,} rows, latestOffset p50/p90/max {cost['p50']}/{cost['p90']}/{cost['max']} ms")


def markdown(result: dict[str, Any]) -> str:
    """A result's series for docs/benchmarks.md: a row per 5 minutes, each holding its ten
    30-second samples of runner RSS, and the window's batches and latestOffset time."""
    rows = ["| minutes | runner RSS, MiB, every 30 s | largest worker RSS, MiB | JVM heap after full GC, MiB "
            "| batches | latestOffset, ms: median of the 30-s p50s / p90s |", "|---|---|---|---|---|---|"]
    series = result["series"]
    for first in range(0, len(series), HEAP_EVERY):
        points = series[first:first + HEAP_EVERY]
        costs = sorted(cost for p in points for cost in [p["latest_offset_ms"]["p50"]] if cost is not None)
        nineties = sorted(cost for p in points for cost in [p["latest_offset_ms"]["p90"]] if cost is not None)
        heaps = [f"{p['jvm_heap_after_gc_mib']:.0f}" for p in points if p.get("jvm_heap_after_gc_mib")]
        rss = " ".join(f"{p['runner_rss_mib']:.1f}" if p["runner_rss_mib"] else "-" for p in points)
        rows.append(f"| {points[0]['minute']:.1f}–{points[-1]['minute']:.1f} | {rss} "
                    f"| {max((max(p['worker_rss_mib'], default=0) for p in points), default=0):.0f} "
                    f"| {' '.join(heaps) or '-'} | {sum(p['batches'] for p in points):,} "
                    f"| {quantile(costs, 0.5) or '-'} / {quantile(nineties, 0.5) or '-'} |")
    return "\n".join(rows)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--markdown"]:  # and the targets again, as this version of targets() judges them
        for path in argv[1:]:
            result = json.load(open(path))
            print(markdown(result), json.dumps(targets(result["series"], result["minutes"])), sep="\n")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=10_000, help="records a second")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="default")
    parser.add_argument("--source", choices=("kafkasync", "kafka"), default="kafkasync",
                        help='"kafka": Spark\'s own format("kafka") (its connector must match the running Spark)')
    parser.add_argument("--tracemalloc", metavar="PATH", help="snapshot the runner's allocations into PATH")
    parser.add_argument("--tracemalloc-every", type=int, default=500, help="triggers between snapshots")
    parser.add_argument("--out", help="also write the result's JSON to this file")
    args = parser.parse_args(argv)
    jars: Optional[str] = None
    if args.source == "kafka":
        from kafkasync_dev.testing.spark import format_kafka_jars

        jars, no_jars = format_kafka_jars()
        if jars is None:
            raise SystemExit(f"soak: {no_jars}")
    from kafkasync_dev.testing.local_broker import real_broker

    with real_broker() as (bootstrap, no_broker):
        if bootstrap is None:
            raise SystemExit(f"soak: {no_broker}")
        result = soak(bootstrap, source=args.source, variant=args.variant, minutes=args.minutes, rate=args.rate,
                      partitions=args.partitions, jars=jars, tracemalloc_path=args.tracemalloc,
                      tracemalloc_every=args.tracemalloc_every,
                      log=lambda m: print(f"[soak {time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
