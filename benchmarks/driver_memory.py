"""Does the driver's memory stay flat as the backlog grows? The peak RSS of the Python process
where kafkasync's driver side runs (Spark's streaming source runner), reading backlogs below and
well above what the driver buffers, on ``make bench``'s embedded cluster.

The default budget (32 MiB, 2.1 million records) is more than the embedded cluster can hold, so
these runs set the smallest, ``driver.buffer.bytes`` = 1 MiB (65,536 records): flat beyond that is
what a larger budget does beyond its size. Target (``make bench``, ``benchmarks/run.py``): the
largest backlog's peak at most 10 % above that of the smallest backlog above twice the buffers
(run-to-run noise of a Python process's RSS is about that; a drop is not growth).
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness.backlogs import Topic, produce_uniform
from benchmarks.harness.queries import run_query
from benchmarks.harness.results import log

MEMORY_BUFFER_BYTES = 1024 * 1024
MEMORY_BACKLOGS = (  # (records per partition, value bytes); the main topic adds 40,000 x 100 B
    (10_000, 100),
    (20_000, 100),
    (90_000, 10),  # 720,000 records: near the mock's ~100,000 messages per partition
)


def produce(cluster: Any, partitions: int) -> list[tuple[Topic, int]]:
    """The backlogs beside ``make bench``'s main topic, with their value sizes."""
    return [(produce_uniform(cluster, f"bench-memory-{n}x{size}", partitions, n, value_bytes=size), size)
            for n, size in MEMORY_BACKLOGS]


def measure(spark: Any, listener: Any, bootstrap: str, backlogs: list[tuple[Topic, int]]) -> dict[str, Any]:
    """The peak RSS by backlog (records), and the backlogs' shapes."""
    by_backlog: dict[int, float] = {}
    for topic, _ in backlogs:
        log(f"driver memory, backlog of {topic.records:,} records")
        by_backlog[topic.records] = run_query(
            spark, listener, label=topic.name, bootstrap=bootstrap, topic=topic.name, expected_rows=topic.records,
            sample_rss=True, options={"driver.buffer.bytes": MEMORY_BUFFER_BYTES}).peak_rss_mb or 0.0
    return {"driver_peak_rss_mb": max(by_backlog.values()),
            "driver_peak_rss_mb_by_backlog": {str(n): round(mb, 1) for n, mb in sorted(by_backlog.items())},
            "driver_peak_rss_backlogs": {str(t.records): f"{t.partitions} x {t.records_per_partition:,} x {size} B"
                                         for t, size in backlogs}}


def growth_mb(results: dict[str, Any]) -> tuple[float, float]:
    """(growth, the smallest full backlog's peak): the target's figures from the results."""
    rss = {int(n): mb for n, mb in results["driver_peak_rss_mb_by_backlog"].items()}
    full = [mb for n, mb in sorted(rss.items()) if n >= 2 * MEMORY_BUFFER_BYTES // 16]
    return full[-1] - full[0], full[0]
