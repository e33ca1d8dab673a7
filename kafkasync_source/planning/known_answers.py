"""The brokers' by-time answers, remembered across look-up rounds and triggers.

A ListOffsets by time answers ``first(t)``: the first offset of the log whose record's
timestamp is >= t, and that record's timestamp ``ts`` (``UnifiedLog.fetchOffsetByTimestamp``,
see :mod:`kafkasync_source.planning.index_planner`). Such an answer ``o`` says that every record before
``o`` is older than ``t``, so:

* ``first(t') = o`` for every ``t'`` in ``[t, ts]``;
* ``first(t') = o'`` where ``ts < t'`` and a later time ``t'' >= t'`` was answered ``o' = o + 1``
  (no record in between).

The log is append-only: records land after the readable end, so a found answer stays true
for as long as the records up to it exist. It is used only where it lies at or after the
query's position (retention may have removed what lies before it, and the brokers would then
answer another offset). An answer of "none below the readable end" is not remembered: the
readable end moves.

At thousands of partitions a trigger's search asks the same partitions at nearby times round
after round, and the next trigger starts at the time the previous one reached: remembering
spares those look-ups (see docs/concepts.md, "Thousands of partitions").
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Mapping, Optional

from kafkasync_source.planning.index_planner import FirstOffsets
from kafkasync_source.planning.planner import TopicPartition

__all__ = ["KnownFirstOffsets"]

ANSWERS_PER_PARTITION = 16
"""The most answers kept per partition (the oldest times go first): a search's answers for
one trigger and the next, a few hundred bytes a partition."""


class _Answers:
    """One partition's answers, ascending in time (and so in offset)."""

    __slots__ = ("times", "offsets", "timestamps")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []

    def forget_before(self, position: int) -> None:
        cut = bisect_left(self.offsets, position)
        if cut:
            del self.times[:cut], self.offsets[:cut], self.timestamps[:cut]

    def first(self, time: int) -> Optional[tuple[int, int]]:
        below = bisect_right(self.times, time) - 1
        if below < 0:
            return None
        if time <= self.timestamps[below]:
            return self.offsets[below], self.timestamps[below]
        above = below + 1
        if above < len(self.times) and self.offsets[above] == self.offsets[below] + 1:
            return self.offsets[above], self.timestamps[above]
        return None

    def learn(self, time: int, offset: int, timestamp: int) -> None:
        if not self.times:
            self.times.append(time)
            self.offsets.append(offset)
            self.timestamps.append(timestamp)
            return
        at = bisect_left(self.times, time)
        if at < len(self.times) and self.times[at] == time:
            return
        if at > 0 and self.offsets[at - 1] == offset:
            return  # the earlier time's answer already covers this one
        if at < len(self.times) and self.offsets[at] == offset:
            self.times[at] = time  # the same record, now known from an earlier time
            return
        self.times.insert(at, time)
        self.offsets.insert(at, offset)
        self.timestamps.insert(at, timestamp)
        if len(self.times) > ANSWERS_PER_PARTITION:
            del self.times[0], self.offsets[0], self.timestamps[0]


class KnownFirstOffsets:
    """Answers to ``first(t)`` per partition, for as long as the query runs."""

    def __init__(self) -> None:
        self._known: dict[TopicPartition, _Answers] = {}

    def remembering(self, first_offsets: FirstOffsets, positions: Mapping[TopicPartition, int]) -> FirstOffsets:
        """``first_offsets`` for a batch from ``positions``: what the answers known imply,
        the brokers asked (in one call, one round) for the rest, their answers learnt."""
        for tp in [tp for tp in self._known if tp not in positions]:
            del self._known[tp]  # a partition the query no longer reads
        for tp, answers in self._known.items():
            answers.forget_before(positions[tp])

        def first_offsets_remembered(
                times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
            found: dict[TopicPartition, Optional[tuple[int, int]]] = {}
            asking: dict[TopicPartition, int] = {}
            for tp, time in times.items():
                answers = self._known.get(tp)
                known = None if answers is None else answers.first(time)
                if known is None or known[0] < positions[tp]:
                    asking[tp] = time
                else:
                    found[tp] = known
            fresh = first_offsets(asking) if asking else {}
            for tp, answer in fresh.items():
                if answer is not None:
                    answers = self._known.get(tp)
                    if answers is None:
                        answers = self._known[tp] = _Answers()
                    answers.learn(asking[tp], *answer)
            found.update(fresh)
            return found

        return first_offsets_remembered

    def forget(self, tp: TopicPartition) -> None:
        """After ``tp``'s log moved back (deleted and recreated, truncated): nothing known of it
        holds."""
        self._known.pop(tp, None)
