"""The synchronization driver: one query's planning state, on the driver.

Spark's reader (:mod:`kafkasync_source.spark.stream_reader`) asks it for the next batch's end
offset. It decides with the planner (Kafka Streams' processability and ``max.task.idle.ms``,
:mod:`kafkasync_source.planning`) over what the brokers' time index answers or what the record
fetcher has buffered, so every batch is cut where Kafka Streams would have stopped, and a
logged batch replays exactly. It owns the query's clients (fetcher, time index, offset reader,
group commits), idle deadlines and partition discovery for the life of the query: created
lazily on the driver, never pickled into tasks.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import numpy as np
from confluent_kafka import KafkaException

from kafkasync_source.config.options import (
    PLANNING_FETCH,
    PLANNING_TIME_INDEX,
    KafkaSyncOptionError,
    SourceOptions,
)
from kafkasync_source.driver.bounded_run import AvailableNowRun, bounded_states, missing_partitions, unfinished
from kafkasync_source.driver.group_commit import GroupCommitter
from kafkasync_source.driver.offset_reader import KafkaSyncConnectionError, OffsetReader
from kafkasync_source.driver.probe_index import ProbeIndexPath
from kafkasync_source.driver.record_probe import ProbedRecords, RecordProbe
from kafkasync_source.driver.time_index import TimeIndexPath, TimeIndexReader
from kafkasync_source.event_time import record_time, stalled_extractions, time_source
from kafkasync_source.kafka.errors import KafkaSyncDataLossError
from kafkasync_source.metrics.listener import emit_event_time_lag_ms, live_report
from kafkasync_source.planning.index_planner import IndexCannotAnswer, plan_from_index
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import (
    NO_TIMESTAMP,
    BatchLimits,
    Cut,
    PartitionState,
    PartitionStatus,
    TopicPartition,
    plan_batch,
)
from kafkasync_source.planning.rate_limit import TriggerDelay

if TYPE_CHECKING:  # pragma: no cover - imported by fetcher(), where the fetch path starts
    from kafkasync_source.driver.fetcher import DriverFetcher

logger = logging.getLogger(__name__)

PLANNING_RECORD_PROBES = "recordProbes"
"""The live report's ``planning`` of a batch planned from records read at chosen offsets
(``eventTime.order=nonDecreasing``), beside ``timeIndex`` and ``fetch``."""

_MOST_FETCH_BATCHES = 64
"""The longest run of fetch-path batches before the time index is asked again."""


def _index_path(options: SourceOptions) -> Optional[TimeIndexPath | ProbeIndexPath]:
    """Where batches are planned without reading every record: the brokers' time index for
    Kafka timestamps, records read at chosen offsets for an event time promised in order
    (``eventTime.order=nonDecreasing``); None where only the fetch path can plan."""
    event_time = options.event_time
    if options.planning_mode == PLANNING_FETCH or (event_time is not None and not event_time.non_decreasing):
        if event_time is not None and options.planning_mode != PLANNING_FETCH:
            logger.info("kafkasync: %s: batches are planned from records the driver reads, since the "
                        "brokers' time index knows Kafka timestamps only (eventTime.order=nonDecreasing "
                        "lets it read a few).", event_time.describe())
        return None
    reader = TimeIndexReader(
        options.client_config, **options.offset_reader_settings(),
        fall_back_on_failure=options.planning_mode != PLANNING_TIME_INDEX,
        give_up_after_ms=options.poll_timeout_ms,
    )
    records = ProbedRecords(RecordProbe(options.client_config, record_time(event_time)))
    past_log_starts = not options.fail_on_data_loss
    return (TimeIndexPath(reader, records, past_log_starts=past_log_starts) if event_time is None
            else ProbeIndexPath(reader, records, past_log_starts=past_log_starts))


def wall_clock_ms() -> int:
    """max.task.idle.ms is wall-clock time (KIP-353), not event time."""
    return int(time.time() * 1000)


class SyncDriver:
    """Driver-side state of one query: fetcher, idle deadlines, partition discovery."""

    def __init__(self, options: SourceOptions, clock: Callable[[], int] = wall_clock_ms) -> None:
        self._options = options
        self._clock = clock
        self._fetcher: Optional[DriverFetcher] = None  # started on the first fetch-path batch
        self._time_index = _index_path(options)
        self._fetch_batches = 0
        """After the index could not answer: batches to plan from fetched records before the
        index is asked again."""
        self._fallbacks_in_a_row = 0
        """Index answers the cut could not use, without an index-planned batch in between: a
        topic whose transaction markers decide every answer (a transactional backfill) is
        asked again after 1, 2, 4 ... up to ``_MOST_FETCH_BATCHES`` batches, not at every
        trigger, whose rounds of look-ups and checks it would only pay for again."""
        self._fallbacks_logged: set[tuple[TopicPartition, str]] = set()
        self.planning: Optional[str] = None
        """The path that planned the latest decision: ``timeIndex``, ``recordProbes`` or ``fetch``."""
        rate = options.rate_limits
        self._trigger_delay = (
            TriggerDelay(rate.min_offsets_per_trigger, rate.max_trigger_delay_ms)
            if rate.min_offsets_per_trigger is not None else None
        )
        self._horizon = _FetchHorizon()
        self.delayed: Optional[dict] = None
        """Set while minOffsetsPerTrigger holds a batch back (for the live report)."""
        self._offset_reader = OffsetReader(options.client_config, **options.offset_reader_settings())
        self._group_committer = (
            GroupCommitter(options.client_config, options.commit_group_id)
            if options.commit_group_id else None
        )
        self._idle_since: dict[TopicPartition, int] = {}
        self._next_discovery_ms = clock() + options.partition_discovery_interval_ms
        self.last_cut: Optional[Cut] = None
        self.last_states: dict[TopicPartition, PartitionState] = {}
        self._known_ends: dict[TopicPartition, int] = {}
        """Each partition's largest log end seen: a trigger whose look-up failed (a topic
        being deleted) knows none, and must not make a read-to-its-end partition look unread."""
        self.available_now: Optional[AvailableNowRun] = None
        """Set by prepareForTriggerAvailableNow(): this query runs as one bounded run."""
        self.emit_event_time_lag_ms: Optional[int] = None
        """When the latest batch was planned minus the stream time it reached (metrics)."""

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
        if self._time_index is not None:
            self._time_index.close()
        self._offset_reader.close()
        if self._group_committer is not None:
            self._group_committer.close()

    def report(self) -> dict:
        """Live state of the latest planning decision, for ``reportLatestOffset``."""
        failures = self._group_committer.failures if self._group_committer else 0
        report = live_report(self.last_cut, self.last_states, group_commit_failures=failures,
                             emit_event_time_lag_ms=self.emit_event_time_lag_ms,
                             planning=self.planning)
        if self.delayed is not None:
            report["delayedBy"] = self.delayed
        if self._options.event_time is not None:
            report["eventTime"] = self._options.event_time.describe()
            stalled = stalled_extractions()  # an extractor that does not return (event_time/watch.py)
            if stalled:
                report["eventTimeStalled"] = stalled
        report["driverRecordsRead"] = self.records_read
        return report

    @property
    def records_read(self) -> int:
        """Records the driver read since the query started: every record on the fetch path,
        a few per partition and round of reads on an index path (each answer, and up to 16
        records its fetch brought after it, with an event time promised in order)."""
        return ((self._fetcher.records_read if self._fetcher is not None else 0)
                + (self._time_index.records_read if self._time_index is not None else 0))

    def forget_records(self, tp: TopicPartition, from_offset: int = 0) -> None:
        """``tp``'s log moved back (truncated, records deleted, the topic deleted and
        recreated): what the index path remembers of its records from ``from_offset`` on no
        longer holds (:meth:`~kafkasync_source.planning.record_facts.RecordFacts.forget`).
        Whatever notices a move back calls it."""
        if self._time_index is not None:
            self._time_index.forget(tp, from_offset)

    def commit(self, processed: SyncOffset) -> None:
        if self._group_committer is not None:
            self._group_committer.commit(processed)

    def initial_offset(self) -> SyncOffset:
        partitions = self._offset_reader.partitions(self._options.subscription, must_exist=True)
        if isinstance(self._time_index, TimeIndexPath) and self._options.planning_mode == PLANNING_TIME_INDEX:
            try:
                self._time_index.check_answers(partitions)
            except IndexCannotAnswer as cannot:
                raise KafkaSyncOptionError(
                    f"Option 'planningMode=timeIndex': {cannot}. Use planningMode=auto (plans "
                    "from fetched timestamps where the index cannot answer) or fetch."
                ) from None
        starts = self._offset_reader.starting_offsets(self._options, partitions)
        return SyncOffset({tp: PartitionOffset(offset) for tp, offset in starts.items()},
                          time_source=time_source(self._options.event_time))

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: capture (or, durable, recover) this run's stop offsets."""
        self.available_now = AvailableNowRun(self._options, self._offset_reader)

    def next_offset(
        self,
        start: SyncOffset,
        stop_offsets: Optional[Mapping[TopicPartition, int]] = None,
        *,
        read_all: bool = False,
    ) -> SyncOffset:
        """The end offset of the next batch, or ``start`` itself when nothing is processable.

        ``stop_offsets`` bound an AvailableNow run (:mod:`kafkasync_source.driver.autostop`): only
        partitions below their stop offset are fetched, none goes past it, the rest are
        FINISHED and never hold a batch back. ``read_all`` is Spark's ReadAllAvailable: the
        rate-limit options do not apply to this batch."""
        # Spark asks for the next batch only once the one ending at ``start`` is complete, and
        # calls commit() for it only when it constructs the next one: keep the group current.
        self.commit(start)
        partitions = (
            self._refresh_partitions(start) if stop_offsets is None
            else {**start.partitions, **missing_partitions(start, stop_offsets, self._offset_reader)}
        )
        if partitions.keys() != start.partitions.keys():
            # New partitions enter (and deleted ones leave) the offsets through a batch of
            # their own, so every later batch has a logged start for them (replays stay exact).
            # One that left and came back is a new log (a topic deleted and recreated).
            for tp in partitions.keys() ^ start.partitions.keys():
                self.forget_records(tp)
            return start.with_partitions(partitions)
        moved_back = self._fetcher.logs_moved_back() if self._fetcher is not None else {}
        for tp, (_, restart) in moved_back.items():
            self.forget_records(tp, restart)
        if moved_back:
            restarted = start.with_partitions({**start.partitions, **_moved_back(start, moved_back)})
            self._fetcher.position_at(restarted.next_offsets())  # type: ignore[union-attr]
            return restarted
        fetching = start.next_offsets() if stop_offsets is None else unfinished(start, stop_offsets)
        limits = self._batch_limits(start, read_all)
        planned = self._plan_from_index(start, stop_offsets, read_all, limits)
        if planned is None:
            planned = self._plan_from_fetch(start, fetching, stop_offsets, read_all, limits)
        if planned is _DELAYED:
            return start
        cut, states = planned
        self._idle_since = dict(cut.idle_since)
        self.last_cut, self.last_states = cut, states
        self._remember_ends(states)
        if not cut.has_batch:
            if not any(d.status in _AWAITING_FETCH for d in cut.partitions.values()):
                # Nothing to read below the captured log ends: planning begins anew at the next
                # trigger, or records produced since would wait behind this horizon for good.
                self._horizon.forget()
            return start
        if self._trigger_delay is not None:
            self._trigger_delay.restart(self._clock())
        if cut.enforced:
            logger.info(
                "kafkasync: enforced processing — gave up waiting for idle partition(s) %s "
                "(max.task.idle.ms=%d); records they receive later may be behind stream time.",
                ", ".join(f"{tp.topic}-{tp.partition}" for tp in cut.given_up),
                self._options.max_task_idle_ms,
            )
        # The driver sees records only on the fetch path (docs/concepts.md, "Planning from the
        # brokers' time index").
        late = _late_records(cut, states, start.stream_time) if self.planning == PLANNING_FETCH else 0
        end = SyncOffset(
            partitions={
                tp: PartitionOffset(decision.end, decision.partition_time)
                for tp, decision in cut.partitions.items()
            },
            stream_time=max(start.stream_time, NO_TIMESTAMP if cut.stream_time is None else cut.stream_time),
            enforced_processing_total=start.enforced_processing_total + int(cut.enforced),
            late_records_total=start.late_records_total + late,
            time_source=start.time_source,
        )
        if self.planning == PLANNING_FETCH:
            self._fetch_batches = max(0, self._fetch_batches - 1)
            self._fetcher.position_at({tp: end.partitions[tp].next_offset for tp in fetching})  # type: ignore[union-attr]
        self.emit_event_time_lag_ms = emit_event_time_lag_ms(self._clock(), end.stream_time)
        return end

    def _plan_from_index(
        self, start: SyncOffset, stop_offsets: Optional[Mapping[TopicPartition, int]],
        read_all: bool, limits: BatchLimits,
    ) -> Any:
        """The cut from the brokers' time index, ``_DELAYED``, or None where the index cannot
        answer (``planningMode=auto``: the fetch path plans this batch, the reason is logged
        once per partition and reason)."""
        if self._time_index is None or self._fetch_batches:
            return None
        try:
            indexed = self._time_index.observe(start, stop_offsets)
            states = self._time_index.report_states(indexed)
            if self._delayed(states, read_all, stop_offsets):
                return _DELAYED
            cut = plan_from_index(
                indexed, self._time_index.first_offsets(start), self._time_index.first_records,
                now_ms=self._clock(),
                max_task_idle_ms=self._options.max_task_idle_ms, idle_since=self._idle_since,
                limits=limits,
            )
        except IndexCannotAnswer as cannot:
            self._fall_back(cannot)
            return None
        except KafkaSyncConnectionError:
            if stop_offsets is None:
                raise
            # A bounded run has its own, more precise verdict on a cluster it cannot read
            # (AvailableNowRun.next_offset: the partitions, their offsets, the poll timeout).
            self._fetch_batches = 0
            return None
        if self._fetcher is not None:
            self._fetcher.position_at({})  # the driver stops fetching records
        self.planning = PLANNING_TIME_INDEX if isinstance(self._time_index, TimeIndexPath) else PLANNING_RECORD_PROBES
        self._fallbacks_in_a_row = 0
        return cut, states

    def _fall_back(self, cannot: IndexCannotAnswer) -> None:
        if self._options.planning_mode == PLANNING_TIME_INDEX:
            raise KafkaSyncPlanningError(
                f"kafkasync (planningMode=timeIndex): the brokers' time index cannot give the "
                f"exact cut: {cannot}. Use planningMode=auto to plan such batches from fetched "
                "timestamps."
            )
        # A failed look-up is asked again at the next trigger (until kafkaConsumer.pollTimeoutMs,
        # see TimeIndexReader); an answer the cut cannot use waits for a fetched batch.
        if not cannot.lookup_failed:
            self._fallbacks_in_a_row += 1
            self._fetch_batches = min(2 ** (self._fallbacks_in_a_row - 1), _MOST_FETCH_BATCHES)
        # Once per partition and kind of reason; partitions with the same reason share a line,
        # so that a cluster which cannot answer at all (a broker before Kafka 3.0 has no
        # max-timestamp look-up) says so once, not once per partition.
        unlogged: dict[str, list[TopicPartition]] = {}
        for tp, why in sorted(cannot.reasons.items()):
            kind = fallback_kind(why)
            if (tp, kind) not in self._fallbacks_logged:
                self._fallbacks_logged.add((tp, kind))
                unlogged.setdefault(why, []).append(tp)
        for why, partitions in unlogged.items():
            logger.info("kafkasync: planning from fetched timestamps: the time index cannot "
                        "answer for %s: %s", ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions),
                        why)

    def fetcher(self) -> DriverFetcher:
        """The driver's consumer of the fetch path, started on the first batch that needs it."""
        if self._fetcher is None:
            # Imported here: most queries on a real cluster never take the fetch path, and Spark's
            # Python source runner, which plans them, is a new process for every query.
            from kafkasync_source.driver.fetcher import DriverFetcher

            self._fetcher = DriverFetcher(
                self._options.client_config,
                buffer_capacity=self._options.buffer_capacity,
                fail_on_data_loss=self._options.fail_on_data_loss,
                record_time=record_time(self._options.event_time),
            )
        return self._fetcher

    def _plan_from_fetch(
        self, start: SyncOffset, fetching: Mapping[TopicPartition, int],
        stop_offsets: Optional[Mapping[TopicPartition, int]], read_all: bool, limits: BatchLimits,
    ) -> Any:
        """The cut from the records the driver fetched, or ``_DELAYED``."""
        self.planning = PLANNING_FETCH
        fetcher = self.fetcher()
        fetcher.position_at(fetching)
        partition_times = {tp: p.partition_time for tp, p in start.partitions.items()}
        states = fetcher.snapshot(partition_times, self._horizon.from_start(start))
        if stop_offsets is not None:
            states = bounded_states(start, states, stop_offsets)
        if self._delayed(states, read_all, stop_offsets):
            return _DELAYED
        cut = plan_batch(
            states,
            now_ms=self._clock(),
            max_task_idle_ms=self._options.max_task_idle_ms,
            idle_since=self._idle_since,
            limits=limits,
        )
        return cut, states

    def _delayed(
        self, states: Mapping[TopicPartition, PartitionState], read_all: bool,
        stop_offsets: Optional[Mapping[TopicPartition, int]],
    ) -> bool:
        # A bounded run must end, so minOffsetsPerTrigger never holds it back (Spark's
        # ReadMinRows docs leave that case to the source).
        if read_all or stop_offsets is not None or not self._delay_batch(states):
            return False
        self.last_cut, self.last_states = None, dict(states)
        self._remember_ends(states)
        # A held trigger begins no batch: the batch let through later is planned up to the log
        # ends known then, as format("kafka")'s is, not up to those captured while it waited.
        self._horizon.forget()
        return True

    def _delay_batch(self, states: Mapping[TopicPartition, PartitionState]) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay, as format("kafka")'s delayBatch: the new
        offsets are counted up to the log end offsets the driver knows."""
        self.delayed = None
        if self._trigger_delay is None:
            return False
        available = sum(
            max(0, state.end_offset - state.start)
            for state in states.values() if state.end_offset is not None
        )
        now = self._clock()
        if not self._trigger_delay.should_delay(available, now):
            if available == 0 and all(state.end_offset is not None for state in states.values()):
                # Let through with nothing to read (a query starting at "latest" or on an empty
                # topic, a quiet spell): Spark's clock restarts here too, so a trickle that
                # follows is held until minOffsetsPerTrigger or maxTriggerDelay.
                self._trigger_delay.restart(now)
            return False
        self.delayed = {
            "option": "minOffsetsPerTrigger",
            "minOffsetsPerTrigger": self._trigger_delay.min_offsets,
            "availableOffsets": available,
            "until": self._trigger_delay.deadline_ms(),
        }
        return True

    def _batch_limits(self, start: SyncOffset, read_all: bool) -> BatchLimits:
        rate = self._options.rate_limits
        if read_all:
            return BatchLimits()
        return BatchLimits(
            max_records=rate.max_offsets_per_trigger,
            max_stream_time_step_ms=rate.max_event_time_per_trigger_ms,
            previous_stream_time=start.stream_time,
        )

    def _refresh_partitions(self, start: SyncOffset) -> dict[TopicPartition, PartitionOffset]:
        """``start``'s partitions, plus the ones created since, minus the deleted ones; looked
        up at most once per ``partitionDiscoveryIntervalMs``."""
        now = self._clock()
        if now < self._next_discovery_ms:
            return dict(start.partitions)
        self._next_discovery_ms = now + self._options.partition_discovery_interval_ms
        try:
            current = self._offset_reader.partitions(self._options.subscription, must_exist=False)
            missing = [tp for tp in start.partitions if tp not in current]
            gone = self._offset_reader.gone(missing) if missing else []
        except (KafkaException, ConnectionError) as err:
            # Discovery is not needed for the partitions already read: a cluster that cannot
            # answer now (e.g. just back from an outage) is asked again at the next interval.
            logger.warning("kafkasync: partition discovery failed (%s); the query goes on with "
                           "its %d partition(s) and tries again in %d ms.", err,
                           len(start.partitions), self._options.partition_discovery_interval_ms)
            return dict(start.partitions)
        if gone:
            self._report_gone(start, gone)
        partitions = {tp: offset for tp, offset in start.partitions.items() if tp not in gone}
        new = [tp for tp in current if tp not in start.partitions]
        if new:
            # As Spark's Kafka source does: partitions that appear while a query runs are read
            # from their beginning, so none of their records is missed.
            marks = self._offset_reader.watermarks(new)
            logger.info("kafkasync: new partition(s) %s", ", ".join(f"{t}-{p}" for t, p in new))
            partitions.update({tp: PartitionOffset(marks[tp][0]) for tp in new})
        return partitions

    def _remember_ends(self, states: Mapping[TopicPartition, PartitionState]) -> None:
        for tp, state in states.items():
            if state.end_offset is not None and state.end_offset > self._known_ends.get(tp, -1):
                self._known_ends[tp] = state.end_offset

    def _report_gone(self, start: SyncOffset, gone: list[TopicPartition]) -> None:
        """Deleted partitions leave the offsets; their unread records are data loss
        (failOnDataLoss) — unless every record of theirs had been read, which kafkasync knows
        from the largest log end it saw. format("kafka") with ``subscribe`` fails the query
        here whatever failOnDataLoss says: its look-up of the latest offsets raises
        UnknownTopicOrPartitionException (seen beside Spark 4.2.0 in
        integration/test_format_kafka_parity.py)."""
        unread = []
        for tp in gone:
            end = self._known_ends.get(tp)
            next_offset = start.partitions[tp].next_offset
            if end is None or next_offset < end:
                unread.append(f"{tp.topic}-{tp.partition} (next offset {next_offset}, "
                              f"log end {'unknown' if end is None else end})")
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
        if not unread:
            logger.info("kafkasync: partition(s) %s were deleted after being read to their end; "
                        "they leave the offsets.", names)
            return
        message = (f"kafkasync: partition(s) {', '.join(unread)} no longer exist (topic deleted) "
                   "while records of theirs were still unread; some data may have been missed.")
        if self._options.fail_on_data_loss:
            raise KafkaSyncDataLossError(
                message + " Set failOnDataLoss=false to drop deleted partitions and continue."
            )
        logger.warning("%s Dropping them (failOnDataLoss=false).", message)


_DELAYED = object()
"""minOffsetsPerTrigger holds the batch back (SyncDriver._delayed)."""
# A batch held back for these waits for records below its fetch horizon.
_AWAITING_FETCH = (PartitionStatus.WAITING_FOR_FETCH, PartitionStatus.WAITING_FOR_END_OFFSET)


def fallback_kind(why: str) -> str:
    """The kind of reason a partition's answer cannot be used, for logging it once per kind.

    Reasons name offsets and times ("offset 812, the first entry with a timestamp >= ..."); the
    kind keeps the words and drops the numbers, so that the set of kinds already logged is
    bounded by the partitions and the handful of reasons, not by the offsets a live query
    passes over weeks (issue 54)."""
    return re.sub(r"\d+", "#", why.split(" (", 1)[0].split(",", 1)[0])


class KafkaSyncPlanningError(RuntimeError):
    """``planningMode=timeIndex`` met a batch only reading records can cut exactly."""


def _moved_back(
    start: SyncOffset, moved_back: Mapping[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, PartitionOffset]:
    """Restart partitions whose log now ends below the query's position (topic deleted and
    recreated, or truncated) at the log's new start, with a data-loss warning naming them:
    format("kafka") reports it too ("offset was changed from X to Y, some data may have been
    missed", KafkaMicroBatchStream) but then continues from the new log's end, skipping the
    records the new log already holds. A batch ending at a lower offset reads nothing for that
    partition (the range [start, end) is empty) and moves it back."""
    restarted = {}
    for tp, (position, restart) in sorted(moved_back.items()):
        if tp not in start.partitions:
            continue
        logger.warning(
            "kafkasync: %s-%d moved backwards: the query stands at offset %d (fetched up to "
            "%d) but the log now restarts at %d (topic deleted and recreated, or truncated). "
            "Continuing from offset %d (failOnDataLoss=false); records of the old log from "
            "offset %d on that were not read are lost.",
            tp.topic, tp.partition, start.partitions[tp].next_offset, position, restart, restart,
            start.partitions[tp].next_offset,
        )
        restarted[tp] = PartitionOffset(restart, start.partitions[tp].partition_time)
    return restarted


class _FetchHorizon:
    """The log end offsets known when planning of a batch began (see the planner's "Same data,
    same batches"): captured on the first ``latestOffset`` from a start, kept while Spark asks
    again from the same start and the batch waits for fetches, so records produced meanwhile
    never hold the batch back; forgotten when the answer was that there is nothing to read."""

    def __init__(self) -> None:
        self._start: Optional[dict[TopicPartition, int]] = None
        self._ends: dict[TopicPartition, int] = {}

    def from_start(self, start: SyncOffset) -> Callable[[TopicPartition, Optional[int]], Optional[int]]:
        """A partition's horizon for a batch from ``start``, given its end offset known now."""
        starts = start.next_offsets()
        if starts != self._start:
            self._start, self._ends = starts, {}

        def horizon(tp: TopicPartition, end_offset: Optional[int]) -> Optional[int]:
            if tp not in self._ends and end_offset is not None:
                self._ends[tp] = end_offset
            return self._ends.get(tp)

        return horizon

    def forget(self) -> None:
        """The next ``from_start`` captures the log ends again, even from the same start."""
        self._start, self._ends = None, {}


def _late_records(cut: Cut, states: dict[TopicPartition, PartitionState], stream_time: int) -> int:
    """Records emitted with a timestamp below the stream time already reached: the out-of-order
    processing a user traded for latency (enforced processing, -1, or out-of-order producers)."""
    if stream_time == NO_TIMESTAMP:
        return 0
    late = 0
    for tp, decision in cut.partitions.items():
        timestamps = states[tp].timestamps[: decision.records]
        late += int(np.count_nonzero((timestamps >= 0) & (timestamps < stream_time)))
    return late
