"""Every benchmark at tiny sizes, in a few minutes, asserting that each produced its figures:
so that ``make bench`` cannot break unseen again (CI runs ``make bench-smoke``).

The numbers of a smoke run mean nothing; what is checked is that each benchmark runs end to
end and returns the figures ``make bench`` and docs/benchmarks.md quote: the planner and driver
benchmarks on the embedded cluster, and on a real broker (``testing.local_broker.real_broker``)
the trigger cost at thousands of partitions (``trigger_cost --tiny``) and the bytes a broker sends
(``broker_bytes --tiny``, plain and transactional), and ``eventTime.field``/``value.decode`` on
Avro against a registry (``event_time.avro_extraction``). ``--side-by-side`` (run in ``make parity``'s
virtualenv, where Spark's connector is served) checks ``benchmarks/side_by_side.py`` instead,
with ``benchmarks/live_rate.py`` in it (one rate, 7 s steps, both conditions), one backlog
(``backlog_small_records`` is the same code with smaller values) and the many-partition backlog
at 16 partitions.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable


def _check(name: str, figures: Any, *paths: str) -> None:
    """Fails unless every dotted ``path`` leads to a number in ``figures``."""
    for path in paths:
        value = figures
        for key in path.split("."):
            if not isinstance(value, dict) or key not in value:
                raise AssertionError(f"{name}: no figure {path!r} in {json.dumps(figures)[:800]}")
            value = value[key]
        if not isinstance(value, (int, float)) or value != value:
            raise AssertionError(f"{name}: {path} is {value!r}, not a number")
    print(f"bench-smoke: {name}: ok ({', '.join(paths)})", flush=True)


def planner() -> None:
    from benchmarks import planner_bench
    from kafkasync_dev.testing import MockKafkaCluster

    _check("pure planner", {"ms": planner_bench.pure_planner_ms(8)}, "ms")
    _check("index planner", {"no_limit": planner_bench.index_planner(64),
                             "limited": planner_bench.index_planner(64, max_records=1_000)},
           "no_limit.ms", "no_limit.list_offsets_rounds", "limited.ms", "limited.list_offsets_rounds")
    with MockKafkaCluster(brokers=1) as cluster:
        _check("driver with full buffers", planner_bench.driver_full_buffers_ms(cluster.bootstrap_servers, 8),
               "snapshot_plan_ms", "latest_offset_ms")
        _check("driver path", planner_bench.driver_path_ms(cluster, 8, reps=1),
               "snapshot_plan_ms", "latest_offset_ms")


def trigger_cost(bootstrap: str) -> None:
    from benchmarks import trigger_cost as benchmark

    figures = benchmark.measure(tiny=True, bootstrap=bootstrap, reps=1)
    size = next(key for key in figures["broker"] if key.isdigit())
    _check("trigger cost", figures["broker"][size],
           "no_limit.timeIndex.first_trigger.ms", "max_offsets_per_trigger.timeIndex.first_trigger.rounds",
           "max_offsets_per_trigger.fetch.walk.ms")


def broker_bytes() -> None:
    from benchmarks import broker_bytes as benchmark
    from benchmarks.harness.spark import session

    spark = session("kafkasync-bench-smoke")
    try:
        _check("broker bytes", {"plain": benchmark.compare(spark, 500),
                                "transactional": benchmark.compare_transactional(spark, 500)},
               "plain.kafkasync timeIndex.bytes_per_payload_byte", "plain.kafkasync fetch.bytes_per_payload_byte",
               "transactional.live.kafkasync auto.bytes_per_payload_byte",
               "transactional.backfill.kafkasync auto.bytes_per_payload_byte")
    finally:
        spark.stop()


def event_time_cost(bootstrap: str) -> None:
    from benchmarks import event_time

    _check("eventTime.jsonPath", event_time.run(bootstrap, 500, repeats=1),
           "extraction_one_core.records_per_s.json_path", "extraction_one_core.batch_records_per_s.json_path",
           "driver_fetch_records_per_s.json_path",
           "speed_vs_without", "speed_vs_fetch_path", "bytes_vs_fetch_path",
           "capped_speed_vs_without", "latest_offset_wait_python_extractor.snapshot_ms_p99",
           "latest_offset_wait_python_extractor.consume_batch_extraction_ms",
           "promised.speed_vs_kafka_timestamp", "promised.capped_speed_vs_kafka_timestamp",
           "promised.driver_read_share", "reads.json_path_promised.bytes_per_payload_byte",
           "reads.json_path_promised.source_runner_peak_rss_mib",
           "at_scale.capped.source_runner_peak_rss_mib", "at_scale.uncapped.batches")


def avro_cost() -> None:
    """eventTime.field and value.decode on Debezium Avro, one core, against a registry (no Spark,
    no broker: a few seconds beside the registry's start); skipped saying why without one,
    failed under ``KAFKASYNC_REQUIRE_REGISTRY=1`` (as CI runs)."""
    from benchmarks import event_time
    from benchmarks.harness.brokers import with_registry
    from kafkasync_dev.testing.schema_registry import REQUIRE_REGISTRY

    figures = with_registry(lambda url: event_time.avro_extraction(url, 2_000, 1))
    if "skipped" in figures:
        print(f"bench-smoke: eventTime.field on Avro is not run: {figures['skipped']}", flush=True)
        if os.environ.get(REQUIRE_REGISTRY, "") not in ("", "0"):
            raise AssertionError(f"{REQUIRE_REGISTRY} is set and there is no registry: {figures['skipped']}")
        return
    us = figures["us_per_record"]  # labels hold dots (source.ts_ms): checked by name, not by dotted path
    _check("eventTime.field on Avro", {"avro": us["avro_field_source.ts_ms"], "json": us["json_path_$.source.ts_ms"],
                                       "decode": figures["value_decode_us_per_record"]},
           "avro.per_record_us", "avro.batch_us", "json.batch_us", "decode.numpy", "decode.per_record")


def side_by_side() -> int:
    from benchmarks import live_latency, live_rate
    from benchmarks import side_by_side as benchmark
    from benchmarks.harness.floor_source import FLOOR_LABEL
    from benchmarks.harness.spark import LABELS

    began = time.monotonic()
    figures = benchmark.measure(tiny=True, log=lambda message: print(
        f"bench-smoke: side by side at {time.monotonic() - began:.0f} s: {message}", flush=True))
    if "skipped" in figures:
        print(f"bench-smoke: side by side is not run: {figures['skipped']}", flush=True)
        return 1 if os.environ.get("KAFKASYNC_REQUIRE_BROKER", "") not in ("", "0") else 0
    size = next(key for key in figures["trigger_cost"]["broker"] if key.isdigit())
    figures["trigger"] = figures["trigger_cost"]["broker"][size]
    _check(f"side by side (Spark {figures['spark_version']})", figures,
           *(f"backlog.{label}.{figure}" for label in LABELS.values()
             for figure in ("seconds", "warm_seconds", "bytes_per_payload_byte", "jvm_peak_rss", "python_peak_rss",
                            "capped_seconds", "capped_bytes_per_payload_byte",
                            "warm_cpu_s_per_million_records.driver JVM", "capped_cpu_s_per_million_records.Spark",
                            "capped_cpu_s_per_million_records.broker", "capped_cpu_s_per_million_records.machine")),
           "backlog.kafkasync.capped_cpu_s_per_million_records.Python workers",
           "backlog.capped_cpu_per_record_vs_format_kafka.Spark and broker",
           "targets.backlog (1,000 B).capped_bytes_per_payload_byte.value",
           f"backlog.{FLOOR_LABEL}.seconds", "backlog.floor_speed_vs_format_kafka",
           "backlog.capped_floor_speed_vs_format_kafka",
           *(f"backlog.{read}_floor_cpu_per_record_vs_format_kafka.Spark and broker" for read in ("warm", "capped")),
           "latency.kafkasync.p99_ms", 'latency.format("kafka").p99_ms',
           "latency.kafkasync.steady.p99_ms", "latency.kafkasync.trigger_ms.addBatch",
           "latency.kafkasync.first_row_ms", 'latency.format("kafka").first_row_ms',
           *(f"latency.{label}.trigger_ms.triggerExecution" for label in live_latency.LIVE_LABELS.values()),
           "latency.kafkasync.python.latestOffset.handler_ms", "latency.kafkasync.python.tasks.ms",
           "latency.kafkasync.spark_tasks.task_ms", "latency.batch_ms_over_floor",
           "latency.batch_ms_over_tuned_floor", "targets.steady_p99_extra_ms.value",
           "trigger.no_limit.format_kafka.ms", "trigger.max_offsets_per_trigger.timeIndex.walk.ms",
           *(f"many_partitions.{label}.{figure}" for label in LABELS.values()
             for figure in ("seconds", "trigger_seconds", "batches", "spark_tasks")),
           "many_partitions.kafkasync_speed_vs_format_kafka")
    rate = str(live_rate.COST_RATE)
    _check("live rate", figures["live_rate"],
           *(f"conditions.{condition}.{label}.{figure}" for condition in live_rate.CONDITIONS
             for label in live_rate.LABELS.values()
             for figure in ("sustainable_rate", f"steps.{rate}.p50_ms", f"steps.{rate}.produced_per_s",
                            f"steps.{rate}.cpu_s_per_1000_records.total",
                            f"steps.{rate}.cpu_s_per_1000_records.driver JVM",
                            f"steps.{rate}.cpu_s_per_1000_records.broker",
                            f"steps.{rate}.machine_busy_cores")),
           *(f"conditions.{condition}.kafkasync.steps.{rate}.cpu_s_per_1000_records.{process}"
             for condition in live_rate.CONDITIONS for process in ("Python workers", "Python source runner")),
           "targets.CPU starved.cpu_s_per_1000_records.value")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--side-by-side"]:
        return side_by_side()
    from kafkasync_dev.testing.local_broker import real_broker

    steps: list[tuple[str, Callable[[], None]]] = [("planner", planner), ("Avro", avro_cost)]
    with real_broker() as (bootstrap, why_not):
        if bootstrap is None:
            print(f"bench-smoke: the real-broker benchmarks are not run: {why_not}", flush=True)
        else:
            steps += [("trigger cost", lambda: trigger_cost(bootstrap)), ("broker bytes", broker_bytes),
                      ("event time", lambda: event_time_cost(bootstrap))]
        for name, step in steps:
            began = time.monotonic()
            step()
            print(f"bench-smoke: {name} took {time.monotonic() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
