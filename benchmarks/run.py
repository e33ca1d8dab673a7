"""``make bench``: what kafkasync's event-time synchronization costs, and what it buys.

One run, one machine; on the embedded Kafka cluster (librdkafka's mock broker, in this process),
the same data for every measurement, then on a real broker:

1. the limit for a Python reader, one confluent-kafka consumer (``benchmarks/raw.py``);
2. the driver's cost per trigger at 8, 64 and 512 partitions and its fetch rate
   (``benchmarks/planner_bench.py``), and what a task waits for its pooled consumer
   (``benchmarks/pool_latency.py``);
3. kafkasync end to end into Spark's ``noop`` sink, synchronized and ``max.task.idle.ms=-1``,
   beside Spark's ceiling for a Python source, and a batch read (``benchmarks/throughput.py``);
4. the driver's memory by backlog size (``benchmarks/driver_memory.py``);
5. the demo's rate-limited backfill at a larger scale: records dropped behind the watermark
   (``benchmarks/skew.py``);
6. on a real broker: a trigger's cost at 512 and 4,096 partitions (``benchmarks/trigger_cost.py``),
   ``eventTime.jsonPath`` (``benchmarks/event_time.py``); with a registry, ``eventTime.field`` and
   ``value.decode`` on Debezium Avro, one core (``event_time.avro_extraction``);
7. ``async_map`` against a thread pool and Arrow UDF concurrency (``benchmarks/async_bench.py``).

``format("kafka")`` beside kafkasync is ``benchmarks/side_by_side.py``, which ``make bench`` runs
next in ``make parity``'s virtualenv. Prints a markdown table with each target and whether it is
met, and writes ``benchmarks/results.json`` and ``docs/img/skew.png``.
"""

from __future__ import annotations

import argparse
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

from benchmarks import (
    async_bench,
    driver_memory,
    event_time,
    planner_bench,
    pool_latency,
    raw,
    skew,
    throughput,
    trigger_cost,
)
from benchmarks.harness import results as results_file
from benchmarks.harness.backlogs import produce_uniform
from benchmarks.harness.brokers import with_registry
from benchmarks.harness.queries import add_listener
from benchmarks.harness.results import log
from benchmarks.harness.spark import session
from kafkasync_dev.testing.local_broker import real_broker

TARGETS = {
    "kafkasync_vs_raw": 0.5,
    "sync_vs_unsync": 0.85,
    "planner_ms_at_512": 50.0,
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
        "cores": os.cpu_count(), "cpu": cpu, "os": platform.platform(), "python": platform.python_version(),
        "pyspark": pyspark.__version__, "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0], "pyarrow": pyarrow.__version__, "numpy": numpy.__version__,
        "java": java_version, "spark_master": "local[2]",
        "kafka": "librdkafka mock cluster (1 broker, in the benchmark process)",
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    results: dict[str, Any] = {"machine": machine_facts(), "load_average_start": os.getloadavg()}
    workdir = tempfile.mkdtemp(prefix="kafkasync-bench-")
    tempfile.tempdir = workdir  # checkpoints and Spark scratch: removed at the end
    ok = False
    try:
        with real_broker() as (bootstrap, why_not):  # KAFKASYNC_BOOTSTRAP names it meanwhile
            _on_the_embedded_cluster(args, results)
            results["trigger_cost"] = (trigger_cost.measure(bootstrap=bootstrap, log=log) if bootstrap
                                       else {"skipped": why_not})
            log("eventTime.jsonPath on 8 x 200,000 JSON records (benchmarks/event_time.py)")
            results["event_time"] = event_time.run(bootstrap) if bootstrap else {"skipped": why_not}
        log("eventTime.field and value.decode on Debezium Avro, one core (benchmarks/event_time.py)")
        results["avro_extraction"] = with_registry(event_time.avro_extraction)
        results["async"] = async_bench.run()  # its own Spark session, after the first one stopped
        ok = True
    finally:
        tempfile.tempdir = None
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"Spark's log: spark.log under {workdir}", file=sys.stderr)
    results["load_average_end"] = os.getloadavg()
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    return results


def _on_the_embedded_cluster(args: argparse.Namespace, results: dict[str, Any]) -> None:
    from kafkasync_dev.testing import MockKafkaCluster
    from kafkasync_dev.testing.plots import save_event_time_figure

    partitions = throughput.PARTITIONS
    with MockKafkaCluster(brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        log(f"producing {partitions} x {throughput.RECORDS_PER_PARTITION:,} records of 100 B (+ warm-up, "
            "small-backlog and skew topics)")
        topic = produce_uniform(cluster, "bench", partitions, throughput.RECORDS_PER_PARTITION)
        memory_backlogs = [(topic, 100), *driver_memory.produce(cluster, partitions)]
        warmup = produce_uniform(cluster, "bench-warmup", partitions, throughput.WARMUP_RECORDS_PER_PARTITION)
        skew_topics = skew.produce(cluster)
        results["data"] = {"partitions": partitions, "records_per_partition": throughput.RECORDS_PER_PARTITION,
                           "records": topic.records, "value_bytes": 100, "key_bytes": 8,
                           "low_watermarks_checked": True}

        # No Spark running yet: the raw consume rate, the driver's cost per trigger.
        log("raw confluent-kafka consume")
        raw_result = raw.raw_consume_rps(bootstrap, topic, runs=args.raw_runs)
        results["raw_consume_rps"] = raw_result["rps"]
        results["raw_consume_runs_rps"] = raw_result["runs_rps"]
        results["raw_consume_default_backoff_rps"] = raw_result["default_backoff_rps"]
        log("planner and driver path at 8, 64, 512 partitions")
        for key in ("planner_ms", "driver_snapshot_plan_full_ms", "driver_latest_offset_full_ms",
                    "driver_latest_offset_ms"):
            results[key] = {}
        for count in planner_bench.PARTITION_COUNTS:
            results["planner_ms"][count] = planner_bench.pure_planner_ms(count)
            full = planner_bench.driver_full_buffers_ms(bootstrap, count)
            results["driver_snapshot_plan_full_ms"][count] = full["snapshot_plan_ms"]
            results["driver_latest_offset_full_ms"][count] = full["latest_offset_ms"]
            results["driver_latest_offset_ms"][count] = planner_bench.driver_path_ms(
                cluster, count, reps=args.driver_reps)["latest_offset_ms"]
        results["driver_latest_offset_buffered_per_partition"] = planner_bench.DRIVER_RECORDS_PER_PARTITION
        results["index_planner"] = {
            count: {"no_limit": planner_bench.index_planner(count),
                    "max_offsets_per_trigger": planner_bench.index_planner(count, max_records=100_000)}
            for count in planner_bench.PARTITION_COUNTS}
        log("driver fetch rate (offsets and timestamps only)")
        results["driver_fetch_rps"] = planner_bench.driver_fetch_rps(bootstrap, topic)
        log("what a task waits for its pooled consumer")
        results["pool_latency"] = pool_latency.measure()

        log("starting Spark (local[2]); warm-up query")
        spark = session("kafkasync-bench", conf={"spark.sql.streaming.numRecentProgressUpdates": "100000",
                                                 "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"})
        try:
            listener = add_listener(spark)
            results.update(throughput.measure(spark, listener, bootstrap, topic, warmup, args.throughput_runs))
            results.update(driver_memory.measure(spark, listener, bootstrap, memory_backlogs))
            skew_runs = {}
            for idle in (0, -1):
                log(f"skew scenario, max.task.idle.ms={idle}")
                skew_runs[idle] = skew.run_skew(spark, listener, bootstrap, skew_topics, idle)
            results["late_dropped_sync"] = skew_runs[0].dropped
            results["late_dropped_unsync"] = skew_runs[-1].dropped
            results["skew"] = {
                str(idle): {"read": r.read, "counted": r.counted, "dropped": r.dropped,
                            "predicted_dropped": r.predicted_dropped, "batches": r.per_batch()}
                for idle, r in skew_runs.items()}
            save_event_time_figure([skew_runs[0], skew_runs[-1]], os.path.join(results_file.PICTURES, "skew.png"),
                                   skew_topics.first_timestamp_ms)
        finally:
            spark.stop()


def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target with the measured value and whether it is met."""
    kafkasync_vs_raw = _ratio(results["kafkasync_rps"], results["raw_consume_rps"])
    sync_vs_unsync = _ratio(results["kafkasync_rps"], results["kafkasync_unsync_rps"])
    per_trigger_512 = max(results["driver_latest_offset_full_ms"][512],
                          results["driver_latest_offset_ms"][512])
    growth, smallest_full = driver_memory.growth_mb(results)
    default_batches = max(r["data_batches"] for r in results["throughput_runs"] if r["max_task_idle_ms"] == 0)
    return {
        "default options read the backlog in <= 2 batches": {
            "value": default_batches, "met": default_batches <= TARGETS["default_batches"]},
        "kafkasync_rps >= 0.5 x raw_consume_rps": {
            "value": round(kafkasync_vs_raw, 3), "met": kafkasync_vs_raw >= TARGETS["kafkasync_vs_raw"]},
        "synchronized >= 0.85 x unsynchronized": {
            "value": round(sync_vs_unsync, 3), "met": sync_vs_unsync >= TARGETS["sync_vs_unsync"]},
        "planner <= 50 ms per trigger at 512 partitions": {
            "value": round(per_trigger_512, 1), "met": per_trigger_512 <= TARGETS["planner_ms_at_512"]},
        "driver memory flat in backlog size (growth <= 10% above 2x the buffers)": {
            "value": round(growth, 1), "met": growth <= 0.1 * smallest_full},
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
        f"| stream reader worker peak RSS (MiB) by backlog (records), `driver.buffer.bytes` 1 MiB | {rss_text} "
        "| flat | "
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
        f"| `value.decode` of those events into its column, µs a record: numpy / record by record (the fallback) | "
        f"{decode['numpy']:.2f} / {decode['per_record']:.2f} | | |",
    ]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--output", default=results_file.RESULTS)
    parser.add_argument("--throughput-runs", type=int, default=len(throughput.THROUGHPUT_ORDER))
    parser.add_argument("--raw-runs", type=int, default=5)
    parser.add_argument("--driver-reps", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    os.environ.setdefault("TZ", "UTC")
    results = run(args)
    results["targets"] = targets(results)
    results_file.write(results, args.output)
    print(markdown(results))
    print("\nasync_map vs a thread pool and Arrow UDF concurrency:\n" + async_bench.markdown(results["async"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
