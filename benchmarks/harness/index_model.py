"""A broker's time index in memory: what a broker answers on an in-order log, so that the
time-index planner (``plan_from_index``) is measured alone, without round trips, at sizes no
single test broker holds comfortably.

Each partition holds ``records`` records, record ``i`` stamped ``base + i * rate_ms(partition)``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from kafkasync_source.planning.index_planner import IndexedPartition, plan_from_index
from kafkasync_source.planning.planner import BatchLimits, TopicPartition


class IndexModel:
    def __init__(self, topic: str, partitions: int, records: int, base: int, rate_ms: Callable[[int], int]) -> None:
        self.records, self._base = records, base
        self._rates = {TopicPartition(topic, p): rate_ms(p) for p in range(partitions)}
        self.states = {tp: IndexedPartition(start=0, end_offset=records, largest=(self._time(tp, records - 1),
                                                                                  records - 1))
                       for tp in self._rates}

    def _time(self, tp: TopicPartition, offset: int) -> int:
        return self._base + offset * self._rates[tp]

    def first_offsets(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """``UnifiedLog.fetchOffsetByTimestamp`` on an in-order log: the first offset whose
        timestamp is >= t, None past the readable end (``ReplicaManager.fetchOffset``)."""
        found = {tp: max(0, -(-(t - self._base) // self._rates[tp])) for tp, t in times.items()}
        return {tp: None if offset >= self.records else (offset, self._time(tp, offset))
                for tp, offset in found.items()}

    def first_records(self, ranges: Mapping[TopicPartition, tuple[int, int]]
                      ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """A log of records only: a consumer reads the entry at the offset itself."""
        return {tp: (offset, self._time(tp, offset)) if offset < until else None
                for tp, (offset, until) in ranges.items()}

    def plan(self, limits: BatchLimits, now_ms: int, asked: Optional[list[int]] = None) -> Any:
        """``plan_from_index`` on this index; ``asked`` gets the partitions of each ListOffsets round."""
        def lookup(times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
            if asked is not None:
                asked.append(len(times))
            return self.first_offsets(times)

        return plan_from_index(self.states, lookup, self.first_records, now_ms=now_ms, max_task_idle_ms=0,
                               idle_since={}, limits=limits)
