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
   Beside them, the same backlog's rows from :mod:`benchmarks.harness.floor_source`, a Python streaming
   source that does no Kafka work (one batch of ready-made Arrow batches, one input partition
   per Kafka partition): Spark's floor for any Python source on this machine, cold and warm.
2. **Latency**: a live stream of 2,000 records/s over 8 partitions for 60 s, read by each
   source in turn (default trigger, ``max.task.idle.ms=0`` for kafkasync): per record, the time
   from its ``CreateTime`` (stamped by the producer) to its batch's ``foreachBatch``, p50/p99,
   over the whole run and over the records produced after its first third (past both
   sources' start-up), and the median ``durationMs`` of a batch per phase.
3. **Sustainable live rate and CPU per record** (:mod:`benchmarks.live_rate`): the highest
   producer rate each source keeps up with, on the machine as it is and with its CPU starved
   by busy loops, and every process's CPU seconds per 1,000 records.
4. **Trigger cost** at 512 and 4,096 partitions, both sources
   (:func:`benchmarks.trigger_cost.measure`, which asks format("kafka")'s Spark progress).
5. **Debezium Avro** (key ``avro``; not in a smoke run): a windowed count on ``source.ts_ms`` by
   kafkasync (``value.format=avro-confluent``, ``eventTime.field``, with and without
   ``value.decode``) beside ``format("kafka")`` + ``substring`` + ``from_avro``
   (:func:`benchmarks.formats_bench.measure`).

``python -m benchmarks.side_by_side [--tiny]`` prints the results as JSON; ``--write`` also
merges them into ``benchmarks/results.json`` (key ``side_by_side``) and draws
``docs/img/side_by_side.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from benchmarks.broker_bytes import (
    KEY_BYTES,
    PARTITIONS,
    RECORDS_PER_PARTITION,
    VALUE_BYTES,
    BrokerBytesSampler,
    PeriodicSampler,
    produce_backlog,
)
from kafkasync_source.spark.input_partitions import default_target_tasks

SOURCES = ("kafka", "kafkasync")
LABELS = {"kafka": 'format("kafka")', "kafkasync": "kafkasync"}
FLOOR = "kafkasync-ceiling"
"""``benchmarks.harness.floor_source``'s source, read beside the two: what a Python source costs in Spark."""
FLOOR_LABEL = "Python source floor, worker fixes"
"""The backlog's floor: :data:`TUNED_FLOOR`, the least a Python source that yields the same rows
costs in Spark (without the fixes each task's worker spends about 50 ms collecting garbage)."""
RUNS = 2
RATE, LIVE_SECONDS = 2_000, 60
TARGETS = {"speed_vs_format_kafka": 1.2, "bytes_per_payload_byte": 1.1, "steady_p99_extra_ms": 100,
           "batch_ms_over_floor": 30}
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}
WARM_UP_SHARE = 1 / 3
"""Latency is also given for records produced after the first third of the live run: both
sources' first batches pay for starting (JIT, consumers, and kafkasync's Python workers)."""
TUNED_FLOOR = "kafkasync-ceiling-tuned"
"""The floor source with kafkasync's fixes for Spark's Python workers (``python_worker.py``):
what a Python source that applies them costs, so that kafkasync's own cost per batch shows."""
LIVE_SOURCES = ("rate", FLOOR, TUNED_FLOOR, "kafka", "kafkasync")
"""The live comparison: Spark's JVM ``rate`` source and Python sources that do nothing (the
floors), then the two Kafka sources."""
LIVE_LABELS = {"rate": 'format("rate")', FLOOR: "Python source floor", TUNED_FLOOR: FLOOR_LABEL, **LABELS}
LIVE_RUNS = 3
SMALL_VALUE_BYTES = 200
"""The backlog is read twice over: 1,000-byte values (``backlog``) and 200-byte ones
(``backlog_small_records``), where per-record costs weigh more than bytes."""
JAVA_BATCH_BYTES = 16_384
"""A Java producer's ``batch.size`` by default (Kafka Connect and so Debezium, Kafka Streams):
the backlog written in such batches too (``backlog_java_batches``,
``backlog_small_records_java_batches``). librdkafka's (``batch.size`` 1,000,000), which writes
the other backlogs at full speed, makes batches of 0.6-1 MB, and a capped read's cost depends on
them: the planner reads one batch at each partition's cut, a range's reader the rest of the one
it ends in."""
CAPPED_SHARE = 1 / 8
"""The capped read's ``maxOffsetsPerTrigger``, a share of the backlog: 8 triggers, each range
of 1/64 of it (8 x 50,000 records capped at 50,000, issue 53's measurement)."""
TINY_RECORDS_PER_PARTITION = 512
"""A smoke run's backlog: the floor's capped read splits it into equal tasks (8 batches of 8)."""
PREFILLED = 1_000
"""Records in a live topic when its query starts (from the earliest offset): its first batch
has rows, and start to first ``foreachBatch`` is the time to first row."""
FLOOR_ROWS_PER_TASK = 200
"""About what each of kafkasync's tasks reads of the live stream (2,000 records/s, batches
of about 200 ms, 2 tasks)."""
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


def _spark(jars: str, event_log: Optional[str] = None):
    from kafkasync_dev.testing.spark import local_spark_session
    from kafkasync_source.spark.source import register

    workdir = tempfile.mkdtemp(prefix="kafkasync-side-by-side-")
    conf = {"spark.jars": jars, **_extra_spark_conf()}
    if event_log:  # Spark's listener events, for the tasks' and jobs' timing (_event_log_timing)
        conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_log,
                     "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false"})
    spark = local_spark_session("kafkasync-side-by-side", workdir, conf,
                                jvm_log=os.path.join(workdir, "spark.log"))
    register(spark)
    return spark


SPARK_CONF_ENV = "KAFKASYNC_BENCH_SPARK_CONF"
"""Extra Spark settings for every child's Spark, ``key=value`` pairs separated by spaces
(``--spark-conf``): to measure what a setting does, on every source alike."""


def _extra_spark_conf() -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in os.environ.get(SPARK_CONF_ENV, "").split())


class SourceRunnerPeak(PeriodicSampler):
    """Peak RSS of Spark's Python streaming source runner (``python_streaming_source_runner``),
    the process a Python data source's driver side runs in, sampled while a query runs: it
    exits with the query, and ``VmHWM`` can only be read while it lives."""

    def __init__(self, interval_s: float = 0.2) -> None:
        super().__init__(interval_s)
        self.peak = 0

    def _sample(self) -> None:
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


class CpuByProcess(PeriodicSampler):
    """CPU seconds each kind of process used while a read ran (:func:`cpu_seconds_by_process`:
    the driver's JVM, the PySpark driver, the Python source runner, the executors' Python
    workers, the broker), and the whole machine's busy seconds (``/proc/stat``, other people's
    processes included). The processes are sampled every ``interval_s``, keeping each one's
    last figure: Spark's source runner exits with its query, before a sample taken after the
    read could see it (what it used in its last ``interval_s`` is lost). The sampling thread's
    own CPU, spent in the PySpark driver, is taken out of that process's figure."""

    def __init__(self, jvm_pid: int, interval_s: float = 0.25) -> None:
        super().__init__(interval_s)
        self._jvm_pid = jvm_pid
        self._first: dict[int, tuple[str, float]] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._machine_busy = 0.0

    def _begin(self) -> None:
        self._first = cpu_seconds_by_process(self._jvm_pid)
        self._last = dict(self._first)
        self._machine_busy = -machine_busy_seconds()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._machine_busy += machine_busy_seconds()

    def _sample(self) -> None:
        self._last.update(cpu_seconds_by_process(self._jvm_pid))

    def seconds(self) -> dict[str, float]:
        """CPU seconds by kind of process over the read, ``Spark`` (every Spark process: what
        the read costs the cluster's cores), ``Spark and broker``, and ``machine``."""
        used: dict[str, float] = {}
        for pid, (name, seconds) in self._last.items():
            used[name] = used.get(name, 0.0) + seconds - self._first.get(pid, (name, 0.0))[1]
        if "PySpark driver" in used:
            used["PySpark driver"] -= self.sampler_cpu_s
        used["Spark"] = sum(seconds for name, seconds in used.items() if name != "broker")
        used["Spark and broker"] = used["Spark"] + used.get("broker", 0.0)
        used["machine"] = self._machine_busy
        return used

    def per_million(self, records: int) -> dict[str, float]:
        return {name: seconds * 1e6 / records for name, seconds in self.seconds().items()}


def machine_busy_seconds() -> float:
    """Seconds every core of this machine has been busy since boot (``/proc/stat``'s first line:
    user, nice, system and interrupts: not idle, I/O wait or time a hypervisor stole)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = (int(field) for field in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _jvm_pid(spark) -> int:
    """PySpark launches the JVM through spark-submit, which ``exec``s java: same pid."""
    return spark.sparkContext._gateway.proc.pid


# -- child processes: one Spark each --------------------------------------------------------

def _backlog_reader(spark, source: str, bootstrap: str, topic: str, records: int, value_bytes: int,
                    capped: bool = False):
    """The backlog's read, capped at :data:`CAPPED_SHARE` of it a trigger: the Kafka sources with
    ``maxOffsetsPerTrigger``, a floor (no broker, no cap) in as many batches of the same tasks."""
    if source in (FLOOR, TUNED_FLOOR):
        from benchmarks.harness.floor_source import CeilingDataSource

        spark.dataSource.register(CeilingDataSource)
        batches = round(1 / CAPPED_SHARE) if capped else 1
        rows, left = divmod(records, PARTITIONS * batches)
        if left:
            raise ValueError(f"the floor reads {records:,} records in {PARTITIONS} x {batches} equal tasks: "
                             "not a multiple")
        return (spark.readStream.format(FLOOR).option("batches", batches).option("partitions", PARTITIONS)
                .option("rows", rows).option("valueBytes", value_bytes)
                .option("workerFixes", source == TUNED_FLOOR))
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in _options(source).items():
        reader = reader.option(key, value)
    if capped:
        reader = reader.option("maxOffsetsPerTrigger", str(max(1, int(records * CAPPED_SHARE))))
    return reader


def child_backlog(spark, source: str, bootstrap: str, topic: str, records: int,
                  value_bytes: int = VALUE_BYTES) -> dict[str, Any]:
    """The backlog read in a new Spark (the figure the target is about), then again in the same
    Spark ("warm": its JVM compiled, the executors' Python workers started), then once more
    capped at :data:`CAPPED_SHARE` of it a trigger (``maxOffsetsPerTrigger``: a rate-limited
    backfill, where a reader that prefetches past its range's end makes the broker send more);
    per read, the query's seconds and its triggers' (``triggerExecution``), the rest being the
    query's start and stop, and every process's CPU seconds (:class:`CpuByProcess`)."""
    def read_once(capped: bool = False) -> tuple[float, float]:
        reader = _backlog_reader(spark, source, bootstrap, topic, records, value_bytes, capped)
        started = time.perf_counter()
        query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
        rows = sum(p.numInputRows for p in query.recentProgress)
        if rows != records:
            raise RuntimeError(f"{source} read {rows} of {records} records")
        return seconds, sum(p.durationMs.get("triggerExecution", 0) for p in query.recentProgress) / 1000

    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    jvm_pid = _jvm_pid(spark)
    with SourceRunnerPeak() as runner, BrokerBytesSampler(port) as sampler, CpuByProcess(jvm_pid) as cpu:
        seconds, trigger_seconds = read_once()
    result: dict[str, Any] = {
        "seconds": seconds, "trigger_seconds": trigger_seconds, "bytes_sent": sampler.bytes_sent,
        "jvm_peak_rss": _peak_rss_bytes(jvm_pid), "python_peak_rss": _peak_rss_bytes(os.getpid()),
        "source_runner_peak_rss": runner.peak, "cpu_s_per_million_records": cpu.per_million(records)}
    with CpuByProcess(jvm_pid) as cpu:
        result["warm_seconds"], result["warm_trigger_seconds"] = read_once()
    result["warm_cpu_s_per_million_records"] = cpu.per_million(records)
    with BrokerBytesSampler(port) as sampler, CpuByProcess(jvm_pid) as cpu:
        result["capped_seconds"], result["capped_trigger_seconds"] = read_once(capped=True)
    result["capped_bytes_sent"] = sampler.bytes_sent
    result["capped_cpu_s_per_million_records"] = cpu.per_million(records)
    return result


def _live_reader(spark, source: str, bootstrap: str, topic: str):
    """The live stream of one source: a Kafka topic from its beginning (it holds
    ``PREFILLED`` records when the query starts, for the time to first row), Spark's JVM
    ``rate`` source, or the Python floor source with as many tasks as kafkasync runs."""
    if source == "rate":
        return (spark.readStream.format("rate").option("rowsPerSecond", RATE)
                .option("numPartitions", default_target_tasks()))
    if source in (FLOOR, TUNED_FLOOR):
        from benchmarks.harness.floor_source import CeilingDataSource

        spark.dataSource.register(CeilingDataSource)
        return (spark.readStream.format(FLOOR).option("batches", 0).option("partitions", default_target_tasks())
                .option("rows", FLOOR_ROWS_PER_TASK).option("valueBytes", 100)
                .option("workerFixes", source == TUNED_FLOOR))
    name = source
    if source == "kafkasync":
        from benchmarks.harness.traced_kafkasync import TracedKafkaSync

        spark.dataSource.register(TracedKafkaSync)
        name = TracedKafkaSync.name()
    reader = (spark.readStream.format(name).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in _options(source).items():
        reader = reader.option(key, value)
    return reader


class _Produced:
    """Records sent at ``RATE`` per second, paced in steps of 1/100 s, in a thread (CreateTime
    is stamped at ``produce()``)."""

    def __init__(self, bootstrap: str, topic: str, seconds: float) -> None:
        from confluent_kafka import Producer

        self.total = int(RATE * seconds)
        self.began_ms = 0.0
        self.error: Optional[BaseException] = None
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "_Produced":
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            began, self.began_ms = time.monotonic(), time.time() * 1000
            for i in range(self.total):
                if i % (RATE // 100) == 0:
                    lag = began + i / RATE - time.monotonic()
                    if lag > 0:
                        time.sleep(lag)
                    self._producer.poll(0)
                self._producer.produce(self._topic, value=b"v" * 100, partition=i % PARTITIONS)
            if self._producer.flush(30):
                raise RuntimeError("records left undelivered")
        except BaseException as err:  # raised in join()
            self.error = err


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


def child_latency(spark, source: str, bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    """One source's live stream into ``foreachBatch``: time to first row, then ``seconds`` of
    steady batches (a Kafka source reads ``RATE`` records/s produced meanwhile; ``rate`` makes
    as many; the floor source always has a batch), per record its latency, per batch its phases,
    per Python runner call and task its timing (:mod:`benchmarks.harness.runner_trace`), and the CPU
    each process used."""
    from benchmarks.harness.runner_trace import TRACE_ENV

    arrivals, sink = arrival_sink()
    started = time.time() * 1000
    query = _live_reader(spark, source, bootstrap, topic).load().writeStream.foreachBatch(sink).start()
    try:
        wait_for_a_row(query, source, arrivals)
        first_row_ms = next(at for at, stamps in list(arrivals) if stamps) - started
        # Every source's run has the producer and the broker at work, so that all run on a
        # machine equally busy; only the Kafka sources read what it writes.
        producer = _Produced(bootstrap, topic, seconds).start()
        began_ms = time.time() * 1000
        warm_up_ms = WARM_UP_SHARE * seconds * 1000
        time.sleep(warm_up_ms / 1000)
        cpu_before = _cpu_seconds(_jvm_pid(spark))
        time.sleep(seconds - warm_up_ms / 1000)
        cpu = {name: (after - cpu_before.get(name, 0.0)) / (seconds - warm_up_ms / 1000)
               for name, after in _cpu_seconds(_jvm_pid(spark)).items()}
        producer.join()
        began_ms = producer.began_ms
        deadline = time.monotonic() + 120
        while source in SOURCES and sum(len(stamps) for _, stamps in list(arrivals)) < PREFILLED + producer.total:
            if query.exception() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{source} read too few records: {query.exception()}")
            time.sleep(0.2)
        progress = query.recentProgress
    finally:
        query.stop()
    steady_from = began_ms + warm_up_ms
    result: dict[str, Any] = {"first_row_ms": first_row_ms, "steady_from_ms": steady_from, "cpu_per_s": cpu,
                              "trigger_ms": _phases(progress, steady_from),
                              "batch_ms_spread": _batch_spread(progress, steady_from)}
    if source in SOURCES:  # the others' timestamps say nothing of latency (rate's: one batch a second)
        latencies = [(stamp, at - stamp) for at, stamps in arrivals for stamp in stamps if stamp >= began_ms]
        result.update(_quantiles([latency for _, latency in latencies]))
        result["records"] = len(latencies)
        result["steady"] = {**_quantiles([latency for stamp, latency in latencies if stamp >= steady_from]),
                            "after_s": warm_up_ms / 1000}
    trace_path = os.environ.get(TRACE_ENV)
    if trace_path and os.path.exists(trace_path):
        result["python"] = _python_trace(trace_path, steady_from)
    return result


def _cpu_seconds(jvm_pid: int) -> dict[str, float]:
    """CPU seconds used so far by this process, the driver's JVM, its Python source runner, the
    executors' Python workers (all this process's descendants) and by a broker the parent started
    (``/proc/<pid>/stat``: utime + stime). Other people's processes on a shared machine are not
    counted; their load shows in the load average."""
    used: dict[str, float] = {}
    for name, seconds in cpu_seconds_by_process(jvm_pid).values():
        used[name] = used.get(name, 0.0) + seconds
    return used


def cpu_seconds_by_process(jvm_pid: int) -> dict[int, tuple[str, float]]:
    """:func:`_cpu_seconds` per process id, with its kind: a difference of two samples taken per
    process counts a process started between them from zero and leaves one that exited out,
    where a difference of the sums by kind goes negative when a Python worker exits."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, bytes, list[str]]] = {}  # pid -> (parent, command, fields)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        stats[int(entry)] = (int(fields[1]), command, fields)

    def descends_from(pid: int, ancestor: int) -> bool:
        while pid > 1 and pid in stats:
            if pid == ancestor:
                return True
            pid = stats[pid][0]
        return False

    used: dict[int, tuple[str, float]] = {}
    for pid, (_, command, fields) in stats.items():
        if not descends_from(pid, os.getpid()) and not (b"kafka.Kafka" in command
                                                         and descends_from(pid, os.getppid())):
            continue
        if pid == jvm_pid:
            name = "driver JVM"
        elif b"python_streaming_source_runner" in command:
            name = "Python source runner"
        elif b"pyspark.daemon" in command or b"pyspark.worker" in command:
            name = "Python workers"
        elif b"kafka.Kafka" in command:
            name = "broker"
        elif pid == os.getpid():
            name = "PySpark driver"
        else:
            continue
        used[pid] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return used


def _event_log_timing(directory: str, steady_from_ms: float) -> dict[str, Any]:
    """From Spark's event log, for the jobs submitted after ``steady_from_ms``: jobs per batch,
    a job's duration, the wait from its submission to its first task's launch, and per task its
    duration (launch to finish), deserialization and run time (Spark's task metrics)."""
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
        "tasks_per_job": len(steady_tasks) / len(steady),
        "job_ms": statistics.median(job["completed"] - job["submitted"] for job in steady.values()),
        "submit_to_launch_ms": statistics.median(first_launch[j] - steady[j]["submitted"] for j in first_launch),
        "task_ms": statistics.median(task["ms"] for task in steady_tasks),
        "task_deserialize_ms": statistics.median(task["deserialize_ms"] for task in steady_tasks),
        "task_run_ms": statistics.median(task["run_ms"] for task in steady_tasks),
    }


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


def _quantiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"p50_ms": ordered[len(ordered) // 2],
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], "max_ms": ordered[-1]}


def _steady_batches(progress: list, steady_from_ms: float) -> list:
    """The batches that read records and began after ``steady_from_ms``."""
    from datetime import datetime

    def began_ms(p) -> float:
        return datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() * 1000

    return [p for p in progress if p.numInputRows and began_ms(p) >= steady_from_ms]


def _phases(progress: list, steady_from_ms: float) -> dict[str, float]:
    """Median ``durationMs`` of the steady batches that read records, per phase: where a
    trigger's time goes (Spark's own accounting, the same for every source)."""
    batches = [p.durationMs for p in _steady_batches(progress, steady_from_ms)]
    return {phase: statistics.median(d.get(phase, 0) for d in batches) for phase in TRIGGER_PHASES} if batches else {}


def _batch_spread(progress: list, steady_from_ms: float) -> dict[str, float]:
    """How many steady batches, and their ``triggerExecution`` p10/p90 (ms)."""
    durations = sorted(p.durationMs.get("triggerExecution", 0) for p in _steady_batches(progress, steady_from_ms))
    if not durations:
        return {"batches": 0}
    return {"batches": len(durations), "p10_ms": durations[len(durations) // 10],
            "p90_ms": durations[min(len(durations) - 1, len(durations) * 9 // 10)]}


def child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("backlog", "latency"))
    parser.add_argument("--source", choices=(*SOURCES, *LIVE_SOURCES), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--value-bytes", type=int, default=VALUE_BYTES)
    parser.add_argument("--seconds", type=float, default=LIVE_SECONDS)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--trace", help="the file benchmarks.harness.runner_trace appends to")
    args = parser.parse_args(argv)
    if args.trace:
        from benchmarks.harness.runner_trace import TRACE_ENV

        os.environ[TRACE_ENV] = args.trace  # before Spark starts: its Python processes inherit it
    event_log = tempfile.mkdtemp(prefix="kafkasync-events-") if args.what == "latency" else None
    spark = _spark(args.jars, event_log)
    try:
        if args.what == "backlog":
            result = child_backlog(spark, args.source, args.bootstrap, args.topic, args.records, args.value_bytes)
        else:
            result = child_latency(spark, args.source, args.bootstrap, args.topic, args.seconds)
    finally:
        spark.stop()
    if event_log:
        result["spark_tasks"] = _event_log_timing(event_log, result.pop("steady_from_ms"))
        shutil.rmtree(event_log, ignore_errors=True)
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
            log: Callable[[str], None], value_bytes: int = VALUE_BYTES,
            batch_bytes: Optional[int] = None) -> dict[str, Any]:
    """Both sources and the Python source floor (with kafkasync's worker fixes, :data:`FLOOR_LABEL`)
    read one backlog, ``runs`` times each.
    ``batch_bytes``: the producer's ``batch.size`` the backlog is written with (None:
    librdkafka's); the floor, which reads no broker, is left out then."""
    topic = f"kafkasync-side-by-side-{value_bytes}-{batch_bytes or 'default'}-{int(time.time())}"
    payload = produce_backlog(bootstrap, topic, records_per_partition, value_bytes, batch_bytes)
    records = PARTITIONS * records_per_partition
    sources = SOURCES if batch_bytes is not None else (*SOURCES, TUNED_FLOOR)
    runs_by_source: dict[str, list[dict[str, Any]]] = {source: [] for source in sources}
    labels = {**LABELS, TUNED_FLOOR: FLOOR_LABEL}
    batches = "" if batch_bytes is None else f" in producer batches of {batch_bytes:,} B"
    for source in sources * runs:
        log(f"side by side: {labels[source]} reads the backlog ({records:,} records of {value_bytes:,} B"
            f"{batches}), twice")
        run = _run_child("backlog", "--source", source, "--bootstrap", bootstrap, "--topic", topic,
                         "--records", str(records), "--value-bytes", str(value_bytes), "--jars", jars)
        bytes_sent, capped_bytes_sent = run.pop("bytes_sent"), run.pop("capped_bytes_sent")
        if source != TUNED_FLOOR:  # it reads no broker
            run["bytes_per_payload_byte"] = bytes_sent / payload
            run["capped_bytes_per_payload_byte"] = capped_bytes_sent / payload
        runs_by_source[source].append(run)
    result: dict[str, Any] = {"records": records, "payload_bytes": payload, "value_bytes": value_bytes,
                              "key_bytes": KEY_BYTES, "runs": runs, "producer_batch_size": batch_bytes,
                              "max_offsets_per_trigger": max(1, int(records * CAPPED_SHARE))}
    for source, measured in runs_by_source.items():
        result[labels[source]] = _median_of_runs(measured)
    kafka = result[LABELS["kafka"]]
    for reader, label in (("kafkasync", LABELS["kafkasync"]), ("floor", FLOOR_LABEL)):
        if label not in result:
            continue
        for prefix, figure in (("", "seconds"), ("warm_", "warm_seconds"), ("warm_trigger_", "warm_trigger_seconds"),
                               ("capped_", "capped_seconds")):
            result[f"{prefix}{reader}_speed_vs_format_kafka"] = kafka[figure] / result[label][figure]
        # CPU per record against format("kafka")'s: the Spark processes', and with the broker's.
        # The floor's is what Spark costs any Python source that yields the same rows (issue 53).
        name = "" if reader == "kafkasync" else "floor_"
        for prefix in ("warm_", "capped_"):
            figures = f"{prefix}cpu_s_per_million_records"
            result[f"{prefix}{name}cpu_per_record_vs_format_kafka"] = {
                scope: result[label][figures][scope] / kafka[figures][scope] for scope in ("Spark", "Spark and broker")}
    return result


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
                measured[source].append(_run_child("latency", "--source", source, "--bootstrap", bootstrap,
                                                   "--topic", topic, "--seconds", str(seconds), "--jars", jars,
                                                   "--trace", trace.name))
    result["load_average_end"] = os.getloadavg()
    for source, source_runs in measured.items():
        result[LIVE_LABELS[source]] = {**_median_of_runs(source_runs), "runs": source_runs}
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


def _median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure (nested), the median over the runs that have it."""
    median: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if key in run]
        if isinstance(values[0], dict):
            median[key] = _median_of_runs(values)
        elif isinstance(values[0], (int, float)):
            median[key] = statistics.median(values)
    return median


def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of the side-by-side issue: value and whether it is met."""
    speed = results["backlog"]["kafkasync_speed_vs_format_kafka"]
    bytes_ratio = results["backlog"]["kafkasync"]["bytes_per_payload_byte"]
    live = results["latency"]
    extra, over_floor = live["steady_p99_extra_ms"], live["batch_ms_over_floor"]
    return {
        "speed_vs_format_kafka": {"value": round(speed, 3), "target": f">= {TARGETS['speed_vs_format_kafka']}",
                                  "met": speed >= TARGETS["speed_vs_format_kafka"],
                                  "python_source_floor": round(results["backlog"]["floor_speed_vs_format_kafka"], 3)},
        "bytes_per_payload_byte": {"value": round(bytes_ratio, 3),
                                   "target": f"<= {TARGETS['bytes_per_payload_byte']}",
                                   "met": bytes_ratio <= TARGETS["bytes_per_payload_byte"]},
        "steady_p99_extra_ms": {"value": round(extra, 1), "target": f"<= {TARGETS['steady_p99_extra_ms']}",
                                "met": extra <= TARGETS["steady_p99_extra_ms"],
                                "whole_run": round(live["p99_extra_ms"], 1)},
        "batch_ms_over_floor": {"value": round(over_floor, 1), "target": f"<= {TARGETS['batch_ms_over_floor']}",
                                "met": over_floor <= TARGETS["batch_ms_over_floor"],
                                "over_floor_with_worker_fixes": round(live["batch_ms_over_tuned_floor"], 1)},
        **{f"{name} ({results[name]['value_bytes']:,} B)": cost_targets(results[name])
           for name, _, _ in BACKLOGS if "skipped" not in results.get(name, {"skipped": "not run"})},
    }


BACKLOGS = (("backlog", VALUE_BYTES, None), ("backlog_small_records", SMALL_VALUE_BYTES, None),
            ("backlog_java_batches", VALUE_BYTES, JAVA_BATCH_BYTES),
            ("backlog_small_records_java_batches", SMALL_VALUE_BYTES, JAVA_BATCH_BYTES))
"""Each backlog read side by side: its name in the results, value size, producer ``batch.size``."""
COST_TARGETS = {"capped_bytes_per_payload_byte": 1.2, "capped_bytes_over_format_kafka": 0.1,
                "uncapped_bytes_per_payload_byte": 1.1, "speed_vs_format_kafka": 1.15,
                "cpu_per_record_vs_format_kafka": 0.7}
"""Issue 53's: broker bytes under a cap at ``format("kafka")``'s, speed, and CPU per record
(every Spark process and the broker, read for read: the cores a cluster pays)."""


def cost_targets(backlog_result: dict[str, Any]) -> dict[str, Any]:
    """Issue 53's targets on one backlog: value, target and whether it is met."""
    kafka, kafkasync = backlog_result[LABELS["kafka"]], backlog_result[LABELS["kafkasync"]]
    capped = kafkasync["capped_bytes_per_payload_byte"]
    checks = {
        "capped_bytes_per_payload_byte": (capped, capped <= COST_TARGETS["capped_bytes_per_payload_byte"]
                                          and capped <= kafka["capped_bytes_per_payload_byte"]
                                          + COST_TARGETS["capped_bytes_over_format_kafka"],
                                          f"<= {COST_TARGETS['capped_bytes_per_payload_byte']} and <= "
                                          f"format(\"kafka\")'s {kafka['capped_bytes_per_payload_byte']:.3f} + "
                                          f"{COST_TARGETS['capped_bytes_over_format_kafka']}"),
        "uncapped_bytes_per_payload_byte": (kafkasync["bytes_per_payload_byte"], kafkasync["bytes_per_payload_byte"]
                                            <= COST_TARGETS["uncapped_bytes_per_payload_byte"],
                                            f"<= {COST_TARGETS['uncapped_bytes_per_payload_byte']}")}
    for read, speed in (("warm", backlog_result["warm_kafkasync_speed_vs_format_kafka"]),
                        ("capped", backlog_result["capped_kafkasync_speed_vs_format_kafka"])):
        checks[f"{read}_speed_vs_format_kafka"] = (speed, speed >= COST_TARGETS["speed_vs_format_kafka"],
                                                   f">= {COST_TARGETS['speed_vs_format_kafka']}")
        ratio = backlog_result[f"{read}_cpu_per_record_vs_format_kafka"]["Spark and broker"]
        limit = COST_TARGETS["cpu_per_record_vs_format_kafka"]
        floor = backlog_result.get(f"{read}_floor_cpu_per_record_vs_format_kafka")
        checks[f"{read}_cpu_per_record_vs_format_kafka"] = (
            ratio, ratio <= limit, f"<= {limit}" + ("" if floor is None else
                                                    f" (the Python source floor's: {floor['Spark and broker']:.2f})"))
    return {name: {"value": round(value, 3), "target": target, "met": met}
            for name, (value, met, target) in checks.items()}


@contextmanager
def broker_and_connector() -> Iterator[tuple[Optional[str], str, str]]:
    """``(bootstrap, jars, "")``: a real broker (``real_broker``) and Spark's Kafka connector's
    jars for this PySpark; ``(None, "", why not)`` where either cannot be had."""
    from kafkasync_dev.testing.local_broker import real_broker
    from kafkasync_dev.testing.spark import format_kafka_jars

    jars, why_not = format_kafka_jars()
    if jars is None:
        yield None, "", str(why_not)
        return
    with real_broker() as (bootstrap, why_not):
        yield bootstrap, jars, "" if bootstrap is not None else str(why_not)


def measure(*, tiny: bool = False, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Every comparison, or ``{"skipped": why}`` where there is no broker or no connector."""
    import pyspark

    from benchmarks import formats_bench, live_rate, trigger_cost

    with broker_and_connector() as (bootstrap, jars, why_not):
        if bootstrap is None:
            return {"skipped": why_not}
        results: dict[str, Any] = {"spark_version": pyspark.__version__, "broker": bootstrap,
                                   "isolation_level": "read_committed", "tiny": tiny}
        # Debezium Avro beside format("kafka") + from_avro, first: its Spark is this process's first,
        # so that spark-avro is on the JVM's classpath (a JVM started for an earlier session here keeps
        # its own, and from_avro then fails: AVRO_NOT_LOADED_SQL_FUNCTIONS_UNUSABLE). A registry of
        # its own and over a minute even at a smoke's size on a 2-core machine: a smoke leaves it out.
        results["avro"] = ({"skipped": "a smoke run: python -m benchmarks.formats_bench --tiny runs it alone"}
                           if tiny else formats_bench.measure(bootstrap, jars, log=log))
        results["backlog"] = backlog(bootstrap, jars, TINY_RECORDS_PER_PARTITION if tiny else RECORDS_PER_PARTITION,
                                     1 if tiny else RUNS, log)
        # A smoke (tiny) skips the second backlog: the same code as the first, with smaller values,
        # three Spark starts more (about a minute of CI).
        for name, value_bytes, batch_bytes in BACKLOGS[1:]:
            results[name] = (
                {"skipped": "a smoke run: backlog() with another value or batch size"} if tiny else
                backlog(bootstrap, jars, RECORDS_PER_PARTITION, RUNS, log, value_bytes, batch_bytes))
        results["latency"] = latency(bootstrap, jars, 8 if tiny else LIVE_SECONDS, 1 if tiny else LIVE_RUNS, log)
        results["live_rate"] = (live_rate.measure_tiny(bootstrap, jars, log=log) if tiny
                                else live_rate.measure(bootstrap, jars, log=log))
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
        values = [live[n]["steady"][quantile] for n in names]
        axis.bar([x + offset for x in range(2)], values, width, label=quantile[:3],
                 color=colours, alpha=0.55 if quantile == "p50_ms" else 1.0)
        for x, value in enumerate(values):
            axis.annotate(f"{value:,.0f}", (x + offset, value), ha="center", va="bottom", fontsize=8)
    axis.set_xticks(range(2), names)
    axis.set_title(f"live latency after {live[names[0]]['steady']['after_s']:.0f} s, {RATE:,} rec/s: "
                   "p50 / p99 (ms)", fontsize=10)
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
    parser.add_argument("--tiny", action="store_true",
                        help=f"{TINY_RECORDS_PER_PARTITION} records a partition, one backlog, 8 s live: a smoke run")
    parser.add_argument("--write", action="store_true",
                        help="into benchmarks/results.json and docs/img/side_by_side.png")
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
