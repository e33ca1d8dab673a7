"""End-to-end: Spark queries over format("kafkasync") on the embedded Kafka cluster."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import ApiKey, MockKafkaCluster, Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.planning.planner import WAIT_FOREVER
from kafkasync_source.spark.source import register

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module", autouse=True)
def kafkasync_registered(spark):
    register(spark)


class CapturedQuery:
    """Runs a kafkasync query into foreachBatch and keeps each batch's rows by batch id
    (a replayed batch overwrites its first run, so exactly-once is checkable)."""

    def __init__(self, spark, bootstrap, checkpoint, **options):
        self.batches: dict[int, list[tuple]] = {}
        reader = spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
        for key, value in {"startingOffsets": "earliest", **options}.items():
            reader = reader.option(key, str(value))
        rows = reader.load().selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS ts")
        self.first_data_at: float | None = None
        # Before start(): the query's first trigger (where an idle partition's wait begins) may
        # run before start() returns to Python on a busy machine, never before this.
        self.started = time.monotonic()
        self.query = (
            rows.writeStream.foreachBatch(self._sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def _sink(self, frame, batch_id):
        rows = [tuple(r) for r in frame.collect()]
        if rows and self.first_data_at is None:
            self.first_data_at = time.monotonic()
        self.batches[batch_id] = rows

    def records(self) -> list[tuple]:
        return [row for batch in self.batches.values() for row in batch]

    def wait_for_progress(self, batches_with_data: int = 1, timeout=PATIENCE_S):
        self.wait(lambda q: sum(1 for b in q.end_offsets() if q.batches.get(b)) >= batches_with_data,
                  timeout)

    def wait(self, condition, timeout=PATIENCE_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.query.exception() is not None:
                raise self.query.exception()
            if condition(self):
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out; {len(self.records())} records in {len(self.batches)} batches")

    def stop(self):
        self.query.stop()

    def progress(self) -> list[dict]:
        return [json.loads(p.json) for p in self.query.recentProgress]

    def end_offsets(self) -> dict[int, dict]:
        """batch id -> the kafkasync end offset Spark logged for it (a batch's progress is
        reported after its sink ran: wait for it with ``wait_for_progress``)."""
        ends = {p["batchId"]: p["sources"][0]["endOffset"] for p in self.progress()}
        return {batch: json.loads(end) if isinstance(end, str) else end for batch, end in ends.items()}


@pytest.fixture
def no_data_progress_every_100_ms(spark):
    """Queries started meanwhile report their no-data triggers too (Spark's default: one every
    10 s), so a test can see what the planner waited on before any batch had data."""
    setting = "spark.sql.streaming.noDataProgressEventInterval"
    previous = spark.conf.get(setting)
    spark.conf.set(setting, "100")
    yield
    spark.conf.set(setting, previous)


def waiting_on(progress: dict) -> dict[str, str]:
    """partition name -> why the planner of this trigger waited for it."""
    latest = progress["sources"][0].get("latestOffset")
    latest = json.loads(latest) if isinstance(latest, str) else latest or {}
    return {entry["partition"]: entry["state"] for entry in latest.get("waitingOn", [])}


def produce_rounds(cluster, topic, partitions, count, step_ms, start=BASE_TS):
    cluster.produce(
        topic, [Record(p, start + i * step_ms[p], None, b"v") for i in range(count) for p in range(partitions)]
    )


def test_batches_are_aligned_across_topics_and_partitions(spark, kafka_cluster, topic_factory, tmp_path):
    orders, payments = topic_factory(2), topic_factory(1)
    kafka_cluster.produce(orders, [Record(p, BASE_TS + i * (7 + 3 * p), None, b"o")
                                   for i in range(300) for p in range(2)])
    kafka_cluster.produce(payments, [Record(0, BASE_TS + i * 50, None, b"p") for i in range(60)])
    # A last record far in the future on every partition lets the query drain everything else
    # without enforcement: a partition only runs empty after its sentinel.
    for topic, partitions in ((orders, 2), (payments, 1)):
        kafka_cluster.produce(topic, [Record(p, BASE_TS + 10**7, None, b"end") for p in range(partitions)])
    total = 2 * 301 + 61

    query = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp",
                          subscribe=f"{orders},{payments}", **{"max.task.idle.ms": WAIT_FOREVER,
                                                               "buffered.records.per.partition": 60})
    try:
        query.wait(lambda q: len(q.records()) >= total)
        query.wait_for_progress(len([b for b in query.batches.values() if b]))
    finally:
        query.stop()

    records = query.records()
    assert Counter((t, p, o) for t, p, o, _ in records).most_common(1)[0][1] == 1
    assert len(records) == total
    ends = query.end_offsets()
    data_batches = sorted(b for b, rows in query.batches.items() if rows)
    assert len(data_batches) >= 5, "small buffers must spread the backlog over many batches"
    for earlier, later in zip(data_batches, data_batches[1:]):
        stream_time = ends[earlier]["streamTime"]
        assert min(ts for *_, ts in query.batches[later]) >= stream_time
    assert all(end["enforcedProcessingTotal"] == 0 for end in ends.values())
    assert all(end["lateRecordsTotal"] == 0 for end in ends.values())
    for topic, partitions in ((orders, 2), (payments, 1)):
        for p in range(partitions):
            offsets = [o for b in data_batches for t, pp, o, _ in query.batches[b] if (t, pp) == (topic, p)]
            assert offsets == sorted(offsets) == list(range(len(offsets)))


def test_idle_partition_blocks_until_max_task_idle_ms_then_enforces(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(10)])
    query = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp",
                          subscribe=topic, **{"max.task.idle.ms": 1500})
    try:
        query.wait(lambda q: len(q.records()) == 10)
        query.wait_for_progress()
    finally:
        query.stop()
    assert query.first_data_at - query.started >= 1.5
    last = query.end_offsets()[max(query.end_offsets())]
    assert last["enforcedProcessingTotal"] == 1
    assert last["topics"][topic]["0"]["partitionTime"] == BASE_TS + 9


def test_wait_forever_never_enforces_and_proceeds_once_data_arrives(
    spark, kafka_cluster, topic_factory, tmp_path, no_data_progress_every_100_ms
):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(10)])
    query = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp",
                          subscribe=topic, **{"max.task.idle.ms": WAIT_FOREVER})
    try:
        # Trigger after trigger plans nothing, waiting on the idle partition 1.
        query.wait(lambda q: sum(waiting_on(p).get(f"{topic}-1") == "idle-waiting" for p in q.progress()) >= 5)
        assert query.records() == [], "an idle partition must hold the batch back"
        kafka_cluster.produce(topic, [Record(1, BASE_TS + 5, None, b"late-producer")])
        query.wait(lambda q: len(q.records()) >= 7)
        query.wait_for_progress()
    finally:
        query.stop()
    # Stream time is min(9, 5) = 5: partition 0 contributes its records up to ts 5.
    ts_by_partition = {p: sorted(ts - BASE_TS for _, pp, _, ts in query.records() if pp == p) for p in (0, 1)}
    assert ts_by_partition == {0: [0, 1, 2, 3, 4, 5], 1: [5]}
    assert all(end["enforcedProcessingTotal"] == 0 for end in query.end_offsets().values())


def test_never_wait_takes_everything_without_enforcement(spark, kafka_cluster, topic_factory, tmp_path):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(10)])
    query = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp",
                          subscribe=topic, **{"max.task.idle.ms": -1})
    try:
        query.wait(lambda q: len(q.records()) == 10)
        query.wait_for_progress()
    finally:
        query.stop()
    assert all(end["enforcedProcessingTotal"] == 0 for end in query.end_offsets().values())


@pytest.mark.parametrize("max_task_idle_ms", [-1, 0])
def test_a_caught_up_query_reads_records_produced_later(
    spark, kafka_cluster, topic_factory, tmp_path, max_task_idle_ms, no_data_progress_every_100_ms
):
    """The log end captured for a batch's planning must not outlive a "nothing to read" answer:
    with -1 it bounded every later batch from the caught-up start, so nothing was read again."""
    topic = topic_factory(2)
    produce_rounds(kafka_cluster, topic, 2, 20, {0: 1, 1: 1})
    query = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp",
                          subscribe=topic, **{"max.task.idle.ms": max_task_idle_ms})
    try:
        query.wait(lambda q: len(q.records()) == 40)
        caught_up = max(query.batches)
        # Several triggers plan from the caught-up start.
        query.wait(lambda q: sum(p["batchId"] > caught_up and not p["numInputRows"] for p in q.progress()) >= 5)
        produce_rounds(kafka_cluster, topic, 2, 15, {0: 1, 1: 1}, start=BASE_TS + 1000)
        query.wait(lambda q: len(q.records()) == 70)
    finally:
        query.stop()
    assert sorted((p, o) for _, p, o, _ in query.records()) == [(p, o) for p in (0, 1) for o in range(35)]


def partition_0_held_for_partition_1s_fetch(progress: dict) -> bool:
    """A trigger that found partition 0 ready and planned nothing because partition 1's data
    was not fetched yet."""
    waits = waiting_on(progress)
    return (not progress["numInputRows"] and "lagging-0" not in waits
            and waits.get("lagging-1") in ("waiting-for-end-offset", "waiting-for-fetch"))


def read_with_a_slow_first_fetch_of_partition_1(spark, checkpoint) -> tuple[CapturedQuery, list[dict]]:
    """Reads 20 records from each of two partitions, whose leaders are two brokers, with
    max.task.idle.ms=0. Partition 1's first fetch answers 2 s late: meanwhile partition 0 is
    fetched and partition 1 is not known to be caught up. Only that request is slow (a slow
    broker made every request of the query, and so the test, take seconds)."""
    with MockKafkaCluster(brokers=2) as cluster:
        cluster.create_topic("lagging", 2)
        cluster.produce("lagging", [Record(p, BASE_TS + i, None, b"v") for i in range(20) for p in (0, 1)])
        cluster.set_partition_leader("lagging", 0, 1)
        cluster.set_partition_leader("lagging", 1, 2)
        cluster.push_broker_request_error_rtts(2, ApiKey.FETCH, (0, 2_000))
        query = CapturedQuery(spark, cluster.bootstrap_servers, checkpoint,
                              subscribe="lagging", **{"max.task.idle.ms": 0})
        try:
            query.wait(lambda q: len(q.records()) == 40)
            query.wait_for_progress(len([b for b in query.batches.values() if b]))
        finally:
            query.stop()
    return query, query.progress()


def test_partition_with_unfetched_data_blocks_instead_of_enforcing(
    spark, tmp_path, no_data_progress_every_100_ms
):
    # A run where no trigger came while partition 1's fetch was outstanding (a JVM that is not
    # warm yet can be busy for longer) proves nothing: it is repeated on a new cluster.
    for attempt in range(3):
        query, progress = read_with_a_slow_first_fetch_of_partition_1(spark, tmp_path / f"cp{attempt}")
        first_data_batch = min(b for b, rows in query.batches.items() if rows)
        first = query.batches[first_data_batch]
        assert {p for _, p, _, _ in first} == {0, 1}, "partition 0 must wait for partition 1's fetch"
        assert all(end["enforcedProcessingTotal"] <= 1 for end in query.end_offsets().values())
        assert query.end_offsets()[first_data_batch]["enforcedProcessingTotal"] == 0
        if any(partition_0_held_for_partition_1s_fetch(p) for p in progress if p["batchId"] <= first_data_batch):
            return
    pytest.fail("in 3 runs, no trigger found partition 0 ready while partition 1's fetch was outstanding")


def test_restart_from_checkpoint_reads_every_record_exactly_once(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(2)
    # 400 records in batches of at most 80: the first query stops part-way through them.
    produce_rounds(kafka_cluster, topic, 2, 200, {0: 10, 1: 13})
    options = dict(subscribe=topic, **{"buffered.records.per.partition": 40})
    first = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp", **options)
    try:
        first.wait(lambda q: sum(1 for rows in q.batches.values() if rows) >= 3)
    finally:
        first.stop()
    produce_rounds(kafka_cluster, topic, 2, 100, {0: 10, 1: 13}, start=BASE_TS + 10_000)
    second = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp", **options)
    try:
        second.wait(lambda q: len({**first.batches, **q.batches}) and
                    sum(len(r) for r in {**first.batches, **q.batches}.values()) >= 600)
    finally:
        second.stop()
    for batch_id in first.batches.keys() & second.batches.keys():
        assert sorted(first.batches[batch_id]) == sorted(second.batches[batch_id]), "replay differs"
    merged = {**first.batches, **second.batches}
    keys = [(t, p, o) for rows in merged.values() for t, p, o, _ in rows]
    assert len(keys) == len(set(keys)) == 600
    assert min(second.batches) > 0, "the restarted query continued the checkpoint's batch ids"


def test_bad_options_fail_at_query_start_naming_the_option(spark, kafka_cluster):
    reader = spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
    with pytest.raises(Exception, match=r"max\.task\.idle\.ms"):
        reader.option("subscribe", "t").option("max.task.idle.ms", "-5").load()
    with pytest.raises(Exception, match=r"Unknown option.*'maxoffsetspertriger'"):
        reader.option("subscribe", "t").option("maxOffsetsPerTriger", "5").load()


def test_missing_topic_fails_the_query_naming_it(spark, kafka_cluster, tmp_path):
    frame = (spark.readStream.format("kafkasync")
             .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", "no-such-topic-xyz").load())
    query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(StreamingQueryException, match="no-such-topic-xyz"):
        query.awaitTermination(PATIENCE_S)
    query.stop()


def test_topics_created_while_running_are_read_from_their_beginning(spark, kafka_cluster, unique_topic, tmp_path):
    prefix = unique_topic("discovered")
    kafka_cluster.create_topic(f"{prefix}-a", 1)
    kafka_cluster.produce(f"{prefix}-a", [Record(0, BASE_TS + i, None, b"a") for i in range(5)])
    query = CapturedQuery(spark, kafka_cluster.bootstrap_servers, tmp_path / "cp",
                          subscribePattern=f"{prefix}-.*", partitionDiscoveryIntervalMs=300)
    try:
        query.wait(lambda q: len(q.records()) == 5)
        kafka_cluster.create_topic(f"{prefix}-b", 2)
        kafka_cluster.produce(f"{prefix}-b", [Record(p, BASE_TS + 10 + i, None, b"b")
                                              for i in range(4) for p in range(2)])
        kafka_cluster.produce(f"{prefix}-a", [Record(0, BASE_TS + 20 + i, None, b"a") for i in range(3)])
        query.wait(lambda q: len(q.records()) == 16)
        query.wait_for_progress(len([b for b in query.batches.values() if b]))
    finally:
        query.stop()
    keys = Counter((t, p, o) for t, p, o, _ in query.records())
    assert max(keys.values()) == 1
    assert sorted(o for (t, p, o) in keys if t == f"{prefix}-b" and p == 1) == [0, 1, 2, 3]
    last = query.end_offsets()[max(query.end_offsets())]
    assert last["topics"][f"{prefix}-b"] == {"0": {"offset": 4, "partitionTime": BASE_TS + 13},
                                             "1": {"offset": 4, "partitionTime": BASE_TS + 13}}
