"""``make bench``: what kafkasync's event-time synchronization costs, and what it buys.

One run, one machine, one embedded Kafka cluster (librdkafka's mock broker, in this process),
the same data for every measurement:

1. raw confluent-kafka consume rate: one consumer reads the whole topic touching key, value,
   offset and timestamp of every record (the limit for a Python reader here);
2. kafkasync end to end into Spark's ``noop`` sink, synchronized (default) and
   ``max.task.idle.ms=-1``, measured alternately after a discarded warm-up query;
3. driver cost per trigger at 8, 64 and 512 partitions, the driver's fetch rate, what a task
   waits for its pooled consumer (``benchmarks/pool_latency.py``), the batch read, and the
   stream reader worker's peak RSS by backlog size;
4. the demo's rate-limited backfill at a larger scale: records dropped behind the watermark;
5. ``format("kafka")`` beside kafkasync on a real broker, when one and the connector are given
   (``benchmarks/format_kafka.py``); 6. async_map (``benchmarks/async_bench.py``); 7. the time
   from a field of Debezium Avro and its value decoded, per record on one core, against a
   registry (``event_time.avro_extraction``; the Spark reads of it beside ``from_avro`` are
   ``benchmarks/formats_bench.py``, run by ``side_by_side.py``).

Prints a markdown table and writes ``benchmarks/results.json`` and ``docs/img/skew.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Optional

from benchmarks import async_bench, event_time, trigger_cost
from kafkasync_dev.testing.local_broker import real_broker

HERE = os.path.dirname(os.path.abspath(__file__))

PARTITIONS = 8
RECORDS_PER_PARTITION = 40_000  # x 100-byte values: within the mock's 5 MiB per partition
# Driver memory: the stream reader worker's peak RSS for backlogs below and well above what
# the driver buffers and librdkafka prefetches (16 MiB). The default budget (32 MiB, 2.1 million
# records) is more than the embedded cluster can hold, so these runs set the smallest budget,
# 1 MiB (65,536 records): flat beyond that is what a larger budget does beyond its size.
MEMORY_BUFFER_BYTES = 1024 * 1024
MEMORY_BACKLOGS = (  # (records per partition, value bytes); the main topic adds 40,000 x 100 B
    (10_000, 100),
    (20_000, 100),
    (90_000, 10),  # 720,000 records: near the mock's ~100,000 messages per partition
)
BATCH_READ_RUNS = 3
WARMUP_RECORDS_PER_PARTITION = 5_000
THROUGHPUT_ORDER = (0, -1, -1, 0, 0, -1)  # alternating (ABBAAB): neither mode always goes first

TARGETS = {
    "kafkasync_vs_raw": 0.5,
    "sync_vs_unsync": 0.85,
    "planner_ms_at_512": 50.0,
    "kafkasync_vs_format_kafka": 0.8,
    "default_batches": 2,
}


def machine_facts() -> dict[str, Any]:
    import confluent_kafka
    import numpy
    import pyarrow
    import pyspark

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        java_version = (java.stderr or java.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        java_version = "unknown"
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "java": java_version,
        "spark_master": "local[2]",
        "kafka": "librdkafka mock cluster (1 broker, in the benchmark process)",
    }


def _spark_session(log_path: str):
    """The shared local session; the JVM's start-up chatter goes to ``log_path``."""
    from kafkasync_dev.testing.spark import local_spark_session

    conf = {
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.local.dir": os.path.join(os.path.dirname(log_path), "local"),
    }
    if os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS"):  # format("kafka"), see format_kafka.py
        conf["spark.jars"] = os.environ["KAFKASYNC_SPARK_KAFKA_JARS"]
    spark = local_spark_session(
        "kafkasync-bench", os.path.join(os.path.dirname(log_path), "warehouse"), conf,
        jvm_log=log_path,
    )
    from kafkasync_source.spark.source import register

    register(spark)
    return spark


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def run(args) -> dict[str, Any]:
    started = time.monotonic()
    results: dict[str, Any] = {"machine": machine_facts(), "load_average_start": os.getloadavg()}
    workdir = tempfile.mkdtemp(prefix="kafkasync-bench-")
    tempfile.tempdir = workdir  # checkpoints and Spark scratch: removed at the end
    ok = False
    try:
        with real_broker() as (bootstrap, why_not):  # KAFKASYNC_BOOTSTRAP names it meanwhile
            _measure(args, results, workdir)
            results["trigger_cost"] = (trigger_cost.measure(bootstrap=bootstrap, log=_log) if bootstrap
                                       else {"skipped": why_not})
            _log("eventTime.jsonPath on 8 x 200,000 JSON records (benchmarks/event_time.py)")
            results["event_time"] = event_time.run(bootstrap) if bootstrap else {"skipped": why_not}
        _log("eventTime.field and value.decode on Debezium Avro, one core (benchmarks/event_time.py)")
        results["avro_extraction"] = event_time.with_registry(event_time.avro_extraction)
        results["async"] = async_bench.run()  # its own Spark session, after _measure's is stopped
        ok = True
    finally:
        tempfile.tempdir = None
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"Spark's log: {os.path.join(workdir, 'spark.log')}", file=sys.stderr)
    results["load_average_end"] = os.getloadavg()
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    return results


def _measure(args, results: dict[str, Any], workdir: str) -> None:
    from benchmarks import format_kafka, planner_bench, pool_latency, raw, skew
    from benchmarks.spark_runs import add_listener, batch_read_seconds, run_query
    from benchmarks.workloads import produce_uniform
    from kafkasync_dev.testing import MockKafkaCluster
    from kafkasync_dev.testing.plots import save_event_time_figure

    with MockKafkaCluster(brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        _log(f"producing {PARTITIONS} x {RECORDS_PER_PARTITION:,} records of 100 B (+ warm-up, "
             "small-backlog and skew topics)")
        topic = produce_uniform(cluster, "bench", PARTITIONS, RECORDS_PER_PARTITION)
        memory_topics = [
            produce_uniform(cluster, f"bench-memory-{n}x{size}", PARTITIONS, n, value_bytes=size)
            for n, size in MEMORY_BACKLOGS
        ]
        warmup = produce_uniform(cluster, "bench-warmup", PARTITIONS, WARMUP_RECORDS_PER_PARTITION)
        skew_topics = skew.produce(cluster)
        results["data"] = {
            "partitions": PARTITIONS,
            "records_per_partition": RECORDS_PER_PARTITION,
            "records": topic.records,
            "value_bytes": 100,
            "key_bytes": 8,
            "low_watermarks_checked": True,
        }

        # 1. Raw consume rate (no Spark running yet).
        _log("raw confluent-kafka consume")
        raw_result = raw.raw_consume_rps(bootstrap, topic, runs=args.raw_runs)
        results["raw_consume_rps"] = raw_result["rps"]
        results["raw_consume_runs_rps"] = raw_result["runs_rps"]
        results["raw_consume_default_backoff_rps"] = raw_result["default_backoff_rps"]

        # 3a. Driver cost per trigger (no Spark running yet either).
        _log("planner and driver path at 8, 64, 512 partitions")
        results["planner_ms"] = {}
        results["driver_snapshot_plan_full_ms"] = {}
        results["driver_latest_offset_full_ms"] = {}
        results["driver_latest_offset_ms"] = {}
        for partitions in planner_bench.PARTITION_COUNTS:
            results["planner_ms"][partitions] = planner_bench.pure_planner_ms(partitions)
            full = planner_bench.driver_full_buffers_ms(bootstrap, partitions)
            results["driver_snapshot_plan_full_ms"][partitions] = full["snapshot_plan_ms"]
            results["driver_latest_offset_full_ms"][partitions] = full["latest_offset_ms"]
            path = planner_bench.driver_path_ms(cluster, partitions, reps=args.driver_reps)
            results["driver_latest_offset_ms"][partitions] = path["latest_offset_ms"]
        results["driver_latest_offset_buffered_per_partition"] = planner_bench.DRIVER_RECORDS_PER_PARTITION
        results["index_planner"] = {
            partitions: {"no_limit": planner_bench.index_planner(partitions),
                         "max_offsets_per_trigger": planner_bench.index_planner(partitions, max_records=100_000)}
            for partitions in planner_bench.PARTITION_COUNTS
        }
        _log("driver fetch rate (offsets and timestamps only)")
        results["driver_fetch_rps"] = planner_bench.driver_fetch_rps(bootstrap, topic)
        _log("what a task waits for its pooled consumer")
        results["pool_latency"] = pool_latency.measure()

        # 2. Spark: warm-up, then the measured runs in alternating order.
        _log("starting Spark (local[2]); warm-up query")
        spark = _spark_session(os.path.join(workdir, "spark.log"))
        try:
            listener = add_listener(spark)
            run_query(spark, listener, label="warm-up", bootstrap=bootstrap, topic=warmup.name,
                      expected_rows=warmup.records, options={"max.task.idle.ms": -1})
            # Context: the same batch shape from a Python source that does no Kafka work.
            from benchmarks.ceiling import CeilingDataSource

            spark.dataSource.register(CeilingDataSource)
            ceiling_runs = []
            for _ in range(2):
                ceiling_runs.append(run_query(
                    spark, listener, label="ceiling", bootstrap="", topic="",
                    expected_rows=topic.records, source_format="kafkasync-ceiling",
                    options={"batches": 1, "partitions": PARTITIONS,
                             "rows": RECORDS_PER_PARTITION}))
            results["spark_python_source_ceiling_rps"] = max(r.rps for r in ceiling_runs)

            runs = {0: [], -1: []}
            for idle in THROUGHPUT_ORDER[: args.throughput_runs]:
                _log(f"kafkasync -> noop, max.task.idle.ms={idle}")
                run_ = run_query(spark, listener, label=f"idle={idle}", bootstrap=bootstrap,
                                 topic=topic.name, expected_rows=topic.records,
                                 options={"max.task.idle.ms": idle}, sample_rss=True)
                runs[idle].append(run_)
            results["kafkasync_rps"] = statistics.median(r.rps for r in runs[0])
            results["kafkasync_unsync_rps"] = statistics.median(r.rps for r in runs[-1])
            results["throughput_runs"] = [
                {"max_task_idle_ms": idle, "rps": round(r.rps), "rows": r.rows,
                 "processing_s": round(r.processing_s, 3), "wall_s": round(r.wall_s, 3),
                 "data_batches": len(r.data_batches), "peak_rss_mb": round(r.peak_rss_mb, 1),
                 "batch_rows": [p["numInputRows"] for p in r.data_batches]}
                for idle in (0, -1) for r in runs[idle]
            ]

            _log("batch read .count()")
            results["batch_read_s"] = batch_read_seconds(spark, bootstrap, topic)

            # 3b. Driver memory: the stream reader worker's peak RSS by backlog size.
            by_backlog = {}
            for memory_topic in [topic] + memory_topics:
                _log(f"driver memory, backlog of {memory_topic.records:,} records")
                memory_run = run_query(
                    spark, listener, label=memory_topic.name, bootstrap=bootstrap,
                    topic=memory_topic.name, expected_rows=memory_topic.records, sample_rss=True,
                    options={"driver.buffer.bytes": MEMORY_BUFFER_BYTES})
                by_backlog[memory_topic.records] = memory_run.peak_rss_mb
            results["driver_peak_rss_mb"] = max(by_backlog.values())
            results["driver_peak_rss_mb_by_backlog"] = {
                str(n): round(mb, 1) for n, mb in sorted(by_backlog.items())}
            results["driver_peak_rss_backlogs"] = {
                str(t.records): f"{PARTITIONS} x {t.records_per_partition:,} x {size} B"
                for t, (_, size) in zip([topic] + memory_topics, [(0, 100)] + list(MEMORY_BACKLOGS))
            }

            # 4. Skew: records dropped behind the watermark.
            skew_runs = {}
            for idle in (0, -1):
                _log(f"skew scenario, max.task.idle.ms={idle}")
                skew_runs[idle] = skew.run_skew(spark, listener, bootstrap, skew_topics, idle)
            results["late_dropped_sync"] = skew_runs[0].dropped
            results["late_dropped_unsync"] = skew_runs[-1].dropped
            results["skew"] = {
                str(idle): {"read": r.read, "counted": r.counted, "dropped": r.dropped,
                            "predicted_dropped": r.predicted_dropped, "batches": r.per_batch()}
                for idle, r in skew_runs.items()
            }
            save_event_time_figure([skew_runs[0], skew_runs[-1]], os.path.join(HERE, os.pardir, "docs", "img", "skew.png"),
                                   skew_topics.first_timestamp_ms)

            # 5. format("kafka") on a real broker, when its connector and a broker are given.
            results["format_kafka"] = format_kafka.compare(spark, listener)
        finally:
            spark.stop()


def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target with the measured value and whether it is met."""
    kafkasync_vs_raw = _ratio(results["kafkasync_rps"], results["raw_consume_rps"])
    sync_vs_unsync = _ratio(results["kafkasync_rps"], results["kafkasync_unsync_rps"])
    per_trigger_512 = max(results["driver_latest_offset_full_ms"][512],
                          results["driver_latest_offset_ms"][512])
    rss = {int(n): mb for n, mb in results["driver_peak_rss_mb_by_backlog"].items()}
    # Flat: once the backlog exceeds twice what the driver may buffer, more backlog adds no
    # memory: the largest backlog's peak RSS is at most 10% above the smallest such backlog's
    # (run-to-run noise of a Python worker's RSS is about that; a drop is not growth).
    full = [mb for n, mb in sorted(rss.items()) if n >= 2 * MEMORY_BUFFER_BYTES // 16]
    growth = full[-1] - full[0]
    default_batches = max(r["data_batches"] for r in results["throughput_runs"]
                          if r["max_task_idle_ms"] == 0)
    format_kafka = results.get("format_kafka", {})
    if "skipped" in format_kafka:
        versus = {"kafkasync >= 0.8 x format(\"kafka\"), batch read faster": {
            "value": f"not run: {format_kafka['skipped']}", "met": None}}
    else:
        ratio = format_kafka["kafkasync_vs_format_kafka"]
        versus = {"kafkasync >= 0.8 x format(\"kafka\"), batch read faster": {
            "value": [round(ratio, 3), format_kafka["batch_read_faster"]],
            "met": ratio >= TARGETS["kafkasync_vs_format_kafka"] and format_kafka["batch_read_faster"]}}
    return {
        **versus,
        "default options read the backlog in <= 2 batches": {
            "value": default_batches, "met": default_batches <= TARGETS["default_batches"]},
        "kafkasync_rps >= 0.5 x raw_consume_rps": {
            "value": round(kafkasync_vs_raw, 3), "met": kafkasync_vs_raw >= TARGETS["kafkasync_vs_raw"]},
        "synchronized >= 0.85 x unsynchronized": {
            "value": round(sync_vs_unsync, 3), "met": sync_vs_unsync >= TARGETS["sync_vs_unsync"]},
        "planner <= 50 ms per trigger at 512 partitions": {
            "value": round(per_trigger_512, 1), "met": per_trigger_512 <= TARGETS["planner_ms_at_512"]},
        "driver memory flat in backlog size (growth <= 10% above 2x the buffers)": {
            "value": round(growth, 1), "met": growth <= 0.1 * full[0]},
        "late_dropped_sync = 0 and late_dropped_unsync > 0": {
            "value": [results["late_dropped_sync"], results["late_dropped_unsync"]],
            "met": results["late_dropped_sync"] == 0 and results["late_dropped_unsync"] > 0},
        **event_time_targets(results["event_time"]),
        **{POOL_TARGETS[name]: figure for name, figure in results["pool_latency"]["targets"].items()},
    }


POOL_TARGETS = {"resume_s": "pooled consumer: resumed to the records produced meanwhile <= 0.1 s",
                "four_ranges_at_log_end_s": "pooled consumer: four ranges after prefetches to the log end <= 0.5 s"}
"""The targets of benchmarks/pool_latency.py, by its figures' names."""


def event_time_targets(figures: dict[str, Any]) -> dict[str, Any]:
    """eventTime.jsonPath: >= 0.8 x the speed of the same read without it; broker bytes per
    payload byte no more than the fetch path's (benchmarks/event_time.py)."""
    keys = ("eventTime.jsonPath read >= 0.8 x the same read without it",
            "eventTime.jsonPath broker bytes <= the fetch path's",
            "eventTime.order=nonDecreasing read >= 0.95 x the same read on Kafka timestamps",
            "eventTime.order=nonDecreasing broker bytes <= 1.15 per payload byte",
            "eventTime.order=nonDecreasing: the driver reads < 1 % of the records",
            "eventTime.order=nonDecreasing: source runner peak RSS at 10 x the backlog <= 1.1 x at 1 x")
    if "skipped" in figures:
        return {key: {"value": f"not run: {figures['skipped']}", "met": None} for key in keys}
    speed, byte_ratio = figures["speed_vs_without"], figures["bytes_vs_fetch_path"]
    promised, promised_targets = figures["promised"], figures["promised"]["targets"]
    promised_speed = min(promised["speed_vs_kafka_timestamp"], promised["capped_speed_vs_kafka_timestamp"])
    promised_bytes = figures["reads"]["json_path_promised"]["bytes_per_payload_byte"]
    # Flat: each read at 10 x the backlog against the same read (uncapped, capped) at 1 x.
    rss_growth = max(figures["at_scale"][label]["source_runner_peak_rss_mib"]
                     / figures["reads"][small]["source_runner_peak_rss_mib"]
                     for label, small in (("uncapped", "json_path_promised"), ("capped", "json_path_promised_capped")))
    return {keys[0]: {"value": round(speed, 3), "met": speed >= event_time.TARGETS["speed_vs_without"]},
            # Sampled byte counts of two reads of the same records: within 1 % is the same.
            keys[1]: {"value": round(byte_ratio, 3), "met": byte_ratio <= 1.01},
            keys[2]: {"value": round(promised_speed, 3),
                      "met": promised_speed >= promised_targets["speed_vs_kafka_timestamp"]},
            keys[3]: {"value": round(promised_bytes, 3),
                      "met": promised_bytes <= promised_targets["bytes_per_payload_byte"]},
            keys[4]: {"value": round(promised["driver_read_share"], 5),
                      "met": promised["driver_read_share"] < promised_targets["driver_read_share"]},
            keys[5]: {"value": round(rss_growth, 3), "met": rss_growth <= 1.1}}


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    raw_rps = results["raw_consume_rps"]
    rss = results["driver_peak_rss_mb_by_backlog"]
    backlogs = sorted(rss, key=int)
    rss_text = ", ".join(f"{int(n):,}: {rss[n]:.0f}" for n in backlogs)
    t = results["targets"]

    def yes(key: str) -> str:
        return {True: "**yes**", False: "**no**", None: "not run"}[t[key]["met"]]

    fk = results["format_kafka"]
    versus_key = 'kafkasync >= 0.8 x format("kafka"), batch read faster'
    if "skipped" in fk:
        versus_row = f"| kafkasync vs `format(\"kafka\")` | skipped: {fk['skipped']} | ≥ 0.8 ×; batch read faster | not run |"
    else:
        versus_row = (
            f"| kafkasync vs `format(\"kafka\")` on {fk['broker']}: AvailableNow s (kafka / kafkasync); "
            f"batch read s | {fk['available_now_s']['kafka']:.2f} / {fk['available_now_s']['kafkasync']:.2f} "
            f"= {fk['kafkasync_vs_format_kafka']:.2f} ×; {fk['batch_read_s']['kafka']:.2f} / "
            f"{fk['batch_read_s']['kafkasync']:.2f} | ≥ 0.8 ×; batch read faster | {yes(versus_key)} |")

    ceiling = results["spark_python_source_ceiling_rps"]

    def batches(idle: int) -> int:
        return int(statistics.median(
            r["data_batches"] for r in results["throughput_runs"] if r["max_task_idle_ms"] == idle))


    def ms(d: dict) -> str:
        return " / ".join(f"{d[p]:.1f}" for p in sorted(d, key=int))

    lines = [
        f"kafkasync benchmark: {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
        f"PySpark {m['pyspark']}, confluent-kafka {m['confluent_kafka']} (librdkafka "
        f"{m['librdkafka']}), embedded Kafka (librdkafka mock), "
        f"{results['data']['partitions']} partitions x {results['data']['records_per_partition']:,} "
        "records of 100 B.",
        "",
        "| measurement | result | target | met |",
        "|---|---|---|---|",
        f"| raw confluent-kafka consume, 1 consumer, touches key/value/offset/timestamp | "
        f"{raw_rps:,.0f} rec/s | | |",
        f"| kafkasync → `noop`, synchronized (default `max.task.idle.ms=0`) | "
        f"{results['kafkasync_rps']:,.0f} rec/s = {t['kafkasync_rps >= 0.5 x raw_consume_rps']['value']:.2f} × raw | "
        f"≥ 0.5 × raw | {yes('kafkasync_rps >= 0.5 x raw_consume_rps')} |",
        f"| kafkasync → `noop`, `max.task.idle.ms=-1` | {results['kafkasync_unsync_rps']:,.0f} rec/s "
        f"= {_ratio(results['kafkasync_unsync_rps'], raw_rps):.2f} × raw | | |",
        f"| Spark's ceiling: a Python streaming source with the same batch (8 tasks x 40,000 rows) "
        f"and no Kafka work | {ceiling:,.0f} rec/s = {_ratio(ceiling, raw_rps):.2f} × raw | | |",
        f"| kafkasync synchronized / -1, as a share of that ceiling | "
        f"{_ratio(results['kafkasync_rps'], ceiling):.2f} / "
        f"{_ratio(results['kafkasync_unsync_rps'], ceiling):.2f} | | |",
        f"| synchronized / -1 throughput (data batches per run: {batches(0)} / {batches(-1)}) | "
        f"{t['synchronized >= 0.85 x unsynchronized']['value']:.2f} | "
        f"≥ 0.85 | {yes('synchronized >= 0.85 x unsynchronized')} |",
        f"| data batches for the backlog with default options (streaming) | {batches(0)} | ≤ 2 | "
        f"{yes('default options read the backlog in <= 2 batches')} |",
        f"| a pooled range-reader consumer: resumed to the records produced while it waited, s | "
        f"{results['pool_latency']['resume_s']:.3f} | ≤ 0.1 | {yes(POOL_TARGETS['resume_s'])} |",
        f"| … four 50-record ranges read with it, each after its prefetch reached the log end, s | "
        f"{results['pool_latency']['four_ranges_at_log_end_s']:.3f} | ≤ 0.5 | "
        f"{yes(POOL_TARGETS['four_ranges_at_log_end_s'])} |",
        f"| driver fetch alone (offsets and timestamps into its buffers) | "
        f"{results['driver_fetch_rps']:,.0f} rec/s = {_ratio(results['driver_fetch_rps'], raw_rps):.2f} × raw | | |",
        f"| batch read `.count()` of the backlog | {results['batch_read_s']:.2f} s = "
        f"{results['data']['records'] / results['batch_read_s']:,.0f} rec/s | | |",
        versus_row,
        f"| planner (`plan_batch`, full buffers: 32 MiB budget), ms at 8 / 64 / 512 partitions | "
        f"{ms(results['planner_ms'])} | | |",
        "| time-index planner (`plan_from_index`, 1,000,000 records a partition, none read), "
        "ms at 8 / 64 / 512 partitions, no limit / maxOffsetsPerTrigger=100,000; and ListOffsets "
        "rounds per trigger | "
        + " / ".join(f"{v['no_limit']['ms']:.1f}" for v in results["index_planner"].values()) + "; "
        + " / ".join(f"{v['max_offsets_per_trigger']['ms']:.1f}" for v in results["index_planner"].values())
        + f"; {results['index_planner'][512]['no_limit']['list_offsets_rounds']} / "
        f"{results['index_planner'][512]['max_offsets_per_trigger']['list_offsets_rounds']} rounds | | |",
        f"| driver snapshot + plan, full buffers (synthetic), ms at 8 / 64 / 512 | "
        f"{ms(results['driver_snapshot_plan_full_ms'])} | | |",
        f"| driver `latestOffset()`, full buffers (synthetic), ms at 8 / 64 / 512 | "
        f"{ms(results['driver_latest_offset_full_ms'])} | ≤ 50 at 512 | "
        f"{yes('planner <= 50 ms per trigger at 512 partitions')} |",
        f"| driver `latestOffset()` (first trigger, "
        f"{results['driver_latest_offset_buffered_per_partition']:,} buffered/partition), ms at 8 / 64 / 512 | "
        f"{ms(results['driver_latest_offset_ms'])} | ≤ 50 at 512 | "
        f"{yes('planner <= 50 ms per trigger at 512 partitions')} |",
        f"| stream reader worker peak RSS (MiB) by backlog (records), `driver.buffer.bytes` 1 MiB | {rss_text} | flat | "
        f"{yes('driver memory flat in backlog size (growth <= 10% above 2x the buffers)')} |",
        f"| rate-limited backfill (the demo's spans x 20, maxOffsetsPerTrigger=4,000): records dropped "
        f"behind the watermark, synchronized / -1 (= format(\"kafka\")'s split) | "
        f"{results['late_dropped_sync']:,} / {results['late_dropped_unsync']:,} "
        f"(of {results['skew']['0']['read']:,}) | 0 / > 0 | "
        f"{yes('late_dropped_sync = 0 and late_dropped_unsync > 0')} |",
        *event_time_rows(results),
        *avro_rows(results.get("avro_extraction", {"skipped": "not measured"})),
        "",
        f"`make bench` took {results['bench_seconds']:.0f} s; load average "
        f"{results['load_average_start'][0]:.1f} at start, {results['load_average_end'][0]:.1f} at end "
        "(other processes on the machine skew the absolute numbers, less so the ratios).",
    ]
    return "\n".join(lines)


def event_time_rows(results: dict[str, Any]) -> list[str]:
    """The eventTime.jsonPath rows of the table (a real broker's figures)."""
    figures, t = results["event_time"], results["targets"]
    speed_key = "eventTime.jsonPath read >= 0.8 x the same read without it"
    bytes_key = "eventTime.jsonPath broker bytes <= the fetch path's"
    if "skipped" in figures:
        return [f"| `eventTime.jsonPath` | not run: {figures['skipped']} | | |"]
    reads = figures["reads"]
    met = {True: "**yes**", False: "**no**"}
    rates = figures["extraction_one_core"]["records_per_s"]
    return [
        f"| `eventTime.jsonPath=$.ts` on {figures['records']:,} JSON records of {figures['mean_value_bytes']:.0f} B "
        f"(real broker): extraction on one core, records/s (Kafka timestamp: {rates['kafka_timestamp']:,.0f}) | "
        f"{rates['json_path']:,.0f} | | |",
        "| … read into `noop`, s: with the path / with it and `eventTime.order=nonDecreasing` / without it "
        "(time index) / without it, fetch path | "
        + " / ".join(f"{reads[label]['seconds']:.2f}" for label, _ in event_time.VARIANTS)
        + f" = {figures['speed_vs_without']:.2f} × | ≥ 0.8 × | {met[t[speed_key]['met']]} |",
        "| … broker bytes per payload byte, in the same order | "
        + " / ".join(f"{reads[label]['bytes_per_payload_byte']:.3f}" for label, _ in event_time.VARIANTS)
        + f" | ≤ the fetch path's | {met[t[bytes_key]['met']]} |",
        "| … read with `maxOffsetsPerTrigger` = an eighth of it, s: with the path / promised in order / "
        "without it (time index) | "
        + " / ".join(f"{reads[label]['seconds']:.2f}" for label, _ in event_time.CAPPED_VARIANTS)
        + f" = {figures['capped_speed_vs_without']:.2f} × | | |",
        *(f"| `eventTime.order=nonDecreasing`: {key.split(': ', 1)[-1].split('nonDecreasing ', 1)[-1]} | "
          f"{t[key]['value']} | | {met[t[key]['met']]} |" for key in t if key.startswith("eventTime.order")),
    ]


def avro_rows(figures: dict[str, Any]) -> list[str]:
    """The Schema Registry rows: a field's time and the decoded value, per record on one core
    (benchmarks/event_time.py ``avro_extraction``; the Spark reads are side_by_side.py's)."""
    if "skipped" in figures:
        return [f"| `eventTime.field` on Avro | not run: {figures['skipped']} | | |"]
    us, decode = figures["us_per_record"], figures["value_decode_us_per_record"]
    avro, as_json = us["avro_field_source.ts_ms"], us["json_path_$.source.ts_ms"]
    size = figures["value_bytes"]
    return [
        f"| `eventTime.field=source.ts_ms` on Debezium Avro ({size['avro_field_source.ts_ms']:.0f} B), µs a record "
        f"on one core, record by record / a consume() batch at a time (`eventTime.jsonPath` on the same events "
        f"as JSON, {size['json_path_$.source.ts_ms']:.0f} B: {as_json['per_record_us']:.2f} / "
        f"{as_json['batch_us']:.2f}) | {avro['per_record_us']:.2f} / {avro['batch_us']:.2f} | | |",
        f"| `value.decode` of those events into its column, µs a record: numpy / fastavro (the fallback) | "
        f"{decode['numpy']:.2f} / {decode['fastavro']:.2f} | | |",
    ]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(HERE, "results.json"))
    parser.add_argument("--throughput-runs", type=int, default=len(THROUGHPUT_ORDER))
    parser.add_argument("--raw-runs", type=int, default=5)
    parser.add_argument("--driver-reps", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    os.environ.setdefault("TZ", "UTC")
    results = run(args)
    results["targets"] = targets(results)
    with open(args.output, "w") as handle:
        json.dump(results, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(markdown(results))
    print("\nasync_map vs a thread pool and Arrow UDF concurrency:\n" + async_bench.markdown(results["async"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
