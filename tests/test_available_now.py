"""Trigger.AvailableNow: bounded runs, durable stop offsets (KIP-95).

Most tests drive the driver-side objects directly (SyncDriver + AvailableNowRun, exactly what
the stream reader calls): fast and deterministic. The Spark tests at the end run real
AvailableNow queries, including a failure restart.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options
from kafkasync_source.driver.autostop import _main
from kafkasync_source.driver.bounded_run import AvailableNowRun, bounded_states
from kafkasync_source.driver.offset_reader import OffsetReader
from kafkasync_source.driver.stop_offset_store import (
    DONE,
    RUNNING,
    KafkaSyncAutostopError,
    StopOffsetStore,
    StopTarget,
    read_stop_offsets,
    reset_stop_offsets,
)
from kafkasync_source.driver.sync_driver import SyncDriver
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import WAIT_FOREVER, PartitionState, PartitionStatus, TopicPartition, plan_batch
from kafkasync_source.spark.source import register

BASE_TS = 1_700_000_000_000
UNKNOWN_TOPIC_OR_PART = 3


FAST_REFILL = {"kafka.fetch.wait.max.ms": "20"}
"""A resumed partition otherwise waits for the broker's long poll on the others (500 ms)."""


def options_for(cluster, **extra):
    return parse_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "startingOffsets": "earliest",
         **FAST_REFILL, **{k: str(v) for k, v in extra.items()}},
        streaming=True,
    )


@pytest.fixture
def store_topic(kafka_cluster, unique_topic):
    """A stop-offset topic of this test's own (the mock cannot create it through AdminClient)."""
    name = unique_topic("autostop")
    kafka_cluster.create_topic(name, 1)
    return name


@pytest.fixture
def durable(store_topic):
    """Options that make a query's AvailableNow runs durable under a fresh key."""
    return {"autostop.offsets": "durable", "autostop.key": f"q-{uuid.uuid4().hex[:8]}",
            "autostop.topic": store_topic}


class Run:
    """One AvailableNow run driven like Spark drives it: prepare, then latestOffset until it
    returns its start. ``batches`` holds each batch's (start, end)."""

    def __init__(self, options, start=None):
        self.driver = SyncDriver(options)
        self.driver.prepare_available_now()
        self.run: AvailableNowRun = self.driver.available_now
        self.start = start if start is not None else self.driver.initial_offset()
        self.batches: list[tuple[SyncOffset, SyncOffset]] = []

    def step(self) -> bool:
        """Plan one batch; False once the run is over."""
        end = self.run.next_offset(self.driver, self.start)
        if end is self.start:
            return False
        self.batches.append((self.start, end))
        self.start = end
        return True

    def to_end(self, on_batch=None, max_batches=500):
        for _ in range(max_batches):
            if not self.step():
                return self
            if on_batch is not None:
                on_batch(len(self.batches))
        raise AssertionError("the run did not end")

    def close(self):
        self.driver.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def offsets(self) -> dict[TopicPartition, int]:
        return self.start.next_offsets()

    def ranges(self):
        """(tp, start, end) of every non-empty range this run planned."""
        return [(tp, a.partitions.get(tp, PartitionOffset(e.next_offset)).next_offset, e.next_offset)
                for a, b in self.batches for tp, e in b.partitions.items()
                if e.next_offset > a.partitions.get(tp, PartitionOffset(e.next_offset)).next_offset]


def produce(cluster, topic, partitions, count, step_ms=10, start_ts=BASE_TS):
    cluster.produce(topic, [Record(p, start_ts + i * step_ms * (p + 1), None, b"v")
                            for i in range(count) for p in range(partitions)])


# --------------------------------------------------------------------- planner input


def test_bounded_states_lift_end_offsets_so_data_below_the_stop_is_never_idle():
    tp, other, outside = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    start = SyncOffset({tp: PartitionOffset(5), other: PartitionOffset(9, 42), outside: PartitionOffset(3)})
    # The fetcher has nothing buffered for tp and an out-of-date cached end offset of 5.
    fetched = {tp: PartitionState(start=5, offsets=[], timestamps=[], position=5, end_offset=5)}
    states = bounded_states(start, fetched, {tp: 8, other: 9})
    assert states[tp].stop_offset == 8 and states[tp].end_offset == 8
    assert states[other].stop_offset == 9 and states[other].partition_time == 42
    assert states[outside].stop_offset == 3, "a partition outside the target is finished where it is"
    cut = plan_batch(states, now_ms=0, max_task_idle_ms=0, idle_since={})
    assert cut.partitions[tp].status is PartitionStatus.WAITING_FOR_FETCH
    assert cut.partitions[other].status is PartitionStatus.FINISHED
    assert cut.partitions[outside].status is PartitionStatus.FINISHED
    assert not cut.has_batch and not cut.enforced and not cut.all_finished


# ------------------------------------------------------------------ bounded runs (driver)


def test_run_stops_at_the_end_of_log_of_its_start_while_producing_continues(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    produce(kafka_cluster, topic, 2, 60)
    options = options_for(kafka_cluster, subscribe=topic, **{"buffered.records.per.partition": 7})

    def keep_producing(batch):
        produce(kafka_cluster, topic, 2, 5, start_ts=BASE_TS + 10**6 + batch)

    with Run(options) as run:
        run.to_end(on_batch=keep_producing)
    assert run.run.captured == {TopicPartition(topic, 0): 60, TopicPartition(topic, 1): 60}
    assert run.offsets() == run.run.captured, "stopped at the target, not at the moving end"
    assert len(run.batches) >= 10, "the bounded run still cuts synchronized batches"
    for tp in run.run.captured:  # every offset below the target exactly once, in order
        covered = [(a, b) for t, a, b in run.ranges() if t == tp]
        assert covered[0][0] == 0 and all(b == c for (_, b), (c, _) in zip(covered, covered[1:]))
    for (_, earlier), (_, later) in zip(run.batches, run.batches[1:]):
        assert later.stream_time >= earlier.stream_time
    assert run.start.enforced_processing_total == 0


@pytest.mark.parametrize("idle_ms", [0, 5_000, WAIT_FOREVER])
def test_finished_partitions_never_block_and_are_never_waited_for(kafka_cluster, topic_factory, idle_ms):
    topic = topic_factory(3)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"short") for i in range(3)])
    kafka_cluster.produce(topic, [Record(1, BASE_TS + i, None, b"long") for i in range(40)])
    # partition 2 is empty: finished from the start
    options = options_for(kafka_cluster, subscribe=topic, **{"max.task.idle.ms": idle_ms,
                                                            "buffered.records.per.partition": 10})
    with Run(options) as run:
        statuses = set()
        plan = run.driver.next_offset

        def noting_why(*args, **kwargs):
            """Every plan of the run, those that waited too: why each partition took part or not."""
            end = plan(*args, **kwargs)
            if run.driver.last_cut is not None:
                statuses.update(decision.status for decision in run.driver.last_cut.partitions.values())
            return end

        run.driver.next_offset = noting_why
        run.to_end()
    # What the planner decided, not how long the run took (under 4 s, asserted before, was
    # the machine's speed as much as the absence of a wait).
    assert PartitionStatus.IDLE_WAITING not in statuses, "no idle waiting inside a bounded run"
    assert PartitionStatus.FINISHED in statuses
    assert run.offsets() == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 40,
                             TopicPartition(topic, 2): 0}
    assert run.start.enforced_processing_total == 0, "a finished partition is not given up on"
    assert run.driver.last_cut.all_finished


def test_an_empty_target_ends_the_run_at_once(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    with Run(options_for(kafka_cluster, subscribe=topic)) as run:
        assert run.step() is False
    assert run.batches == [] and run.run.finished


def test_a_run_ends_exactly_at_its_stop_offsets_across_transaction_markers(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    for batch in range(2):
        kafka_cluster.produce_transaction(
            topic, [Record(0, BASE_TS + 10 * batch + i, None, b"v") for i in range(5)]
        )
    high = kafka_cluster.end_offsets(topic)[0][1]
    assert high == 12, "5 records + 1 commit marker, twice"
    options = options_for(kafka_cluster, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    with Run(options) as run:
        run.to_end()
    assert run.offsets() == {TopicPartition(topic, 0): 12}, "the trailing marker is carried too"
    assert run.batches[-1][0].next_offsets() != run.batches[-1][1].next_offsets()


def test_partitions_created_during_a_run_are_left_to_the_next_run(kafka_cluster, unique_topic):
    prefix = unique_topic("grow")
    kafka_cluster.create_topic(f"{prefix}.a", 1)
    kafka_cluster.produce(f"{prefix}.a", [Record(0, BASE_TS + i, None, b"a") for i in range(20)])
    options = options_for(kafka_cluster, subscribePattern=prefix.replace(".", r"\.") + r"\..*",
                          partitionDiscoveryIntervalMs=1, **{"buffered.records.per.partition": 5})

    def add_partitions(batch):
        if batch == 1:
            kafka_cluster.create_topic(f"{prefix}.b", 2)
            kafka_cluster.produce(f"{prefix}.b", [Record(p, BASE_TS, None, b"b") for p in (0, 1)])
            time.sleep(0.05)

    with Run(options) as first:
        first.to_end(on_batch=add_partitions)
    a0, b0, b1 = (TopicPartition(f"{prefix}.a", 0), TopicPartition(f"{prefix}.b", 0),
                  TopicPartition(f"{prefix}.b", 1))
    assert first.offsets() == {a0: 20}, "new partitions are not read (nor added) in this run"
    kafka_cluster.produce(f"{prefix}.a", [Record(0, BASE_TS + 99, None, b"a")])
    with Run(options, start=first.start) as second:
        second.to_end()
    assert second.offsets() == {a0: 21, b0: 1, b1: 1}, "the next run reads them from their beginning"
    assert second.ranges()[0] == (b0, 0, 0) or any(r[0] == b0 and r[1] == 0 for r in second.ranges())


@pytest.mark.mock_brokers(2)
def test_a_topic_deleted_during_a_run_fails_it_naming_the_topic_and_a_restart_finishes(fresh_cluster):
    cluster = fresh_cluster
    cluster.create_topic("keep", 1)
    cluster.create_topic("doomed", 1)
    cluster.create_topic("autostop", 1)
    cluster.set_partition_leader("keep", 0, 1)
    cluster.set_partition_leader("autostop", 0, 1)
    cluster.set_partition_leader("doomed", 0, 2)
    for topic in ("keep", "doomed"):
        cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(30)])
    durable = {"autostop.offsets": "durable", "autostop.key": "q", "autostop.topic": "autostop"}
    options = options_for(cluster, subscribe="keep,doomed", **durable,
                          **{"buffered.records.per.partition": 5})

    def delete(batch):
        if batch == 1:  # what a client sees of a deleted topic: gone from metadata, no fetches
            cluster.set_topic_error("doomed", UNKNOWN_TOPIC_OR_PART)
            cluster.broker_down(2)

    began = time.monotonic()
    with Run(options) as first:
        with pytest.raises(KafkaSyncAutostopError, match=r"doomed-0 \(at offset \d+, stop offset 30\) no longer exist"):
            first.to_end(on_batch=delete)
    # Found by the run's existence check (every 2 s), not after kafkaConsumer.pollTimeoutMs
    # (120 s) without progress: a deadline between the two, not a speed (30 s was one).
    assert time.monotonic() - began < 90, "a deleted topic must never make a run wait forever"
    with Run(options, start=first.start) as restart:
        restart.to_end()
    assert restart.offsets()[TopicPartition("keep", 0)] == 30
    assert restart.offsets()[TopicPartition("doomed", 0)] < 30, "left out: its records are gone"
    assert read_stop_offsets(_raw(options, durable)).state == DONE


@pytest.mark.mock_brokers(2)
def test_a_run_that_cannot_fetch_fails_after_poll_timeout_naming_the_partition(fresh_cluster):
    fresh_cluster.create_topic("stuck", 2)
    fresh_cluster.set_partition_leader("stuck", 0, 1)
    fresh_cluster.set_partition_leader("stuck", 1, 2)
    fresh_cluster.produce("stuck", [Record(p, BASE_TS + i, None, b"v") for i in range(10) for p in (0, 1)])
    options = options_for(fresh_cluster, subscribe="stuck", **{"kafkaConsumer.pollTimeoutMs": 1500})
    with Run(options) as run:
        fresh_cluster.broker_down(2)  # the partition exists, but cannot be fetched
        began = time.monotonic()
        with pytest.raises(KafkaSyncAutostopError, match=r"no progress for 1500 ms.*stuck-1 is waiting"):
            while run.step():
                pass
        # The message says the poll timeout ended it; this, that nothing else held it long (a
        # metadata look-up of the broker down takes up to 30 s): a deadline, not a speed.
        assert time.monotonic() - began < 25


def test_transient_mode_captures_a_new_target_on_every_start(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    produce(kafka_cluster, topic, 1, 30)
    options = options_for(kafka_cluster, subscribe=topic, **{"buffered.records.per.partition": 5})
    with Run(options) as crashed:
        crashed.step()
    produce(kafka_cluster, topic, 1, 10, start_ts=BASE_TS + 10**6)
    with Run(options, start=crashed.start) as restart:
        restart.to_end()
    assert restart.offsets() == {TopicPartition(topic, 0): 40}, "Spark's behaviour: target moved"


# ------------------------------------------------------------ durable stop offsets (driver)


def _raw(options, durable):
    return {"kafka.bootstrap.servers": options.bootstrap_servers, "subscribe": "-", **durable}


def test_durable_restart_after_a_failure_keeps_the_first_target_and_a_clean_finish_clears_it(
    kafka_cluster, topic_factory, durable
):
    topic = topic_factory(2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    produce(kafka_cluster, topic, 2, 40)
    options = options_for(kafka_cluster, subscribe=topic, **durable,
                          **{"buffered.records.per.partition": 6})
    with Run(options) as crashed:
        crashed.step()
        crashed.step()
    stored = read_stop_offsets(_raw(options, durable))
    assert stored.state == RUNNING and stored.stop_offsets == {tp0: 40, tp1: 40}
    assert stored.started_from == {tp0: 0, tp1: 0}

    produce(kafka_cluster, topic, 2, 15, start_ts=BASE_TS + 10**6)  # between failure and restart
    with Run(options, start=crashed.start) as restart:
        restart.to_end()
    assert restart.offsets() == {tp0: 40, tp1: 40}, "the restart stops at the first start's target"
    finished = read_stop_offsets(_raw(options, durable))
    assert finished.state == DONE and finished.run_id == stored.run_id and finished.finished_at_ms

    with Run(options, start=restart.start) as following:
        following.to_end()
    assert following.offsets() == {tp0: 55, tp1: 55}, "after a clean finish: a new target"
    assert following.ranges() and all(a >= 40 for _, a, _ in following.ranges())
    assert read_stop_offsets(_raw(options, durable)).run_id != stored.run_id


def test_running_target_already_reached_counts_as_finished(kafka_cluster, topic_factory, durable):
    """Crash after the last batch, before the done record: the next run takes new data."""
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    produce(kafka_cluster, topic, 1, 20)
    options = options_for(kafka_cluster, subscribe=topic, **durable)
    store = StopOffsetStore(options.client_config, durable["autostop.topic"])
    store.save(StopTarget(durable["autostop.key"], "old", RUNNING, {tp: 12}, {tp: 0}))
    with Run(options, start=SyncOffset({tp: PartitionOffset(12)})) as run:
        run.to_end()
    assert run.offsets() == {tp: 20}


def test_running_target_of_a_later_checkpoint_is_not_reused(kafka_cluster, topic_factory, durable):
    """A new (or rolled-back) checkpoint under the same key starts below where the stored
    run started: it cannot be that run's restart."""
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    produce(kafka_cluster, topic, 1, 20)
    options = options_for(kafka_cluster, subscribe=topic, **durable)
    store = StopOffsetStore(options.client_config, durable["autostop.topic"])
    store.save(StopTarget(durable["autostop.key"], "other", RUNNING, {tp: 15}, {tp: 10}))
    with Run(options) as run:  # starts at earliest = 0 < 10
        run.to_end()
    assert run.offsets() == {tp: 20}


def test_reset_clears_the_stored_target(kafka_cluster, topic_factory, durable, capsys):
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    produce(kafka_cluster, topic, 1, 20)
    options = options_for(kafka_cluster, subscribe=topic, **durable, **{"buffered.records.per.partition": 5})
    with Run(options) as crashed:
        crashed.step()
    produce(kafka_cluster, topic, 1, 5, start_ts=BASE_TS + 10**6)
    raw = _raw(options, durable)
    args = ["--bootstrap-servers", options.bootstrap_servers, "--key", durable["autostop.key"],
            "--topic", durable["autostop.topic"]]
    assert _main(["show", *args]) == 0
    assert json.loads(capsys.readouterr().out)["stopOffsets"] == {topic: {"0": 20}}
    assert _main(["reset", *args]) == 0
    assert "captures new stop offsets" in capsys.readouterr().out
    assert read_stop_offsets(raw) is None
    assert reset_stop_offsets(raw) is None  # idempotent
    with Run(options, start=crashed.start) as run:
        run.to_end()
    assert run.offsets() == {tp: 25}, "after a reset the restart captures a new target"


def test_store_reads_the_latest_record_of_its_key_only(kafka_cluster, store_topic):
    store = StopOffsetStore({"bootstrap.servers": kafka_cluster.bootstrap_servers}, store_topic)
    tp = TopicPartition("t", 0)
    assert store.load("a") is None
    store.save(StopTarget("a", "1", RUNNING, {tp: 1}))
    store.save(StopTarget("b", "2", RUNNING, {tp: 2}))
    store.save(StopTarget("a", "3", DONE, {tp: 3}, finished_at_ms=7))
    loaded = store.load("a")
    assert (loaded.run_id, loaded.state, loaded.stop_offsets, loaded.finished_at_ms) == ("3", DONE, {tp: 3}, 7)
    assert store.load("b").stop_offsets == {tp: 2}
    store.delete("a")
    assert store.load("a") is None and store.load("b") is not None


@pytest.mark.parametrize("value", [b'{"format":"kafkasync-autostop","version":1,"state":"run',
                                   b"not json", b'{"format":"other"}',
                                   b'{"format":"kafkasync-autostop","version":99,"state":"running"}'])
def test_an_unusable_stored_target_fails_the_start_naming_key_and_reset(kafka_cluster, store_topic, value):
    kafka_cluster.produce(store_topic, [Record(0, BASE_TS, "k", value)])
    store = StopOffsetStore({"bootstrap.servers": kafka_cluster.bootstrap_servers}, store_topic)
    with pytest.raises(KafkaSyncAutostopError, match=r"autostop\.key='k'.*unusable.*reset"):
        store.load("k")


def test_missing_store_topic_that_cannot_be_created_is_named(kafka_cluster, unique_topic):
    name = unique_topic("absent")
    store = StopOffsetStore({"bootstrap.servers": kafka_cluster.bootstrap_servers}, name, timeout_s=1)
    with pytest.raises(KafkaSyncAutostopError, match=rf"'{name}' \(option 'autostop.topic'\).*cleanup.policy=compact"):
        store.ensure_topic()


def test_autostop_options_are_validated():
    base = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}
    assert parse_options(base, streaming=True).autostop_offsets == "transient"
    parsed = parse_options({**base, "autostop.offsets": "DURABLE", "autostop.key": " nightly "}, streaming=True)
    assert (parsed.autostop_offsets, parsed.autostop_key, parsed.autostop_topic) == (
        "durable", "nightly", "kafkasync-autostop")
    for bad, message in [
        ({"autostop.offsets": "forever"}, r"'autostop.offsets' must be 'transient'"),
        ({"autostop.offsets": "durable"}, r"'autostop.key' is required"),
        ({"autostop.offsets": "durable", "autostop.key": "  "}, r"'autostop.key' is required"),
        ({"autostop.key": "k"}, r"'autostop.key' only applies with autostop.offsets=durable"),
        ({"autostop.topic": "x"}, r"'autostop.topic' only applies"),
        ({"autostop.offsets": "durable", "autostop.key": "k", "autostop.topic": "a b"},
         r"'autostop.topic' must be a Kafka topic name"),
        ({"autostop.stopat": "eol"}, r"Unknown option.*'autostop.stopat'"),
    ]:
        with pytest.raises(KafkaSyncOptionError, match=message):
            parse_options({**base, **bad}, streaming=True)
    with pytest.raises(KafkaSyncOptionError, match=r"'autostop.offsets' applies to streaming"):
        parse_options({**base, "autostop.offsets": "transient"}, streaming=False)


# ------------------------------------------------------- stopping at a time (driver)


@pytest.fixture
def broker_time_lookup(monkeypatch, kafka_cluster):
    """ListOffsets by time answered as a real broker answers it (computed from the log): the
    embedded cluster answers -1 to every such request. Everything else still talks Kafka."""

    def answer(_reader, timestamps):
        found = kafka_cluster.offsets_for_times({(tp.topic, tp.partition): t for tp, t in timestamps.items()})
        return {TopicPartition(topic, partition): offset for (topic, partition), offset in found.items()}

    monkeypatch.setattr(OffsetReader, "offsets_for_times", answer)


def produce_at_rates(cluster, topic, steps_ms, span_ms, start_ts=BASE_TS):
    """Partition p gets one record every steps_ms[p] over span_ms: different rates, same time span."""
    cluster.produce(topic, [Record(p, start_ts + i * step, None, b"v")
                            for p, step in enumerate(steps_ms) for i in range(span_ms // step)])


def test_a_run_with_an_ending_timestamp_stops_every_partition_at_its_first_record_at_that_time(
    kafka_cluster, topic_factory, broker_time_lookup
):
    topic = topic_factory(3)
    produce_at_rates(kafka_cluster, topic, (10, 30, 100), 3_000)  # 300, 100 and 30 records
    until = BASE_TS + 1_500
    options = options_for(kafka_cluster, subscribe=topic, endingTimestamp=until, maxOffsetsPerTrigger=40)
    with Run(options) as run:
        run.to_end()
    tps = [TopicPartition(topic, p) for p in range(3)]
    assert run.run.captured == {tps[0]: 150, tps[1]: 50, tps[2]: 15}, "1500 ms / step: the first record at the time"
    assert run.offsets() == run.run.captured and run.run.finished
    assert run.start.stream_time == BASE_TS + 1_490, "the newest record before the time, no later one"
    assert len(run.batches) >= 5, "maxOffsetsPerTrigger still cuts the run into batches"
    for _, end in run.batches[:-1]:  # synchronized inside the run: no partition runs ahead
        times = [end.partitions[tp].partition_time for tp in tps if end.partitions[tp].next_offset < run.run.captured[tp]]
        assert max(times) - min(times) <= 100, f"partition times {times} drift apart"


def test_an_ending_timestamp_no_record_reaches_stops_at_the_captured_end(
    kafka_cluster, topic_factory, broker_time_lookup
):
    topic = topic_factory(2)
    produce(kafka_cluster, topic, 2, 20)
    options = options_for(kafka_cluster, subscribe=topic, endingTimestamp=BASE_TS + 10**7)
    with Run(options) as run:
        produce(kafka_cluster, topic, 2, 5, start_ts=BASE_TS + 10**8)  # after the capture
        run.to_end()
    assert run.offsets() == {TopicPartition(topic, 0): 20, TopicPartition(topic, 1): 20}


def test_a_durable_run_with_an_ending_timestamp_restarts_at_the_same_stops_and_a_new_time_is_a_new_run(
    kafka_cluster, topic_factory, durable, broker_time_lookup, caplog
):
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    produce(kafka_cluster, topic, 1, 40)  # BASE_TS + 10 ms steps
    late_end = BASE_TS + 10**6  # past every record: the run stops at the end captured first
    options = options_for(kafka_cluster, subscribe=topic, endingTimestamp=late_end, **durable,
                          **{"buffered.records.per.partition": 6})
    with Run(options) as crashed:
        crashed.step()
    stored = read_stop_offsets(_raw(options, durable))
    assert (stored.state, stored.stop_offsets, stored.ending_time) == (RUNNING, {tp: 40}, late_end)
    # Written between the failure and the restart, before the ending time: a new look-up
    # would now stop at 55; the restart keeps the first start's target.
    produce(kafka_cluster, topic, 1, 15, start_ts=BASE_TS + 500)
    with Run(options, start=crashed.start) as restart:
        restart.to_end()
    assert restart.offsets() == {tp: 40}
    assert read_stop_offsets(_raw(options, durable)).state == DONE

    with Run(options_for(kafka_cluster, subscribe=topic, endingTimestamp=BASE_TS + 200, **durable,
                         **{"buffered.records.per.partition": 6})) as crashed_again:
        crashed_again.step()
    with caplog.at_level("WARNING"), Run(
        options_for(kafka_cluster, subscribe=topic, endingTimestamp=BASE_TS + 300, **durable),
        start=crashed_again.start,
    ) as changed:
        assert changed.run.resolve(changed.start) == {tp: 30}, "a new time: a new target"
    assert "it was captured for endingTimestamp=%d, this start asks for endingTimestamp=%d" % (
        BASE_TS + 200, BASE_TS + 300) in caplog.text


def test_stored_targets_keep_their_ending_time_and_older_records_have_none():
    tp = TopicPartition("t", 3)
    for ending in (None, 1_700_000_000_000, {tp: 1_700_000_000_000}):
        target = StopTarget("k", "r", RUNNING, {tp: 5}, {tp: 0}, ending_time=ending)
        assert StopTarget.from_bytes("k", target.to_bytes(), topic="s").ending_time == ending
    before = json.loads(StopTarget("k", "r", RUNNING, {tp: 5}).to_bytes())
    del before["endingTime"]  # a record written before kafkasync stored the ending time
    assert StopTarget.from_bytes("k", json.dumps(before).encode(), topic="s").ending_time is None


def test_ending_timestamps_are_accepted_by_streaming_queries():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
    assert parse_options({**base, "endingTimestamp": "5"}, streaming=True).timestamps.ending == 5
    by_partition = parse_options({**base, "endingOffsetsByTimestamp": '{"a":{"0":7}}'}, streaming=True)
    assert by_partition.timestamps.ending == {"a": {0: 7}}
    assert by_partition.timestamps.ending_option == "endingOffsetsByTimestamp"


# -------------------------------------------------------------------- Spark end to end


@pytest.fixture(scope="module")
def registered(spark):
    register(spark)
    return spark


class AvailableNowQuery:
    """One trigger(availableNow=True) run into foreachBatch; ``on_batch(batch_id)`` runs in
    the sink (it may produce, or raise to fail the run)."""

    def __init__(self, spark, cluster, checkpoint, on_batch=None, **options):
        self.batches: dict[int, list[tuple]] = {}
        self._on_batch = on_batch
        reader = spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        for key, value in {"startingOffsets": "earliest", **FAST_REFILL, **options}.items():
            reader = reader.option(key, str(value))
        rows = reader.load().selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ts")
        self.query = (rows.writeStream.foreachBatch(self._sink)
                      .option("checkpointLocation", str(checkpoint))
                      .trigger(availableNow=True).start())

    def _sink(self, frame, batch_id):
        self.batches[batch_id] = [tuple(r) for r in frame.collect()]
        if self._on_batch is not None:
            self._on_batch(batch_id)

    def wait(self, timeout=PATIENCE_S):
        finished = self.query.awaitTermination(timeout)
        assert finished, "an AvailableNow run must end by itself"
        return self

    def keys(self):
        return [(t, p, o) for rows in self.batches.values() for t, p, o, _ in rows]


def test_spark_run_stops_at_its_original_target_while_producing_continues(
    registered, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(2)
    produce(kafka_cluster, topic, 2, 60, step_ms=5)

    def more(batch_id):
        produce(kafka_cluster, topic, 2, 20, start_ts=BASE_TS + 10**6 + batch_id)

    query = AvailableNowQuery(registered, kafka_cluster, tmp_path / "cp", on_batch=more, subscribe=topic,
                              **{"buffered.records.per.partition": 20}).wait()
    keys = query.keys()
    assert sorted(keys) == [(topic, p, o) for p in (0, 1) for o in range(60)]
    data = [b for b in sorted(query.batches) if query.batches[b]]
    assert len(data) >= 3, "small buffers spread the run over several batches"
    ends = {p["batchId"]: p["sources"][0]["endOffset"] for p in map(json.loads, (p.json for p in query.query.recentProgress))}
    ends = {b: json.loads(e) if isinstance(e, str) else e for b, e in ends.items()}
    for earlier, later in zip(data, data[1:]):  # synchronization still applies inside the run
        assert min(ts for *_, ts in query.batches[later]) >= ends[earlier]["streamTime"]


def test_spark_failure_restart_stops_at_the_same_target_exactly_once_then_next_run_reads_only_new(
    registered, kafka_cluster, topic_factory, durable, tmp_path
):
    topic = topic_factory(2)
    produce(kafka_cluster, topic, 2, 60)
    checkpoint = tmp_path / "cp"
    options = dict(subscribe=topic, **durable, **{"buffered.records.per.partition": 15})

    def fail_third_batch(batch_id):
        produce(kafka_cluster, topic, 2, 3, start_ts=BASE_TS + 10**6 + 10 * batch_id)  # after the target
        if batch_id == 2:
            raise RuntimeError("injected failure")

    first = AvailableNowQuery(registered, kafka_cluster, checkpoint, on_batch=fail_third_batch, **options)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        first.query.awaitTermination(PATIENCE_S)
    target = read_stop_offsets({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers,
                                "subscribe": topic, **durable})
    assert target.state == RUNNING
    assert target.stop_offsets == {TopicPartition(topic, 0): 60, TopicPartition(topic, 1): 60}
    produce(kafka_cluster, topic, 2, 7, start_ts=BASE_TS + 2 * 10**6)

    second = AvailableNowQuery(registered, kafka_cluster, checkpoint, **options).wait()
    merged = {**first.batches, **second.batches}  # batch 2 ran again after the failure
    assert sorted(first.batches[2]) == sorted(second.batches[2]), "the failed batch replays exactly"
    keys = [k for rows in merged.values() for k in [(t, p, o) for t, p, o, _ in rows]]
    assert sorted(keys) == [(topic, p, o) for p in (0, 1) for o in range(60)], "exactly once, same target"
    done = read_stop_offsets({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers,
                              "subscribe": topic, **durable})
    assert done.state == DONE and done.run_id == target.run_id

    high = {p: kafka_cluster.end_offsets(topic)[p][1] for p in (0, 1)}
    third = AvailableNowQuery(registered, kafka_cluster, checkpoint, **options).wait()
    assert sorted(third.keys()) == [(topic, p, o) for p in (0, 1) for o in range(60, high[p])]
    assert min(third.batches) > max(merged)
