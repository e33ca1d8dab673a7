"""Metrics of ``async_map``: counters and a latency histogram, summed over tasks by Spark.

Each task counts locally (``AsyncCounters``, no locking: the counters live on the task's event
loop). When its input is done, a task that had rows hands its totals to Spark as one extra
output row carrying them in a hidden column (``METRICS_COLUMN``). ``async_map`` sums that column
with Spark's observed metrics (``DataFrame.observe``) and drops the extra rows right after, so
the caller never sees them. Observed metrics work on classic and Spark Connect sessions alike
(accumulators need a ``sparkContext``, which Connect does not have), and Spark merges them from
successful tasks only: a task that fails and is retried is not counted twice; a micro-batch
that Spark replays after a restart is counted again (it really calls the service again).

Latency is a fixed log-bucket histogram (four buckets per doubling, from 0.1 ms to about
2.5 hours), so task histograms add up exactly and a quantile is within about 9% of the truth.
"""

from __future__ import annotations

import bisect
import json
import math
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

_SMALLEST = 1e-4  # seconds: the upper bound of the first bucket
_PER_DOUBLING = 4
_BUCKETS = 96  # the last bucket also takes everything above its bound
UPPER_BOUNDS: Tuple[float, ...] = tuple(_SMALLEST * 2 ** (i / _PER_DOUBLING) for i in range(_BUCKETS))

COUNTER_NAMES = ("rows", "ok", "failures", "calls", "retries", "timeouts")
LATENCY_FIELD = "latency_histogram"
# The hidden column of the one row per task that carries the task's counters (a bigint array:
# COUNTER_NAMES, then the latency buckets); null on every real row. Dropped right after observe.
METRICS_COLUMN = "__async_map_task_metrics"


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


def _zero_vector() -> List[int]:
    return [0] * (len(COUNTER_NAMES) + _BUCKETS)


def _counter_property(name: str, doc: str) -> property:
    return property(lambda self: self._vector()[COUNTER_NAMES.index(name)], doc=doc)


class AsyncMetrics:
    """Metrics of one ``async_map`` call: pass one to ``async_map(..., metrics=...)``.

    Works on classic and Spark Connect sessions. The counts reach the driver as Spark's
    observed metrics under the name ``metrics.name``:

    * streaming: with each micro-batch's progress (``progress.observedMetrics[metrics.name]``
      holds that batch's counts); this object adds them up over the query's batches, as a
      ``StreamingQueryListener`` on ``spark`` receives them (``catch_up(query)`` adds any the
      listener has not delivered yet);
    * batch: when the first action on ``async_map``'s output has finished (Spark's
      ``Observation``: later actions on the same DataFrame are not counted).

    ::

        metrics = AsyncMetrics(spark)
        out = async_map(df, lookup, returns=..., metrics=metrics)
        ...
        metrics.calls, metrics.retries, metrics.failures, metrics.timeouts
        metrics.latency_p50, metrics.latency_p99      # seconds, None before the first call
        metrics.snapshot()                            # all of it as a dict

    ``name`` (default ``async_map-<8 hex digits>``) must be unique among the observed metrics
    of the session's running queries: the listener counts the progress of the first query that
    reports it, and Spark refuses two observations of one name in a query.
    """

    def __init__(self, spark: Any, name: Optional[str] = None):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"AsyncMetrics: name={name!r} must be a non-empty string")
        self._spark = spark
        self.name = name or f"async_map-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._streamed = _zero_vector()
        self._counted_batches: set = set()  # (run id, batch id) of the progress added up
        self._query_id: Optional[str] = None
        self._observation: Any = None
        self._attached = False

    def observe(self, df: Any) -> Any:
        """Sum ``df``'s ``METRICS_COLUMN`` as observed metrics named ``self.name`` and drop the
        metrics rows (called by ``async_map`` on ``mapInArrow``'s output)."""
        from pyspark.sql import functions as F

        if self._attached:
            raise ValueError(f"async_map: AsyncMetrics {self.name!r} is already used by another async_map "
                             "call; create one AsyncMetrics per call")
        self._attached = True
        if df.isStreaming:
            _ProgressListener.attach(self)
            observed = df.observe(self.name, *_observed_columns())
        else:
            self._observation = _observation_for(df, self.name)
            observed = df.observe(self._observation, *_observed_columns())
        return observed.filter(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)

    def add_progress(self, progress: Dict[str, Any]) -> None:
        """Add one micro-batch's observed counts (a progress as a dict; called by the listener)."""
        counts = (progress.get("observedMetrics") or {}).get(self.name)
        if not counts:
            return
        batch = (progress.get("runId"), progress.get("batchId"))
        with self._lock:
            if self._query_id is None:
                self._query_id = progress.get("id")
            if progress.get("id") != self._query_id or batch in self._counted_batches:
                return
            self._counted_batches.add(batch)
            self._streamed = [a + b for a, b in zip(self._streamed, _vector_of(counts))]

    def catch_up(self, query: Any) -> "AsyncMetrics":
        """Add the batches in ``query.recentProgress`` that the listener has not delivered yet.

        Progress events reach listeners asynchronously, a moment after their batch; after
        ``query.processAllAvailable()``, ``query.stop()`` or ``awaitTermination()``, call this for
        exact totals: ``metrics.catch_up(query).snapshot()``. A batch is never counted twice.
        ``recentProgress`` holds the last ``spark.sql.streaming.numRecentProgressUpdates``
        (100) batches.
        """
        for progress in query.recentProgress:
            self.add_progress(_progress_dict(progress))
        return self

    def of_batch(self, progress: Any) -> Optional[Dict[str, Any]]:
        """One micro-batch's counts, as ``snapshot()`` gives totals, from its progress
        (``query.lastProgress``, an element of ``recentProgress``, or a listener event's
        ``progress``); None when that batch has none (no rows, or another query)."""
        counts = (_progress_dict(progress).get("observedMetrics") or {}).get(self.name)
        return _snapshot_of(_vector_of(counts)) if counts else None

    @property
    def batches(self) -> int:
        """Micro-batches whose counts have been added up (0 for a batch DataFrame)."""
        with self._lock:
            return len(self._counted_batches)

    def _vector(self) -> List[int]:
        if self._observation is not None:
            counts = _finished_observation(self._observation)
            return _vector_of(counts) if counts else _zero_vector()
        with self._lock:
            return list(self._streamed)

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
        return _snapshot_of(self._vector())


def _snapshot_of(vector: List[int]) -> Dict[str, Any]:
    histogram = vector[len(COUNTER_NAMES):]
    return {**dict(zip(COUNTER_NAMES, vector)),
            "latency_p50": quantile(histogram, 0.5), "latency_p99": quantile(histogram, 0.99)}


def _progress_dict(progress: Any) -> Dict[str, Any]:
    """A ``StreamingQueryProgress`` (classic or Connect) or a progress dict, as a plain dict."""
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def _observed_columns() -> List[Any]:
    """One sum per counter, and the element-wise sum of the tasks' latency histograms."""
    from pyspark.sql import functions as F

    task_metrics = F.col(METRICS_COLUMN)
    counters = [F.coalesce(F.sum(task_metrics[i]), F.lit(0).cast("long")).alias(name)
                for i, name in enumerate(COUNTER_NAMES)]
    histograms = F.collect_list(F.slice(task_metrics, len(COUNTER_NAMES) + 1, _BUCKETS))
    latency = F.aggregate(histograms, F.array_repeat(F.lit(0).cast("long"), _BUCKETS),
                          lambda total, task: F.zip_with(total, task, lambda a, b: a + b))
    return counters + [latency.alias(LATENCY_FIELD)]


def _vector_of(counts: Any) -> List[int]:
    """An observed-metrics row of a progress as a vector (see ``_named_values`` for its forms)."""
    named = _named_values(counts)
    return [int(named[name]) for name in COUNTER_NAMES] + [int(n) for n in named[LATENCY_FIELD]]


def _named_values(counts: Any) -> Dict[str, Any]:
    """An observed-metrics row as {field: value}, whatever form the progress gave it in.

    Classic sessions' progress and Connect's listener events hold ``{field: value}`` (a Row in a
    ``StreamingQueryProgress``); PySpark 4.3.0's Connect ``recentProgress``/``lastProgress``
    hold ``{"values": [...], "schema": {...}}`` instead (a Row with those two fields).
    """
    if isinstance(counts, str):
        counts = json.loads(counts)
    if hasattr(counts, "asDict"):
        counts = counts.asDict()
    if set(counts) == {"values", "schema"}:
        names = [field["name"] for field in _json_value(counts["schema"])["fields"]]
        return dict(zip(names, counts["values"]))
    return counts


def _json_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _is_connect(obj: Any) -> bool:
    """Whether a DataFrame or SparkSession is Spark Connect's (its classes live apart)."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def _observation_for(df: Any, name: str) -> Any:
    """Spark's ``Observation`` of ``df``'s kind (Connect has its own class)."""
    if _is_connect(df):
        from pyspark.sql.connect.observation import Observation as ConnectObservation

        return ConnectObservation(name)
    from pyspark.sql import Observation

    return Observation(name)


def _finished_observation(observation: Any) -> Optional[Dict[str, Any]]:
    """The observation's metrics once its first action finished, else None, without waiting.

    ``Observation.get`` waits for the action on a classic session and answers ``{}`` before it on
    Connect; neither says "not yet" without blocking. So ask the state each keeps: the classic
    JVM observation's result future, and the Connect client's result dict.
    """
    java_observation = getattr(observation, "_jo", None)
    if java_observation is not None:
        return observation.get if java_observation.future().isCompleted() else None
    if hasattr(observation, "_result"):
        return observation.get or None
    return None


class _ProgressListener:
    """One ``StreamingQueryListener`` per session, feeding each progress to the ``AsyncMetrics``
    objects of that session's streaming ``async_map`` calls."""

    # Keyed by the session object itself: an id() could be reused by a later session.
    _by_session: "weakref.WeakKeyDictionary[Any, _ProgressListener]" = weakref.WeakKeyDictionary()
    _registry_lock = threading.Lock()

    def __init__(self) -> None:
        self.metrics: "weakref.WeakSet[AsyncMetrics]" = weakref.WeakSet()

    @classmethod
    def attach(cls, metrics: AsyncMetrics) -> None:
        with cls._registry_lock:
            listener = cls._by_session.get(metrics._spark)
            if listener is None:
                listener = cls._by_session[metrics._spark] = cls()
                if _is_connect(metrics._spark):
                    _deliver_pending_accumulator_updates(metrics._spark)
                metrics._spark.streams.addListener(_as_streaming_listener(listener))
            listener.metrics.add(metrics)

    def on_progress(self, progress: Dict[str, Any]) -> None:
        for metrics in list(self.metrics):
            metrics.add_progress(progress)


def _deliver_pending_accumulator_updates(spark: Any) -> None:
    """Run a tiny action so that the session's pending Python accumulator updates reach the client.

    PySpark 4.3.0's Connect client stops its whole listener bus (every client-side listener of the
    session, with the warning "StreamingQueryListenerBus Handler thread received exception ...
    UNKNOWN_RESPONSE ... __python_accumulator__") when the session's first listener is added while
    Python Data Source workers' accumulator updates wait to be sent with the next response, as
    they do right after a kafkasync DataFrame was analyzed. Any action takes them and handles them.
    Fixed in Spark by SPARK-59135 (apache/spark#58435), after 4.3.0.
    """
    spark.range(1).collect()


def _as_streaming_listener(listener: _ProgressListener) -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            listener.on_progress(_progress_dict(event.progress))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return _Listener()
