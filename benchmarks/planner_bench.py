"""Driver cost per trigger, at 8, 64 and 512 partitions.

Two measurements:

* ``plan_batch`` alone (pure), on *synthetic* PartitionStates whose buffers are full: the
  default ``driver.buffer.bytes`` (64 MiB, about 4.2 million records) split over the
  partitions, the most the planner ever sees. Partitions advance at different event-time
  rates, so the cut is partial.
* The whole driver path on the embedded cluster: a real :class:`KafkaSyncStreamReader`
  (driver fetcher, consumer, buffers) over a topic with that many partitions and
  ``DRIVER_RECORDS_PER_PARTITION`` small records each, all buffered. Timed: Spark's
  ``latestOffset(start)`` call on the first trigger (JSON in, fetcher repositioning,
  snapshot, plan, offsets, JSON out), and snapshot + plan repeated on the same buffers.

And the time-index planner (``plan_from_index``) alone, and the driver's fetch rate. Against: the
target of ``make bench`` (``benchmarks/run.py``), at most 50 ms a trigger at 512 partitions;
``benchmarks/trigger_cost.py`` measures a trigger on a real broker, beside ``format("kafka")``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks.harness.backlogs import BASE_TS, produce_uniform
from benchmarks.harness.index_model import IndexModel
from kafkasync_source.config.options import parse_options
from kafkasync_source.planning.planner import BatchLimits, PartitionState, TopicPartition, plan_batch
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

PARTITION_COUNTS = (8, 64, 512)
DRIVER_RECORDS_PER_PARTITION = 2_000


def budget_capacity(partitions: int) -> int:
    """Records per partition the default driver buffer budget allows."""
    options = parse_options({"kafka.bootstrap.servers": "-", "subscribe": "-"}, streaming=True)
    return options.buffer_capacity(partitions)


def synthetic_states(partitions: int, buffered: int) -> dict[TopicPartition, PartitionState]:
    states = {}
    for p in range(partitions):
        offsets = np.arange(buffered, dtype=np.int64)
        timestamps = BASE_TS + offsets * (10 + p % 7)  # different event-time rates
        states[TopicPartition("bench", p)] = PartitionState(
            start=0, offsets=offsets, timestamps=timestamps, position=buffered,
            end_offset=buffered * 4,  # a backlog: lag > 0
            buffer_full=True,
        )
    return states


def _median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def pure_planner_ms(partitions: int) -> float:
    buffered = budget_capacity(partitions)
    states = synthetic_states(partitions, buffered)
    now = int(time.time() * 1000)
    cut = plan_batch(states, now_ms=now, max_task_idle_ms=0, idle_since={})
    assert cut.has_batch and cut.records < partitions * buffered, "expected a partial cut"
    return _median_ms(
        lambda: plan_batch(states, now_ms=now, max_task_idle_ms=0, idle_since={}),
        reps=max(5, 400 // partitions),
    )


INDEX_RECORDS_PER_PARTITION = 1_000_000
"""The time-index path's cost does not grow with the backlog: a million records each."""


def index_planner(partitions: int, *, max_records: int | None = None) -> dict:
    """``plan_from_index`` alone (pure), at ``partitions`` partitions of a backlog the driver
    never reads, answered by an in-memory index with Kafka's by-time semantics (the first
    offset whose timestamp is >= t): milliseconds per plan without the round trips, and how
    many ListOffsets rounds the plan asks for (the round trips a broker adds)."""
    model = IndexModel("bench", partitions, INDEX_RECORDS_PER_PARTITION, BASE_TS, lambda p: 10 + p % 7)
    limits = BatchLimits(max_records=max_records, previous_stream_time=BASE_TS - 1)
    rounds: list[int] = []
    now = int(time.time() * 1000)
    cut = model.plan(limits, now, rounds)
    assert cut.has_batch and 0 < cut.records < partitions * model.records, "expected a partial cut"
    per_plan = len(rounds)
    milliseconds = _median_ms(lambda: model.plan(limits, now), reps=max(5, 400 // partitions))
    # + latest and max_timestamp, the two rounds every trigger starts with (time_index.py).
    return {"ms": milliseconds, "list_offsets_rounds": per_plan + 2}


def _fill_synthetically(fetcher, partitions: int, buffered: int) -> dict:
    """Fill a DriverFetcher's buffers to the bound without Kafka; returns the states used."""
    from kafkasync_source.driver.fetcher import _PartitionBuffer

    states = synthetic_states(partitions, buffered)
    with fetcher._lock:
        for tp, state in states.items():
            buffer = _PartitionBuffer(state.start, buffered)
            buffer.offsets[:] = state.offsets
            buffer.timestamps[:] = state.timestamps
            buffer.count = buffered
            buffer.position = state.position
            buffer.log_end = state.end_offset
            buffer.paused = True  # full: the fetch thread leaves it alone
            fetcher._buffers[tp] = buffer
    return states


def driver_full_buffers_ms(bootstrap: str, partitions: int) -> dict:
    """The driver with its buffers filled *synthetically* to the budget (producing 4 million
    records into the embedded cluster would take longer than the whole benchmark may):

    * ``snapshot_plan_ms``: snapshot() + plan_batch, median of repeated calls;
    * ``latest_offset_ms``: Spark's whole latestOffset(start) call on a fresh reader (JSON,
      fetcher repositioning, snapshot, plan, offsets), median of 3.
    """
    from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset

    options = parse_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": "synthetic",
         "startingOffsets": "earliest", "planningMode": "fetch"},
        streaming=True,
    )
    buffered = budget_capacity(partitions)
    latest, snapshot_plan = [], None
    for _ in range(3):
        reader = KafkaSyncStreamReader(options, kafka_schema(False))
        try:
            fetcher = reader._sync_driver().fetcher()
            states = _fill_synthetically(fetcher, partitions, buffered)
            now = int(time.time() * 1000)
            if snapshot_plan is None:
                snapshot_plan = _median_ms(
                    lambda fetcher=fetcher, now=now: plan_batch(fetcher.snapshot({}), now_ms=now, max_task_idle_ms=0,
                                       idle_since={}),
                    reps=max(5, 200 // partitions),
                )
            start = SyncOffset({tp: PartitionOffset(0) for tp in states}).to_json()
            started = time.perf_counter()
            end = reader.latestOffset(start, None)
            latest.append((time.perf_counter() - started) * 1000)
            assert end != start, "full buffers should cut a batch"
        finally:
            reader.stop()
    return {"snapshot_plan_ms": snapshot_plan, "latest_offset_ms": statistics.median(latest)}


def driver_path_ms(cluster, partitions: int, reps: int = 3) -> dict:
    """latestOffset() on the first trigger of the fetch path (median of ``reps`` fresh readers),
    and snapshot + plan on full buffers (median of 10) for a topic of ``partitions`` partitions."""
    topic = produce_uniform(
        cluster, f"planner-{partitions}", partitions, DRIVER_RECORDS_PER_PARTITION, value_bytes=10
    )
    options = parse_options(
        {
            "kafka.bootstrap.servers": cluster.bootstrap_servers,
            "subscribe": topic.name,
            "startingOffsets": "earliest",
            "planningMode": "fetch",
        },
        streaming=True,
    )
    latest, snapshot_plan = [], []
    for rep in range(reps):
        reader = KafkaSyncStreamReader(options, kafka_schema(False))
        try:
            start = reader.initialOffset()
            fetcher = reader._sync_driver().fetcher()
            # Position the fetcher as the first trigger would, then wait until every record
            # is buffered: "realistic buffers" for a backlog this size.
            fetcher.position_at({TopicPartition(topic.name, p): 0 for p in range(partitions)})
            deadline = time.monotonic() + 120
            while sum(fetcher.buffered().values()) < topic.records:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"driver fetcher: {fetcher.buffered()}")
                time.sleep(0.01)
            if rep == 0:
                now = int(time.time() * 1000)
                snapshot_plan.append(_median_ms(
                    lambda fetcher=fetcher, now=now: plan_batch(fetcher.snapshot({}), now_ms=now,
                                       max_task_idle_ms=0, idle_since={}),
                    reps=10,
                ))
            started = time.perf_counter()
            end = reader.latestOffset(start, None)
            latest.append((time.perf_counter() - started) * 1000)
            assert end != start, "the first trigger should cut a batch"
        finally:
            reader.stop()
    return {
        "latest_offset_ms": statistics.median(latest),
        "snapshot_plan_ms": snapshot_plan[0],
        "buffered_per_partition": DRIVER_RECORDS_PER_PARTITION,
    }


def driver_fetch_rps(bootstrap: str, topic, runs: int = 3) -> float:
    """Records/s of the driver's fetcher alone (offsets and timestamps of a whole backlog into
    its buffers), median of ``runs``: with one batch per backlog it precedes the executors."""
    from kafkasync_source.driver.fetcher import DriverFetcher

    options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic.name},
                            streaming=True)
    rates = []
    for _ in range(runs):
        fetcher = DriverFetcher(options.client_config, buffer_capacity=options.buffer_capacity,
                                fail_on_data_loss=True)
        try:
            started = time.perf_counter()
            fetcher.position_at({TopicPartition(topic.name, p): 0 for p in range(topic.partitions)})
            deadline = time.monotonic() + 120
            while sum(fetcher.buffered().values()) < topic.records:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"driver fetcher: {fetcher.buffered()}")
                time.sleep(0.002)
            rates.append(topic.records / (time.perf_counter() - started))
        finally:
            fetcher.close()
    return statistics.median(rates)
