"""``maxOffsetsPerTrigger`` on the index path: the first N offsets in Kafka Streams' processing
order, found by a search over time levels that asks the brokers only where an answer can change.

The fetch path takes the first N records in processing order from its buffers
(:mod:`kafkasync_source.planning.planner`); here no record is at hand, so the search looks for the
largest time level whose offsets fit in N (``first(level + 1)`` per partition), then fills the
rest from the next level in topic-partition order, as the fetch path breaks ties.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from kafkasync_source.planning.cut import BatchLimits, TopicPartition
from kafkasync_source.planning.index_search import IndexCannotAnswer, IndexSearch, Window

__all__ = ["rate_limited"]

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
                 index: IndexSearch) -> None:
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


def rate_limited(
    ends: dict[TopicPartition, int], windows: Mapping[TopicPartition, Window],
    bound: int, limits: BatchLimits, index: IndexSearch,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, tuple[int, int]]]:
    """The first ``max_records`` offsets in Kafka Streams' processing order: a search for the
    largest time level whose offsets fit, then the next level's offsets in topic-partition
    order (the fetch path's tie-breaking). Returns the ends, each partition's level, and the
    cuts for :meth:`IndexSearch.check`."""
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
