"""What synchronization costs a backlog read: kafkasync end to end into Spark's ``noop`` sink, on
``make bench``'s embedded cluster (8 x 40,000 records of 100 B).

Measures records/s from ``start()`` until every row was read, synchronized (the default,
``max.task.idle.ms=0``) and ``max.task.idle.ms=-1``, alternating (ABBAAB) after a discarded warm-up
query, and the data batches each run took; beside them Spark's ceiling for any Python streaming
source with the same batch shape (``harness.floor_source``, no Kafka work) and a batch read's
``.count()``. Against: one confluent-kafka consumer (``benchmarks/raw.py``). Targets (``make bench``,
``benchmarks/run.py``): kafkasync at least 0.5 x the raw consumer, synchronized at least 0.85 x
``-1``, the backlog in at most 2 batches with the default options.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.harness.backlogs import Topic
from benchmarks.harness.floor_source import CeilingDataSource
from benchmarks.harness.queries import QueryRun, batch_read_seconds, run_query
from benchmarks.harness.results import log

PARTITIONS = 8
RECORDS_PER_PARTITION = 40_000  # x 100-byte values: within the mock's 5 MiB per partition
WARMUP_RECORDS_PER_PARTITION = 5_000
THROUGHPUT_ORDER = (0, -1, -1, 0, 0, -1)  # alternating (ABBAAB): neither mode always goes first


def measure(spark: Any, listener: Any, bootstrap: str, topic: Topic, warmup: Topic, runs: int) -> dict[str, Any]:
    """The figures ``results.json`` keeps at its top level (``kafkasync_rps``, ``throughput_runs``...)."""
    run_query(spark, listener, label="warm-up", bootstrap=bootstrap, topic=warmup.name,
              expected_rows=warmup.records, options={"max.task.idle.ms": -1})
    spark.dataSource.register(CeilingDataSource)
    ceiling = [run_query(spark, listener, label="ceiling", bootstrap="", topic="", expected_rows=topic.records,
                         source_format=CeilingDataSource.name(),
                         options={"batches": 1, "partitions": PARTITIONS, "rows": RECORDS_PER_PARTITION})
               for _ in range(2)]
    measured: dict[int, list[QueryRun]] = {0: [], -1: []}
    for idle in THROUGHPUT_ORDER[:runs]:
        log(f"kafkasync -> noop, max.task.idle.ms={idle}")
        measured[idle].append(run_query(spark, listener, label=f"idle={idle}", bootstrap=bootstrap, topic=topic.name,
                                        expected_rows=topic.records, options={"max.task.idle.ms": idle},
                                        sample_rss=True))
    log("batch read .count()")
    return {
        "spark_python_source_ceiling_rps": max(r.rps for r in ceiling),
        "kafkasync_rps": statistics.median(r.rps for r in measured[0]),
        "kafkasync_unsync_rps": statistics.median(r.rps for r in measured[-1]),
        "throughput_runs": [
            {"max_task_idle_ms": idle, "rps": round(r.rps), "rows": r.rows, "processing_s": round(r.processing_s, 3),
             "wall_s": round(r.wall_s, 3), "data_batches": len(r.data_batches),
             "peak_rss_mb": round(r.peak_rss_mb or 0.0, 1), "batch_rows": [p["numInputRows"] for p in r.data_batches]}
            for idle in (0, -1) for r in measured[idle]],
        "batch_read_s": batch_read_seconds(spark, bootstrap, topic),
    }
