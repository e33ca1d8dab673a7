"""Asking the brokers' time index, and checking its answers against the records a consumer reads.

The index path (:mod:`kafkasync_source.planning.index_planner`) plans a batch from two kinds of
question, each one round for many partitions at once: ``first(t)``, the first offset whose
timestamp is >= t (ListOffsets by time, :data:`FirstOffsets`), and the first record a consumer
reads at or after an offset (:data:`FirstRecords`). :class:`IndexSearch` turns them into what the
cut needs — a window's end at a time, a window's largest timestamp, the largest one a cut takes —
and raises :class:`IndexCannotAnswer` where only fetched records can tell.

What the index counts that no consumer reads
--------------------------------------------
A log holds entries no consumer is given: transaction markers (control batches), and under
read_committed the records of aborted transactions. The broker counts them like records:
``LogSegment.append`` raises the segment's ``maxTimestampSoFar`` and adds time-index entries
from every appended batch, control batches included, and ``UnifiedLog.fetchOffsetByTimestamp``
answers MAX_TIMESTAMP and by-time look-ups from those. A marker carries the broker's clock at
the transaction's end (``MemoryRecords.withEndTransactionMarker`` is given
``time.milliseconds()`` by the transaction coordinator's ``WriteTxnMarkers``), not an event
time: on a backfill of old event times every marker is newer than every record. So an answer
can point at an entry that is not a readable record: ``first(t)`` then lies *before* the first
readable record >= t (a cut too early leaves older records for a later batch, behind its stream
time), and the largest timestamp can be a marker's (a stream time too high).

Hence every answer the cut *uses* is checked through ``first_records``: the first record a
consumer of the query's isolation level reads at or after an offset (one round of fetches, one
record batch per partition checked). Where it shows the entry is not a readable record and
the next readable one does not settle the answer either, the index path raises
:class:`IndexCannotAnswer` for that partition, and the batch is planned from fetched
timestamps. A largest timestamp that is a marker's is not given up at once: the largest
*readable* one is searched for (:meth:`IndexSearch.readable_maxima`), so that a transactional topic
written in time order — a live stream, the markers among its records — stays on the index.
The searches in between need no check: ``first(t)`` over all entries is monotone
in ``t`` as it is over records, and the checked result of a search is exact when the entry
it ends on is a readable record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from kafkasync_source.planning.cut import PartitionStatus, TopicPartition

__all__ = ["FirstOffsets", "FirstRecords", "IndexCannotAnswer", "IndexSearch", "Window"]

FirstOffsets = Callable[[Mapping[TopicPartition, int]], Mapping[TopicPartition, Optional[tuple[int, int]]]]
"""ListOffsets by time for several partitions at once: per partition, the first offset whose
record timestamp is >= the given time and that record's timestamp, or None where no such
record lies below the readable end. One call is one round of requests (one per leader)."""

FirstRecords = Callable[[Mapping[TopicPartition, tuple[int, int]]],
                        Mapping[TopicPartition, Optional[tuple[int, int]]]]
"""Per partition ``(offset, end)``: the first record a consumer of the query's isolation level
reads in ``[offset, end)`` — ``(offset, timestamp)`` — or None where it reads none there
(only transaction markers or aborted records). One call is one round of fetches."""


class IndexCannotAnswer(Exception):
    """The time index cannot give the exact cut; ``reasons`` says why, per partition."""

    def __init__(self, reasons: Mapping[TopicPartition, str], *, lookup_failed: bool = False) -> None:
        self.reasons = dict(reasons)
        self.lookup_failed = lookup_failed
        """The brokers did not answer (an error, a timeout), rather than answered what the
        cut cannot use: worth asking again at the next trigger."""
        super().__init__("; ".join(
            f"{tp.topic}-{tp.partition}: {why}" for tp, why in sorted(self.reasons.items())
        ))


@dataclass(frozen=True)
class Window:
    """Offsets ``[start, end)`` of one partition that this batch may take."""

    start: int
    end: int
    """Exclusive; the readable end capped by the stop offset (== start when unknown)."""
    lag: Optional[int]
    status: PartitionStatus
    exhausted: bool
    """Bounded run: the window reaches the stop offset, nothing more will come."""


class IndexSearch:
    """The ``first_offsets`` answers seen from the windows, with the cases the index cannot
    answer collected instead of guessed."""

    def __init__(self, first_offsets: FirstOffsets, windows: Mapping[TopicPartition, Window],
                 first_records: FirstRecords) -> None:
        self._first_offsets = first_offsets
        self._first_records = first_records
        self._windows = windows
        self.rounds = 0
        self.found_timestamps: dict[TopicPartition, int] = {}
        """Timestamp of the record each partition's answer in the last round points at."""

    def ends_at(self, times: Mapping[TopicPartition, int], why: str) -> dict[TopicPartition, int]:
        """Per partition, the first offset of its window whose timestamp is >= the time (the
        window's end if none); raises where the answer lies before the window."""
        if not times:
            return {}
        self.rounds += 1
        answers = self._first_offsets(times)
        self.found_timestamps = {tp: answer[1] for tp, answer in answers.items() if answer is not None}
        ends, unknown = {}, {}
        for tp, time in times.items():
            window, answer = self._windows[tp], answers.get(tp)
            found = None if answer is None else answer[0]
            if found is not None and found < window.start:
                unknown[tp] = (f"offset {found}, before the position {window.start}, has a "
                               f"timestamp >= {time} ({why})")
            else:
                ends[tp] = window.end if found is None else min(found, window.end)
        if unknown:
            raise IndexCannotAnswer(unknown)
        return ends

    def check(self, cuts: Mapping[TopicPartition, tuple[int, int]],
              maxima: Mapping[TopicPartition, tuple[int, int, int]]) -> None:
        """Raises where an answer the cut uses is not a readable record's (see the module
        docstring). ``cuts``: ``(end, time)`` where a partition ends inside its window at the
        first entry >= time — right where no readable record of ``[end, window end)`` is older
        than the time comes first. ``maxima``: ``(offset, timestamp, until)`` of the first entry
        with the largest timestamp of a range ending at ``until`` — right where a readable
        record of ``[offset, until)`` has that timestamp (none can have a larger one)."""
        wrong = {}
        if maxima:
            records = self._first_records({tp: (offset, until) for tp, (offset, _, until) in maxima.items()})
            for tp, (offset, largest, _) in maxima.items():
                record = records.get(tp)
                if record is None or record[1] != largest:
                    wrong[tp] = (f"its largest timestamp {largest}, at offset {offset}, is not a "
                                 "readable record's (a transaction marker or an aborted record)")
        cuts = {tp: cut for tp, cut in cuts.items() if cut[0] < self._windows[tp].end and tp not in wrong}
        if cuts:
            records = self._first_records({tp: (end, self._windows[tp].end) for tp, (end, _) in cuts.items()})
            for tp, (end, time) in cuts.items():
                record = records.get(tp)
                if record is not None and record[1] < time:
                    wrong[tp] = (f"offset {end}, the first entry with a timestamp >= {time}, is not "
                                 f"a readable record (a transaction marker or an aborted record), "
                                 f"and the next record, at offset {record[0]}, is older")
        if wrong:
            raise IndexCannotAnswer(wrong)

    def heads(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, Optional[tuple[int, int]]]:
        """The first readable record of each window."""
        return self._first_records({tp: (self._windows[tp].start, self._windows[tp].end) for tp in partitions})

    def entries_at(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """``(time, offset of the first entry >= time)`` per partition, for largest timestamps
        a search found, so that :meth:`check` can look at the entry."""
        found = self.ends_at(times, "locating the window's largest timestamp")
        return {tp: (time, found[tp]) for tp, time in times.items()}

    def readable_maxima(self, entries: Mapping[TopicPartition, tuple[int, int]],
                        untils: Mapping[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """``entries``: per partition the largest timestamp of ``[start, untils[tp])`` and the
        offset of its first entry. Where that entry is not a readable record (a transaction
        marker, stamped with the broker's clock, or an aborted record under read_committed),
        the largest timestamp of the records a consumer reads there, and that record's offset.

        A search on what a consumer reads. ``first(t)`` is the first entry >= t, so no record
        before it is >= t; and the first readable record at or after it answers whether one is:
        if it is >= t, a record >= t exists; if there is none, none does; if it is older than
        t, the index cannot tell (an out-of-order partition), and the fetch path plans the
        batch. First the records just before the entry are read, going back 1, 4, 16 ...
        offsets (in a partition written in time order the largest record is the last one
        before the final marker), then ``low + 1`` is asked to confirm it, and only then the
        range is bisected, each readable record found raising the lower bound to its own time."""
        if not entries:
            return {}
        records = self._first_records({tp: (offset, untils[tp]) for tp, (_, offset) in entries.items()})
        maxima: dict[TopicPartition, tuple[int, int]] = {}
        low: dict[TopicPartition, tuple[int, int]] = {}  # (timestamp, offset) of a readable record
        high: dict[TopicPartition, int] = {}  # no readable record is at or above it
        for tp, (largest, offset) in entries.items():
            record = records.get(tp)
            if record is not None and record[1] == largest:
                maxima[tp] = (largest, offset)
                continue
            high[tp] = largest + 1
            if record is not None:
                low[tp] = (record[1], record[0])
        found = self._largest_readable(low, high, {tp: entries[tp][1] for tp in high if tp not in low}, untils)
        unreadable = {tp: f"no record a consumer reads lies in offsets [{self._windows[tp].start}, {untils[tp]})"
                      for tp, largest in found.items() if largest is None}
        if unreadable:
            raise IndexCannotAnswer(unreadable)
        maxima.update({tp: largest for tp, largest in found.items() if largest is not None})
        return maxima

    def largest_taken(self, ends: Mapping[TopicPartition, int],
                      ceilings: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[int]]:
        """Per partition cut inside its window, the largest timestamp of the records a consumer
        reads in ``[start, ends[tp])`` — what the fetch path's partition time and stream time
        take from the records a batch holds (KIP-472: the largest timestamp processed) — or
        None where it reads none there. No readable record there is at or above
        ``ceilings[tp]`` (the level the partition was cut at, plus one).

        The cut's level itself would do for the next record (it is above the level) but not for
        the batch: its records can all lie below the level, and the next batch's
        ``partitionTime`` column, ``onInvalid=partitionTime`` times and ``maxEventTimePerTrigger``
        base would then differ from the fetch path's. :meth:`readable_maxima`'s search from the
        end: the last readable record before it (in a partition written in time order the
        largest, one read), then one look-up above it to confirm it."""
        found = self._largest_readable({}, ceilings, ends, ends)
        return {tp: None if record is None else record[0] for tp, record in found.items()}

    def _largest_readable(self, low: Mapping[TopicPartition, tuple[int, int]], high: Mapping[TopicPartition, int],
                          back_from: Mapping[TopicPartition, int], untils: Mapping[TopicPartition, int]
                          ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """Per partition of ``high``, the largest timestamp of a record a consumer reads in
        ``[start, untils[tp])`` and its offset, None where it reads none. No readable record
        there is at or above ``high[tp]``; ``low[tp]``, where given, is one that is read
        there, ``(timestamp, offset)``; else the search reads back from ``back_from[tp]``."""
        low, high = dict(low), dict(high)
        back = {tp: (offset, 1) for tp, offset in back_from.items()}  # (offset, step)
        while back:
            asking = {tp: max(self._windows[tp].start, offset - step) for tp, (offset, step) in back.items()}
            found = self._first_records({tp: (at, untils[tp]) for tp, at in asking.items()})
            for tp, at in asking.items():
                record = found.get(tp)
                offset, step = back.pop(tp)
                if record is not None and record[0] < offset:
                    low[tp] = (record[1], record[0])
                elif at > self._windows[tp].start:
                    back[tp] = (offset, 4 * step)
        confirmed: set[TopicPartition] = set()
        while True:
            probes = {tp: low[tp][0] + 1 if tp not in confirmed else (low[tp][0] + high[tp]) // 2
                      for tp in high if tp in low and high[tp] - low[tp][0] > 1}
            if not probes:
                break
            confirmed.update(probes)
            found_at = self.ends_at(probes, "searching the window's largest readable timestamp")
            found = self._first_records({tp: (at, untils[tp]) for tp, at in found_at.items() if at < untils[tp]})
            undecided = {}
            for tp, time in probes.items():
                record = found.get(tp)
                if record is None:
                    high[tp] = time
                elif record[1] >= time:
                    low[tp] = (record[1], record[0])
                else:
                    undecided[tp] = (f"offset {found_at[tp]}, the first entry with a timestamp >= {time}, "
                                     f"is not a readable record, and the next record, at offset "
                                     f"{record[0]}, is older (searching the largest readable timestamp)")
            if undecided:
                raise IndexCannotAnswer(undecided)
        return {tp: low.get(tp) for tp in high}

    def gallop_above(self, floors: Mapping[TopicPartition, int],
                     ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, a time above every timestamp of ``[start, ends[tp])``, doubling from
        the floor: O(log) rounds where the broker gave no largest timestamp."""
        ceilings: dict[TopicPartition, int] = {}
        probes = {tp: max(2 * floor, floor + 1) for tp, floor in floors.items()}
        while probes:
            found = self.ends_at(probes, "searching the window's largest timestamp")
            ceilings.update({tp: time for tp, time in probes.items() if found[tp] >= ends[tp]})
            probes = {tp: 2 * time for tp, time in probes.items() if found[tp] < ends[tp]}
        return ceilings

    def largest_before(self, ends: Mapping[TopicPartition, int], floors: Mapping[TopicPartition, int],
                       ceilings: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the largest timestamp in ``[start, ends[tp])``, known to lie in
        ``[floors[tp], ceilings[tp])``: a binary search, all partitions in the same rounds."""
        low, high = dict(floors), dict(ceilings)  # first(low) < end <= first(high)
        while True:
            probes = {tp: (low[tp] + high[tp]) // 2 for tp in low if high[tp] - low[tp] > 1}
            if not probes:
                return low
            found = self.ends_at(probes, "searching the window's largest timestamp")
            for tp, time in probes.items():
                if found[tp] < ends[tp]:
                    low[tp] = time
                else:
                    high[tp] = time
