"""Metrics of ``async_map``: counters and a latency histogram, summed over tasks by Spark.

Each task counts locally (``AsyncCounters``, no locking: the counters live on the task's event
loop) and adds its totals once, when its input is done, to one Spark accumulator owned by an
``AsyncMetrics`` object. Spark merges accumulator updates of successful tasks only, so a task
that fails and is retried is not counted twice; a micro-batch that Spark replays after a restart
is counted again (it really calls the service again).

Latency is a fixed log-bucket histogram (four buckets per doubling, from 0.1 ms to about
2.5 hours), so task histograms add up exactly and a quantile is within about 9% of the truth.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

_SMALLEST = 1e-4  # seconds: the upper bound of the first bucket
_PER_DOUBLING = 4
_BUCKETS = 96  # the last bucket also takes everything above its bound
UPPER_BOUNDS: Tuple[float, ...] = tuple(_SMALLEST * 2 ** (i / _PER_DOUBLING) for i in range(_BUCKETS))

COUNTER_NAMES = ("rows", "ok", "failures", "calls", "retries", "timeouts")


def bucket_of(seconds: float) -> int:
    """The histogram bucket of one latency: the first whose upper bound is >= it."""
    return min(bisect.bisect_left(UPPER_BOUNDS, seconds), _BUCKETS - 1)


def quantile(histogram: List[int], q: float) -> Optional[float]:
    """The ``q`` quantile (0..1) of a bucket histogram in seconds: the geometric middle of the
    bucket holding it. ``None`` when the histogram is empty."""
    total = sum(histogram)
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            upper = UPPER_BOUNDS[index]
            lower = UPPER_BOUNDS[index - 1] if index else upper / 2 ** (1 / _PER_DOUBLING)
            return math.sqrt(lower * upper)
    raise AssertionError("unreachable: rank <= total")


@dataclass
class AsyncCounters:
    """One task's counts. ``calls`` are attempts (fn invocations); ``retries`` the attempts after
    a row's first; ``failures`` rows whose last attempt failed; ``timeouts`` attempts that hit
    the timeout; ``latency`` a histogram of every attempt's duration, timed-out ones included."""

    rows: int = 0
    ok: int = 0
    failures: int = 0
    calls: int = 0
    retries: int = 0
    timeouts: int = 0
    latency: List[int] = field(default_factory=lambda: [0] * _BUCKETS)

    def record_latency(self, seconds: float) -> None:
        self.latency[bucket_of(seconds)] += 1

    def as_vector(self) -> List[int]:
        return [getattr(self, name) for name in COUNTER_NAMES] + self.latency


class _VectorParam:
    """Element-wise sum of ``AsyncCounters.as_vector()`` lists (Spark's AccumulatorParam
    protocol: ``zero`` and ``addInPlace``; no pyspark import, so the core stays Spark-free)."""

    def zero(self, value: List[int]) -> List[int]:
        return [0] * len(value)

    def addInPlace(self, value1: List[int], value2: List[int]) -> List[int]:
        return [a + b for a, b in zip(value1, value2)]


def _counter_property(name: str, doc: str) -> property:
    return property(lambda self: self._vector()[COUNTER_NAMES.index(name)], doc=doc)


class AsyncMetrics:
    """Per-query metrics of ``async_map``: pass one to ``async_map(..., metrics=...)``.

    Read on the driver at any time (values grow as tasks finish)::

        metrics = AsyncMetrics(spark)
        out = async_map(df, lookup, returns=..., metrics=metrics)
        ...
        metrics.calls, metrics.retries, metrics.failures, metrics.timeouts
        metrics.latency_p50, metrics.latency_p99      # seconds, None before the first call
        metrics.snapshot()                            # all of it as a dict

    Use one object per query: everything the query's tasks did adds up in it.
    """

    def __init__(self, spark: Any):
        zero = AsyncCounters().as_vector()
        self._accumulator = spark.sparkContext.accumulator(zero, _VectorParam())

    def add(self, counters: AsyncCounters) -> None:
        """Called by a task with its totals (executor side)."""
        self._accumulator.add(counters.as_vector())

    def _vector(self) -> List[int]:
        return self._accumulator.value

    rows = _counter_property("rows", "input rows that entered a call")
    ok = _counter_property("ok", "rows whose call succeeded")
    failures = _counter_property("failures", "rows whose last attempt failed (dead letters)")
    calls = _counter_property("calls", "attempts: fn invocations, retries included")
    retries = _counter_property("retries", "attempts after a row's first")
    timeouts = _counter_property("timeouts", "attempts that hit the timeout")

    @property
    def latency_histogram(self) -> List[int]:
        return self._vector()[len(COUNTER_NAMES):]

    @property
    def latency_p50(self) -> Optional[float]:
        return quantile(self.latency_histogram, 0.5)

    @property
    def latency_p99(self) -> Optional[float]:
        return quantile(self.latency_histogram, 0.99)

    def snapshot(self) -> Dict[str, Any]:
        vector = self._vector()
        histogram = vector[len(COUNTER_NAMES):]
        return {**dict(zip(COUNTER_NAMES, vector)),
                "latency_p50": quantile(histogram, 0.5), "latency_p99": quantile(histogram, 0.99)}
