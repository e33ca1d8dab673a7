"""Batch after batch, the planning paths cut what the driver cuts reading every record.

A query plans each batch from its previous end offset: the positions, the partition times and
the stream time the previous batch handed on. The comparisons in tests/test_index_planner.py
and tests/test_record_search.py give both paths the *same* start, so a path that hands on
something else (the level it cut a partition at rather than the largest time it took) passes
them and still changes the next batch: its ``partitionTime`` column, the time an
``onInvalid=partitionTime`` record takes, the base of ``maxEventTimePerTrigger``. Here each path
runs its own query over the same log, from its own previous batch, as the driver does:

* ``auto`` — the time index (Kafka timestamps; promise off) or the record probes
  (``eventTime.order=nonDecreasing``; promise on), and the fetch path for a batch where they
  say they cannot answer (``SyncDriver._plan_from_index``);
* ``fetch`` — every record read (``planningMode=fetch``).

Both must give the same batches: the same records (a consumer's view of each range: heartbeats
and aborted records under read_uncommitted included, transaction markers and compacted offsets
not), the same partition times and stream time handed on, the same enforced batches.

The logs are tests/test_index_planner.py's model broker (ListOffsets and reads as Kafka's source
says a broker answers; its docstrings cite the source), with transaction markers, aborted
records, compacted offsets, and under the promise heartbeats (records whose time is SKIPPED).
What differs by design is left out and said where: ``maxOffsetsPerTrigger`` counts offsets on
the index paths and records on the fetch path (docs/concepts.md, "What differs on the
time-index path"), so a synchronized cap is drawn only over logs whose every offset is a record
that takes part; tests/test_index_planner.py checks the capped batches among markers hold the
fetch path's records for the same number of records.
"""

from __future__ import annotations

from typing import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples
from test_index_planner import (
    ABORTED,
    COMPACTED,
    HEARTBEAT,
    MARKER,
    RECORD,
    ModelBroker,
    ModelLog,
    fetched,
    indexed,
    readable,
    tp,
)
from test_record_search import probe_path_cut

from kafkasync_source.event_time import SKIPPED
from kafkasync_source.planning.index_planner import IndexCannotAnswer, plan_from_index
from kafkasync_source.planning.planner import NEVER_WAIT, NO_TIMESTAMP, WAIT_FOREVER, BatchLimits, Cut, plan_batch
from kafkasync_source.planning.record_search import OrderedRecords

Batch = tuple
"""What a batch is to a user: per partition the records it holds and the partition time it
hands on, the stream time the offsets carry after it, and whether it was enforced."""


@st.composite
def differential_logs(draw: st.DrawFn, *, promise: bool) -> dict:
    """Up to 4 partitions of up to 10 entries. Under the promise the records a consumer reads
    with a time are in time order (ties allowed) and heartbeats lie among them; without it,
    time order or not, and records without a timestamp. Markers carry the broker's clock:
    after the records they close (a live stream) or far newer (a backfill of old times)."""
    read_committed = draw(st.booleans())
    kinds_drawn = [RECORD] * 5 + [MARKER, ABORTED, COMPACTED] + ([HEARTBEAT] if promise else [])
    plain = draw(st.booleans())
    in_order = promise or draw(st.booleans())
    logs, starts, partition_times, stops = {}, {}, {}, {}
    for index in range(draw(st.integers(1, 4))):
        size = draw(st.integers(0, 10))
        kinds = [RECORD] * size if plain else [draw(st.sampled_from(kinds_drawn)) for _ in range(size)]
        times = draw(st.lists(st.integers(0, 40), min_size=size, max_size=size))
        if in_order:
            times.sort()
        elif draw(st.booleans()):
            times = [NO_TIMESTAMP if draw(st.integers(0, 5)) == 0 else t for t in times]
        backfill = draw(st.booleans())
        timestamps = [
            SKIPPED if kind == HEARTBEAT else NO_TIMESTAMP if kind == COMPACTED
            else (draw(st.integers(60, 90)) if backfill else t) if kind == MARKER else t
            for kind, t in zip(kinds, times)
        ]
        log_start = draw(st.integers(0, 2))
        readable_end = draw(st.one_of(st.none(), st.integers(0, size)))
        log = ModelLog(timestamps, readable_end, log_start, kinds)
        start = draw(st.one_of(st.just(log_start), st.integers(log_start, log.end)))
        emitted = [ts for offset, ts in enumerate(timestamps[: start - log_start], log_start)
                   if ts >= 0 and log.timed(offset, read_committed)]
        logs[tp(index)], starts[tp(index)] = log, start
        partition_times[tp(index)] = max(emitted, default=NO_TIMESTAMP)
        if draw(st.integers(0, 3)) == 0:
            stops[tp(index)] = draw(st.integers(log_start, log.end))
    max_task_idle_ms = draw(st.sampled_from([NEVER_WAIT, 0, 7, WAIT_FOREVER]))
    # A synchronized cap counts offsets on the index paths, records on the fetch path: drawn
    # only where every offset is a record that takes part (see the module docstring).
    capped = draw(st.booleans()) and (plain or max_task_idle_ms == NEVER_WAIT)
    step = None if max_task_idle_ms == NEVER_WAIT else draw(st.one_of(st.none(), st.integers(1, 15)))
    return dict(broker=ModelBroker(logs, read_committed=read_committed), starts=starts,
                partition_times=partition_times, stops=stops, max_task_idle_ms=max_task_idle_ms,
                max_records=draw(st.integers(1, 12)) if capped else None, step=step,
                idle_since={}, now_ms=0)


Planner = Callable[[dict], Cut]


def fetch_path(scenario: dict) -> Cut:
    return plan_batch(fetched(scenario["broker"], scenario["starts"], scenario["partition_times"],
                              scenario["stops"]),
                      now_ms=scenario["now_ms"], max_task_idle_ms=scenario["max_task_idle_ms"],
                      idle_since=scenario["idle_since"], limits=scenario["limits"])


def time_index_path(scenario: dict) -> Cut:
    broker = scenario["broker"]
    return plan_from_index(indexed(broker, scenario["starts"], scenario["partition_times"], scenario["stops"]),
                           broker.first_offsets, broker.first_records, now_ms=scenario["now_ms"],
                           max_task_idle_ms=scenario["max_task_idle_ms"], idle_since=scenario["idle_since"],
                           limits=scenario["limits"])


def auto(index_path: Planner) -> tuple[Planner, list[str]]:
    """``planningMode=auto``: the index path, the fetch path where it cannot answer."""
    paths: list[str] = []

    def plan(scenario: dict) -> Cut:
        try:
            cut = index_path(scenario)
            paths.append("index")
            return cut
        except IndexCannotAnswer:
            paths.append("fetch")
            return fetch_path(scenario)
    return plan, paths


def batches(scenario: dict, plan: Planner) -> list[Batch]:
    """The query's batches until none is left (at most 40), each planned from what the
    previous one handed on, as ``SyncDriver.latest_offset`` hands it on. A batch that holds no
    record (``max.task.idle.ms=-1``: Spark's split of offsets can end on markers) is one too."""
    starts, partition_times = dict(scenario["starts"]), dict(scenario["partition_times"])
    stream_time, idle_since = NO_TIMESTAMP, {}
    out: list[Batch] = []
    for _ in range(40):
        cut = plan({**scenario, "starts": starts, "partition_times": partition_times, "idle_since": idle_since,
                    "limits": BatchLimits(scenario["max_records"], scenario["step"], stream_time)})
        idle_since = dict(cut.idle_since)
        if not cut.has_batch:
            return out
        held = {p: tuple(offsets) for p, offsets in readable(scenario["broker"], starts, cut).items() if offsets}
        stream_time = max(stream_time, NO_TIMESTAMP if cut.stream_time is None else cut.stream_time)
        starts = cut.end_offsets
        partition_times = {p: d.partition_time for p, d in cut.partitions.items()}
        out.append((held, partition_times, stream_time, cut.enforced))
    raise AssertionError("40 batches did not read the logs")


def assert_same_batches(scenario: dict, index_path: Planner) -> list[str]:
    plan, paths = auto(index_path)
    assert batches(scenario, plan) == batches(scenario, fetch_path), f"planned by {paths}"
    return paths


@settings(max_examples=examples(500), deadline=None)
@given(scenario=differential_logs(promise=False))
def test_the_time_index_path_hands_on_what_reading_every_record_does(scenario):
    assert_same_batches(scenario, time_index_path)


@settings(max_examples=examples(500), deadline=None)
@given(scenario=differential_logs(promise=True))
def test_the_record_probe_path_hands_on_what_reading_every_record_does(scenario):
    """The promise kept: the probe path's search, its records remembered across batches as
    ``ProbeIndexPath`` keeps them, over the same log."""
    records = OrderedRecords(scenario["broker"].first_records)
    assert_same_batches(scenario, lambda batch: probe_path_cut(batch, records))


def test_a_partition_cut_below_the_stream_time_hands_on_the_largest_time_it_gave():
    """Partition 0 gives 10 and 20 (the cut is at its first record above 25): the next batch
    starts from partition time 20 on every path, not from the level 25 it was cut at."""
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30, 40, 50]), tp(1): ModelLog([15, 25])})
    scenario = dict(broker=broker, starts={tp(0): 0, tp(1): 0}, partition_times={tp(0): -1, tp(1): -1},
                    stops={}, max_task_idle_ms=0, max_records=None, step=None, idle_since={}, now_ms=0)
    expected = batches(scenario, fetch_path)
    assert expected[0][1] == {tp(0): 20, tp(1): 25} and expected[0][2] == 25
    # Two batches, then none.
    assert assert_same_batches(scenario, time_index_path) == ["index"] * 3
    records = OrderedRecords(broker.first_records)
    assert assert_same_batches(scenario, lambda batch: probe_path_cut(batch, records)) == ["index"] * 3


def test_the_next_event_time_step_starts_from_the_time_the_records_reached():
    """``maxEventTimePerTrigger=20`` from nothing: the first slice is bounded at 19 and its
    records reach 15, so the next one ends at 35 — not at 39, a step past the bound. From the
    third slice on the batches themselves would differ (50 against 59)."""
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30, 40, 50]), tp(1): ModelLog([15, 25, 45, 55])})
    scenario = dict(broker=broker, starts={tp(0): 0, tp(1): 0}, partition_times={tp(0): -1, tp(1): -1},
                    stops={}, max_task_idle_ms=0, max_records=None, step=20, idle_since={}, now_ms=0)
    expected = batches(scenario, fetch_path)
    assert [stream_time for _, _, stream_time, _ in expected][:3] == [15, 30, 50]
    assert set(assert_same_batches(scenario, time_index_path)) == {"index"}
    records = OrderedRecords(broker.first_records)
    assert set(assert_same_batches(scenario, lambda batch: probe_path_cut(batch, records))) == {"index"}


def test_a_heartbeat_only_window_is_moved_over_as_on_the_fetch_path():
    """Heartbeats (time SKIPPED) take no part: the partition idles, and the batch that moves
    over them holds them as rows on both paths."""
    broker = ModelBroker({tp(0): ModelLog([10, 20, 30]),
                          tp(1): ModelLog([SKIPPED, SKIPPED], kinds=[HEARTBEAT, HEARTBEAT])})
    scenario = dict(broker=broker, starts={tp(0): 0, tp(1): 0}, partition_times={tp(0): -1, tp(1): -1},
                    stops={}, max_task_idle_ms=0, max_records=None, step=None, idle_since={}, now_ms=0)
    expected = batches(scenario, fetch_path)
    assert expected == [({tp(0): (0, 1, 2), tp(1): (0, 1)}, {tp(0): 30, tp(1): -1}, 30, True)]
    records = OrderedRecords(broker.first_records)
    # One batch, then none.
    assert assert_same_batches(scenario, lambda batch: probe_path_cut(batch, records)) == ["index"] * 2


@settings(max_examples=examples(400), deadline=None)
@given(scenario=differential_logs(promise=True), cap=st.integers(1, 12))
def test_a_capped_probe_batch_holds_the_fetch_paths_records_for_as_many_records(scenario, cap):
    """The difference left by design: a synchronized ``maxOffsetsPerTrigger`` counts offsets on
    the record-probe path (markers, aborted records and heartbeats included), records on the
    fetch path. Its batch is never more records than the cap, and with distinct times it holds
    the records taking part that the fetch path's batch holds when capped at the number of
    them it took. (A heartbeat right after the last record taken goes with that batch on the
    fetch path, which ends a capped partition at the first record left out, and with the next
    one here, which ends it at its offset count.)"""
    if scenario["max_task_idle_ms"] == NEVER_WAIT:
        return
    broker = scenario["broker"]
    times = [log.timestamps[o - log.log_start] for log in broker.logs.values()
             for o in range(log.log_start, log.end) if log.timed(o, broker.read_committed)]
    scenario = {**scenario, "limits": BatchLimits(cap, scenario["step"], NO_TIMESTAMP)}
    try:
        probe_cut = probe_path_cut(scenario, OrderedRecords(broker.first_records))
    except IndexCannotAnswer:
        return
    if not probe_cut.has_batch:
        return
    def taking_part(cut: Cut) -> dict:
        return {p: [o for o in offsets if broker.logs[p].timed(o, broker.read_committed)]
                for p, offsets in readable(broker, scenario["starts"], cut).items()}

    held = taking_part(probe_cut)
    timed = sum(map(len, held.values()))
    assert timed <= cap
    if timed == 0 or len(set(times)) != len(times):
        return
    fetch_cut = fetch_path({**scenario, "limits": BatchLimits(timed, scenario["step"], NO_TIMESTAMP)})
    assert taking_part(fetch_cut) == held
    assert {p: d.partition_time for p, d in fetch_cut.partitions.items()} == {
        p: d.partition_time for p, d in probe_cut.partitions.items()}
