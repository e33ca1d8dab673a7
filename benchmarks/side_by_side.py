"""``make bench``'s second half: kafkasync beside Spark's own ``format("kafka")``, at the same
Spark version, on a real broker.

``format("kafka")`` needs Spark's Kafka connector at the running PySpark's version; Maven Central
serves none for some releases (4.3.0), so ``make bench`` runs this module in ``make parity``'s
virtualenv (the newest PySpark whose connector is served) and prints that version in the report.
It runs, each measurement's docstring saying how and against which target:

1. **Debezium Avro** (key ``avro``; not in a smoke run): a windowed count on ``source.ts_ms``,
   kafkasync beside ``format("kafka")`` + ``from_avro`` (``benchmarks/formats_bench.py``);
2. **a backlog read once** (``backlog`` and its variants: ``benchmarks/backlog_read.py``);
3. **a live stream's latency** (``latency``: ``benchmarks/live_latency.py``);
4. **the sustainable live rate and CPU per record** (``live_rate``: ``benchmarks/live_rate.py``);
5. **a trigger's cost** at 512 and 4,096 partitions (``trigger_cost``: ``benchmarks/trigger_cost.py``);
6. **a 1,024-partition backlog** (``many_partitions``: ``benchmarks/many_partitions.py``).

Targets (:data:`TARGETS`): kafkasync at least 1.2 x ``format("kafka")``'s speed on the backlog, at
most 1.1 broker bytes per payload byte, a steady p99 at most 100 ms above ``format("kafka")``'s, a
live batch at most 30 ms above a Python source's floor; and each backlog's (``backlog_read``).

``python -m benchmarks.side_by_side [--tiny]`` prints the results as JSON; ``--write`` also
merges them into ``benchmarks/results.json`` (key ``side_by_side``) and draws
``docs/img/side_by_side.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional

from benchmarks import backlog_read, formats_bench, live_latency, live_rate, many_partitions, trigger_cost
from benchmarks.backlog_read import BACKLOGS, TINY_RECORDS_PER_PARTITION, cost_targets
from benchmarks.harness import results as results_file
from benchmarks.harness.backlogs import RECORDS_PER_PARTITION
from benchmarks.harness.brokers import broker_and_connector
from benchmarks.harness.floor_source import FLOOR_LABEL
from benchmarks.harness.results import log, print_json, target
from benchmarks.harness.spark import LABELS, SOURCES, session

TARGETS = {"speed_vs_format_kafka": 1.2, "bytes_per_payload_byte": 1.1, "steady_p99_extra_ms": 100,
           "batch_ms_over_floor": 30}


def targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target of the comparison: value, target and whether it is met."""
    backlog, live = results["backlog"], results["latency"]
    return {
        "speed_vs_format_kafka": target(backlog["kafkasync_speed_vs_format_kafka"], ">=",
                                        TARGETS["speed_vs_format_kafka"],
                                        python_source_floor=round(backlog["floor_speed_vs_format_kafka"], 3)),
        "bytes_per_payload_byte": target(backlog[LABELS["kafkasync"]]["bytes_per_payload_byte"], "<=",
                                         TARGETS["bytes_per_payload_byte"]),
        "steady_p99_extra_ms": target(live["steady_p99_extra_ms"], "<=", TARGETS["steady_p99_extra_ms"], 1,
                                      whole_run=round(live["p99_extra_ms"], 1)),
        "batch_ms_over_floor": target(live["batch_ms_over_floor"], "<=", TARGETS["batch_ms_over_floor"], 1,
                                      over_floor_with_worker_fixes=round(live["batch_ms_over_tuned_floor"], 1)),
        **{f"{name} ({results[name]['value_bytes']:,} B)": cost_targets(results[name])
           for name, _, _ in BACKLOGS if "skipped" not in results.get(name, {"skipped": "not run"})},
        "many_partitions_speed_vs_format_kafka": results["many_partitions"]["target"],
    }


def measure(*, tiny: bool = False, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Every comparison, or ``{"skipped": why}`` where there is no broker or no connector."""
    import pyspark

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
        results["backlog"] = backlog_read.backlog(
            bootstrap, jars, TINY_RECORDS_PER_PARTITION if tiny else RECORDS_PER_PARTITION,
            1 if tiny else backlog_read.RUNS, log)
        # A smoke (tiny) skips the other backlogs: the same code as the first, with smaller values or
        # batches, three Spark starts more each (about a minute of CI).
        for name, value_bytes, batch_bytes in BACKLOGS[1:]:
            results[name] = (
                {"skipped": "a smoke run: backlog() with another value or batch size"} if tiny else
                backlog_read.backlog(bootstrap, jars, RECORDS_PER_PARTITION, backlog_read.RUNS, log, value_bytes,
                                     batch_bytes))
        results["latency"] = live_latency.latency(bootstrap, jars, 8 if tiny else live_latency.LIVE_SECONDS,
                                                  1 if tiny else live_latency.LIVE_RUNS, log)
        results["live_rate"] = (live_rate.measure_tiny(bootstrap, jars, log=log) if tiny
                                else live_rate.measure(bootstrap, jars, log=log))
        spark = session("kafkasync-side-by-side", jars=jars)
        try:
            log("side by side: the cost of one trigger, both sources")
            results["trigger_cost"] = trigger_cost.measure(tiny=tiny, bootstrap=bootstrap, spark=spark, log=log)
        finally:
            spark.stop()
        results["many_partitions"] = many_partitions.measure(bootstrap, jars, tiny=tiny, log=log)
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
    axis.set_title(f"live latency after {live[names[0]]['steady']['after_s']:.0f} s, {live_latency.RATE:,} rec/s: "
                   "p50 / p99 (ms)", fontsize=10)
    figure.suptitle(f"kafkasync beside format(\"kafka\"), Spark {results['spark_version']}, "
                    f"{back['records']:,} x {back['value_bytes']:,} B backlog, read_committed", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help=f"{TINY_RECORDS_PER_PARTITION} records a partition, one backlog, 8 s live: a smoke run")
    parser.add_argument("--write", action="store_true",
                        help="into benchmarks/results.json and docs/img/side_by_side.png")
    args = parser.parse_args(argv)
    results = measure(tiny=args.tiny, log=log)
    print_json(results)
    if "skipped" in results:
        print(f"side by side: skipped: {results['skipped']}", file=sys.stderr)
    elif args.write:
        results_file.merge(("side_by_side",), results)
        draw(results, os.path.join(results_file.PICTURES, "side_by_side.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
