"""Metrics: what synchronization did, and why a query is waiting.

KIP-353 asks that users be told about enforced processing, because it may process records
out of timestamp order; KIP-695 is about lag. kafkasync reports through two channels Spark
already has, so nothing extra needs to run:

* ``progress.sources[i].endOffset`` — the offset JSON (see :mod:`kafkasync_source.planning.offsets`):
  durable counters (``enforcedProcessingTotal``, ``lateRecordsTotal``), stream time and
  partition times. They survive restarts because Spark checkpoints them.
* ``progress.sources[i].latestOffset`` — the live report of the latest planning decision,
  built by :func:`live_report` and returned from ``reportLatestOffset()`` (PySpark >= 4.2;
  older versions show ``null`` there and only the durable counters are available): per
  partition next offset, log end offset, lag, partition time, buffered records and state,
  plus which partitions hold a batch back and until when, format("kafka")'s
  ``*OffsetsBehindLatest`` and Flink's ``pendingRecords`` and ``currentEmitEventTimeLag``.
  (Flink's ``watermarkLag`` needs Spark's watermark, which only the progress event has: the
  listener computes it.)

:class:`KafkaSyncListener` turns both into :class:`SyncMetrics` objects per query.

Partition states: ``ready`` (has buffered records), ``waiting-for-end-offset`` (nothing
fetched yet and the log end is unknown: waiting for data from the broker),
``waiting-for-fetch`` (the broker has records the driver has not fetched yet),
``idle-waiting`` (caught up; waiting for producers until ``idleDeadline``), ``idle`` (caught
up and the wait is over: batches proceed without it — enforced processing), ``finished``
(a bounded run reached its stop offset).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from kafkasync_source.metrics.decode_errors import DECODE_ERRORS
from kafkasync_source.planning.planner import NO_TIMESTAMP, Cut, PartitionState, TopicPartition

logger = logging.getLogger(__name__)

REPORT_MARKER = "kafkasync"
"""Key that marks a ``latestOffset`` report as kafkasync's (other sources are ignored)."""

_UNKNOWN = -1


def live_report(
    cut: Optional[Cut],
    states: Mapping[TopicPartition, PartitionState],
    *,
    group_commit_failures: int,
    emit_event_time_lag_ms: Optional[int] = None,
    planning: Optional[str] = None,
) -> dict[str, Any]:
    """The ``reportLatestOffset()`` payload for the latest planning decision.

    JSON primitives only (Spark's requirement); unknown numbers are -1.
    ``emit_event_time_lag_ms``: see :func:`emit_event_time_lag_ms`. ``planning``: the path
    that made the decision, ``timeIndex`` (the driver read no record: ``buffered`` is 0) or
    ``fetch``; it is shown for the query and for each partition.
    """
    report: dict[str, Any] = {
        REPORT_MARKER: 1,
        "batch": bool(cut and cut.has_batch),
        "enforced": bool(cut and cut.enforced),
        "givenUp": [_name(tp) for tp in (cut.given_up if cut else ())],
        "waitingOn": [],
        "groupCommitFailuresTotal": group_commit_failures,
        "emitEventTimeLagMs": _UNKNOWN if emit_event_time_lag_ms is None else emit_event_time_lag_ms,
        "planning": planning,
        "partitions": {},
    }
    if cut is None:
        return report
    for tp in sorted(cut.partitions):
        decision, state = cut.partitions[tp], states[tp]
        end_offset = _UNKNOWN if state.end_offset is None else state.end_offset
        entry = {
            "nextOffset": decision.end,
            "endOffset": end_offset,
            "lag": _UNKNOWN if state.end_offset is None else max(0, end_offset - decision.end),
            "partitionTime": decision.partition_time,
            "buffered": len(state.offsets) - decision.records,
            "state": decision.status.value,
            "idleDeadline": _UNKNOWN if decision.idle_deadline is None else decision.idle_deadline,
        }
        if planning is not None:
            entry["planning"] = planning
        report["partitions"].setdefault(tp.topic, {})[str(tp.partition)] = entry
    lags = [entry["lag"] for entries in report["partitions"].values() for entry in entries.values()]
    report.update(offsets_behind_latest(lags))
    report["pendingRecords"] = pending_records(lags)
    for tp, decision in sorted(cut.blocking.items()):
        report["waitingOn"].append(
            {
                "partition": _name(tp),
                "state": decision.status.value,
                "until": _UNKNOWN if decision.idle_deadline is None else decision.idle_deadline,
            }
        )
    return report


def offsets_behind_latest(lags: Any) -> dict[str, float]:
    """format("kafka")'s ``minOffsetsBehindLatest`` / ``maxOffsetsBehindLatest`` /
    ``avgOffsetsBehindLatest``, defined as Spark's ``KafkaMicroBatchStream.metrics`` defines
    them: per partition, the latest available offset minus the offset consumed up to (here:
    the log end the driver knows minus the next offset after the planned batch), then the
    minimum, maximum and mean over partitions. Unknown lags (-1) are left out; -1 when none
    is known. A Python source cannot fill ``progress.sources[i].metrics``, where Spark's own
    source puts them, so they live in the live report (``latestOffset``) and SyncMetrics."""
    known = _known(lags)
    if not known:
        return {"minOffsetsBehindLatest": _UNKNOWN, "maxOffsetsBehindLatest": _UNKNOWN,
                "avgOffsetsBehindLatest": _UNKNOWN}
    return {"minOffsetsBehindLatest": min(known), "maxOffsetsBehindLatest": max(known),
            "avgOffsetsBehindLatest": sum(known) / len(known)}


def pending_records(lags: Any) -> int:
    """Flink's ``pendingRecords`` ("the number of records that have not been fetched by the
    source, e.g. the available records after the consumer offset in a Kafka partition", Flink
    Kafka connector docs, Monitoring): here the sum of the partitions' lags after the planned
    batch. -1 when no lag is known."""
    known = _known(lags)
    return sum(known) if known else _UNKNOWN


def emit_event_time_lag_ms(planned_at_ms: int, stream_time: int) -> Optional[int]:
    """Flink's ``currentEmitEventTimeLag`` ("EmitTime - EventTime", the time from a record's
    event timestamp to when the source emits it; Flink Kafka connector docs, Monitoring), per
    batch: when the batch was planned minus the stream time it reaches. Flink's gauge
    is per record; a micro-batch emits its records together, and the stream time it reaches
    is the freshest event time the query has seen. None before the first timestamped record."""
    if stream_time == NO_TIMESTAMP:
        return None
    return planned_at_ms - stream_time


def watermark_lag_ms(progress: Mapping[str, Any]) -> Optional[int]:
    """Flink's ``watermarkLag`` ("CurrentTime - Watermark", Flink Kafka connector docs,
    Monitoring) for Spark: the progress' trigger time minus the query's event-time watermark
    (``progress.eventTime.watermark``, set when the query uses ``withWatermark``). Spark's
    watermark is the query's, not the source's: it is what decides which records are late.
    None without a watermark, or before the first one (Spark reports the epoch, 0, then)."""
    watermark = (progress.get("eventTime") or {}).get("watermark")
    if not watermark:
        return None
    watermark_ms = _timestamp_ms(watermark)
    if watermark_ms <= 0:
        return None
    return int(_timestamp_ms(progress.get("timestamp")) - watermark_ms)


def _known(lags: Any) -> list[int]:
    return [lag for lag in lags if lag is not None and lag >= 0]


@dataclass(frozen=True)
class PartitionMetrics:
    """One partition as of the latest planning decision."""

    next_offset: int
    end_offset: Optional[int]
    lag: Optional[int]
    partition_time: int
    buffered: int
    state: str
    idle_deadline: Optional[int]


@dataclass(frozen=True)
class SyncMetrics:
    """kafkasync's view of one query after a progress event."""

    query_id: str
    batch_id: int
    enforced_processing_total: int
    enforced_processing: int
    """Enforced batches since the previous update of this query."""
    enforced_processing_rate: float
    """Enforced batches per second over the interval since the previous progress event."""
    late_records_total: int
    late_records: int
    """Records of this batch emitted below the stream time already reached."""
    stream_time: int
    partitions: dict[TopicPartition, PartitionMetrics]
    """Empty when the PySpark version does not report live state (< 4.2)."""
    waiting_on: tuple[tuple[TopicPartition, str, Optional[int]], ...]
    """Partitions holding the next batch back: (partition, state, idle deadline ms)."""
    given_up: tuple[TopicPartition, ...]
    """Idle partitions the latest batch proceeded without (enforced processing)."""
    offsets_behind_latest: tuple[float, float, float] = (_UNKNOWN, _UNKNOWN, _UNKNOWN)
    """format("kafka")'s (min, max, avg) OffsetsBehindLatest (see :func:`offsets_behind_latest`);
    -1 when unknown (PySpark < 4.2 reports no live state)."""
    pending_records: Optional[int] = None
    """Flink's ``pendingRecords``: see :func:`pending_records`; None when unknown."""
    emit_event_time_lag_ms: Optional[int] = None
    """Flink's ``currentEmitEventTimeLag``: see :func:`emit_event_time_lag_ms`."""
    watermark_lag_ms: Optional[int] = None
    """Flink's ``watermarkLag``: see :func:`watermark_lag_ms`."""
    reader_schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """By part (``value``, ``key``), the reader schema the batch was decoded with (``subject``,
    ``version``, ``id``), as its offsets record it; empty for a query that decodes none."""
    decode_errors: Mapping[str, int] = field(default_factory=dict)
    """This batch's records that could not be decoded, by :func:`~kafkasync_source.metrics.
    decode_errors.metric_name` (``valueNotFramed``, ``valueUndecodable``...), as the query's
    ``observe_decode_errors`` counted them; empty without it."""
    decode_errors_total: Mapping[str, int] = field(default_factory=dict)
    """The same, added up over the batches this listener saw of the query (observed metrics are
    per batch and not checkpointed: a restarted query counts from 0, with a new listener)."""
    decode_errors_batch_id: Optional[int] = None
    """The last batch whose counts ``decode_errors_total`` holds: a batch's progress may come
    twice (``onQueryIdle`` re-reads ``lastProgress``), and an idle trigger's progress already
    carries the next batch's id, without counts, so ``batch_id`` cannot tell what was added."""


def parse_source_progress(source: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The kafkasync parts of one ``progress["sources"][i]``; None for any other source."""
    end = _json(source.get("endOffset"))
    if not isinstance(end, dict) or "enforcedProcessingTotal" not in end or "topics" not in end:
        return None
    start = _json(source.get("startOffset"))
    latest = _json(source.get("latestOffset"))
    return {
        "start": start if isinstance(start, dict) else {},
        "end": end,
        "latest": latest if isinstance(latest, dict) and latest.get(REPORT_MARKER) else None,
    }


def metrics_from_progress(
    progress: Mapping[str, Any], previous: Optional[SyncMetrics], interval_s: float,
    decode_errors_name: str = DECODE_ERRORS,
) -> list[SyncMetrics]:
    """One :class:`SyncMetrics` per kafkasync source in a progress JSON dict.
    ``decode_errors_name``: the observed metrics of ``observe_decode_errors``."""
    found = []
    decode_errors = _decode_errors(progress, decode_errors_name)
    totals = dict(previous.decode_errors_total) if previous is not None else {}
    counted = previous.decode_errors_batch_id if previous is not None else None
    if decode_errors and counted != progress.get("batchId"):
        for name, count in decode_errors.items():
            totals[name] = totals.get(name, 0) + count
        counted = progress.get("batchId")
    for source in progress.get("sources", []):
        parsed = parse_source_progress(source)
        if parsed is None:
            continue
        end, start, latest = parsed["end"], parsed["start"], parsed["latest"] or {}
        enforced_total = int(end.get("enforcedProcessingTotal", 0))
        late_total = int(end.get("lateRecordsTotal", 0))
        enforced_before = (
            previous.enforced_processing_total if previous is not None
            else int(start.get("enforcedProcessingTotal", enforced_total))
        )
        partitions = _partitions(latest)
        behind = offsets_behind_latest(p.lag for p in partitions.values())
        found.append(
            SyncMetrics(
                query_id=str(progress.get("id")),
                batch_id=int(progress.get("batchId", -1)),
                enforced_processing_total=enforced_total,
                enforced_processing=enforced_total - enforced_before,
                enforced_processing_rate=(
                    (enforced_total - enforced_before) / interval_s if interval_s > 0 else 0.0
                ),
                late_records_total=late_total,
                late_records=late_total - int(start.get("lateRecordsTotal", late_total)),
                stream_time=int(end.get("streamTime", NO_TIMESTAMP)),
                partitions=partitions,
                waiting_on=tuple(
                    (_parse_name(w["partition"]), w["state"], None if w["until"] < 0 else w["until"])
                    for w in latest.get("waitingOn", [])
                ),
                given_up=tuple(_parse_name(name) for name in latest.get("givenUp", [])),
                offsets_behind_latest=(behind["minOffsetsBehindLatest"], behind["maxOffsetsBehindLatest"],
                                       behind["avgOffsetsBehindLatest"]),
                pending_records=_optional(pending_records([p.lag for p in partitions.values()])),
                emit_event_time_lag_ms=_optional(latest.get("emitEventTimeLagMs", _UNKNOWN)),
                watermark_lag_ms=watermark_lag_ms(progress),
                reader_schemas=end.get("readerSchemas", {}),
                decode_errors=decode_errors,
                decode_errors_total=totals,
                decode_errors_batch_id=counted,
            )
        )
    return found


class KafkaSyncListener(StreamingQueryListener):
    """Collects kafkasync metrics of every query in the session.

    ``spark.streams.addListener(listener)``; then ``listener.latest(query.id)`` returns the
    newest :class:`SyncMetrics` (or None). ``on_update(metrics)`` is called for each update.
    When a batch was cut by enforced processing, one concise warning names the partitions
    it gave up waiting for. Sources other than kafkasync in the same query are ignored.

    While a query waits (no batch), Spark 4 tells listeners only that it is idle; the
    listener then reads the query's ``lastProgress``, whose latestOffset says which
    partitions hold the batch back and why (``SyncMetrics.waiting_on``). That needs the
    session (``spark``, default: the active one); Spark emits these no-data progress
    updates every ``spark.sql.streaming.noDataProgressEventInterval`` (10 s by default).

    Records a query could not decode (``value.decode.mode=PERMISSIVE``) are counted where the
    query observes them with ``observe_decode_errors`` (observed metrics named
    ``decode_errors_name``): ``SyncMetrics.decode_errors`` for the batch, ``decode_errors_total``
    over the batches seen, and one warning per query the first time a batch holds some.
    """

    def __init__(
        self,
        on_update: Optional[Callable[[SyncMetrics], None]] = None,
        spark: Optional[SparkSession] = None,
        decode_errors_name: str = DECODE_ERRORS,
    ) -> None:
        self._on_update = on_update
        self._spark = spark
        self._decode_errors_name = decode_errors_name
        self._undecodable_warned: set[str] = set()
        self._lock = threading.Lock()
        self._latest: dict[str, SyncMetrics] = {}
        self._last_seen_ms: dict[str, float] = {}

    def latest(self, query_id: Any) -> Optional[SyncMetrics]:
        with self._lock:
            return self._latest.get(str(query_id))

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        spark = self._spark or SparkSession.getActiveSession()
        query = spark.streams.get(str(event.id)) if spark is not None else None
        progress = query.lastProgress if query is not None else None
        if progress:
            self._update(dict(progress))

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self._update(json.loads(event.progress.json))

    def _update(self, progress: dict[str, Any]) -> None:
        query_id = str(progress.get("id"))
        now_ms = _timestamp_ms(progress.get("timestamp"))
        with self._lock:
            previous = self._latest.get(query_id)
            last_ms = self._last_seen_ms.get(query_id)
            interval_s = (
                (now_ms - last_ms) / 1000 if last_ms is not None and now_ms > last_ms
                else progress.get("durationMs", {}).get("triggerExecution", 0) / 1000
            )
            updates = metrics_from_progress(progress, previous, interval_s, self._decode_errors_name)
            if updates:
                self._latest[query_id] = updates[-1]
                self._last_seen_ms[query_id] = now_ms
        for metrics in updates:
            if metrics.enforced_processing > 0:
                logger.warning(
                    "kafkasync query %s batch %d: enforced processing, gave up waiting for idle "
                    "partition(s) %s; records they receive later may be behind stream time "
                    "(max.task.idle.ms).",
                    metrics.query_id, metrics.batch_id,
                    ", ".join(_name(tp) for tp in metrics.given_up) or "(not reported)",
                )
            self._warn_once_of_undecodable(metrics)
            if self._on_update is not None:
                self._on_update(metrics)

    def _warn_once_of_undecodable(self, metrics: SyncMetrics) -> None:
        found = {name: count for name, count in metrics.decode_errors.items() if count and name.endswith("Undecodable")}
        if not found or metrics.query_id in self._undecodable_warned:
            return
        self._undecodable_warned.add(metrics.query_id)
        logger.warning(
            "kafkasync query %s batch %d: %s record(s) could not be decoded and are null in their decoded column "
            "(decode.mode=PERMISSIVE; the reason in <part>DecodeError): %s. Counted per batch in SyncMetrics."
            "decode_errors; this listener warns once per query.", metrics.query_id, metrics.batch_id,
            sum(found.values()), ", ".join(f"{name}={count}" for name, count in sorted(metrics.decode_errors.items())))


def _decode_errors(progress: Mapping[str, Any], name: str) -> dict[str, int]:
    """The batch's counts of ``observe_decode_errors`` (``progress.observedMetrics[name]``)."""
    observed = (progress.get("observedMetrics") or {}).get(name) or {}
    if hasattr(observed, "asDict"):  # a Row, where the progress is a query's lastProgress
        observed = observed.asDict()
    return {key: int(value) for key, value in observed.items() if isinstance(value, (int, float))}


def _partitions(latest: Mapping[str, Any]) -> dict[TopicPartition, PartitionMetrics]:
    result = {}
    for topic, entries in latest.get("partitions", {}).items():
        for partition, entry in entries.items():
            result[TopicPartition(topic, int(partition))] = PartitionMetrics(
                next_offset=entry["nextOffset"],
                end_offset=None if entry["endOffset"] < 0 else entry["endOffset"],
                lag=None if entry["lag"] < 0 else entry["lag"],
                partition_time=entry["partitionTime"],
                buffered=entry["buffered"],
                state=entry["state"],
                idle_deadline=None if entry["idleDeadline"] < 0 else entry["idleDeadline"],
            )
    return result


def _optional(number: int) -> Optional[int]:
    """The report's -1 for "unknown" as None."""
    return None if number == _UNKNOWN else int(number)


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _timestamp_ms(value: Any) -> float:
    from datetime import datetime

    if not value:
        return 0.0
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _parse_name(name: str) -> TopicPartition:
    topic, _, partition = name.rpartition("-")
    return TopicPartition(topic, int(partition))
