"""A backlog over 1,024 partitions read once, kafkasync beside Spark's own ``format("kafka")`` at
the same Spark version, on a real broker: what packing many small ranges into a few tasks buys.

``format("kafka")`` reads each Kafka partition in a Spark task of its own unless ``minPartitions``
asks for more (the Structured Streaming + Kafka integration guide, ``minPartitions``: by default
Spark partitions map one to one to Kafka partitions), and each task pays Spark's fixed cost of a
task whatever it reads; kafkasync packs the ranges into about as many tasks as the driver has
cores (docs/parity.md, ``minPartitions``). The read counts the tasks each ran.
At thousands of partitions the first pays that cost thousands of times (DESIGN.md, "Lessons from
round 7": 270 s for a 1,024-partition backlog that kafkasync read in 8.9 s).

:data:`PARTITIONS` x :data:`RECORDS_PER_PARTITION` records of 100 B (``harness.backlogs.produce_backlog``),
read with ``trigger(availableNow=True)`` into the ``noop`` sink by each source in a Spark of its
own (a child process), ``read_committed``: the read's seconds, its triggers' seconds, and the
batches and Spark tasks it ran (Spark's event log). Target: kafkasync at least 1.2 x
``format("kafka")``'s speed (the backlog's, ``side_by_side.TARGETS``). A smoke run reads 16
partitions of 64 records. ``make bench`` runs it from ``benchmarks/side_by_side.py``;
``python -m benchmarks.many_partitions [--tiny] [--write]`` runs it alone in ``make parity``'s
virtualenv (``--write``: into ``benchmarks/results.json`` at ``side_by_side.many_partitions``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Optional

from benchmarks.harness.backlogs import produce_backlog
from benchmarks.harness.children import print_result, run_child
from benchmarks.harness.queries import event_log_timing
from benchmarks.harness.results import target
from benchmarks.harness.spark import LABELS, SOURCES, compared_options, kafka_reader, session, timed_read

PARTITIONS, RECORDS_PER_PARTITION, VALUE_BYTES = 1_024, 1_000, 100
TINY_PARTITIONS, TINY_RECORDS_PER_PARTITION = 16, 64
TARGET_SPEED_VS_FORMAT_KAFKA = 1.2


def child(source: str, bootstrap: str, topic: str, records: int, jars: str) -> dict[str, Any]:
    """One source's read in a new Spark: seconds, triggers' seconds, batches, Spark tasks."""
    event_log = tempfile.mkdtemp(prefix="kafkasync-events-")
    spark = session("kafkasync-many-partitions", jars=jars, event_log=event_log)
    try:
        seconds, progress = timed_read(kafka_reader(spark, source, bootstrap, topic, compared_options(source)),
                                       source, records)
    finally:
        spark.stop()
    tasks = event_log_timing(event_log, 0)
    shutil.rmtree(event_log, ignore_errors=True)
    return {"seconds": seconds,
            "trigger_seconds": sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000,
            "batches": sum(1 for p in progress if p.numInputRows), "spark_tasks": tasks.get("tasks", 0),
            "task_ms": tasks.get("task_ms")}


def measure(bootstrap: str, jars: str, *, tiny: bool = False,
            log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """The backlog, then each source's read (``format("kafka")`` first: the longer one)."""
    partitions, per_partition = (TINY_PARTITIONS, TINY_RECORDS_PER_PARTITION) if tiny else (
        PARTITIONS, RECORDS_PER_PARTITION)
    topic = f"kafkasync-many-partitions-{partitions}-{int(time.time())}"
    log(f"many partitions: writing {partitions:,} partitions x {per_partition:,} records of {VALUE_BYTES} B")
    payload = produce_backlog(bootstrap, topic, per_partition, VALUE_BYTES, partitions=partitions)
    records = partitions * per_partition
    result: dict[str, Any] = {"partitions": partitions, "records": records, "value_bytes": VALUE_BYTES,
                              "payload_bytes": payload}
    for source in SOURCES:
        log(f"many partitions: {LABELS[source]} reads the backlog in a new Spark")
        result[LABELS[source]] = run_child("benchmarks.many_partitions", source, bootstrap, topic, str(records), jars)
    speed = result[LABELS["kafka"]]["seconds"] / result[LABELS["kafkasync"]]["seconds"]
    result["kafkasync_speed_vs_format_kafka"] = speed
    result["target"] = target(speed, ">=", TARGET_SPEED_VS_FORMAT_KAFKA)
    return result


def main(argv: Optional[list[str]] = None) -> int:
    from benchmarks.harness import results as results_file
    from benchmarks.harness.brokers import broker_and_connector

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        source, servers, topic, records, connector = argv[1:]
        print_result(child(source, servers, topic, int(records), connector))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help=f"{TINY_PARTITIONS} partitions: a smoke run")
    parser.add_argument("--write", action="store_true",
                        help="into benchmarks/results.json (side_by_side.many_partitions)")
    args = parser.parse_args(argv)
    with broker_and_connector() as (bootstrap, jars, why_not):
        figures = {"skipped": why_not} if bootstrap is None else measure(bootstrap, jars, tiny=args.tiny,
                                                                          log=results_file.log)
    results_file.print_json(figures)
    if args.write and "skipped" not in figures:
        results_file.merge(("side_by_side", "many_partitions"), figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
