"""Benchmark of ``async_map`` against what Spark users do today, in one run on one machine.

Workload (issue 11): a local HTTP service answering every call after 40 ms, 2 Spark tasks, 64
calls in flight per task. The ideal throughput is ``2 x 64 / 0.04 s = 3,200 rows/s``; the
target (issue 11): ``async_map`` at least 0.7 x the ideal rate in the uniform scenario. Side by
side, with the same service, client code path (one TCP connection per call) and concurrency:

* ``async_map`` (``ordering="input"``; in the tail scenario also ``"none"``);
* ``mapInPandas`` with a ``ThreadPoolExecutor`` of 64 threads per task, mapping each Arrow batch
  (the common hand-written pattern);
* an Arrow-optimized Python UDF (``udf(..., useArrow=True)``) with
  ``spark.sql.execution.pythonUDF.arrow.concurrency.level=64``. In the installed PySpark 4.3
  (``pyspark/worker.py``, ``_evaluate_batch_udf``) that option is read only for
  ``SQL_ARROW_BATCHED_UDF``, i.e. Arrow-optimized row-at-a-time ``udf``s, not pandas UDFs or
  ``mapInPandas``/``mapInArrow``; it maps the rows of each Arrow batch over a new
  ``ThreadPoolExecutor(max_workers=level)`` and waits for the whole batch (SPARK-50446,
  https://github.com/apache/spark/pull/49000).

Two scenarios: ``uniform`` (every call 40 ms, Spark's default 10,000-row Arrow batches) and
``tail`` (every 50th call 400 ms, 256-row Arrow batches: what stragglers and batch boundaries
cost each approach). Each approach runs twice per scenario, alternating, after a warm-up; the
better run counts (the machine is shared).

``python -m benchmarks.async_bench`` prints a table and writes ``benchmarks/async_results.json``;
``make bench`` records the same under ``"async"`` in ``benchmarks/results.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

LATENCY_MS = 40
SLOW_MS = 400
SLOW_EVERY = 50
MAX_IN_FLIGHT = 64
TASKS = 2
WARM_UP_ROWS = 1_280
ARROW_CONCURRENCY = "spark.sql.execution.pythonUDF.arrow.concurrency.level"
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
SCENARIOS = {
    # rows: 4 s (uniform) and 1.8 s (tail) at the ideal rate, so that a Spark job's fixed start-up
    # cost (a few hundred ms) weighs little in the end-to-end rate.
    "uniform": {"slow_every": 0, "arrow_batch": 10_000, "rows": 12_800},
    "tail": {"slow_every": SLOW_EVERY, "arrow_batch": 256, "rows": 4_800},
}
TARGET_VS_IDEAL = 0.7


def ideal_rps(slow_every: int) -> float:
    mean = LATENCY_MS if not slow_every else ((slow_every - 1) * LATENCY_MS + SLOW_MS) / slow_every
    return TASKS * MAX_IN_FLIGHT / (mean / 1000)


def _path_params(slow_every: int) -> Callable[[int], Dict[str, int]]:
    def params(i: int) -> Dict[str, int]:
        slow = slow_every and i % slow_every == 0
        return {"id": i, "key": i, "latency_ms": SLOW_MS if slow else LATENCY_MS}
    return params


def _async_map_frame(spark, port: int, slow_every: int, rows: int, ordering: str):
    from kafkasync_dev.testing.http_service import fetch, lookup_path
    from kafkasync_source import async_map

    params = _path_params(slow_every)

    async def lookup(row):
        body = await fetch(port, lookup_path(**params(row["id"])))
        return {"value": body["value"]}

    return async_map(spark.range(0, rows, 1, TASKS), lookup, returns="value string",
                     max_in_flight=MAX_IN_FLIGHT, timeout=30.0, ordering=ordering)


def _thread_pool_frame(spark, port: int, slow_every: int, rows: int):
    params = _path_params(slow_every)

    def per_task(batches):
        from concurrent.futures import ThreadPoolExecutor

        from kafkasync_dev.testing.http_service import fetch_blocking, lookup_path

        def call(i):
            return fetch_blocking(port, lookup_path(**params(int(i))))["value"]

        with ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT) as pool:
            for batch in batches:
                yield batch.assign(value=list(pool.map(call, batch["id"])))

    return spark.range(0, rows, 1, TASKS).mapInPandas(per_task, "id long, value string")


def _arrow_udf_frame(spark, port: int, slow_every: int, rows: int):
    from pyspark.sql.functions import col, udf

    params = _path_params(slow_every)

    def call(i):
        from kafkasync_dev.testing.http_service import fetch_blocking, lookup_path

        return fetch_blocking(port, lookup_path(**params(i)))["value"]

    lookup = udf(call, "string", useArrow=True)
    return spark.range(0, rows, 1, TASKS).select("id", lookup(col("id")).alias("value"))


APPROACHES = {
    "async_map": lambda spark, port, slow, rows: _async_map_frame(spark, port, slow, rows, "input"),
    "async_map_unordered": lambda spark, port, slow, rows: _async_map_frame(spark, port, slow, rows, "none"),
    "thread_pool_mapInPandas": _thread_pool_frame,
    "arrow_udf_concurrency": _arrow_udf_frame,
}
APPROACHES_BY_SCENARIO = {
    "uniform": ["async_map", "thread_pool_mapInPandas", "arrow_udf_concurrency"],
    "tail": ["async_map", "async_map_unordered", "thread_pool_mapInPandas", "arrow_udf_concurrency"],
}


def _timed_run(spark, service, frame, rows: int) -> Dict[str, Any]:
    service.reset()
    started = time.monotonic()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - started
    stats = service.stats()
    if stats.requests != rows:
        raise AssertionError(f"expected {rows} calls, the service saw {stats.requests}")
    return {"seconds": round(seconds, 3), "rps": round(rows / seconds, 1),
            "calls_per_second_at_service": round(stats.calls_per_second(), 1),
            "max_concurrent_at_service": stats.max_concurrent}


def _with_conf(spark, settings: Dict[str, str], action: Callable[[], Any]) -> Any:
    """Run ``action`` with session confs set, then restore them (unset when they were unset)."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return action()
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def measure(spark) -> Dict[str, Any]:
    """Every scenario and approach on ``spark`` (a local[2] session); the results as a dict."""
    from kafkasync_dev.testing.http_service import LookupService

    results: Dict[str, Any] = {
        "workload": {"latency_ms": LATENCY_MS, "max_in_flight": MAX_IN_FLIGHT, "tasks": TASKS,
                     "client": "one TCP connection per call (asyncio streams / blocking socket)"},
        "arrow_concurrency_option": (
            f"{ARROW_CONCURRENCY}: PySpark 4.3 worker.py reads it only for Arrow-optimized Python UDFs "
            "(SQL_ARROW_BATCHED_UDF) and maps each Arrow batch's rows over a new ThreadPoolExecutor of "
            "that size, waiting for the whole batch (SPARK-50446, apache/spark#49000)"),
        "scenarios": {},
    }
    with LookupService() as service:
        _log("warm-up (Python workers, service)")
        _with_conf(spark, {ARROW_CONCURRENCY: str(MAX_IN_FLIGHT)}, lambda: [
            _timed_run(spark, service, APPROACHES[name](spark, service.port, 0, WARM_UP_ROWS), WARM_UP_ROWS)
            for name in APPROACHES_BY_SCENARIO["uniform"]])
        for scenario, shape in SCENARIOS.items():
            names = APPROACHES_BY_SCENARIO[scenario]
            runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in names}
            for repetition in range(2):
                for name in names if repetition == 0 else list(reversed(names)):
                    _log(f"{scenario}: {name} (run {repetition + 1})")
                    frame = APPROACHES[name](spark, service.port, shape["slow_every"], shape["rows"])
                    settings = {ARROW_BATCH: str(shape["arrow_batch"])}
                    if name == "arrow_udf_concurrency":
                        settings[ARROW_CONCURRENCY] = str(MAX_IN_FLIGHT)
                    runs[name].append(_with_conf(spark, settings, functools.partial(
                        _timed_run, spark, service, frame, shape["rows"])))
            ideal = ideal_rps(shape["slow_every"])
            results["scenarios"][scenario] = {
                "ideal_rps": round(ideal, 1),
                "slow_every": shape["slow_every"], "slow_ms": SLOW_MS if shape["slow_every"] else None,
                "arrow_batch_rows": shape["arrow_batch"], "rows": shape["rows"],
                "approaches": {
                    name: {"best_rps": max(r["rps"] for r in rs),
                           "vs_ideal": round(max(r["rps"] for r in rs) / ideal, 3),
                           "best_calls_per_second_at_service": max(r["calls_per_second_at_service"] for r in rs),
                           "at_service_vs_ideal": round(
                               max(r["calls_per_second_at_service"] for r in rs) / ideal, 3),
                           "runs": rs}
                    for name, rs in runs.items()},
            }
    uniform = results["scenarios"]["uniform"]["approaches"]["async_map"]["vs_ideal"]
    results["target"] = {"async_map uniform rps >= 0.7 x ideal": {"value": uniform,
                                                                  "met": uniform >= TARGET_VS_IDEAL}}
    return results


def markdown(results: Dict[str, Any]) -> str:
    lines = ["| scenario | approach | rows/s end to end (best of 2) | × ideal | calls/s at the service | × ideal "
             "| max calls in flight at the service |",
             "|---|---|---|---|---|---|---|"]
    for scenario, data in results["scenarios"].items():
        for name, result in data["approaches"].items():
            concurrent = max(r["max_concurrent_at_service"] for r in result["runs"])
            lines.append(f"| {scenario} (ideal {data['ideal_rps']:,.0f}/s) | {name} | {result['best_rps']:,.0f} | "
                         f"{result['vs_ideal']:.2f} | {result['best_calls_per_second_at_service']:,.0f} | "
                         f"{result['at_service_vs_ideal']:.2f} | {concurrent} |")
    return "\n".join(lines)


def run() -> Dict[str, Any]:
    """Start a local[2] Spark session of its own, measure, stop it."""
    from benchmarks.harness.spark import session

    spark = session("kafkasync-async-bench")
    started = time.monotonic()
    try:
        results = measure(spark)
    finally:
        spark.stop()
    results["bench_seconds"] = round(time.monotonic() - started, 1)
    results["load_average_end"] = os.getloadavg()
    return results


def _log(message: str) -> None:
    print(f"[async bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.path.join(HERE, "async_results.json"))
    args = parser.parse_args(argv)
    results = run()
    with open(args.output, "w") as handle:
        json.dump(results, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
