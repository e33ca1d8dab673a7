"""Planning from records read at chosen offsets (``eventTime.order=nonDecreasing``), without Kafka.

The model log answers ``first_records`` as :class:`~kafkasync_source.driver.record_probe.RecordProbe`
does on a broker: per ``(offset, end)`` the first record a consumer is handed in ``[offset, end)``
with a time of its own or one taken from its partition, reading past records whose time is
SKIPPED (the probe's rule) and past offsets no consumer reads (transaction markers, aborted
records: ``None`` in the model). The searches are compared with reading every record with and
without the reader knowing the record after each answer (``Following``: the probe keeps the
next record of the fetch that answered, ``RecordProbe.read_on``). The same probe on the embedded
cluster and a real broker is in tests/test_record_probe.py, tests/test_event_time_stream.py and
integration/test_event_time_broker.py.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Mapping, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples
from test_index_planner import assert_same_cut, assert_same_records, fetched, scenarios

from kafkasync_source.driver.record_probe import _MOST_FOLLOWING
from kafkasync_source.event_time import PARTITION_TIME, SKIPPED, KafkaSyncEventTimeError
from kafkasync_source.planning.index_planner import IndexCannotAnswer, IndexedPartition, plan_from_index
from kafkasync_source.planning.planner import NO_TIMESTAMP, BatchLimits, TopicPartition, plan_batch
from kafkasync_source.planning.record_search import OrderedRecords

Record = Optional[tuple[int, int]]
FirstRecords = Callable[[Mapping[TopicPartition, tuple[int, int]]], Mapping[TopicPartition, Record]]

TP = TopicPartition("orders", 0)


class ModelLog:
    """Offsets 0..n-1 of partitions, each a time code or None (no record a consumer reads)."""

    def __init__(self, logs: dict[TopicPartition, list]) -> None:
        self.logs = logs
        self.rounds = 0
        self.probes = 0

    def first_records(self, ranges):
        self.rounds += 1
        answers = {}
        for tp, (offset, end) in ranges.items():
            self.probes += 1
            answers[tp] = next(((at, code) for at, code in enumerate(self.logs[tp][offset:end], offset)
                                if code is not None and code != SKIPPED), None)
        return answers


@st.composite
def ordered_logs(draw):
    """A partition in time order, with unreadable offsets and records without a time."""
    length = draw(st.integers(1, 60))
    steps = draw(st.lists(st.integers(0, 3), min_size=length, max_size=length))
    kinds = draw(st.lists(st.sampled_from(["record"] * 6 + ["marker", "skipped"]), min_size=length, max_size=length))
    times, time = [], 100
    for step, kind in zip(steps, kinds):
        time += step
        times.append(time if kind == "record" else None if kind == "marker" else SKIPPED)
    return times


def timed(log, start, end):
    return [(offset, code) for offset, code in enumerate(log[start:end], start) if code is not None and code >= 0]


class Following:
    """``first_records`` of a model that, as the probe, also learns the records after each
    answer (each the first readable one after the one before, up to one without a time of
    its own: the probe's chain, ``Following`` in record_probe.py), answered by
    ``known_first_record`` without a round — not all: the probe learns those that arrive in
    the answer's fetch, at most ``RecordProbe``'s ``_MOST_FOLLOWING`` (``rng``: a random
    number of them, often none; None: all)."""

    def __init__(self, first_records: FirstRecords, logs: Optional[dict[TopicPartition, list]] = None,
                 rng: Optional[random.Random] = None) -> None:
        self._first_records = first_records
        self._logs = logs
        self._rng = rng
        self.known: dict[tuple[TopicPartition, int], tuple[int, int]] = {}
        self.rounds = 0

    def first_records(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, Record]:
        self.rounds += 1
        answers = dict(self._first_records(ranges))
        for tp, record in answers.items():
            if record is None:
                continue
            most = _MOST_FOLLOWING if self._rng is None else self._rng.choice([0, 0, 1, 2, 5, _MOST_FOLLOWING])
            after = record[0] + 1
            for offset, code in self._readable_after(tp, after, most):
                if code == SKIPPED:
                    break
                self.known[(tp, after)] = (offset, code)
                after = offset + 1
        return answers

    def _readable_after(self, tp: TopicPartition, offset: int, most: int) -> list[tuple[int, int]]:
        """The first ``most`` records a consumer is handed from ``offset`` on (those without a
        time of their own too, where the model has ``logs``)."""
        if self._logs is not None:
            return [(at, code) for at, code in enumerate(self._logs[tp][offset:], offset) if code is not None][:most]
        records: list[tuple[int, int]] = []
        while len(records) < most:
            found = self._first_records({tp: (offset, 2 ** 62)})[tp]
            if found is None:
                break
            records.append(found)
            offset = found[0] + 1
        return records

    def known_first_record(self, tp: TopicPartition, offset: int) -> Record:
        return self.known.get((tp, offset))


followers = st.one_of(st.none(), st.just("every"), st.randoms(use_true_random=False))
"""How the reader knows the records after each answer (RecordProbe.read_on): not at all, as
many as the probe keeps, or a random number of them (the probe learns those that came in the
answer's fetch)."""


def searching(first_records: Callable, follower, logs: Optional[dict[TopicPartition, list]] = None) -> OrderedRecords:
    """The search over ``first_records`` (of ``logs``, where given), its reader knowing
    following records as ``follower`` says."""
    if follower is None:
        return OrderedRecords(first_records)
    model = Following(first_records, logs, None if follower == "every" else follower)
    return OrderedRecords(model.first_records, model.known_first_record)


@settings(max_examples=examples(300), deadline=None)
@given(log=ordered_logs(), data=st.data(), follower=followers)
def test_the_last_record_and_first_at_or_above_match_reading_every_record(log, data, follower):
    start = data.draw(st.integers(0, len(log) - 1))
    end = data.draw(st.integers(start, len(log)))
    records = searching(ModelLog({TP: log}).first_records, follower, {TP: log})
    windows = {TP: (start, end)}
    everything = timed(log, start, end)
    last = records.last_records(windows, {TP: -1})[TP]
    assert last == (None if not everything else (everything[-1][1], everything[-1][0]))
    for time in data.draw(st.lists(st.integers(90, 300), min_size=1, max_size=6)):
        expected = next(((offset, code) for offset, code in everything if code >= time), None)
        assert records.first_at_or_above({TP: time}, windows, {TP: -1})[TP] == expected


def test_a_record_read_just_below_the_target_and_the_one_after_it_end_the_search():
    """Times rise by 1 a record: from the window's head the interpolation lands on the record
    just below the time, and the record sent after it is the answer."""
    log = list(range(100, 100 + 4096))
    plain, following = ModelLog({TP: log}), Following(ModelLog({TP: log}).first_records)
    windows = {TP: (0, len(log))}
    assert OrderedRecords(plain.first_records).first_at_or_above({TP: 2_000}, windows, {})[TP] == (1_900, 2_000)
    records = OrderedRecords(following.first_records, following.known_first_record)
    assert records.first_at_or_above({TP: 2_000}, windows, {})[TP] == (1_900, 2_000)
    assert following.rounds < plain.rounds
    assert following.rounds <= 3, "the head, then the record below the target with the target after it"


def test_a_million_offsets_are_searched_in_rounds_logarithmic_in_the_window_for_every_partition_at_once():
    partitions = [TopicPartition("orders", p) for p in range(8)]
    length = 1_000_000
    model = ModelLog({tp: _Times(length, p) for p, tp in enumerate(partitions)})
    records = OrderedRecords(model.first_records)
    windows = {tp: (0, length) for tp in partitions}
    last = records.last_records(windows, {})
    assert last == {tp: (_Times(length, p)[length - 1], length - 1) for p, tp in enumerate(partitions)}
    assert model.rounds == 1, "a partition that ends in a record is answered by its last offset"
    found = records.first_at_or_above({tp: 1_000 + 3 * 400_000 + p for p, tp in enumerate(partitions)}, windows, {})
    assert found == {tp: (400_000, 1_000 + 3 * 400_000 + p) for p, tp in enumerate(partitions)}
    assert model.rounds <= 1 + math.ceil(math.log2(length)) + 1
    assert model.probes <= 8 * model.rounds


class _Times:
    """A log of ``length`` records whose times rise by 3 from ``1,000 + partition``."""

    def __init__(self, length: int, partition: int) -> None:
        self.length, self.partition = length, partition

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))[:1]]  # the probe reads one
        return 1_000 + self.partition + 3 * index


def test_what_a_search_read_narrows_the_next_one():
    log = list(range(100, 100 + 4096))
    model = ModelLog({TP: log})
    records = OrderedRecords(model.first_records)
    windows = {TP: (0, len(log))}
    records.first_at_or_above({TP: 2_000}, windows, {})
    first = model.rounds
    assert records.first_at_or_above({TP: 2_000}, windows, {})[TP] == (1_900, 2_000)
    assert model.rounds == first, "the same search again is answered from the records read"
    records.first_at_or_above({TP: 2_010}, windows, {})
    assert model.rounds - first <= 5, "a nearby time is searched between the records read, not over the log"


def test_a_record_below_an_earlier_one_breaks_the_promise_naming_both():
    log = [100, 101, 102, 50, 103, 104, 105, 106]
    records = OrderedRecords(ModelLog({TP: log}).first_records)
    assert records.first_at_or_above({TP: 102}, {TP: (0, len(log))}, {})[TP] == (2, 102)  # read 4, 2, 1
    with pytest.raises(KafkaSyncEventTimeError, match=r"orders-0 offset 3 has event time 50, below 102 at offset 2"):
        records.first_at_or_above({TP: 60}, {TP: (3, len(log))}, {})  # reads 3


def test_a_record_below_the_partition_time_before_the_batch_breaks_the_promise():
    records = OrderedRecords(ModelLog({TP: [90, 95, 120]}).first_records)
    with pytest.raises(KafkaSyncEventTimeError, match=r"orders-0 offset 1 has event time 95, below the partition's "
                                                      r"time 100 before the batch"):
        records.last_records({TP: (1, 2)}, {TP: 100})


def test_a_record_that_takes_its_partitions_time_is_left_to_the_fetch_path():
    records = OrderedRecords(ModelLog({TP: [100, PARTITION_TIME, 120]}).first_records)
    with pytest.raises(IndexCannotAnswer, match="offset 1 takes its time from the records before it"):
        records.last_records({TP: (1, 2)}, {TP: 100})


def test_a_window_of_markers_and_records_without_a_time_has_no_last_record():
    log = [100, None, SKIPPED, SKIPPED, None]
    model = ModelLog({TP: log})
    assert OrderedRecords(model.first_records).last_records({TP: (1, 5)}, {}) == {TP: None}
    assert OrderedRecords(model.first_records).last_records({TP: (0, 5)}, {}) == {TP: (100, 0)}



def test_a_window_whose_end_has_not_moved_keeps_its_last_record_unread():
    """Every trigger asks each window's last record; the log is append-only, so where the end
    is where it was, so is the answer — unless the start moved past it."""
    log = [100, 101, 102, None, SKIPPED]
    model = ModelLog({TP: log})
    records = OrderedRecords(model.first_records)
    assert records.last_records({TP: (0, 5)}, {}) == {TP: (102, 2)}
    rounds = model.rounds
    assert records.last_records({TP: (1, 5)}, {TP: 100}) == {TP: (102, 2)}
    assert model.rounds == rounds, "the same end, a later start: answered unread"
    assert records.last_records({TP: (3, 5)}, {TP: 102}) == {TP: None}
    assert model.rounds > rounds, "a start past the last record: read again"
    rounds = model.rounds
    assert records.last_records({TP: (4, 5)}, {TP: 102}) == {TP: None}
    assert model.rounds == rounds, "nothing in a window, nothing in a later part of it"
    assert records.last_records({TP: (0, 2)}, {}) == {TP: (101, 1)}, "an end that moved is read"

# --- The cut from records read equals the cut from every record --------------------------------

def probe_path_cut(scenario: dict, records: OrderedRecords):
    """:func:`plan_from_index` fed as driver/probe_index.ProbeIndexPath feeds it."""
    broker = scenario["broker"]
    starts, partition_times, stops = scenario["starts"], scenario["partition_times"], scenario["stops"]
    windows = {p: (starts[p], min(log.end, stops.get(p, log.end))) for p, log in broker.logs.items()}
    last = records.last_records(windows, partition_times)
    states = {p: IndexedPartition(starts[p], log.end, last[p], partition_times[p], stops.get(p),
                                  holds_records=windows[p][1] <= starts[p] or last[p] is not None)
              for p, log in broker.logs.items()}
    return plan_from_index(states, lambda times: records.first_at_or_above(times, windows, partition_times),
                           broker.first_records, now_ms=scenario["now_ms"],
                           max_task_idle_ms=scenario["max_task_idle_ms"], idle_since=scenario["idle_since"],
                           limits=scenario["limits"])


@settings(max_examples=examples(300), deadline=None)
@given(scenario=st.one_of(scenarios(in_order_from_start=True),
                          scenarios(in_order_from_start=True, transactional=True, limit_kinds=("none", "step"))),
       follower=followers)
def test_batch_after_batch_the_probe_path_cuts_what_reading_every_record_cuts(scenario, follower):
    """On logs whose records a consumer reads are in time order, every batch until nothing is
    left: never a fallback, and the fetch path's cut (tests/test_index_planner.py's model broker
    and comparison). Among transaction markers, aborted and compacted entries the batches hold
    the same records; offsets may differ by such entries, which maxOffsetsPerTrigger counts on
    an index path (as format("kafka") does) and the fetch path does not, so there it is off.
    With or without the record after each answer known (past markers and aborted records too)."""
    assert_cuts_batch_after_batch(scenario, searching(scenario["broker"].first_records, follower))


def assert_cuts_batch_after_batch(scenario, records: OrderedRecords) -> None:
    """The probe path's cut (``records``) against the fetch path's, batch after batch until
    nothing is left (tests/test_index_planner.py's comparison): the same records among
    transaction markers and aborted entries, else the same cut."""
    transactional = any(log.kinds is not None for log in scenario["broker"].logs.values())
    starts, partition_times = dict(scenario["starts"]), dict(scenario["partition_times"])
    limits, stream_time = scenario["limits"], NO_TIMESTAMP
    for _ in range(60):
        scenario = {**scenario, "starts": starts, "partition_times": partition_times,
                    "limits": BatchLimits(limits.max_records, limits.max_stream_time_step_ms, stream_time)}
        probe_cut = probe_path_cut(scenario, records)
        fetch_cut = plan_batch(fetched(scenario["broker"], starts, partition_times, scenario["stops"]),
                               now_ms=scenario["now_ms"], max_task_idle_ms=scenario["max_task_idle_ms"],
                               idle_since=scenario["idle_since"], limits=scenario["limits"])
        if transactional:
            assert_same_records(scenario, probe_cut, fetch_cut)
            assert probe_cut.has_batch == fetch_cut.has_batch
        else:
            assert_same_cut(probe_cut, fetch_cut)
        if not probe_cut.has_batch:
            break
        starts = probe_cut.end_offsets
        partition_times = {p: d.partition_time for p, d in probe_cut.partitions.items()}
        stream_time = max(stream_time, NO_TIMESTAMP if probe_cut.stream_time is None else probe_cut.stream_time)
    assert not probe_cut.has_batch
