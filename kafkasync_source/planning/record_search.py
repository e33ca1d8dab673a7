"""The time index's answers from records read at chosen offsets, where times do not go backwards.

Why this exists
---------------
With ``eventTime.*`` the brokers' time index cannot help (it knows Kafka timestamps only), and
the fetch path reads every record on the driver before the executors read it again. What
:func:`~kafkasync_source.planning.index_planner.plan_from_index` needs of a partition's window
``[start, end)`` is its largest time and ``first(t)``, the first record whose time is >= t. When
the user promises ``eventTime.order=nonDecreasing`` — no record's time is below an earlier
record's of its partition — both follow from a few records:

* the largest time is the last record's: read the record before ``end`` (going back 1, 4, 16 ...
  offsets past transaction markers, aborted records and records without a time, then
  bisecting forward);
* ``first(t)`` is a binary search over offsets: the first record at or after the middle answers
  on which side the first record >= t lies.

Each round asks every partition at once (one :data:`FirstRecords` call: one fetch per leader),
``O(log n)`` rounds, and every record read is remembered (in :class:`~kafkasync_source.planning.
record_facts.RecordFacts`, which forgets them where a log moves back and drops them below the
query's position): under the promise the records read so far, in offset order, are in time
order too, so they narrow every later search (of this trigger's rate-limit levels, and of later
triggers: the log is append-only). So are the records
after each one read, where the reader knows them (:data:`KnownFirstRecord`: the broker sends
whole record batches for each read, and the probe keeps up to 16 records after its answer,
up to the end of the range it asked): a search reads just below where it expects its answer,
and a partition whose backlog fits in what came with one read needs no further round
(benchmarks/trigger_cost.py's capped first trigger at 4,096 partitions: 7 rounds, 3 with
those records).

Records without a time of their own
-----------------------------------
A record whose time is :data:`~kafkasync_source.event_time.SKIPPED` takes no part in
synchronization; the probe reads past it (:class:`~kafkasync_source.driver.record_probe.RecordProbe`),
as the fetcher does not buffer it. One that takes its partition's time (no Kafka timestamp,
``eventTime.onInvalid=partitionTime``) has a time only its predecessors tell: the search raises
:class:`~kafkasync_source.planning.index_planner.IndexCannotAnswer` and the fetch path, which
reads them, plans the batch.

A broken promise
----------------
A record read here whose time is below a record's before it (or below the partition time the
batch starts from) breaks the promise: :func:`~kafkasync_source.event_time.broken_order`
names both records, and the query fails. Records the driver does not read are checked by the
executors, which read them all (:mod:`kafkasync_source.executor.range_reader`).

Pure: records are asked through the ``first_records`` callable; no clock, no client.
"""

from __future__ import annotations

import bisect
from typing import Callable, Mapping, Optional

from kafkasync_source.event_time import broken_order
from kafkasync_source.planning.index_planner import FirstRecords, IndexCannotAnswer
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.planning.record_facts import InOrder, RecordFacts

KnownFirstRecord = Callable[[TopicPartition, int], Optional[tuple[int, int]]]
"""The first record with a time at or after an offset, ``(offset, time)``, where the reader
knows it without reading; None where it does not."""

__all__ = ["KnownFirstRecord", "OrderedRecords"]

_Record = Optional[tuple[int, int]]
"""A record read, ``(offset, time)``, or None."""

_MOST_FOLLOWING = 64
"""Records after an answer taken from what the reader knows (it keeps fewer: 16 a read)."""


def _search(known: InOrder, time: int, start: int, end: int, partition_time: int) -> "_Search | _Record":
    """The search for the first record >= time in ``[start, end)``, narrowed by the records
    known: the last one below the time, the first one at or above it. Where nothing lies
    between those two, the answer itself (a record, or None: none), with no search: a
    trigger asked again from the same start knows every answer (4,096 partitions, capped: 9
    levels of the rate limit, each asking most partitions)."""
    offsets, times = known.offsets, known.times
    first = bisect.bisect_left(offsets, start)
    last = bisect.bisect_left(offsets, end)
    at = bisect.bisect_left(times, time, first, last)
    low = offsets[at - 1] + 1 if at > first else start
    high = offsets[at] if at < last else end
    if low >= high:
        return (offsets[at], times[at]) if at < last else None
    below = (offsets[at - 1], times[at - 1]) if at > first else (
        (start - 1, partition_time) if 0 <= partition_time < time else None)
    return _Search(time, low, high, below, (offsets[at], times[at]) if at < last else None)


class _Search:
    """One partition's search for the first record >= ``time``: it lies in ``[low, high)`` or
    is ``found``. Each step reads the first record at a guess: just below where its time is
    expected (interpolated between the record known below and ``found``: a backfill's
    times rise about evenly, so a few steps land there, and the record the reader sends
    after it is the answer), or, after a guess that did not halve the range, the middle (so
    no search takes more than twice the rounds of a bisection, plus one). While no record
    below the time is known (a query's first trigger knows no partition time), the guess
    is the range's start: its record is the answer, or the anchor the interpolation needs
    (without it, the first capped trigger of benchmarks/trigger_cost.py bisected down to
    the windows' first records, 5 rounds)."""

    __slots__ = ("time", "low", "high", "below", "found", "interpolate")

    def __init__(self, time: int, low: int, high: int, below: Optional[tuple[int, int]],
                 found: Optional[tuple[int, int]]) -> None:
        self.time, self.low, self.high, self.below, self.found = time, low, high, below, found
        self.interpolate = True

    @property
    def open(self) -> bool:
        return self.low < self.high

    def guess(self) -> int:
        if self.below is None:
            return self.low
        middle = (self.low + self.high) // 2
        if not (self.interpolate and self.found is not None):
            return middle
        # Just below where the first record >= time is expected (the last offset whose
        # interpolated time is below it): read there, the record after it is the answer.
        (low_offset, low_time), (high_offset, high_time) = self.below, self.found
        rise = (self.time - low_time) * (high_offset - low_offset)
        expected = low_offset + (rise - 1) // max(high_time - low_time, 1)
        return min(max(expected, self.low), self.high - 1)

    def learn(self, at: int, record: _Record, following: tuple[_Record, ...] = ()) -> None:
        """What the first record at or after ``at`` (None: none before ``high``) says, and
        ``following``, where known, the records after it, each the first one after the one
        before (None: no record before ``high``). The read that found the first anchor below
        the time is no interpolation that failed, and a record with those after it is one
        step."""
        span, anchored = self.high - self.low, self.below is not None
        self._narrow(at, record)
        for after in following:
            if not (self.open and record is not None and record[1] < self.time):
                break
            self._narrow(record[0] + 1, after)
            record = after
        self.interpolate = not anchored or 2 * (self.high - self.low) <= span

    def _narrow(self, at: int, record: _Record) -> None:
        if record is not None and record[1] < self.time:
            self.low, self.below = record[0] + 1, record  # the first >= time lies after it
        else:  # none in [at, high) is older: the first >= time is this record or before it
            self.high = at
            if record is not None:
                self.found = record


class OrderedRecords:
    """``largest`` and ``first(t)`` of partitions whose times do not go backwards, from the
    records ``first_records`` reads (see the module docstring)."""

    def __init__(self, first_records: FirstRecords, known_first_record: Optional[KnownFirstRecord] = None,
                 facts: Optional[RecordFacts] = None) -> None:
        """``known_first_record``: the first record at or after an offset where the reader
        learnt it without being asked (the records after an answer, sent with it); each
        record read is followed by those, so a search that read just below its target ends
        without another round. ``facts``: where the records read and each window's last
        record are kept — the reader's, so that one ``forget`` reaches all it knows."""
        self._first_records = first_records
        self._known_first_record = known_first_record
        self._facts = RecordFacts() if facts is None else facts
        self.rounds = 0
        """Rounds of record reads since the query started (each: one fetch per leader)."""

    def last_records(self, windows: Mapping[TopicPartition, tuple[int, int]],
                     partition_times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """Per partition window ``(start, end)``, its last record with a time, as ``(time,
        offset)``, or None where it holds none. Read first: the record before the end. A
        partition whose end has not moved since the last call answers as then, unread (every
        trigger asks for every partition: a backfill's next batch, Spark asking again)."""
        last: dict[TopicPartition, tuple[int, int]] = {}  # offset, time
        empty_from = {}
        for tp, (start, end) in windows.items():
            before = self._facts.last_record(tp)
            if before is not None and before[0] == end and (
                    before[2][0] >= start if before[2] is not None else before[1] <= start):
                if before[2] is not None:
                    last[tp] = before[2]
            elif end > start:
                empty_from[tp] = end
        steps = dict.fromkeys(empty_from, 1)
        while steps:  # back from the end until a record is found: 1, 4, 16 ... offsets
            asking = {tp: max(windows[tp][0], empty_from[tp] - step) for tp, step in steps.items()}
            found, _ = self._read({tp: (at, empty_from[tp]) for tp, at in asking.items()}, partition_times)
            for tp, at in asking.items():
                record = found.get(tp)
                if record is not None:
                    last[tp] = record
                    del steps[tp]
                else:
                    empty_from[tp] = at
                    if at > windows[tp][0]:
                        steps[tp] *= 4
                    else:
                        del steps[tp]
        while True:  # then forward: the last record lies in [found, empty_from)
            asking = {tp: (last[tp][0] + 1 + end) // 2 for tp, end in empty_from.items()
                      if tp in last and last[tp][0] + 1 < end}
            if not asking:
                break
            found, _ = self._read({tp: (at, empty_from[tp]) for tp, at in asking.items()}, partition_times)
            for tp, at in asking.items():
                record = found.get(tp)
                if record is not None:
                    last[tp] = record
                else:
                    empty_from[tp] = at
        for tp, (start, end) in windows.items():
            self._facts.remember_last(tp, end, start, last.get(tp))
        return {tp: (last[tp][1], last[tp][0]) if tp in last else None for tp in windows}

    def first_at_or_above(self, times: Mapping[TopicPartition, int],
                          windows: Mapping[TopicPartition, tuple[int, int]],
                          partition_times: Mapping[TopicPartition, int]
                          ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """Per partition, the first record of its window whose time is >= the time, as
        ``(offset, time)``; None where there is none: :data:`~kafkasync_source.planning.
        index_planner.FirstOffsets` over the window (never an answer before its start)."""
        answers: dict[TopicPartition, _Record] = {}
        searches: dict[TopicPartition, _Search] = {}
        for tp, time in times.items():
            search = _search(self._facts.in_order(tp), time, *windows[tp], partition_times.get(tp, -1))
            if isinstance(search, _Search):
                searches[tp] = search
            else:
                answers[tp] = search
        while True:
            asking = {tp: search.guess() for tp, search in searches.items() if search.open}
            if not asking:
                break
            found, following = self._read({tp: (at, searches[tp].high) for tp, at in asking.items()},
                                          partition_times)
            for tp, at in asking.items():
                searches[tp].learn(at, found.get(tp), following.get(tp, ()))
        answers.update((tp, search.found) for tp, search in searches.items())
        return answers

    def _read(self, ranges: Mapping[TopicPartition, tuple[int, int]], partition_times: Mapping[TopicPartition, int]
              ) -> tuple[dict[TopicPartition, _Record], dict[TopicPartition, tuple[_Record, ...]]]:
        """One round: the first record with a time in each ``[offset, end)``, remembered and
        checked against the promise; and per partition whose record's next ones the reader
        knows, those (:meth:`_follow`)."""
        self.rounds += 1
        found = self._first_records(ranges)
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        following: dict[TopicPartition, tuple[_Record, ...]] = {}
        untimed = {}
        for tp, (_, end) in ranges.items():
            record = found.get(tp)
            if record is None or record[0] >= end:
                answers[tp] = None
                continue
            if record[1] < 0:
                untimed[tp] = (f"the record at offset {record[0]} takes its time from the records "
                               "before it (no Kafka timestamp, or eventTime.onInvalid=partitionTime)")
                continue
            if record[1] < partition_times.get(tp, -1):
                raise broken_order(tp.topic, tp.partition, record[0], record[1],
                                   f"the partition's time {partition_times[tp]} before the batch")
            self._facts.in_order(tp).add(tp, record[0], record[1])
            answers[tp] = record
            if self._known_first_record is not None:
                following[tp] = self._follow(tp, record[0], end)
        if untimed:
            raise IndexCannotAnswer(untimed)
        return answers, following

    def _follow(self, tp: TopicPartition, offset: int, end: int) -> tuple[_Record, ...]:
        """The records after the answer at ``offset`` that the reader knows, each the first
        after the one before: remembered (and checked against the promise), for the search
        that asked — ending in None where the next lies past the range's end. They end at a
        record that takes its partition's time (left unused)."""
        assert self._known_first_record is not None
        known, records = self._facts.in_order(tp), list[_Record]()
        record = self._known_first_record(tp, offset + 1)
        while record is not None and record[1] >= 0 and len(records) < _MOST_FOLLOWING:
            if record[0] >= end:
                records.append(None)
                break
            known.add(tp, record[0], record[1])
            records.append(record)
            record = self._known_first_record(tp, record[0] + 1)
        return tuple(records)
