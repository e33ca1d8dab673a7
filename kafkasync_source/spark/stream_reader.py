"""Spark's DataSourceStreamReader for ``format("kafkasync")``: offsets in and out as JSON, ranges
to executors.

Spark asks the reader for the next batch's end offset (``latestOffset``), logs it, then has
executors read each partition's ``[start, end)`` range. The reader is created by Spark on the
driver *and* again, fresh, on planning workers whose ``read`` is shipped to executors. It
therefore holds only options; its driver state (:class:`~kafkasync_source.driver.sync_driver.
SyncDriver`: consumer, thread, buffers) is created lazily, on first use on the driver, and never
pickled.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Mapping, Optional, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kafkasync_source.config.options import KafkaSyncOptionError, SourceOptions
from kafkasync_source.driver.bounded_run import SupportsTriggerAvailableNow
from kafkasync_source.driver.sync_driver import SyncDriver
from kafkasync_source.event_time import time_source
from kafkasync_source.formats.options import FormatOptions, ReaderPin
from kafkasync_source.formats.registry import registry
from kafkasync_source.planning.offsets import SyncOffset
from kafkasync_source.planning.planner import WAIT_FOREVER
from kafkasync_source.spark.executor_import import RANGE_READER_MODULE, RebuiltAfterImport
from kafkasync_source.spark.input_partitions import KafkaRanges, plan_input_partitions
from kafkasync_source.spark.python_worker import landed_in_worker

try:  # PySpark >= 4.2: admission control
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
except ImportError:  # pragma: no cover - PySpark 4.0/4.1 never pass a limit
    ReadAllAvailable = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)


class KafkaSyncStreamReader(RebuiltAfterImport, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark glue: offsets in and out as JSON, ranges to executors. Holds only options."""

    EXECUTOR_MODULES = (RANGE_READER_MODULE,)

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._driver: Optional[SyncDriver] = None
        self._initial: Optional[dict] = None
        # PySpark 4.0/4.1 call latestOffset() without a start: the reader tracks it itself.
        self._last_end: Optional[dict] = None
        self._unconfirmed_plan: Optional[tuple[dict, dict]] = None  # (start planned from, end)
        self._consumer_scope: Optional[str] = None
        self._rebase_logged = False
        self._moves_logged: set[tuple[str, int]] = set()
        self._read_as = {part: pin.to_json() for part, pin in options.reader_pins.items()}
        """What the offsets handed to Spark record as this query's reader schemas (offsets.py)."""

    def __getstate__(self) -> dict:
        # The reader is pickled to executors for read(): never ship the driver's consumer.
        state = self.__dict__.copy()
        state["_driver"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        # Unpickled in an executor's Python worker as part of a task's command, before the
        # worker reads the task's input (python_worker.py).
        self.__dict__.update(state)
        landed_in_worker()

    def _sync_driver(self) -> SyncDriver:
        if self._driver is None:
            self._driver = SyncDriver(self._options)
        return self._driver

    def initialOffset(self) -> dict:
        # Resolved once: PySpark 4.0/4.1 ask for it after the first latestOffset(), and
        # "latest" must mean the same both times.
        if self._initial is None:
            self._initial = self._sync_driver().initial_offset().read_as(self._read_as).to_json()
        return self._initial

    def getDefaultReadLimit(self) -> Any:
        """As format("kafka"): ReadMinRows with minOffsetsPerTrigger, else ReadMaxRows with
        maxOffsetsPerTrigger, else ReadAllAvailable. PySpark has no composite limit, so
        ``latestOffset`` applies every configured limit unless Spark passes ReadAllAvailable,
        which it does where a trigger must read everything (Trigger.Once). For that to mean
        anything, ReadAllAvailable is never the default while an option limits batches:
        maxEventTimePerTrigger alone (no ReadLimit expresses it) reports ReadMaxRows(Long.MAX)."""
        rate = self._options.rate_limits
        if rate.min_offsets_per_trigger is not None:
            return ReadMinRows(rate.min_offsets_per_trigger)
        if rate.max_offsets_per_trigger is not None:
            return ReadMaxRows(rate.max_offsets_per_trigger)
        if rate.max_event_time_per_trigger_ms is not None:
            return ReadMaxRows(WAIT_FOREVER)
        return ReadAllAvailable()

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        # PySpark >= 4.2 passes the start and a ReadLimit: ReadAllAvailable (e.g. Trigger.Once)
        # lifts the rate limits for this batch, any other applies them as configured.
        # PySpark 4.0/4.1 pass nothing, and call this before initialOffset() on a fresh query:
        # continue from the last offset handed out, else from startingOffsets. Whether that
        # was Spark's start is only known in partitions(), which checks it.
        legacy = start is None
        if start is None:
            start = self._last_end if self._last_end is not None else self.initialOffset()
        start_offset = self._offset(start)
        driver = self._sync_driver()
        if driver.available_now is None and self._options.timestamps.ending is not None:
            # Only now does the source know the trigger: AvailableNow prepares a run first.
            raise KafkaSyncOptionError(
                f"Option '{self._options.timestamps.ending_option}' bounds a streaming query "
                "run with trigger(availableNow=True) (PySpark >= 4.2) only: that run stops at "
                "the time. Other triggers never stop; remove the option, or use a batch read."
            )
        read_all = ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable)
        end_offset = (
            driver.next_offset(start_offset, read_all=read_all) if driver.available_now is None
            else driver.available_now.next_offset(driver, start_offset, read_all=read_all)
        )
        self._last_end = start if end_offset is start_offset else end_offset.read_as(self._read_as).to_json()
        self._unconfirmed_plan = (start, self._last_end) if legacy else None
        return self._last_end

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow (PySpark >= 4.2): stop at the end of the log as of now, or as
        of the first start of an unfinished run with ``autostop.offsets=durable``."""
        self._sync_driver().prepare_available_now()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = self._offset(start), SyncOffset.from_json(end)
        self._check_legacy_plan(begin, end)
        self._last_end = end
        ranges = [
            (tp, begin.partitions.get(tp, position).next_offset, position.next_offset)
            for tp, position in sorted(finish.partitions.items())
        ]
        if self._consumer_scope is None:
            self._consumer_scope = uuid.uuid4().hex  # this query run's executor consumers
        partition_times = (
            {tp: position.partition_time for tp, position in begin.partitions.items()}
            if self._options.tracks_partition_time else None
        )
        return plan_input_partitions(
            ranges, self._options.max_records_per_partition, self._options.min_partitions,
            consumer_scope=self._consumer_scope, partition_times=partition_times,
            in_time_order=self._options.in_time_order,
        )

    def _offset(self, offset: dict) -> SyncOffset:
        """A batch's start as this query continues from it: re-based on this query's time
        source when the checkpoint was planned on another (offsets.py), for planning and for
        the executors' partition times alike."""
        parsed = SyncOffset.from_json(offset)
        self._check_reader_schemas(parsed.reader_schemas)
        current = time_source(self._options.event_time)
        if parsed.time_source == current:
            return parsed
        if not self._rebase_logged:
            self._rebase_logged = True
            logger.warning(
                "kafkasync: this checkpoint was planned on %s and the query now synchronizes on "
                "%s: stream time and partition times start afresh on the new time from the next "
                "batch (its positions and counters continue). A stateful query's own watermark "
                "and state stay Spark's: if the watermark's column changed too, use a new "
                "checkpointLocation (docs/event-time.md).", parsed.time_source, current)
        return parsed.on_time_source(current)

    def _check_reader_schemas(self, recorded: Mapping[str, Mapping[str, Any]]) -> None:
        """A checkpoint's records were decoded with the reader schemas its offsets record; this
        query was loaded with its own (Spark fixed the columns' types then, before the source could
        see the checkpoint). Where they differ, a restart must not silently change the decoded
        column: it fails naming both, unless ``<part>.subject.version`` names this query's version
        (the user moves the query to it; the offsets record it from the next batch)."""
        for part, pin in self._options.reader_pins.items():
            was = recorded.get(part)
            if was is None or was["id"] == pin.schema_id:
                continue
            before = ReaderPin.from_json(dict(was))
            format_options = self._options.value_format if part == "value" else self._options.key_format
            assert format_options is not None
            if format_options.subject_version is not None:
                if (part, pin.schema_id) not in self._moves_logged:
                    self._moves_logged.add((part, pin.schema_id))
                    logger.warning(
                        "kafkasync: %s=%d moves this query's %s from the reader schema its checkpoint recorded, %s, "
                        "to %s; the checkpoint records it from the next batch.", format_options.version_option,
                        pin.version, part, before.describe(), pin.describe())
                continue
            gone = _gone(format_options, before)
            raise KafkaSyncOptionError(
                f"kafkasync: this checkpoint's {part}s were decoded with the reader schema {before.describe()}"
                f"{gone}, and this query was loaded with {pin.describe()}, the subject's latest (its columns have "
                f"that version's types). {_restart_advice(format_options, before, pin, gone=bool(gone))} "
                "(docs/formats.md, 'Moving a running query to a new reader schema')."
            )

    def _check_legacy_plan(self, spark_start: SyncOffset, end: dict) -> None:
        """PySpark 4.0/4.1: a restart from a checkpoint looks like a fresh query to the
        source, so the first batch after it was planned from startingOffsets. Fail rather
        than read records twice or skip them."""
        plan, self._unconfirmed_plan = self._unconfirmed_plan, None
        if plan is None or SyncOffset.from_json(plan[1]) != SyncOffset.from_json(end):
            return
        if SyncOffset.from_json(plan[0]).next_offsets() != spark_start.next_offsets():
            raise RuntimeError(
                "kafkasync cannot continue this query from its checkpoint on PySpark 4.0/4.1: "
                "those versions do not tell the source where a checkpoint stands, and the batch "
                "just planned does not start there. Use PySpark >= 4.2 to restart queries, or "
                "a new checkpointLocation."
            )

    def read(self, partition: InputPartition) -> Any:
        from kafkasync_source.executor.range_reader import RangeReader  # EXECUTOR_MODULES

        assert isinstance(partition, KafkaRanges)
        return RangeReader.from_options(self._options, self._schema).read(partition)

    def reportLatestOffset(self) -> Optional[dict]:
        """Live per-partition state (PySpark >= 4.2 shows it as the progress' latestOffset), and
        the reader schemas the query decodes with."""
        if self._driver is None:
            return None
        report = self._driver.report()
        if self._read_as:
            report["readerSchemas"] = self._read_as
        return report

    def commit(self, end: dict) -> None:
        """Spark finished the batch ending at ``end``; with ``kafka.group.id`` set, tell the
        consumer group (monitoring only: Spark's checkpoint stays the source of truth)."""
        if self._options.commit_group_id:
            self._sync_driver().commit(SyncOffset.from_json(end))

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None


def _restart_advice(format_options: FormatOptions, recorded: ReaderPin, loaded: ReaderPin, *, gone: bool) -> str:
    """What a restart on another reader than its checkpoint's can be told to do: keep the recorded
    reader where options can still name it, or move to the loaded one (one sentence, no full stop)."""
    option = format_options.version_option
    move = f"'{option}' to {loaded.version} to move the query to {loaded.describe()}"
    if gone:
        return f"The checkpoint's reader can no longer be read as: set {move}"
    if recorded.subject != loaded.subject:
        return (f"Set '{format_options.part}.subject' to {recorded.subject!r} and '{option}' to {recorded.version} to "
                f"read as the checkpoint did, or {move}")
    if recorded.version == loaded.version:
        return (f"Version {loaded.version} of subject {loaded.subject!r} is another schema than when the checkpoint "
                "was written (another registry, or the subject deleted and registered again), so no version reads "
                f"as the checkpoint did: set {move}")
    return (f"Set '{option}' to {recorded.version} to read as the checkpoint did, or to {loaded.version} to move the "
            "query to the new version")


def _gone(format_options: FormatOptions, recorded: ReaderPin) -> str:
    """`` (... no longer in the registry at URL)`` where the registry answers it has no such id."""
    if registry(format_options.registry).holds(recorded.schema_id) is not False:
        return ""
    return f" (schema id {recorded.schema_id} is no longer in the registry at {format_options.registry.display_url})"
