"""What the driver remembers of the records it read (planning/record_facts.py): forgotten where a
log moves back, dropped as the query's position passes it, and bounded by the partitions however
many triggers a query runs.

The index paths are driven here as the driver drives them (driver/time_index.py's and
driver/probe_index.py's ``observe``, then ``plan_from_index``), over tests/test_index_planner.py's
model broker: its ListOffsets answers as ``UnifiedLog`` does, and :class:`ModelProbe` answers as
:class:`~kafkasync_source.driver.record_probe.RecordProbe` does on a broker — the first record a
consumer is handed at or after an offset, and up to ``_MOST_FOLLOWING`` records after it that came
in the same fetch. The same paths on a real broker, with a topic truncated by ``DeleteRecords``
and one deleted and recreated, are in integration/test_record_facts_broker.py.
"""

from __future__ import annotations

from typing import Mapping, Optional

import pytest
from test_index_planner import ModelBroker, ModelLog

from kafkasync_source.driver.probe_index import ProbeIndexPath
from kafkasync_source.driver.record_probe import _MOST_FOLLOWING, ProbedRecords
from kafkasync_source.driver.time_index import TimeIndexPath
from kafkasync_source.planning.index_planner import IndexCannotAnswer, plan_from_index
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import NO_TIMESTAMP, BatchLimits, TopicPartition
from kafkasync_source.planning.record_facts import MOST_ANSWERS, MOST_IN_ORDER, RecordFacts

TP = TopicPartition("t", 0)


class ModelProbe:
    """:class:`RecordProbe` over a :class:`ModelBroker`: per offset the first entry a consumer
    reads below the readable end (None: none before the range's end), and in ``read_on`` the
    records after each record answer, up to ``_MOST_FOLLOWING`` and up to the first one at or
    past the range's end (``RecordProbe._follow``)."""

    def __init__(self, broker: ModelBroker) -> None:
        self.broker = broker
        self.records_read = 0
        self.read_on: dict[TopicPartition, tuple[int, list[tuple[int, int]]]] = {}

    def first_records(self, offsets: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
                      ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        self.read_on = {}
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        for tp, offset in offsets.items():
            records = self._readable(tp, offset)
            self.records_read += min(len(records), 1 + _MOST_FOLLOWING)
            if not records or records[0][0] >= ends[tp]:
                answers[tp] = None
                continue
            answers[tp] = records[0]
            following: list[tuple[int, int]] = []
            for record in records[1:1 + _MOST_FOLLOWING]:
                following.append(record)
                if record[0] >= ends[tp]:
                    break
            if following:
                self.read_on[tp] = (records[0][0] + 1, following)
        return answers

    def _readable(self, tp: TopicPartition, offset: int) -> list[tuple[int, int]]:
        log = self.broker.logs[tp]
        return [(at, log.timestamps[at - log.log_start]) for at in range(max(offset, log.log_start), log.end)
                if log.consumed(at, self.broker.read_committed)]

    def close(self) -> None:
        pass


class ModelReader:
    """:class:`~kafkasync_source.driver.time_index.TimeIndexReader`'s ListOffsets over the model."""

    def __init__(self, broker: ModelBroker) -> None:
        self.broker = broker

    def latest(self, partitions) -> dict[TopicPartition, Optional[int]]:
        return {tp: self.broker.logs[tp].end for tp in partitions}

    def earliest(self, partitions) -> dict[TopicPartition, Optional[int]]:
        return {tp: self.broker.logs[tp].log_start for tp in partitions}

    def largest(self, partitions) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        return {tp: self.broker.largest(tp) for tp in partitions}

    def first_offsets(self, times):
        return self.broker.first_offsets(times)

    def close(self) -> None:
        pass


def probe_path(broker: ModelBroker, past_log_starts: bool = False) -> tuple[ProbeIndexPath, RecordFacts]:
    records = ProbedRecords(ModelProbe(broker))  # type: ignore[arg-type]
    return (ProbeIndexPath(ModelReader(broker), records, past_log_starts=past_log_starts),  # type: ignore[arg-type]
            records.facts)


def time_index_path(broker: ModelBroker, past_log_starts: bool = False) -> tuple[TimeIndexPath, RecordFacts]:
    records = ProbedRecords(ModelProbe(broker))  # type: ignore[arg-type]
    return (TimeIndexPath(ModelReader(broker), records, past_log_starts=past_log_starts),  # type: ignore[arg-type]
            records.facts)


def at(offsets: Mapping[TopicPartition, int], partition_time: int = NO_TIMESTAMP) -> SyncOffset:
    return SyncOffset({tp: PartitionOffset(offset, partition_time) for tp, offset in offsets.items()})


def next_batch(path, start: SyncOffset, max_records: Optional[int] = None, now_ms: int = 0) -> SyncOffset:
    """One trigger as SyncDriver plans it on an index path: the batch's end, or ``start``."""
    indexed = path.observe(start, None)
    cut = plan_from_index(indexed, path.first_offsets(start), path.first_records, now_ms=now_ms,
                          max_task_idle_ms=0, idle_since={},
                          limits=BatchLimits(max_records=max_records, previous_stream_time=start.stream_time))
    if not cut.has_batch:
        return start
    return SyncOffset({tp: PartitionOffset(d.end, d.partition_time) for tp, d in cut.partitions.items()},
                      stream_time=max(start.stream_time, NO_TIMESTAMP if cut.stream_time is None else cut.stream_time))


# --- The facts themselves ----------------------------------------------------------------------

def test_forget_drops_every_fact_at_or_past_its_offset_and_keeps_those_below():
    facts = RecordFacts()
    facts.learn_first(TP, 10, (12, 1012))
    facts.learn_first(TP, 40, (41, 1041))
    facts.learn_nothing_until(TP, 20, 30)
    facts.learn_followers(TP, 42, [(42, 1042), (44, 1044)])
    facts.in_order(TP).add(TP, 12, 1012)
    facts.in_order(TP).add(TP, 41, 1041)
    facts.remember_last(TP, 50, 10, (44, 1044))
    facts.forget(TP, 25)
    assert facts.first_record(TP, 10) == facts.first_record(TP, 12) == (12, 1012)
    assert facts.first_record(TP, 40) is None and facts.first_record(TP, 43) is None
    assert facts.nothing_until(TP, 20) == 20, "an empty range that reaches past the offset"
    assert facts.in_order(TP).offsets == [12]
    assert facts.last_record(TP) is None
    facts.forget(TP)
    assert len(facts) == 0 and facts.first_record(TP, 10) is None


def test_passing_a_position_drops_the_facts_below_it_and_the_partitions_left_behind():
    facts, other = RecordFacts(), TopicPartition("t", 1)
    facts.learn_first(TP, 10, (12, 1012))
    facts.learn_first(TP, 30, (31, 1031))
    facts.learn_nothing_until(TP, 5, 9)
    facts.learn_followers(TP, 13, [(13, 1013), (14, 1014)])
    facts.learn_first(other, 0, (0, 1))
    facts.pass_positions({TP: 13})
    assert facts.first_record(TP, 10) is None and facts.first_record(TP, 12) is None
    assert facts.first_record(TP, 13) == (13, 1013), "followers that reach the position stay"
    assert facts.first_record(TP, 30) == (31, 1031)
    assert facts.nothing_until(TP, 5) == 5
    assert facts.first_record(other, 0) is None, "a partition the query no longer reads"
    facts.pass_positions({TP: 15})
    assert facts.first_record(TP, 13) is None


def test_answers_are_kept_per_partition_up_to_a_bound_the_least_recently_used_first_out():
    facts = RecordFacts()
    for offset in range(10 * MOST_ANSWERS):
        facts.learn_first(TP, offset, (offset, offset))
        assert facts.first_record(TP, 0) == (0, 0), "asked at every insert: never the one to go"
    assert len(facts) == MOST_ANSWERS
    for offset in range(10 * MOST_IN_ORDER):
        facts.in_order(TP).add(TP, offset, offset)
    assert len(facts.in_order(TP).offsets) == MOST_IN_ORDER


# --- A log that moves back ---------------------------------------------------------------------

def recreated(broker: ModelBroker, tp: TopicPartition, timestamps: list[int]) -> None:
    """The topic deleted and recreated under its name: a new log from offset 0."""
    broker.logs[tp] = ModelLog(timestamps)


@pytest.mark.parametrize("path_of", [probe_path, time_index_path], ids=["recordProbes", "timeIndex"])
def test_a_recreated_log_that_regrows_is_read_not_answered_from_the_old_one(path_of):
    """The old log's facts lie past the query's position (a capped backfill read the window's
    last record and searched it). The topic is deleted and recreated with fewer records: the
    index path sees the log end below the position (and the fetch path restarts the partition
    at 0, as SyncDriver._moved_back does); the new log then grows past the old position with
    newer times. Remembered answers of the old log would give the window's last record, and
    so its largest time, as the old log had it (and, on the probe path, a search that meets
    both logs' records fails the query with a false broken promise)."""
    broker = ModelBroker({TP: ModelLog([1_000 + i for i in range(1_000)])})
    path, facts = path_of(broker)
    start = next_batch(path, at({TP: 0}), max_records=100)
    assert start.partitions[TP].next_offset == 100
    assert any(facts.first_record(TP, offset) for offset in range(100, 1_000)), "facts past the position"
    recreated(broker, TP, [5_000 + i for i in range(50)])
    with pytest.raises(IndexCannotAnswer, match="below the position"):
        path.observe(start, None)
    broker.logs[TP].timestamps.extend(5_050 + i for i in range(950))
    restarted = at({TP: 0}, partition_time=NO_TIMESTAMP)
    assert path.observe(restarted, None)[TP].largest == (5_999, 999)
    assert path.first_offsets(restarted)({TP: 5_500}) == {TP: (500, 5_500)}
    assert next_batch(path, restarted, max_records=100).partitions[TP].next_offset == 100


@pytest.mark.parametrize("path_of", [probe_path, time_index_path], ids=["recordProbes", "timeIndex"])
def test_records_deleted_below_a_new_log_start_answer_nothing_under_failondataloss_false(path_of):
    """DeleteRecords (or retention) moves the log start past the query's position and leaves
    the log end where it was, so no latest offset shows it. Under failOnDataLoss=false the
    executors skip the deleted records and the query goes on: what the driver learnt of them
    (a capped backfill's search) must be dropped with them at the next trigger's earliest
    look-up (ModelLog's log start answers as ``UnifiedLog.logStartOffset`` does after
    ``deleteRecordsOnLeader``), and the first record at the position is the new log start's."""
    broker = ModelBroker({TP: ModelLog([1_000 + i for i in range(1_000)])})
    path, facts = path_of(broker, past_log_starts=True)
    start = next_batch(path, at({TP: 0}), max_records=100)
    assert start.partitions[TP].next_offset == 100
    assert any(facts.first_record(TP, offset) for offset in range(100, 500)), "facts of records to delete"
    log = broker.logs[TP]
    log.timestamps, log.log_start = log.timestamps[500:], 500
    path.observe(start, None)
    assert not any(facts.first_record(TP, offset) for offset in range(0, 500))
    # The records that survive are still answered for: the first at or past the position is
    # the new log start's.
    assert path.first_records({TP: (100, 1_000)})[TP] == (500, 1_500)


def test_a_partition_forgotten_by_the_driver_answers_from_the_new_log():
    """SyncDriver.forget_records, as called for a partition that left the query and came back
    (a topic deleted and recreated between two partition discoveries) or that the fetcher saw
    move back: the next look-up reads."""
    broker = ModelBroker({TP: ModelLog([1_000 + i for i in range(100)])})
    path, facts = probe_path(broker)
    assert path.observe(at({TP: 0}), None)[TP].largest == (1_099, 99)
    recreated(broker, TP, [2_000 + i for i in range(100)])
    path.forget(TP)
    assert len(facts) == 0
    assert path.observe(at({TP: 0}), None)[TP].largest == (2_099, 99)


# --- Bounded by the partitions, not by the query's age -----------------------------------------

@pytest.mark.parametrize("path_of", [probe_path, time_index_path], ids=["recordProbes", "timeIndex"])
def test_the_facts_kept_stay_bounded_by_the_partitions_over_many_triggers(path_of):
    """A live stream of 8 partitions at uneven rates, capped, for 600 triggers: what the driver
    keeps levels off after the first triggers, at a few facts per partition — far below the
    per-partition bounds, which only a partition that stands still while its window is searched
    again and again would reach."""
    partitions = [TopicPartition("live", p) for p in range(8)]
    broker = ModelBroker({tp: ModelLog([]) for tp in partitions})
    path, facts = path_of(broker)
    start = at(dict.fromkeys(partitions, 0))
    now, kept = 0, []
    for _ in range(600):
        now += 100
        for tp in partitions:  # 1 to 8 records a trigger, times 10 ms apart per partition
            log = broker.logs[tp]
            step = 100 // (tp.partition + 1)
            log.timestamps.extend(range(now - 100 + step, now + 1, step))
        start = next_batch(path, start, max_records=100, now_ms=now)
        kept.append(len(facts))
    assert start.partitions[partitions[0]].next_offset > 500, "the query kept up with the stream"
    assert max(kept[100:]) <= 24 * len(partitions), kept[-20:]
    assert max(kept[300:]) <= max(kept[100:300]), "no growth with the query's age"


def test_followers_that_touch_the_chain_join_it_and_what_it_answers_is_what_a_consumer_reads():
    """Chains of followers learnt in any order, touching, overlapping or apart, on a log with
    gaps (offsets a consumer does not read): every offset the partition's chain answers is the
    first record at or after it, and a chain grows only up to its bound."""
    import random

    from kafkasync_source.planning.record_facts import MOST_FOLLOWERS

    readable = sorted(random.Random(3).sample(range(400), 250))

    def first_at(offset: int):
        later = [o for o in readable if o >= offset]
        return (later[0], 1000 + later[0]) if later else None

    rng = random.Random(11)
    facts = RecordFacts()
    for _ in range(300):
        after = rng.randrange(380)
        chain = [first_at(after)]
        while len(chain) < rng.randint(1, 20) and first_at(chain[-1][0] + 1) is not None:
            chain.append(first_at(chain[-1][0] + 1))
        facts.learn_followers(TP, after, [record for record in chain if record is not None])
        chain_after, offsets, _ = facts._partitions[TP].followers
        assert len(offsets) <= MOST_FOLLOWERS
        for offset in range(chain_after, offsets[-1] + 1):
            assert facts.first_record(TP, offset) == first_at(offset), offset


def test_the_followers_of_the_record_before_a_cut_extend_those_of_the_cut():
    """A capped trigger reads the cut's record (and the 16 after it, which came in its batch),
    then the record before it with the cut as its range's end (the batch's largest taken: one
    follower). On Kafka 4.3.1 the second replaced the first's followers, and each next trigger,
    its cut 5 records further, fetched the same producer batch again, twice; joined, the next
    three triggers read nothing (benchmarks/trigger_cost.py --large-batches)."""
    facts = RecordFacts()
    facts.learn_first(TP, 5, (5, 1005))
    facts.learn_followers(TP, 6, [(offset, 1000 + offset) for offset in range(6, 22)])
    facts.learn_first(TP, 4, (4, 1004))
    facts.learn_followers(TP, 5, [(5, 1005)])
    assert [facts.first_record(TP, offset) for offset in (9, 10, 21)] == [(9, 1009), (10, 1010), (21, 1021)]
    assert facts.first_record(TP, 22) is None
