"""A backlog read once, kafkasync beside Spark's own ``format("kafka")``, at the same Spark
version, on a real broker: seconds, broker bytes, memory, CPU per record.

8 x 50,000 records of 1 KB (400 MB of values, ``harness.backlogs.produce_backlog``), read with
``trigger(availableNow=True)`` into the ``noop`` sink, each source in a Spark of its own (a child
process, ``harness.children``), the sources alternating, :data:`RUNS` each (median), both
``read_committed``. Per read: the query's seconds (not Spark's start) and its triggers'
(``triggerExecution``); the same read again in that Spark ("warm": its JVM compiled, the
executors' Python workers started); then capped at :data:`CAPPED_SHARE` of the backlog a
trigger (``maxOffsetsPerTrigger``, a rate-limited backfill, where a reader that prefetches past its
range's end makes the broker send more). For each: bytes the broker sent per payload byte, peak
RSS of the driver's JVM (in ``local[2]`` it runs the executors' JVM side too; ``format("kafka")``
plans in it), of the driver's Python process and of Spark's Python source runner (where kafkasync
plans), and every process's CPU seconds per million records (``harness.samplers``). Beside them,
the same rows from ``harness.floor_source`` with kafkasync's worker fixes: what Spark itself costs
any Python source.

Read again with 200-byte values (``backlog_small_records``), and both written in a Java producer's
16 KB batches (``..._java_batches``). Targets: kafkasync at least 1.2 x ``format("kafka")``'s speed,
at most 1.1 broker bytes per payload byte (``side_by_side.TARGETS``); and issue 53's per backlog
(:data:`COST_TARGETS`): under a cap at most 1.2 bytes per payload byte and at most
``format("kafka")``'s + 0.1, at least 1.15 x its speed warm and capped, at most 0.7 x its CPU per
record. ``make bench`` runs it from ``benchmarks/side_by_side.py``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Optional

from benchmarks.harness.backlogs import KEY_BYTES, PARTITIONS, VALUE_BYTES, produce_backlog
from benchmarks.harness.brokers import broker_port
from benchmarks.harness.children import print_result, run_child
from benchmarks.harness.floor_source import FLOOR_LABEL, TUNED_FLOOR, floor_reader
from benchmarks.harness.results import median_of_runs
from benchmarks.harness.samplers import BrokerBytesSampler, CpuByProcess, SourceRunnerPeak, peak_rss_bytes
from benchmarks.harness.spark import LABELS, SOURCES, compared_options, jvm_pid, kafka_reader, session, timed_read

RUNS = 2
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
BACKLOGS = (("backlog", VALUE_BYTES, None), ("backlog_small_records", SMALL_VALUE_BYTES, None),
            ("backlog_java_batches", VALUE_BYTES, JAVA_BATCH_BYTES),
            ("backlog_small_records_java_batches", SMALL_VALUE_BYTES, JAVA_BATCH_BYTES))
"""Each backlog read side by side: its name in the results, value size, producer ``batch.size``."""
CAPPED_SHARE = 1 / 8
"""The capped read's ``maxOffsetsPerTrigger``, a share of the backlog: 8 triggers, each range
of 1/64 of it (8 x 50,000 records capped at 50,000, issue 53's measurement)."""
TINY_RECORDS_PER_PARTITION = 512
"""A smoke run's backlog: the floor's capped read splits it into equal tasks (8 batches of 8)."""
COST_TARGETS = {"capped_bytes_per_payload_byte": 1.2, "capped_bytes_over_format_kafka": 0.1,
                "uncapped_bytes_per_payload_byte": 1.1, "speed_vs_format_kafka": 1.15,
                "cpu_per_record_vs_format_kafka": 0.7}
"""Issue 53's: broker bytes under a cap at ``format("kafka")``'s, speed, and CPU per record
(every Spark process and the broker, read for read: the cores a cluster pays)."""


# -- the child: one Spark, one source, three reads -------------------------------------------------

def _reader(spark: Any, source: str, bootstrap: str, topic: str, records: int, value_bytes: int,
            capped: bool = False) -> Any:
    """The backlog's read, capped at :data:`CAPPED_SHARE` of it a trigger: the Kafka sources with
    ``maxOffsetsPerTrigger``, the floor (no broker, no cap) in as many batches of the same tasks."""
    if source == TUNED_FLOOR:
        batches = round(1 / CAPPED_SHARE) if capped else 1
        rows, left = divmod(records, PARTITIONS * batches)
        if left:
            raise ValueError(f"the floor reads {records:,} records in {PARTITIONS} x {batches} equal tasks: "
                             "not a multiple")
        return floor_reader(spark, batches=batches, partitions=PARTITIONS, rows=rows, value_bytes=value_bytes,
                            worker_fixes=True)
    cap = {"maxOffsetsPerTrigger": str(max(1, int(records * CAPPED_SHARE)))} if capped else {}
    return kafka_reader(spark, source, bootstrap, topic, {**compared_options(source), **cap})


def child(spark: Any, source: str, bootstrap: str, topic: str, records: int, value_bytes: int) -> dict[str, Any]:
    """The backlog read in a new Spark (the figure the target is about), then again in the same
    Spark ("warm"), then once more capped; per read, the query's seconds and its triggers', the
    rest being the query's start and stop, and every process's CPU seconds."""
    def read_once(capped: bool = False) -> tuple[float, float]:
        seconds, progress = timed_read(_reader(spark, source, bootstrap, topic, records, value_bytes, capped),
                                       source, records)
        return seconds, sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000

    port, jvm = broker_port(bootstrap), jvm_pid(spark)
    with SourceRunnerPeak() as runner, BrokerBytesSampler(port) as sampler, CpuByProcess(jvm) as cpu:
        seconds, trigger_seconds = read_once()
    result: dict[str, Any] = {
        "seconds": seconds, "trigger_seconds": trigger_seconds, "bytes_sent": sampler.bytes_sent,
        "jvm_peak_rss": peak_rss_bytes(jvm), "python_peak_rss": peak_rss_bytes(os.getpid()),
        "source_runner_peak_rss": runner.peak, "cpu_s_per_million_records": cpu.per_million(records)}
    with CpuByProcess(jvm) as cpu:
        result["warm_seconds"], result["warm_trigger_seconds"] = read_once()
    result["warm_cpu_s_per_million_records"] = cpu.per_million(records)
    with BrokerBytesSampler(port) as sampler, CpuByProcess(jvm) as cpu:
        result["capped_seconds"], result["capped_trigger_seconds"] = read_once(capped=True)
    result["capped_bytes_sent"] = sampler.bytes_sent
    result["capped_cpu_s_per_million_records"] = cpu.per_million(records)
    return result


# -- the parent: the backlog, the reads in turn, the ratios ----------------------------------------

def backlog(bootstrap: str, jars: str, records_per_partition: int, runs: int,
            log: Callable[[str], None], value_bytes: int = VALUE_BYTES,
            batch_bytes: Optional[int] = None) -> dict[str, Any]:
    """Both sources and the Python source floor (with kafkasync's worker fixes, :data:`FLOOR_LABEL`)
    read one backlog, ``runs`` times each. ``batch_bytes``: the producer's ``batch.size`` the
    backlog is written with (None: librdkafka's); the floor, which reads no broker, is left out then."""
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
        run = run_child("benchmarks.backlog_read", source, bootstrap, topic, str(records), str(value_bytes), jars)
        bytes_sent, capped_bytes_sent = run.pop("bytes_sent"), run.pop("capped_bytes_sent")
        if source != TUNED_FLOOR:  # it reads no broker
            run["bytes_per_payload_byte"] = bytes_sent / payload
            run["capped_bytes_per_payload_byte"] = capped_bytes_sent / payload
        runs_by_source[source].append(run)
    result: dict[str, Any] = {"records": records, "payload_bytes": payload, "value_bytes": value_bytes,
                              "key_bytes": KEY_BYTES, "runs": runs, "producer_batch_size": batch_bytes,
                              "max_offsets_per_trigger": max(1, int(records * CAPPED_SHARE))}
    for source, measured in runs_by_source.items():
        result[labels[source]] = median_of_runs(measured)
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


if __name__ == "__main__":  # the child (run_child): --child source bootstrap topic records value_bytes jars
    _, source, bootstrap, topic, records, value_bytes, jars = sys.argv[1:]
    spark = session("kafkasync-side-by-side", jars=jars)
    try:
        figures = child(spark, source, bootstrap, topic, int(records), int(value_bytes))
    finally:
        spark.stop()
    print_result(figures)
