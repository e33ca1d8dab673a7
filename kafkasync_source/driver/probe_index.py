"""Driver side: the time index's answers for an event time, from records read at chosen offsets.

With ``eventTime.order=nonDecreasing`` a partition's records are in time order, so the largest
time of a window is its last record's and ``first(t)`` is a binary search
(:mod:`kafkasync_source.planning.record_search`). This path feeds
:func:`~kafkasync_source.planning.index_planner.plan_from_index` as
:class:`~kafkasync_source.driver.time_index.TimeIndexPath` does, with the readable end from
ListOffsets (``latest``, one request per leader) and the times from single records fetched
through the query's event-time seam (:class:`~kafkasync_source.driver.record_probe.RecordProbe`):
per trigger one round for the windows' last records (a partition whose end has not moved is
answered from memory), and ``O(log n)`` rounds for a cut inside a window, all partitions in the
same rounds; the record the probe is sent after each answer narrows the search too
(:meth:`~kafkasync_source.driver.record_probe.ProbedRecords.known_first_record`). What the reads
said is kept in one :class:`~kafkasync_source.planning.record_facts.RecordFacts`, dropped below
each batch's start and forgotten where a log moved back. The executors read every record and
check the promise on each.
"""

from __future__ import annotations

from typing import Mapping, Optional

from kafkasync_source.driver.record_probe import ProbedRecords
from kafkasync_source.driver.time_index import IndexPath, TimeIndexReader
from kafkasync_source.planning.index_planner import FirstOffsets, IndexCannotAnswer, IndexedPartition
from kafkasync_source.planning.offsets import SyncOffset
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.planning.record_search import OrderedRecords


class ProbeIndexPath(IndexPath):
    """The planner's input for partitions whose event times do not go backwards: per batch
    start, :class:`IndexedPartition` with the window's last record as its largest time."""

    def __init__(self, reader: TimeIndexReader, records: ProbedRecords, *, past_log_starts: bool = False) -> None:
        super().__init__(reader, records, past_log_starts=past_log_starts)
        self._ordered = OrderedRecords(records.first_records, records.known_first_record, records.facts)
        self._windows: dict[TopicPartition, tuple[int, int]] = {}
        self._partition_times: dict[TopicPartition, int] = {}

    def observe(
        self, start: SyncOffset, stop_offsets: Optional[Mapping[TopicPartition, int]]
    ) -> dict[TopicPartition, IndexedPartition]:
        """What the partitions of ``start`` hold now. In a bounded run, partitions at or past
        their stop offset (or outside the run) are FINISHED unasked."""
        latest, moved_back = self.latest_ends(start, stop_offsets)
        if moved_back:
            raise IndexCannotAnswer(moved_back)
        self._partition_times = {tp: position.partition_time for tp, position in start.partitions.items()}
        self._windows = {}
        for tp, end in latest.items():
            if end is not None:
                stop = end if stop_offsets is None else min(end, stop_offsets.get(tp, end))
                self._windows[tp] = (start.partitions[tp].next_offset, stop)
        last = self._ordered.last_records(self._windows, self._partition_times)
        states = {}
        for tp, position in start.partitions.items():
            offset = position.next_offset
            if tp in latest:
                stop_offset = None if stop_offsets is None else stop_offsets[tp]
                begin, end = self._windows.get(tp, (offset, offset))
                states[tp] = IndexedPartition(offset, latest[tp], last.get(tp), position.partition_time, stop_offset,
                                              holds_records=end <= begin or last.get(tp) is not None)
            else:
                states[tp] = IndexedPartition(offset, None, None, position.partition_time, stop_offset=offset)
        return states

    def first_offsets(self, start: SyncOffset) -> FirstOffsets:
        """``first(t)`` within each window of the batch from ``start`` (:meth:`observe` first)."""
        def first_offsets(times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
            windows = {tp: self._windows.get(tp, (start.partitions[tp].next_offset,) * 2) for tp in times}
            return self._ordered.first_at_or_above(times, windows, self._partition_times)
        return first_offsets
