"""Where to cut the next micro-batch, from the brokers' time index: the driver reads no record.

Why this exists
---------------
The fetch path (:mod:`kafkasync_source.driver.fetcher` + :func:`kafkasync_source.planning.planner.plan_batch`)
learns every record's timestamp by fetching it on the driver, so the brokers send each record
twice and one Python consumer caps the query. The planner needs three facts per partition,
and a broker answers each with ListOffsets, in one request per leader, without a record
leaving it:

* the readable end: ``latest`` — the high watermark, or the last stable offset under
  read_committed (``Partition.fetchOffsetForTimestamp``: ``lastFetchableOffset``);
* the largest timestamp and its offset: ``max_timestamp`` (KIP-734, Kafka >= 3.0);
* the first offset whose timestamp is >= t: ``for_timestamp(t)``. ``UnifiedLog.
  fetchOffsetByTimestamp`` takes the first segment whose largest timestamp is >= t,
  ``LogSegment.findOffsetByTimestamp`` looks t up in its time index — whose entries say where
  the segment's *running maximum* timestamp rose to a value — and ``FileRecords.
  searchForTimestamp`` scans from there for the first record with timestamp >= t. No record
  before that entry can be >= t (the running maximum was below it), so the answer is the first
  such record in offset order, for out-of-order logs too. ``ReplicaManager.fetchOffset``
  answers -1 when that record lies at or past the readable end.

With ``first(t)`` for that answer, the fetch path's cut at stream time ``T`` (each partition
up to, not including, its first record newer than ``T``) is ``first(T + 1)``, and a
partition's largest timestamp in ``[start, end)`` is the largest ``t`` with
``first(t) < end``. Both only hold where ``first(t) >= start``: the answer searches the
whole log, not from the query's position.

When the index cannot answer (and the caller falls back to the fetch path)
-------------------------------------------------------------------------
:class:`IndexCannotAnswer` names the partition and why, for:

* no largest timestamp although the window holds records: the broker answered -1 (the
  embedded librdkafka cluster always does; a broker without KIP-734; an open transaction
  holding the largest record past the last stable offset);
* the largest-timestamp record lies before the query's position: the window's own largest
  timestamp is then unknown;
* ``first(t) < start`` for a time the cut needs: a record before the position is newer than
  ``t``, so the index cannot tell which records of the window are at or below ``t`` (an
  out-of-order partition behind its own past, or one whose log before the query's start
  holds newer records);
* a rate limit whose search must go below the stream time already reached.

Where this path differs from the fetch path, on purpose
--------------------------------------------------------
* It counts *offsets* where the fetch path counts records: ``maxOffsetsPerTrigger`` caps
  offsets, as ``format("kafka")`` does; transaction markers, aborted records, compaction gaps
  and (on the record-probe path) records without a time (``onInvalid=skip``) count. Counting
  records would need every entry of the range read: the index answers by time, and a probe
  reads one record a step. A capped batch is then (with distinct times) the fetch path's
  capped at the number of records it holds, never more records than the cap
  (tests/test_index_planner.py, tests/test_paths_differential.py).
* ``lateRecordsTotal`` is not counted (the driver sees no record); the executors see every
  record (``includePartitionTime``).

The partition time a batch hands on is the fetch path's: the largest time among the records
it holds (KIP-472), also for a partition cut inside its window, where the cut's level (``T``,
or a rate limit's) lies above the records taken; the largest one taken is searched for from
the cut (:meth:`_Index.largest_taken`). So is the batch's stream time, the base of the next
``maxEventTimePerTrigger`` step (tests/test_paths_differential.py, batch after batch).

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
*readable* one is searched for (:meth:`_Index.readable_maxima`), so that a transactional topic
written in time order — a live stream, the markers among its records — stays on the index.
The searches in between need no check: ``first(t)`` over all entries is monotone
in ``t`` as it is over records, and the checked result of a search is exact when the entry
it ends on is a readable record.

The function is pure: the index is asked through the ``first_offsets`` callable (a model
broker in tests, ListOffsets in :mod:`kafkasync_source.driver.time_index`); no clock, no sleep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np

from kafkasync_source.planning.planner import (
    NEVER_WAIT,
    NO_LIMITS,
    NO_TIMESTAMP,
    BatchLimits,
    Cut,
    PartitionDecision,
    PartitionStatus,
    TopicPartition,
    batch_can_proceed,
    check_plan_arguments,
    settle_idle_partitions,
)
from kafkasync_source.planning.rate_limit import proportional_ends

__all__ = ["FirstOffsets", "FirstRecords", "IndexCannotAnswer", "IndexedPartition", "plan_from_index"]

FirstOffsets = Callable[[Mapping[TopicPartition, int]], Mapping[TopicPartition, Optional[tuple[int, int]]]]
"""ListOffsets by time for several partitions at once: per partition, the first offset whose
record timestamp is >= the given time and that record's timestamp, or None where no such
record lies below the readable end. One call is one round of requests (one per leader)."""

FirstRecords = Callable[[Mapping[TopicPartition, tuple[int, int]]],
                        Mapping[TopicPartition, Optional[tuple[int, int]]]]
"""Per partition ``(offset, end)``: the first record a consumer of the query's isolation level
reads in ``[offset, end)`` — ``(offset, timestamp)`` — or None where it reads none there
(only transaction markers or aborted records). One call is one round of fetches."""


@dataclass(frozen=True)
class IndexedPartition:
    """What the brokers said of one partition at planning time."""

    start: int
    """Next offset to emit: this batch's start."""
    end_offset: Optional[int]
    """Readable end (ListOffsets latest); None while unknown."""
    largest: Optional[tuple[int, int]]
    """(timestamp, offset) of the log's largest timestamp (ListOffsets max_timestamp), None
    when the broker gave none."""
    partition_time: int = NO_TIMESTAMP
    """From the start offset (KIP-472), as on the fetch path."""
    stop_offset: Optional[int] = None
    """Bounded run (Trigger.AvailableNow): offsets at or after it are not part of the query."""
    holds_records: bool = True
    """False where the window up to the readable end holds no record that takes part in
    synchronization, only records whose time is SKIPPED (``eventTime.onInvalid=skip``:
    heartbeats) and offsets no consumer reads. As on the fetch path, where the driver buffers
    no such record, the partition counts as empty: it idles, and a batch moves it over them."""


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
class _Window:
    """Offsets ``[start, end)`` of one partition that this batch may take."""

    start: int
    end: int
    """Exclusive; the readable end capped by the stop offset (== start when unknown)."""
    lag: Optional[int]
    status: PartitionStatus
    exhausted: bool
    """Bounded run: the window reaches the stop offset, nothing more will come."""


def _window(state: IndexedPartition) -> _Window:
    """The window and its status, by the fetch path's rules (``planner._buffer``) for a
    partition whose every record up to the readable end is known."""
    end = state.end_offset
    limit = None if state.stop_offset is None else max(state.stop_offset, state.start)
    if end is not None and limit is not None:
        end = min(end, limit)
    stopped = limit is not None and end is not None and end >= limit
    if end is not None and end > state.start and state.holds_records:
        status = PartitionStatus.READY
    elif stopped and not state.holds_records:
        status = PartitionStatus.FINISHED
    elif limit is not None and state.start >= limit:
        status = PartitionStatus.FINISHED
    elif end is None:
        status = PartitionStatus.WAITING_FOR_END_OFFSET
    else:
        status = PartitionStatus.IDLE_WAITING
    return _Window(
        start=state.start,
        end=state.start if end is None else max(end, state.start),
        lag=None if end is None else 0,
        status=status,
        exhausted=stopped,
    )


class _Index:
    """The ``first_offsets`` answers seen from the windows, with the cases the index cannot
    answer collected instead of guessed."""

    def __init__(self, first_offsets: FirstOffsets, windows: Mapping[TopicPartition, _Window],
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


def _window_maxima(
    states: Mapping[TopicPartition, IndexedPartition],
    windows: Mapping[TopicPartition, _Window],
    index: _Index,
) -> dict[TopicPartition, tuple[int, int]]:
    """The largest timestamp in each ready window and the offset of its first entry: the
    log's largest where its record lies in the window; else searched for, above the partition
    time (the log's largest record arrived after the readable end was taken, lies past the
    stop offset, or past the last stable offset, where the broker answers none)."""
    maxima: dict[TopicPartition, tuple[int, int]] = {}
    searched: dict[TopicPartition, Optional[int]] = {}  # the log's largest, when known
    for tp, window in windows.items():
        if window.status is not PartitionStatus.READY:
            continue
        largest = states[tp].largest
        if largest is not None and 0 <= largest[0] and largest[1] < window.start:
            raise IndexCannotAnswer({tp: f"its largest timestamp ({largest[0]}) is at offset "
                                         f"{largest[1]}, before the position {window.start}"})
        if largest is not None and 0 <= largest[0] and largest[1] < window.end:
            maxima[tp] = largest
        else:
            searched[tp] = largest[0] if largest is not None and largest[0] >= 0 else None
    if not searched:
        return index.readable_maxima(maxima, {tp: windows[tp].end for tp in maxima})
    # first(floor) must lie in the window: a record there newer than the partition time.
    floors = {tp: states[tp].partition_time + 1 for tp in searched}
    found = index.ends_at(floors, "the partition time")
    older = {tp: f"no record of offsets [{windows[tp].start}, {windows[tp].end}) is newer than "
                 f"its partition time {states[tp].partition_time} (or the broker does not "
                 "answer timestamp look-ups)"
             for tp in searched if found[tp] >= windows[tp].end}
    if older:
        raise IndexCannotAnswer(older)
    ends = {tp: windows[tp].end for tp in searched}
    ceilings = {tp: largest + 1 for tp, largest in searched.items() if largest is not None}
    unbounded = [tp for tp in searched if tp not in ceilings]
    if unbounded:
        ceilings.update(index.gallop_above({tp: floors[tp] for tp in unbounded}, ends))
        floors.update({tp: max(floors[tp], (ceilings[tp] - 1) // 2) for tp in unbounded})
    maxima.update(index.entries_at(index.largest_before(ends, floors, ceilings)))
    return index.readable_maxima(maxima, {tp: windows[tp].end for tp in maxima})


def _step_base(ready: list[TopicPartition], windows: Mapping[TopicPartition, _Window],
               limits: BatchLimits, index: _Index) -> int:
    """``maxEventTimePerTrigger``'s base, as the fetch path's: the previous stream time if a
    head record lies within one step of it, else the oldest head record's timestamp. The head
    records are read, not looked up: a window's first entry can be a transaction marker."""
    assert limits.max_stream_time_step_ms is not None
    reach = limits.previous_stream_time + limits.max_stream_time_step_ms
    heads = [head[1] for head in index.heads(ready).values() if head is not None]
    if not heads or min(heads) <= reach:
        return limits.previous_stream_time
    return min(heads)


class _LevelCounts:
    """Per ready partition, the end of its offsets at or below a time level — ``min(first(level
    + 1), cap)`` — at the search's two bounds, and what those answers imply in between, so
    that a probe asks only the partitions whose end it can change.

    ``first(t) = o`` with timestamp ``ts`` means no record before ``o`` is >= t, so ``first(t')
    = o`` for every ``t'`` in ``[t, ts]``; and where ``ts < t'`` and ``first(t'') = o + 1`` for
    some ``t'' >= t'``, then ``first(t') = o + 1``. Everything is a NumPy array over the
    partitions in topic-partition order: the Python work per probe is per partition asked,
    not per partition of the query."""

    def __init__(self, ready: list[TopicPartition], starts: np.ndarray, caps: np.ndarray,
                 index: "_Index") -> None:
        self._ready, self._starts, self._caps, self._index = ready, starts, caps, index
        self.low_ends = starts.copy()
        self.low_next = np.zeros(len(ready), dtype=np.int64)
        """A lower bound on the timestamp of the record at ``low_ends`` (where below the cap)."""
        self.low_exact = np.zeros(len(ready), dtype=bool)
        self.high_ends = caps.copy()
        self.high_next = np.zeros(len(ready), dtype=np.int64)
        self.high_exact = np.zeros(len(ready), dtype=bool)

    def probe(self, level: int, *, everyone: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ends at ``level``, with the timestamps of the records there (a lower bound where
        not ``exact``): from the bounds where they tell, from the brokers for the rest."""
        ends = self.low_ends.copy()
        following, exact = self.low_next.copy(), self.low_exact.copy()
        if everyone:
            unknown = np.arange(len(self._ready))
        else:
            after_low = (self.low_ends < self.high_ends) & (self.low_next <= level)
            next_is_high = after_low & self.low_exact & (self.low_ends + 1 == self.high_ends)
            ends[next_is_high] = self.high_ends[next_is_high]
            following[next_is_high] = self.high_next[next_is_high]
            exact[next_is_high] = self.high_exact[next_is_high]
            unknown = np.flatnonzero(after_low & ~next_is_high)
        if len(unknown):
            asked = [self._ready[i] for i in unknown]
            found = self._index.ends_at(dict.fromkeys(asked, level + 1), "maxOffsetsPerTrigger")
            timestamps = self._index.found_timestamps
            ends[unknown] = np.minimum([found[tp] for tp in asked], self._caps[unknown])
            known = [tp in timestamps for tp in asked]
            following[unknown] = [timestamps.get(tp, level + 1) for tp in asked]
            exact[unknown] = known
        # The record at first(level + 1) is newer than the level, whatever else is known.
        np.maximum(following, level + 1, out=following, where=~exact)
        return ends, following, exact

    def raise_low(self, ends: np.ndarray, following: np.ndarray, exact: np.ndarray) -> None:
        self.low_ends, self.low_next, self.low_exact = ends, following, exact

    def lower_high(self, ends: np.ndarray, following: np.ndarray, exact: np.ndarray) -> None:
        self.high_ends, self.high_next, self.high_exact = ends, following, exact

    def constant_until(self, level: int) -> int:
        """The largest level up to which the counts stay as at ``level`` (the low bound):
        each partition's next record lies above it."""
        growing = self.low_ends < self.high_ends
        return int(self.low_next[growing].min()) - 1 if growing.any() else level


def _rate_limited(
    ends: dict[TopicPartition, int], windows: Mapping[TopicPartition, _Window],
    bound: int, limits: BatchLimits, index: _Index,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, tuple[int, int]]]:
    """The first ``max_records`` offsets in Kafka Streams' processing order: a search for the
    largest time level whose offsets fit, then the next level's offsets in topic-partition
    order (the fetch path's tie-breaking). Returns the ends, each partition's level, and the
    cuts for :meth:`_Index.check`."""
    assert limits.max_records is not None
    ready = sorted(ends)
    starts = np.array([windows[tp].start for tp in ready], dtype=np.int64)
    counts = _LevelCounts(ready, starts, np.array([ends[tp] for tp in ready], dtype=np.int64), index)
    low = limits.previous_stream_time
    at_low = counts.probe(low, everyone=True)
    fitting = int((at_low[0] - starts).sum())
    if fitting > limits.max_records:
        raise IndexCannotAnswer({tp: f"more than maxOffsetsPerTrigger={limits.max_records} "
                                     f"offsets at or below the stream time {low} remain"
                                 for tp, end, start in zip(ready, at_low[0], starts) if end > start})
    counts.raise_low(*at_low)
    high = bound
    over = int((counts.high_ends - starts).sum())
    bisect = False
    while True:
        # No window holds a record between the low level and the oldest of the records just
        # above it, so the counts stay the same up to there: the search moves to the data.
        low = max(low, min(counts.constant_until(low), high - 1))
        if high - low <= 1:
            break
        # Interpolation on the offset counts finds the level in a few rounds where event time
        # is spread evenly over offsets; alternating with bisection keeps the worst case at
        # twice log2(span) rounds (one ListOffsets round each, for the partitions whose end
        # the bounds leave open).
        if bisect or over <= fitting:
            middle = (low + high) // 2
        else:
            share = (limits.max_records - fitting) / (over - fitting)
            middle = min(high - 1, max(low + 1, low + int(share * (high - low))))
        bisect = not bisect
        at_middle = counts.probe(middle)
        total = int((at_middle[0] - starts).sum())
        if total <= limits.max_records:
            low, fitting = middle, total
            counts.raise_low(*at_middle)
        else:
            high, over = middle, total
            counts.lower_high(*at_middle)
    fit = counts.low_ends - starts
    room = counts.high_ends - counts.low_ends
    before = np.cumsum(room) - room
    extra = np.clip(limits.max_records - fitting - before, 0, room)
    limited = {tp: int(end) for tp, end in zip(ready, starts + fit + extra)}
    levels = {tp: high if more else low for tp, more in zip(ready, extra > 0)}
    # Cut at the first entry above the level, or part of the way through the level's own
    # entries: the next readable record must be above, or at, the level.
    checks = {tp: (limited[tp], levels[tp] + (0 if more else 1)) for tp, more in zip(ready, extra > 0)}
    return limited, levels, checks


def plan_from_index(
    partitions: Mapping[TopicPartition, IndexedPartition],
    first_offsets: FirstOffsets,
    first_records: FirstRecords,
    *,
    now_ms: int,
    max_task_idle_ms: int,
    idle_since: Mapping[TopicPartition, int],
    limits: BatchLimits = NO_LIMITS,
) -> Cut:
    """The cut :func:`kafkasync_source.planning.planner.plan_batch` makes over every record up to the
    readable ends, computed from ListOffsets answers (see the module docstring).

    Raises:
        IndexCannotAnswer: where only reading records can give the exact cut.
    """
    check_plan_arguments(max_task_idle_ms, limits)
    now_ms = int(now_ms)
    windows = {tp: _window(state) for tp, state in partitions.items()}
    statuses, deadlines, next_idle_since = settle_idle_partitions(
        {tp: window.status for tp, window in windows.items()},
        now_ms=now_ms, max_task_idle_ms=max_task_idle_ms, idle_since=idle_since,
    )
    index = _Index(first_offsets, windows, first_records)
    ends: dict[TopicPartition, int] = {}
    times: dict[TopicPartition, int] = {}  # the partition time each contributing one reaches
    enforced = False
    if max_task_idle_ms == NEVER_WAIT:
        if not any(status is PartitionStatus.WAITING_FOR_END_OFFSET for status in statuses.values()):
            untils = {tp: window.end for tp, window in windows.items()}
            starts = {tp: window.start for tp, window in windows.items()}
            ends = (untils if limits.max_records is None
                    else proportional_ends(limits.max_records, starts, untils))
            times = _times_reached(partitions, windows, ends, index)
    elif batch_can_proceed(statuses):
        ready = [tp for tp, status in statuses.items() if status is PartitionStatus.READY]
        enforced = any(status is PartitionStatus.IDLE for status in statuses.values())
        entries = _window_maxima(partitions, windows, index)
        maxima = {tp: largest for tp, (largest, _) in entries.items()}
        # Which partitions bound stream time: planner._bounds_stream_time, for windows known
        # to their end (lag 0): with max.task.idle.ms=0 an enforced batch bounds on none.
        enforcing_at_once = enforced and max_task_idle_ms == 0
        bounds = [maxima[tp] for tp in ready if not windows[tp].exhausted and not enforcing_at_once]
        if limits.max_stream_time_step_ms is not None:
            base = _step_base(ready, windows, limits, index)
            bounds.append(base + limits.max_stream_time_step_ms)
        bound = min(bounds) if bounds else None
        cut = [tp for tp in ready if bound is not None and maxima[tp] > bound]
        ends = {tp: windows[tp].end for tp in ready}
        checks: dict[TopicPartition, tuple[int, int]] = {}
        if bound is not None and cut:
            ends.update(index.ends_at({tp: bound + 1 for tp in cut}, "the stream time"))
            checks = {tp: (ends[tp], bound + 1) for tp in cut}
        # A partition whose end moved below its window's is a cut one: no record it gives is
        # above the level it was cut at (the bound, or a rate limit's).
        levels = {tp: bound for tp in ready if bound is not None}
        if limits.max_records is not None and sum(ends[tp] - windows[tp].start for tp in ready) > limits.max_records:
            top = bound if bound is not None else max(maxima[tp] for tp in ready)
            ends, levels, checks = _rate_limited(ends, windows, top, limits, index)
        inside = [tp for tp in ready if windows[tp].start < ends[tp] < windows[tp].end]
        # The last records before each cut first: the records a probe reads come with those
        # after them in the batch the broker sends whole, so the record at the cut, which the
        # check reads, is then known. In the other order each cut cost its producer batch twice
        # (the planning runner's fetches at offsets X and then X - 1, Kafka 4.3.1's debug log).
        taken = index.largest_taken({tp: ends[tp] for tp in inside}, {tp: levels[tp] + 1 for tp in inside})
        # Each largest timestamp bounds stream time, or is a partition time where the
        # partition is read to its end: it must be a readable record's.
        index.check(checks, {tp: (offset, largest, windows[tp].end) for tp, (largest, offset) in entries.items()})
        times = {tp: maxima[tp] for tp in ready if ends[tp] == windows[tp].end}
        times.update({tp: largest for tp, largest in taken.items() if largest is not None})
        ends.update({tp: window.end for tp, window in windows.items() if tp not in ends})
    # A window of records without a time is moved over by a batch, and makes none of its own
    # (planner.plan_batch: a batch needs records), unless nothing waits (NEVER_WAIT).
    if not any(end > windows[tp].start for tp, end in ends.items()
               if partitions[tp].holds_records or max_task_idle_ms == NEVER_WAIT):
        ends, times, enforced = {}, {}, False

    decisions: dict[TopicPartition, PartitionDecision] = {}
    stream_time: Optional[int] = None
    for tp, state in partitions.items():
        end = ends.get(tp, state.start)
        records = end - state.start if state.holds_records else 0
        partition_time = state.partition_time
        if records and tp in times:
            partition_time = max(partition_time, times[tp])
            stream_time = times[tp] if stream_time is None else max(stream_time, times[tp])
        decisions[tp] = PartitionDecision(
            status=statuses[tp], end=end, records=records, lag=windows[tp].lag,
            idle_deadline=deadlines.get(tp), partition_time=partition_time,
        )
    return Cut(
        partitions=decisions,
        stream_time=stream_time,
        enforced=enforced,
        idle_since=next_idle_since,
        # Only windows without a record that takes part move (NEVER_WAIT): a batch all the
        # same, as planner.plan_batch runs one over such gaps.
        moves_over_gap=stream_time is None and any(end > windows[tp].start for tp, end in ends.items()),
    )


def _times_reached(
    states: Mapping[TopicPartition, IndexedPartition], windows: Mapping[TopicPartition, _Window],
    ends: Mapping[TopicPartition, int], index: _Index,
) -> dict[TopicPartition, int]:
    """``max.task.idle.ms=-1``: the largest timestamp each partition's range reaches, for its
    partition time and the batch's stream time (the fetch path knows it from the records).
    The ends need no timestamp, but a partition time must not be silently wrong: where the
    index cannot tell it, the fetch path plans the batch."""
    taking = {tp: end for tp, end in ends.items() if end > windows[tp].start}
    entries = _window_maxima(states, {tp: windows[tp] for tp in taking}, index)
    # A window of records without a time (heartbeats) or of markers only has no largest time.
    partial = {tp: end for tp, end in taking.items() if tp in entries and end < windows[tp].end}
    index.check({}, {tp: (offset, largest, windows[tp].end) for tp, (largest, offset) in entries.items()
                     if tp not in partial})
    times = {tp: largest for tp, (largest, _) in entries.items() if tp not in partial}
    taken = index.largest_taken(partial, {tp: entries[tp][0] + 1 for tp in partial})
    times.update({tp: largest for tp, largest in taken.items() if largest is not None})
    return times
