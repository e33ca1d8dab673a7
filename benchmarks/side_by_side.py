"""kafkasync beside Spark's own ``format("kafka")``, at the same Spark version, on a real broker.

``format("kafka")`` needs Spark's Kafka connector at the running PySpark's version; Maven Central
serves none for some releases (4.3.0), so ``make bench`` runs this module in ``make parity``'s
virtualenv (the newest PySpark whose connector is served) and prints that version in the
report. The broker: ``testing.local_broker.real_broker`` (``KAFKASYNC_BOOTSTRAP``, else Apache
Kafka from Maven Central). Both sources read with ``kafka.isolation.level=read_committed`` (Java's
consumer defaults to read_uncommitted, librdkafka to read_committed).

1. **Backlog**: 8 x 50,000 records of 1 KB (400 MB of values), read once with
   ``trigger(availableNow=True)`` into the ``noop`` sink, each read in a Spark of its own (a
   child process), the two sources alternating, ``RUNS`` each (median). Per read: seconds of
   the query (not Spark's start; also the same read again in that Spark, "warm", and the
   seconds of its triggers alone), bytes the broker sent per payload byte
   (:class:`~benchmarks.broker_bytes.BrokerBytesSampler`), and peak RSS (``VmHWM``) of the
   driver's JVM (in ``local[2]`` it runs the executors' JVM side too; format("kafka") plans in
   it), of the driver's Python process, and of Spark's Python streaming source runner, where
   kafkasync plans (:class:`SourceRunnerPeak`; none for format("kafka")).
   Beside them, the same backlog's rows from :mod:`benchmarks.ceiling`, a Python streaming
   source that does no Kafka work (one batch of ready-made Arrow batches, one input partition
   per Kafka partition): Spark's floor for any Python source on this machine, cold and warm.
2. **Latency**: a live stream of 2,000 records/s over 8 partitions for 60 s, read by each
   source in turn (default trigger, ``max.task.idle.ms=0`` for kafkasync): per record, the time
   from its ``CreateTime`` (stamped by the producer) to its batch's ``foreachBatch``, p50/p99,
   over the whole run and over the records produced after its first third (past both
   sources' start-up), and the median ``durationMs`` of a batch per phase.
3. **Trigger cost** at 512 and 4,096 partitions, both sources
   (:func:`benchmarks.trigger_cost.measure`, which asks format("kafka")'s Spark progress).

``python -m benchmarks.side_by_side [--tiny]`` prints the results as JSON; ``--write`` also
merges them into ``benchmarks/results.json`` (key ``side_by_side``) and draws
``docs/img/side_by_side.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Optional

from benchmarks.broker_bytes import (BrokerBytesSampler, KEY_BYTES, PARTITIONS, RECORDS_PER_PARTITION,
                                     VALUE_BYTES, produce_backlog)

SOURCES = ("kafka", "kafkasync")
LABELS = {"kafka": 'format("kafka")', "kafkasync": "kafkasync"}
FLOOR = "kafkasync-ceiling"
"""``benchmarks.ceiling``'s source, read beside the two: what a Python source costs in Spark."""
FLOOR_LABEL = "Python source floor"
RUNS = 2
RATE, LIVE_SECONDS = 2_000, 60
TARGETS = {"speed_vs_format_kafka": 1.2, "bytes_per_payload_byte": 1.1, "p99_extra_ms": 100}
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}
WARM_UP_SHARE = 1 / 3
"""Latency is also given for records produced after the first third of the live run: both
sources' first batches pay for starting (JIT, consumers, and kafkasync's Python workers)."""
TRIGGER_PHASES = ("triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
HERE = os.path.dirname(os.path.abspath(__file__))


def _options(source: str, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    options = dict(READ_COMMITTED)
    if source == "kafkasync":
        options["max.task.idle.ms"] = "0"
    options.update(extra or {})
    return options


def _peak_rss_bytes(pid: int) -> int:
    """``VmHWM``: the process's peak resident set size (Linux /proc)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def _spark(jars: str):
    from kafkasync_source.source import register
    from kafkasync_source.testing.spark import local_spark_session

    workdir = tempfile.mkdtemp(prefix="kafkasync-side-by-side-")
    spark = local_spark_session("kafkasync-side-by-side", workdir, {"spark.jars": jars},
                                jvm_log=os.path.join(workdir, "spark.log"))
    register(spark)
    return spark


class SourceRunnerPeak:
    """Peak RSS of Spark's Python streaming source runner (``python_streaming_source_runner``),
    the process a Python data source's driver side runs in, sampled while a query runs: it
    exits with the query, and ``VmHWM`` can only be read while it lives."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.peak = 0
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "SourceRunnerPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                        if b"python_streaming_source_runner" not in cmdline.read():
                            continue
                    self.peak = max(self.peak, _peak_rss_bytes(int(entry)))
                except (OSError, RuntimeError):  # exited meanwhile
                    continue


def _jvm_pid(spark) -> int:
    """PySpark launches the JVM through spark-submit, which ``exec``s java: same pid."""
    return spark.sparkContext._gateway.proc.pid


# -- child processes: one Spark each --------------------------------------------------------

def _backlog_reader(spark, source: str, bootstrap: str, topic: str, records: int):
    if source == FLOOR:
        from benchmarks.ceiling import CeilingDataSource

        spark.dataSource.register(CeilingDataSource)
        return (spark.readStream.format(FLOOR).option("batches", 1).option("partitions", PARTITIONS)
                .option("rows", records // PARTITIONS).option("valueBytes", VALUE_BYTES))
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in _options(source).items():
        reader = reader.option(key, value)
    return reader


def child_backlog(spark, source: str, bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    """The backlog read in a new Spark (the figure the target is about), then again in the same
    Spark ("warm": its JVM compiled, the executors' Python workers started); per read, the
    query's seconds and its triggers' (``triggerExecution``), the rest being the query's start
    and stop."""
    def read_once() -> tuple[float, float]:
        reader = _backlog_reader(spark, source, bootstrap, topic, records)
        started = time.perf_counter()
        query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
        rows = sum(p.numInputRows for p in query.recentProgress)
        if rows != records:
            raise RuntimeError(f"{source} read {rows} of {records} records")
        return seconds, sum(p.durationMs.get("triggerExecution", 0) for p in query.recentProgress) / 1000

    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    with SourceRunnerPeak() as runner, BrokerBytesSampler(port) as sampler:
        seconds, trigger_seconds = read_once()
    result = {"seconds": seconds, "trigger_seconds": trigger_seconds, "bytes_sent": sampler.bytes_sent,
              "jvm_peak_rss": _peak_rss_bytes(_jvm_pid(spark)),
              "python_peak_rss": _peak_rss_bytes(os.getpid()), "source_runner_peak_rss": runner.peak}
    result["warm_seconds"], result["warm_trigger_seconds"] = read_once()
    return result


def child_latency(spark, source: str, bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    """Start the query at the topic's end, then produce ``RATE`` records/s for ``seconds``."""
    from confluent_kafka import Producer

    latencies: list[tuple[float, float]] = []  # (CreateTime ms, latency ms)
    lock = threading.Lock()

    def sink(frame, batch_id):
        arrived = time.time() * 1000
        stamps = [row[0] for row in frame.selectExpr("unix_millis(timestamp)").collect()]
        with lock:
            latencies.extend((stamp, arrived - stamp) for stamp in stamps)

    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "latest"))
    for key, value in _options(source).items():
        reader = reader.option(key, value)
    query = reader.load().writeStream.foreachBatch(sink).start()
    try:
        deadline = time.monotonic() + 120
        while len(query.recentProgress) < 2:  # started, and at the end of the topic
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{source} did not start: {query.exception()}")
            time.sleep(0.1)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        total = int(RATE * seconds)
        began, began_ms = time.monotonic(), time.time() * 1000
        for i in range(total):
            # Paced in steps of 1/100 s; CreateTime is stamped at produce().
            if i % (RATE // 100) == 0:
                lag = began + i / RATE - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
                producer.poll(0)
            producer.produce(topic, value=b"v" * 100, partition=i % PARTITIONS)
        if producer.flush(30):
            raise RuntimeError("records left undelivered")
        deadline = time.monotonic() + 120
        while True:
            with lock:
                read = len(latencies)
            if read >= total:
                break
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{source} read {read} of {total}: {query.exception()}")
            time.sleep(0.2)
        progress = query.recentProgress
    finally:
        query.stop()
    warm_up_ms = WARM_UP_SHARE * seconds * 1000
    return {**_quantiles([latency for _, latency in latencies]), "records": len(latencies),
            "steady": {**_quantiles([latency for stamp, latency in latencies if stamp - began_ms >= warm_up_ms]),
                       "after_s": warm_up_ms / 1000},
            "trigger_ms": _phases(progress)}


def _quantiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"p50_ms": ordered[len(ordered) // 2],
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], "max_ms": ordered[-1]}


def _phases(progress: list) -> dict[str, float]:
    """Median ``durationMs`` of the batches that read records, per phase: where a trigger's
    time goes (Spark's own accounting, the same for both sources)."""
    batches = [p.durationMs for p in progress if p.numInputRows]
    return {phase: statistics.median(d.get(phase, 0) for d in batches) for phase in TRIGGER_PHASES} if batches else {}


def child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("backlog", "latency"))
    parser.add_argument("--source", choices=(*SOURCES, FLOOR), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=LIVE_SECONDS)
    parser.add_argument("--jars", required=True)
    args = parser.parse_args(argv)
    spark = _spark(args.jars)
    try:
        if args.what == "backlog":
            result = child_backlog(spark, args.source, args.bootstrap, args.topic, args.records)
        else:
            result = child_latency(spark, args.source, args.bootstrap, args.topic, args.seconds)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


def _run_child(*arguments: str) -> dict[str, Any]:
    completed = subprocess.run([sys.executable, "-m", "benchmarks.side_by_side", "--child", *arguments],
                               capture_output=True, text=True, cwd=os.path.dirname(HERE))
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"side_by_side child {arguments[:3]} failed (exit {completed.returncode}): "
                       f"{completed.stderr[-2000:]}")


# -- the parent: broker, topics, comparisons -------------------------------------------------

def backlog(bootstrap: str, jars: str, records_per_partition: int, runs: int,
            log: Callable[[str], None]) -> dict[str, Any]:
    topic = f"kafkasync-side-by-side-{int(time.time())}"
    payload = produce_backlog(bootstrap, topic, records_per_partition)
    records = PARTITIONS * records_per_partition
    runs_by_source: dict[str, list[dict[str, Any]]] = {source: [] for source in (*SOURCES, FLOOR)}
    labels = {**LABELS, FLOOR: FLOOR_LABEL}
    for source in (*SOURCES, FLOOR) * runs:
        log(f"side by side: {labels[source]} reads the backlog ({records:,} records), twice")
        run = _run_child("backlog", "--source", source, "--bootstrap", bootstrap, "--topic", topic,
                         "--records", str(records), "--jars", jars)
        bytes_sent = run.pop("bytes_sent")
        if source != FLOOR:  # it reads no broker
            run["bytes_per_payload_byte"] = bytes_sent / payload
        runs_by_source[source].append(run)
    result: dict[str, Any] = {"records": records, "payload_bytes": payload,
                              "value_bytes": VALUE_BYTES, "key_bytes": KEY_BYTES, "runs": runs}
    for source, measured in runs_by_source.items():
        result[labels[source]] = {key: statistics.median(run[key] for run in measured) for key in measured[0]}
    for reader, label in (("kafkasync", LABELS["kafkasync"]), ("floor", FLOOR_LABEL)):
        for prefix, figure in (("", "seconds"), ("warm_", "warm_seconds"), ("warm_trigger_", "warm_trigger_seconds")):
            result[f"{prefix}{reader}_speed_vs_format_kafka"] = result[LABELS["kafka"]][figure] / result[label][figure]
    return result


def latency(bootstrap: str, jars: str, seconds: float, log: Callable[[str], None]) -> dict[str, Any]:
    from kafkasync_source.testing.broker import KafkaBroker

    result: dict[str, Any] = {"records_per_second": RATE, "partitions": PARTITIONS, "seconds": seconds}
    for source in SOURCES:
        topic = f"kafkasync-latency-{source}-{int(time.time())}"
        with KafkaBroker(bootstrap) as broker:
            broker.create_topic(topic, PARTITIONS)
        log(f"side by side: {LABELS[source]} reads {RATE:,} records/s live for {seconds:.0f} s")
        result[LABELS[source]] = _run_child("latency", "--source", source, "--bootstrap", bootstrap,
                                            "--topic", topic, "--seconds", str(seconds), "--jars", jars)
    result["p99_extra_ms"] = result[LABELS["kafkasync"]]["p99_ms"] - result[LABELS["kafka"]]["p99_ms"]
    result["steady_p99_extra_ms"] = (result[LABELS["kafkasync"]]["steady"]["p99_ms"]
                                     - result[LABELS["kafka"]]["steady"]["p99_ms"])
    return result


def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of the side-by-side issue: value and whether it is met."""
    speed = results["backlog"]["kafkasync_speed_vs_format_kafka"]
    bytes_ratio = results["backlog"]["kafkasync"]["bytes_per_payload_byte"]
    extra = results["latency"]["p99_extra_ms"]
    return {
        "speed_vs_format_kafka": {"value": round(speed, 3), "target": f">= {TARGETS['speed_vs_format_kafka']}",
                                  "met": speed >= TARGETS["speed_vs_format_kafka"],
                                  "python_source_floor": round(results["backlog"]["floor_speed_vs_format_kafka"], 3)},
        "bytes_per_payload_byte": {"value": round(bytes_ratio, 3),
                                   "target": f"<= {TARGETS['bytes_per_payload_byte']}",
                                   "met": bytes_ratio <= TARGETS["bytes_per_payload_byte"]},
        "p99_extra_ms": {"value": round(extra, 1), "target": f"<= {TARGETS['p99_extra_ms']}",
                         "met": extra <= TARGETS["p99_extra_ms"]},
    }


def measure(*, tiny: bool = False, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Every comparison, or ``{"skipped": why}`` where there is no broker or no connector."""
    import pyspark

    from benchmarks import trigger_cost
    from kafkasync_source.testing.local_broker import real_broker

    from kafkasync_source.testing.spark import format_kafka_jars

    jars, why_not = format_kafka_jars()
    if jars is None:
        return {"skipped": why_not}
    with real_broker() as (bootstrap, why_not):
        if bootstrap is None:
            return {"skipped": why_not}
        results: dict[str, Any] = {"spark_version": pyspark.__version__, "broker": bootstrap,
                                   "isolation_level": "read_committed", "tiny": tiny}
        results["backlog"] = backlog(bootstrap, jars, 500 if tiny else RECORDS_PER_PARTITION,
                                     1 if tiny else RUNS, log)
        results["latency"] = latency(bootstrap, jars, 5 if tiny else LIVE_SECONDS, log)
        spark = _spark(jars)
        try:
            log("side by side: the cost of one trigger, both sources")
            results["trigger_cost"] = trigger_cost.measure(tiny=tiny, bootstrap=bootstrap, spark=spark, log=log)
        finally:
            spark.stop()
    results["targets"] = targets(results)
    return results


def draw(results: dict[str, Any], path: str) -> None:
    """Four panels, format("kafka") beside kafkasync: backlog seconds, bytes per payload byte,
    driver peak RSS, live latency p50/p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [LABELS[source] for source in SOURCES]
    colours = ["#999999", "#1f77b4"]
    back, live = results["backlog"], results["latency"]
    panels = [
        ("backlog read once (s)", [back[n]["seconds"] for n in names]),
        ("broker bytes per payload byte", [back[n]["bytes_per_payload_byte"] for n in names]),
        ("driver peak RSS: JVM + Python processes (MiB)",
         [(back[n]["jvm_peak_rss"] + back[n]["python_peak_rss"] + back[n]["source_runner_peak_rss"]) / 2**20
          for n in names]),
    ]
    floor = back.get(FLOOR_LABEL)
    if floor is not None:  # results written before the floor was measured have none
        panels[0] = (panels[0][0], [*panels[0][1], floor["seconds"]])
    figure, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for axis, (title, values) in zip(axes, panels):
        axis.bar([*names, "Python source\nfloor"][:len(values)], values, color=[*colours, "#dddddd"][:len(values)])
        axis.set_title(title, fontsize=10)
        for x, value in enumerate(values):
            label = f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"
            axis.annotate(label, (x, value), ha="center", va="bottom")
    axis = axes[3]
    width = 0.38
    for offset, quantile in ((-width / 2, "p50_ms"), (width / 2, "p99_ms")):
        values = [live[n][quantile] for n in names]
        axis.bar([x + offset for x in range(2)], values, width, label=quantile[:3],
                 color=colours, alpha=0.55 if quantile == "p50_ms" else 1.0)
        for x, value in enumerate(values):
            axis.annotate(f"{value:,.0f}", (x + offset, value), ha="center", va="bottom", fontsize=8)
    axis.set_xticks(range(2), names)
    axis.set_title(f"live latency, {RATE:,} rec/s: p50 / p99 (ms)", fontsize=10)
    figure.suptitle(f"kafkasync beside format(\"kafka\"), Spark {results['spark_version']}, "
                    f"{back['records']:,} x {back['value_bytes']:,} B backlog, read_committed", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write(results: dict[str, Any]) -> None:
    path = os.path.join(HERE, "results.json")
    merged = json.load(open(path)) if os.path.exists(path) else {}
    merged["side_by_side"] = results
    with open(path, "w") as out:
        json.dump(merged, out, indent=1, sort_keys=True)
        out.write("\n")
    draw(results, os.path.join(HERE, os.pardir, "docs", "img", "side_by_side.png"))


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="500 records a partition, 5 s live: a smoke run")
    parser.add_argument("--write", action="store_true", help="into benchmarks/results.json and docs/img/side_by_side.png")
    args = parser.parse_args(argv)
    results = measure(tiny=args.tiny, log=lambda m: print(f"[bench {time.strftime('%H:%M:%S')}] {m}",
                                                          file=sys.stderr, flush=True))
    print(json.dumps(results, indent=2))
    if "skipped" in results:
        print(f"side by side: skipped: {results['skipped']}", file=sys.stderr)
        return 0
    if args.write:
        write(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
