"""What the driver learnt by reading records at chosen offsets, kept only while it can be used.

Why one owner
-------------
An index path reads a few records per partition and trigger (:class:`~kafkasync_source.driver.
record_probe.RecordProbe`) and remembers what they said, so that the next round or trigger does
not read them again:

* **answers**: the first record a consumer is handed at or after an offset, ``(offset, time)``;
* **nothing until**: no record to read in ``[offset, end)`` (transaction markers and aborted
  records only);
* **followers**: the records the broker sent after the partition's answers (it sends whole
  record batches), each the first record after the one before it: one chain per partition, which
  the followers of a later answer extend where they touch it (a capped backfill's cut moves a few
  records a trigger, inside the batch an earlier probe fetched whole);
* **in order** (``eventTime.order=nonDecreasing``): every record read, in offset order and so in
  time order, which narrows the searches (:mod:`kafkasync_source.planning.record_search`) and
  checks the promise;
* **the last record** of the window the previous trigger asked about.

Each is true only while the log it was read from exists. A log moves back — truncated below
its end, records deleted (``DeleteRecords``, retention), the topic deleted and recreated under
its name — and from then on a remembered answer speaks of records that are gone: a window is
thought empty and its partition idles, a cut lands at a time only the old log had, or a record
of the new log "breaks" an order it never shared. So every fact lives here, whoever notices a
move back calls :meth:`RecordFacts.forget`, and nothing else keeps a copy.

Bounds
------
A fact below a partition's position can never be asked again: the planner asks about windows
that start at the batch's start, and a position only moves forward (a move back is a
:meth:`~RecordFacts.forget`). :meth:`RecordFacts.pass_positions` drops them at every trigger, and
every partition the query no longer reads. What stays is bounded per partition —
:data:`MOST_ANSWERS` answers and :data:`MOST_NOTHING_UNTIL` empty ranges (least recently used
first out, O(1) each), one chain of at most :data:`MOST_FOLLOWERS` followers,
:data:`MOST_IN_ORDER` records in order, one last record — so the driver's memory is the
partitions times a constant, whatever the query's age. A live stream keeps a few facts per
partition (tests/test_record_facts.py: 3 to 7); a capped backfill, whose windows hold the
records its searches read until the position passes them, can reach the bounds (about 100 KB
a partition).

Pure: no clock, no client.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Mapping, Optional

from kafkasync_source.event_time import broken_order
from kafkasync_source.planning.planner import TopicPartition

__all__ = ["MOST_ANSWERS", "MOST_FOLLOWERS", "MOST_IN_ORDER", "MOST_NOTHING_UNTIL", "InOrder", "RecordFacts"]

Record = tuple[int, int]
"""A record read, ``(offset, time)``."""

MOST_FOLLOWERS = 64
"""Followers kept per partition, in one chain, its lowest offsets dropped first (a position
passes them first)."""
MOST_ANSWERS = 64
"""Answers kept per partition, the least recently used dropped first. A trigger's look-ups ask
a few offsets per partition (the window's last record, the cut, a few more per rate-limit
level); the records of a search are also kept in order (:data:`MOST_IN_ORDER`)."""
MOST_NOTHING_UNTIL = 16
"""Empty ranges kept per partition (a transactional partition's tail, asked at every trigger)."""
MOST_IN_ORDER = 1_024
"""Records kept in order per partition (the lowest offsets dropped first): a search reads
``O(log n)`` records per round and up to 16 that come after each, a few rounds per trigger and
rate-limit level. On a model of a capped backfill (64 partitions, 20,000-60,000 records each)
1,024 took as few rounds as 4,096; 256 took many times more."""


class InOrder:
    """The records of one partition read so far, in offset order, and so, under the promise, in
    time order. At most :data:`MOST_IN_ORDER` (a list insert of that many is a constant)."""

    __slots__ = ("offsets", "times")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.times: list[int] = []

    def add(self, tp: TopicPartition, offset: int, time: int) -> None:
        """Remember a record; raise where it breaks the order of those known."""
        at = bisect.bisect_left(self.offsets, offset)
        if at < len(self.offsets) and self.offsets[at] == offset:
            return
        if at > 0 and self.times[at - 1] > time:
            raise broken_order(tp.topic, tp.partition, offset, time,
                               f"{self.times[at - 1]} at offset {self.offsets[at - 1]}")
        if at < len(self.offsets) and self.times[at] < time:
            raise broken_order(tp.topic, tp.partition, self.offsets[at], self.times[at],
                               f"{time} at offset {offset}")
        self.offsets.insert(at, offset)
        self.times.insert(at, time)
        if len(self.offsets) > MOST_IN_ORDER:
            del self.offsets[0], self.times[0]

    def drop_before(self, position: int) -> None:
        drop = bisect.bisect_left(self.offsets, position)
        del self.offsets[:drop], self.times[:drop]

    def drop_from(self, offset: int) -> None:
        keep = bisect.bisect_left(self.offsets, offset)
        del self.offsets[keep:], self.times[keep:]


class _Partition:
    """Everything known of one partition's log (see the module docstring)."""

    __slots__ = ("answers", "nothing_until", "followers", "in_order", "last", "passed")

    def __init__(self) -> None:
        self.answers: OrderedDict[int, Record] = OrderedDict()
        self.nothing_until: OrderedDict[int, int] = OrderedDict()
        self.followers: Optional[tuple[int, list[int], list[Record]]] = None
        """``(after, offsets, records)``: ``records[0]`` is the first record at or after
        ``after``, each next one the first after the one before."""
        self.in_order: Optional[InOrder] = None
        self.last: Optional[tuple[int, int, Optional[Record]]] = None
        """The last record of the window ``[start, end)`` asked last: ``(end, start, record)``."""
        self.passed = 0
        """The position facts below which were last dropped: the index paths learn only at or
        past the position, so while it stands there is nothing to drop."""

    def __len__(self) -> int:
        return (len(self.answers) + len(self.nothing_until)
                + (len(self.followers[1]) if self.followers is not None else 0)
                + (len(self.in_order.offsets) if self.in_order is not None else 0)
                + (self.last is not None))

    def drop_before(self, position: int) -> None:
        if position == self.passed:
            return
        self.passed = position
        for offset in [offset for offset, record in self.answers.items() if record[0] < position]:
            del self.answers[offset]
        for offset in [offset for offset in self.nothing_until if offset < position]:
            del self.nothing_until[offset]
        if self.followers is not None and self.followers[1][-1] < position:
            self.followers = None
        if self.in_order is not None:
            self.in_order.drop_before(position)

    def drop_from(self, offset: int) -> None:
        """Forget every fact that speaks of a record at or past ``offset``."""
        for asked in [asked for asked, record in self.answers.items() if record[0] >= offset]:
            del self.answers[asked]
        for asked in [asked for asked, end in self.nothing_until.items() if end > offset]:
            del self.nothing_until[asked]
        if self.followers is not None and self.followers[1][-1] >= offset:
            self.followers = None
        if self.in_order is not None:
            self.in_order.drop_from(offset)
        if self.last is not None and self.last[0] > offset:
            self.last = None


class RecordFacts:
    """The one owner of what the driver read of each partition's records (module docstring)."""

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _Partition] = {}

    def first_record(self, tp: TopicPartition, offset: int) -> Optional[Record]:
        """:data:`~kafkasync_source.planning.record_search.KnownFirstRecord`: the first record at
        or after ``offset`` where known without reading: answered before, or among the records
        that came after the partition's last answer."""
        known = self._partitions.get(tp)
        if known is None:
            return None
        answer = known.answers.get(offset)
        if answer is not None:
            known.answers.move_to_end(offset)
            return answer
        if known.followers is None:
            return None
        after, offsets, records = known.followers
        if not after <= offset <= offsets[-1]:
            return None
        return records[bisect.bisect_left(offsets, offset)]

    def nothing_until(self, tp: TopicPartition, offset: int) -> int:
        """An end below which nothing is to be read from ``offset`` on (``offset`` where none is
        known)."""
        known = self._partitions.get(tp)
        return offset if known is None else known.nothing_until.get(offset, offset)

    def learn_first(self, tp: TopicPartition, asked: int, record: Record) -> None:
        """``record`` is the first one at or after ``asked``, and so also at or after its own
        offset: a search that finds a record past where it asked often asks for it next."""
        answers = self._partition(tp).answers
        for offset in (asked, record[0]):
            answers[offset] = record
            answers.move_to_end(offset)
        while len(answers) > MOST_ANSWERS:
            answers.popitem(last=False)

    def learn_nothing_until(self, tp: TopicPartition, asked: int, end: int) -> None:
        """Nothing a consumer reads lies in ``[asked, end)``."""
        empty = self._partition(tp).nothing_until
        empty[asked] = end
        empty.move_to_end(asked)
        if len(empty) > MOST_NOTHING_UNTIL:
            empty.popitem(last=False)

    def learn_followers(self, tp: TopicPartition, after: int, records: list[Record]) -> None:
        """The records that came after an answer: ``records[0]`` is the first at or after
        ``after``, each next one the first after the one before; each is an answer at its own
        offset and at ``after``. They join the partition's chain where the two touch (one
        begins at or before the record after the other's last, so no record can lie between
        them unseen), else replace it; at most :data:`MOST_FOLLOWERS` stay."""
        if not records:
            return
        self.learn_first(tp, after, records[0])
        known = self._partition(tp)
        if known.followers is not None:
            chain_after, chain_offsets, chain = known.followers
            if chain_after <= after <= chain_offsets[-1] + 1:
                records = [record for record in chain if record[0] < after] + records
                after = chain_after
            elif after <= chain_after <= records[-1][0] + 1:
                records = records + [record for record in chain if record[0] > records[-1][0]]
        if len(records) > MOST_FOLLOWERS:
            after = records[-MOST_FOLLOWERS - 1][0] + 1
            records = records[-MOST_FOLLOWERS:]
        known.followers = (after, [record[0] for record in records], records)

    def in_order(self, tp: TopicPartition) -> InOrder:
        """The records of ``tp`` read so far in offset order (the search's, under the promise)."""
        known = self._partition(tp)
        if known.in_order is None:
            known.in_order = InOrder()
        return known.in_order

    def last_record(self, tp: TopicPartition) -> Optional[tuple[int, int, Optional[Record]]]:
        """The window asked last of ``tp`` and its last record: ``(end, start, record)``."""
        known = self._partitions.get(tp)
        return None if known is None else known.last

    def remember_last(self, tp: TopicPartition, end: int, start: int, record: Optional[Record]) -> None:
        self._partition(tp).last = (end, start, record)

    def forget(self, tp: TopicPartition, from_offset: int = 0) -> None:
        """``tp``'s log moved back: every fact about a record at or past ``from_offset`` is
        dropped (all of them with the default: a topic deleted and recreated shares no record
        with the old log). Call it wherever a move back is noticed: a log end below the
        position, a consumer reset to the log start, a partition that left the query."""
        known = self._partitions.get(tp)
        if known is None:
            return
        if from_offset <= 0:
            del self._partitions[tp]
        else:
            known.drop_from(from_offset)

    def forget_all(self) -> None:
        self._partitions.clear()

    def pass_positions(self, positions: Mapping[TopicPartition, int]) -> None:
        """The query stands at ``positions`` (a batch's start): facts below them can no longer
        be asked, nor those of partitions it no longer reads. Called at every trigger, this
        keeps the facts bounded by the partitions (module docstring)."""
        for tp in [tp for tp in self._partitions if tp not in positions]:
            del self._partitions[tp]
        for tp, known in self._partitions.items():
            known.drop_before(positions[tp])

    def __len__(self) -> int:
        """Facts kept, all partitions and kinds (each record, answer or range one)."""
        return sum(len(known) for known in self._partitions.values())

    def _partition(self, tp: TopicPartition) -> _Partition:
        known = self._partitions.get(tp)
        if known is None:
            known = self._partitions[tp] = _Partition()
        return known
