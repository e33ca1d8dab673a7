"""Bounded runs: Trigger.AvailableNow that stops at end-of-log (KIP-95).
Users run the same streaming query as a periodic "process everything written so far" job
(``trigger(availableNow=True)``). A run must stop at the end of the log *as it was when the run
first started*: if a restart after a failure captured a new end, the run would not stop where
the user expects, and a job that keeps failing while producers keep writing might never finish.
A run that finishes cleanly must clear its target, so the next run picks up new data.

Stop offsets
------------
``prepareForTriggerAvailableNow()`` captures every subscribed partition's end offset (high
watermark; the last stable offset with ``kafka.isolation.level=read_committed``). From then on
:meth:`AvailableNowRun.next_offset` hands the planner these *stop offsets*: records at or after
them are invisible, and a partition that reached its stop offset is FINISHED — it no longer
holds batches back, is never idle-waited for, and is no longer fetched. Synchronization still
applies among the partitions that are not finished. The run ends (``latestOffset`` returns its
start) once every partition is finished.

Spark ends an AvailableNow query as soon as ``latestOffset`` returns its start, so while any
partition is unfinished, ``next_offset`` waits for the fetcher (the records below a stop offset
exist, so a fetch is all that is missing) instead of returning "no new data". The wait is
bounded by ``kafkaConsumer.pollTimeoutMs`` without progress, then fails with an error naming
the partitions. While it waits it checks every few seconds that the unfinished partitions
still exist.

Partitions that are not part of the target — created after the capture, or created between a
failed run and its restart — are not read in this run; the next run captures them and reads
them from their beginning. A partition whose topic is deleted during the run fails the run with
an error naming it (its remaining records are gone); a restarted run leaves out partitions
that no longer exist, so it finishes.

Stopping at a time
------------------
With ``endingTimestamp`` / ``endingOffsetsByTimestamp`` — format("kafka")'s batch-read options,
which format("kafka") rejects in streaming queries — a run stops every partition at its first
offset whose record timestamp is >= the time (the brokers' ListOffsets-by-time answer, as for a
batch read's end), or at the captured end where no record is that late. "Backfill up to
midnight": since the synchronized cut applies inside the run, its batches advance every
partition's event time together, and the run ends with every partition at its first record
at or after the time. Flink
offers the stop without the synchronization: ``KafkaSource.setBounded(OffsetsInitializer
.timestamp(t))``, and in SQL ``scan.bounded.mode=timestamp`` with
``scan.bounded.timestamp-millis`` (Flink Kafka connector docs, "Bounded Ending Position").
The option applies to trigger(availableNow=True) only; any other trigger fails at start.

The durable variant (``autostop.offsets=durable``) keeps the stop offsets in
:mod:`kafkasync_source.driver.stop_offset_store`, with the time they were resolved for: a restart
with another ending time is a new run, not a restart of the unfinished one.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Protocol

import numpy as np

from kafkasync_source.config.options import AUTOSTOP_DURABLE, SourceOptions
from kafkasync_source.driver.stop_offset_store import (
    DONE,
    RUNNING,
    EndingTime,
    KafkaSyncAutostopError,
    StopOffsetStore,
    StopTarget,
    ending_time,
)
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import Cut, PartitionState, TopicPartition

if TYPE_CHECKING:  # pragma: no cover
    from kafkasync_source.driver.offset_reader import OffsetReader

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0/4.1 have no AvailableNow for Python sources

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: the stream reader declares the mixin on every PySpark version."""


__all__ = [
    "AvailableNowRun",
    "BatchPlanner",
    "SupportsTriggerAvailableNow",
    "bounded_states",
    "missing_partitions",
    "unfinished",
]

logger = logging.getLogger(__name__)

WAIT_POLL_S = 0.05
"""How often a waiting AvailableNow ``latestOffset`` asks the planner again."""
EXISTENCE_CHECK_S = 2.0
"""While waiting, how often to check that the unfinished partitions still exist."""

_EMPTY = np.empty(0, dtype=np.int64)


def _describe(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


class BatchPlanner(Protocol):
    """What a bounded run needs of the stream's driver (``sync_driver.SyncDriver``): plan the next
    batch under stop offsets, and show the last planning decision."""

    last_cut: Optional[Cut]
    last_states: dict[TopicPartition, PartitionState]

    def next_offset(
        self,
        start: SyncOffset,
        stop_offsets: Optional[Mapping[TopicPartition, int]] = None,
        *,
        read_all: bool = False,
    ) -> SyncOffset: ...


def _reached(stops: Mapping[TopicPartition, int], start: SyncOffset) -> bool:
    """Whether ``start`` is at or past every stop offset (a partition ``start`` does not
    cover yet has reached only an empty target)."""
    return all(
        (start.partitions[tp].next_offset if tp in start.partitions else 0) >= stop
        for tp, stop in stops.items()
    )


def _below(start: SyncOffset, started_from: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    """Partitions where ``start`` lies before where a stored run started."""
    return sorted(
        tp for tp, offset in started_from.items()
        if tp in start.partitions and start.partitions[tp].next_offset < offset
    )


def unfinished(start: SyncOffset, stops: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Next offsets of the partitions that still have records to read before their stop."""
    return {
        tp: position.next_offset
        for tp, position in start.partitions.items()
        if tp in stops and position.next_offset < stops[tp]
    }


def missing_partitions(
    start: SyncOffset, stops: Mapping[TopicPartition, int], offset_reader: "OffsetReader"
) -> dict[TopicPartition, PartitionOffset]:
    """Target partitions the offsets do not cover yet (created since the checkpoint's last
    batch): they enter at their log start, as partitions discovered while streaming do."""
    missing = sorted(tp for tp in stops if tp not in start.partitions)
    if not missing:
        return {}
    marks = offset_reader.watermarks(missing)
    logger.info(
        "kafkasync: AvailableNow run adds partition(s) %s from their beginning",
        ", ".join(_describe(tp) for tp in missing),
    )
    return {tp: PartitionOffset(marks[tp][0]) for tp in missing}


def bounded_states(
    start: SyncOffset,
    fetched: Mapping[TopicPartition, PartitionState],
    stops: Mapping[TopicPartition, int],
) -> dict[TopicPartition, PartitionState]:
    """The planner's input for a bounded run: a state for every partition of ``start``.

    Fetched partitions get their stop offset, and an end offset and fetch horizon of at least
    the stop offset: the records below it existed when it was captured, so such a partition
    waits for a fetch, is never treated as idle, and its buffer is complete only once fetched
    up to the stop offset (or full). Partitions that are not fetched (finished, or outside the
    target) get an empty state at their start, which the planner reports as FINISHED.
    """
    states: dict[TopicPartition, PartitionState] = {}
    for tp, position in start.partitions.items():
        stop = stops.get(tp)
        state = fetched.get(tp)
        if state is not None and stop is not None and position.next_offset < stop:
            end = state.end_offset
            states[tp] = replace(
                state, stop_offset=stop, end_offset=stop if end is None else max(end, stop),
                fetch_horizon=stop,
            )
            continue
        offset = position.next_offset
        states[tp] = PartitionState(
            start=offset,
            offsets=_EMPTY,
            timestamps=_EMPTY,
            position=offset,
            end_offset=None,
            partition_time=position.partition_time,
            stop_offset=offset if stop is None else min(stop, offset),
        )
    return states


def _describe_ending(ending: EndingTime) -> str:
    if ending is None:
        return "the end of the log"
    if isinstance(ending, int):
        return f"endingTimestamp={ending}"
    return "endingOffsetsByTimestamp " + ", ".join(
        f"{_describe(tp)}@{time}" for tp, time in sorted(ending.items())
    )


def _wall_ms() -> int:
    return int(time.time() * 1000)


class AvailableNowRun:
    """One Trigger.AvailableNow run of one query, on the driver.

    Created by ``prepareForTriggerAvailableNow()``: captures the end offsets and, in durable
    mode, reads the stored target. The stop offsets are decided on the first ``latestOffset``,
    the first moment the run knows where the checkpoint stands."""

    def __init__(
        self,
        options: SourceOptions,
        offset_reader: "OffsetReader",
        *,
        store: Optional[StopOffsetStore] = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._options = options
        self._offset_reader = offset_reader
        self._monotonic = monotonic
        self._sleep = sleep
        self._store = store
        if self._store is None and options.autostop_offsets == AUTOSTOP_DURABLE:
            self._store = StopOffsetStore(options.client_config, options.autostop_topic)
        self._stored: Optional[StopTarget] = None
        if self._store is not None:
            # Before the capture: a missing or unreadable store fails the query at start.
            self._store.ensure_topic()
            self._stored = self._store.load(self._key)
        partitions = offset_reader.partitions(options.subscription, must_exist=False)
        self.captured: dict[TopicPartition, int] = {
            tp: high for tp, (_, high) in offset_reader.watermarks(partitions).items()
        }
        self.ending_time = ending_time(options.timestamps.ending)
        if self.ending_time is not None:
            # At the first offset whose timestamp is >= the time, or the log end where none is;
            # never past the end just captured.
            at_time = offset_reader.ending_offsets(options, partitions)
            self.captured = {tp: min(end, at_time[tp]) for tp, end in self.captured.items()}
        self.captured_at_ms = _wall_ms()
        self.target: Optional[StopTarget] = None
        """The durable target this run stops at (durable mode, after the first call)."""
        self.stop_offsets: Optional[dict[TopicPartition, int]] = None
        self.finished = False

    @property
    def _key(self) -> str:
        assert self._options.autostop_key is not None
        return self._options.autostop_key

    def resolve(self, start: SyncOffset) -> dict[TopicPartition, int]:
        """This run's stop offsets; decided once, on the first call (see the module docs)."""
        if self.stop_offsets is not None:
            return self.stop_offsets
        stored = self._stored
        if stored is not None and stored.state == RUNNING:
            kept = {tp: o for tp, o in stored.stop_offsets.items() if tp in self.captured}
            below = _below(start, stored.started_from)
            if stored.ending_time != self.ending_time:
                logger.warning(
                    "kafkasync: ignoring the unfinished AvailableNow target of autostop.key=%r "
                    "(run %s): it was captured for %s, this start asks for %s. Capturing new "
                    "stop offsets.",
                    self._key, stored.run_id, _describe_ending(stored.ending_time),
                    _describe_ending(self.ending_time),
                )
            elif below:
                logger.warning(
                    "kafkasync: ignoring the unfinished AvailableNow target of autostop.key=%r "
                    "(run %s): this checkpoint starts before that run did (%s), so it is not "
                    "a restart of it. Capturing new stop offsets.",
                    self._key, stored.run_id, ", ".join(_describe(tp) for tp in below[:5]),
                )
            elif not _reached(kept, start):
                gone = sorted(set(stored.stop_offsets) - set(kept))
                logger.warning(
                    "kafkasync: restarting the unfinished AvailableNow run %s "
                    "(autostop.key=%r): it stops at the offsets stored when it first started%s.",
                    stored.run_id, self._key,
                    (f"; left out, no longer existing or subscribed: "
                     f"{', '.join(_describe(tp) for tp in gone)}") if gone else "",
                )
                self.target, self.stop_offsets = stored, kept
                return kept
            else:
                logger.info(
                    "kafkasync: the previous AvailableNow run %s (autostop.key=%r) had reached "
                    "its stop offsets; starting a new run.", stored.run_id, self._key,
                )
        self.stop_offsets = dict(self.captured)
        if self._store is not None:
            target = StopTarget(
                key=self._key,
                run_id=uuid.uuid4().hex,
                state=RUNNING,
                stop_offsets=self.stop_offsets,
                started_from=start.next_offsets(),
                captured_at_ms=self.captured_at_ms,
                ending_time=self.ending_time,
            )
            self._store.save(target)  # before any batch of this run is planned
            self.target = target
        logger.info(
            "kafkasync: AvailableNow run stops at %s (%s)",
            ", ".join(f"{_describe(tp)}@{o}" for tp, o in sorted(self.stop_offsets.items())) or "nothing",
            _describe_ending(self.ending_time),
        )
        return self.stop_offsets

    def next_offset(
        self, driver: BatchPlanner, start: SyncOffset, *, read_all: bool = False
    ) -> SyncOffset:
        """The next batch's end, waiting for fetches as needed; ``start`` once all partitions
        reached their stop offsets (Spark then ends the query)."""
        stops = self.resolve(start)
        since = self._monotonic()
        next_check = since + EXISTENCE_CHECK_S
        timeout_s = self._options.poll_timeout_ms / 1000
        while True:
            end = driver.next_offset(start, stop_offsets=stops, read_all=read_all)
            if end is not start:
                return end
            cut = driver.last_cut
            if cut is not None and cut.all_finished:
                # Offsets before a stop offset that hold no records (transaction markers,
                # compaction) yield no batch; carry them in a last, record-less batch so the
                # checkpoint ends exactly at the stop offsets.
                gaps = {
                    tp: PartitionOffset(min(state.position, state.stop_offset), state.partition_time)
                    for tp, state in driver.last_states.items()
                    if state.stop_offset is not None
                    and min(state.position, state.stop_offset) > start.partitions[tp].next_offset
                }
                if gaps:
                    return start.with_partitions({**start.partitions, **gaps})
                self._finish()
                return start
            now = self._monotonic()
            if now >= next_check:
                self._fail_if_deleted(start, stops)
                next_check = now + EXISTENCE_CHECK_S
            if now - since >= timeout_s:
                waiting = cut.blocking if cut is not None else {}
                raise KafkaSyncAutostopError(
                    f"kafkasync: the AvailableNow run made no progress for "
                    f"{self._options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs): "
                    + ", ".join(
                        f"{_describe(tp)} is {d.status.value} at offset "
                        f"{start.partitions[tp].next_offset}, stop offset {stops.get(tp)}"
                        for tp, d in sorted(waiting.items())
                    )
                    + ". These records existed when the run started; check that the brokers "
                    "are reachable, or raise kafkaConsumer.pollTimeoutMs."
                )
            self._sleep(WAIT_POLL_S)

    def _fail_if_deleted(self, start: SyncOffset, stops: Mapping[TopicPartition, int]) -> None:
        remaining = unfinished(start, stops)
        if not remaining:
            return
        existing = set(self._offset_reader.partitions(self._options.subscription, must_exist=False))
        gone = sorted(tp for tp in remaining if tp not in existing)
        if gone:
            raise KafkaSyncAutostopError(
                "kafkasync: partition(s) "
                + ", ".join(f"{_describe(tp)} (at offset {remaining[tp]}, stop offset {stops[tp]})" for tp in gone)
                + " no longer exist (topic deleted?) but this AvailableNow run had not read up "
                "to their stop offsets; their remaining records are gone. Restart the query: "
                "a restarted run leaves out partitions that no longer exist."
            )

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        logger.info("kafkasync: AvailableNow run reached its stop offsets")
        if self._store is None or self.target is None:
            return
        done = replace(self.target, state=DONE, finished_at_ms=_wall_ms())
        try:
            self._store.save(done)
            self.target = done
        except KafkaSyncAutostopError as err:
            # Harmless: the next run sees a "running" target the checkpoint has reached.
            logger.warning("%s The next run will start a new target anyway.", err)
