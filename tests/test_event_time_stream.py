"""Event time taken from the record, end to end on the embedded cluster.

* A backfill re-published by a copy job (Kafka timestamp = write time, event time only in the
  JSON value): synchronizing on the Kafka timestamp drops records behind a watermark on the
  payload's time; with ``eventTime.jsonPath`` nothing is dropped, under ``maxOffsetsPerTrigger``.
* Property: with ``eventTime.*`` the driver's batches are prefixes of a pure merge of the
  partitions by extracted time (Kafka Streams' processing order), whatever the Kafka
  timestamps say, and the executors' ``eventTime`` column shows the times the driver cut by.
* The columns (a header in KIP-472's encoding, a function), each invalid-time policy, and a
  query that fails at an invalid time once every record before it was processed.
"""

from __future__ import annotations

import json
import re
import struct
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from kafkasync_dev.testing import Record, extractors
from kafkasync_dev.testing.backfills import spans
from kafkasync_dev.testing.heartbeats import HEARTBEAT, Heartbeats
from kafkasync_dev.testing.invalid_times import (
    assert_a_write_time_stands_in_under_the_promise,
    assert_an_invalid_time_fails_its_whole_batch,
    assert_read_as_on_invalid,
    payload,
    with_numeric_lookalikes,
)
from kafkasync_dev.testing.live_query import event_time_rows
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import parse_options
from kafkasync_source.driver.sync_driver import SyncDriver
from kafkasync_source.event_time import watch
from kafkasync_source.executor.range_reader import RangeReader
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.input_partitions import KafkaRange
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.source import register

T = 1_700_000_000_000
WRITTEN = T + 10**9  # a copy job's clock: later than every event time in these tests


@pytest.fixture(scope="module", autouse=True)
def kafkasync_registered(spark):
    register(spark)


def reader(spark, bootstrap, topics, **options):
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics).option("startingOffsets", "earliest"))
    for key, value in options.items():
        stream = stream.option(key, str(value))
    return stream.load()


# --- The re-published backfill ----------------------------------------------------------------

def dropped_by_a_windowed_count_on_payload_time(spark, bootstrap, topics, checkpoint, **options):
    """A 5-minute window count per topic on the value's ``ts`` with a 10-minute watermark, as a
    format("kafka") user writes it (get_json_object): (rows dropped, input rows, batches)."""
    events = reader(spark, bootstrap, topics, **options)
    event_time = F.timestamp_millis(F.get_json_object(F.col("value").cast("string"), "$.ts").cast("long"))
    counts = (events.withColumn("event_time", event_time).withWatermark("event_time", "10 minutes")
              .groupBy(F.window("event_time", "5 minutes"), "topic").count())
    query = (counts.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(PATIENCE_S)
    assert not query.isActive, "the bounded run did not finish"
    progress = [json.loads(p.json) for p in query.recentProgress]
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p.get("stateOperators", []))
    rows = [p["numInputRows"] for p in progress if p["numInputRows"]]
    return dropped, rows, progress


def as_json(offset):
    """A source offset in a progress report: JSON text or already parsed, by PySpark version."""
    return json.loads(offset) if isinstance(offset, str) else offset


def test_a_republished_backfill_drops_nothing_when_synchronized_on_the_payloads_time(
    spark, kafka_cluster, unique_topic, tmp_path
):
    backfill = spans(kafka_cluster, unique_topic("republished"), republished=True)
    on_kafka_time, _, _ = dropped_by_a_windowed_count_on_payload_time(
        spark, kafka_cluster.bootstrap_servers, backfill.subscribe, tmp_path / "kafka-time",
        maxOffsetsPerTrigger=400)
    dropped, rows, progress = dropped_by_a_windowed_count_on_payload_time(
        spark, kafka_cluster.bootstrap_servers, backfill.subscribe, tmp_path / "event-time",
        maxOffsetsPerTrigger=400, **{"eventTime.jsonPath": "$.ts"})
    # (Spark counts late rows after its partial aggregation: windows, not records.)
    assert on_kafka_time > 0, "the Kafka timestamp (write time) protects nothing here"
    assert dropped == 0
    assert sum(rows) == backfill.records and max(rows) <= 400 and len(rows) >= 5
    # The offsets carry the payload's time: stream time steps through the event times.
    stream_times = [as_json(p["sources"][0]["endOffset"])["streamTime"] for p in progress if p["numInputRows"]]
    first = backfill.first_timestamp_ms
    last = max(max(stamps) for stamps in backfill.timestamps.values())
    assert all(first <= t <= last for t in stream_times) and stream_times == sorted(stream_times)
    latest = as_json(progress[-1]["sources"][0]["latestOffset"])
    assert latest["eventTime"] == "eventTime.jsonPath='$.ts'" and latest["planning"] == "fetch"


# --- Property: the batches are a merge by extracted time ------------------------------------

def merge_order(times: list[list[int]]) -> list[int]:
    """Kafka Streams' processing order over fully buffered queues: always the head with the
    smallest time (ties to the lower partition); a queue that runs dry just drops out (a
    bounded run: nothing more will come). Returns the partition of each record in turn."""
    heads, order = [0] * len(times), []
    while any(head < len(queue) for head, queue in zip(heads, times)):
        chosen = min((p for p in range(len(times)) if heads[p] < len(times[p])),
                     key=lambda p: (times[p][heads[p]], p))
        order.append(chosen)
        heads[chosen] += 1
    return order


@st.composite
def republished_partitions(draw):
    """1-3 partitions of distinct event times, in or out of order within a partition."""
    partitions = draw(st.integers(1, 3))
    counts = [draw(st.integers(0, 12)) for _ in range(partitions)]
    times = draw(st.lists(st.integers(0, 10_000), min_size=sum(counts), max_size=sum(counts), unique=True))
    queues, taken = [], 0
    for count in counts:
        queue = times[taken:taken + count]
        taken += count
        queues.append(queue if draw(st.booleans()) else sorted(queue))
    return queues


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(queues=republished_partitions(), cap=st.integers(1, 7), where=st.sampled_from(["jsonPath", "header"]),
       promised=st.booleans())
def test_capped_batches_are_prefixes_of_a_merge_by_extracted_time(kafka_cluster, queues, cap, where, promised):
    """``promised``: each partition in time order and ``eventTime.order=nonDecreasing``, so the
    driver plans from records read at chosen offsets, not from all of them."""
    if promised:
        queues = [sorted(queue) for queue in queues]
    topic = f"merge-{uuid.uuid4().hex[:10]}"
    kafka_cluster.create_topic(topic, len(queues))
    written = WRITTEN
    records = []
    for partition, queue in reversed(list(enumerate(queues))):  # the copy job's order disagrees
        for event_time in queue:
            records.append(Record(partition, written, None, payload(T + event_time),
                                  [("event-time", struct.pack(">q", T + event_time))]))
            written += 1
    kafka_cluster.produce(topic, records)
    option = {"eventTime.jsonPath": "$.ts"} if where == "jsonPath" else {"eventTime.header": "event-time"}
    if promised:
        option["eventTime.order"] = "nonDecreasing"
    options = parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                             "startingOffsets": "earliest", "maxOffsetsPerTrigger": str(cap),
                             "kafka.fetch.wait.max.ms": "10", **option}, streaming=True)
    driver = SyncDriver(options)
    range_reader = RangeReader.from_options(options, kafka_schema(False, include_event_time=True))
    try:
        driver.prepare_available_now()
        start = driver.initial_offset()
        batches = []
        while True:
            end = driver.available_now.next_offset(driver, start)
            if end is start:
                break
            batches.append({tp: end.partitions[tp].next_offset - start.partitions[tp].next_offset
                            for tp in end.partitions})
            for tp, position in end.partitions.items():
                first = start.partitions[tp].next_offset
                if position.next_offset > first:
                    rows = [row for batch in range_reader.read(KafkaRange(topic, tp.partition, first,
                                                                          position.next_offset))
                            for row in batch.to_pylist()]
                    shown = [int(row["eventTime"].timestamp() * 1000) - T for row in rows]
                    assert shown == queues[tp.partition][first:position.next_offset]
            start = end
        planned_by = driver.planning
        read_by_driver = driver.records_read
    finally:
        driver.close()
    if promised and sum(map(len, queues)):
        assert planned_by == "recordProbes"
    elif sum(map(len, queues)):
        assert planned_by == "fetch" and read_by_driver >= sum(map(len, queues))
    order = merge_order(queues)
    expected = [order[i:i + cap] for i in range(0, len(order), cap)]
    assert [[batch[TopicPartition(topic, p)] for p in range(len(queues))] for batch in batches] == [
        [prefix.count(p) for p in range(len(queues))] for prefix in expected
    ]


# --- Columns and invalid times through Spark -------------------------------------------------

def test_a_batch_read_shows_a_headers_event_time_and_the_partition_time_it_drives(
    spark, kafka_cluster, topic_factory
):
    topic = topic_factory(1)
    event_times = [T + 50, T + 30, None, T + 80]
    kafka_cluster.produce(topic, [
        Record(0, WRITTEN + i, None, b"v", None if t is None else [("partition-time", struct.pack(">q", t))])
        for i, t in enumerate(event_times)
    ])
    rows = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
            .option("subscribe", topic).option("eventTime.header", "partition-time")
            .option("eventTime.onInvalid", "skip").option("includePartitionTime", "true").load()
            .selectExpr("offset", "unix_millis(timestamp) AS kafka", "unix_millis(eventTime) AS event",
                        "unix_millis(partitionTime) AS partition").orderBy("offset").collect())
    assert [row.event for row in rows] == event_times
    assert [row.partition for row in rows] == [T + 50, T + 50, T + 50, T + 80]
    assert [row.kafka for row in rows] == [WRITTEN + i for i in range(4)], "timestamp stays Kafka's"


@pytest.mark.parametrize("on_invalid, expected", [
    ("skip", [T + 1, None, T + 3]),
    ("partitionTime", [T + 1, T + 1, T + 3]),
    ("recordTimestamp", [T + 1, WRITTEN + 1, T + 3]),
])
def test_each_invalid_policy_through_a_stream(spark, kafka_cluster, topic_factory, tmp_path, on_invalid, expected):
    topic = topic_factory(1)
    values = [payload(T + 1), b'{"ts": "soon"}', payload(T + 3)]
    kafka_cluster.produce(topic, [Record(0, WRITTEN + i, None, v) for i, v in enumerate(values)])
    rows: list = []
    query = (reader(spark, kafka_cluster.bootstrap_servers, topic,
                    **{"eventTime.jsonPath": "$.ts", "eventTime.onInvalid": on_invalid})
             .selectExpr("offset", "unix_millis(eventTime) AS event").writeStream
             .foreachBatch(lambda frame, _: rows.extend(frame.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(PATIENCE_S)
    assert [row.event for row in sorted(rows)] == expected


def test_an_invalid_time_fails_the_query_naming_the_record_after_every_record_before_it(
    spark, kafka_cluster, topic_factory, tmp_path
):
    topic = topic_factory(1)
    values = [payload(T + i) for i in range(10)] + [b'{"id": 10}'] + [payload(T + i) for i in range(11, 15)]
    kafka_cluster.produce(topic, [Record(0, WRITTEN + i, None, v) for i, v in enumerate(values)])
    offsets: list[int] = []
    query = (reader(spark, kafka_cluster.bootstrap_servers, topic, maxOffsetsPerTrigger=4,
                    **{"eventTime.jsonPath": "$.ts"})
             .select("offset").writeStream
             .foreachBatch(lambda frame, _: offsets.extend(row.offset for row in frame.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="100 milliseconds")
             .start())
    try:
        with pytest.raises(StreamingQueryException,
                           match=rf"no event time for {topic}-0 offset 10 \(eventTime.jsonPath='\$.ts'\): "
                                 r"the value has no \$.ts"):
            query.awaitTermination(PATIENCE_S)
    finally:
        query.stop()
    assert sorted(offsets) == list(range(10)), "every record before it, none after"


def test_an_extractor_function_runs_on_the_executors(spark, kafka_cluster, topic_factory, tmp_path):
    topic = topic_factory(2)
    placed = ["2023-11-15T00:13:20+02:00", "2023-11-14T22:13:21Z", None]
    kafka_cluster.produce(topic, [
        Record(i % 2, WRITTEN + i, None, json.dumps({} if p is None else {"placed": p}).encode())
        for i, p in enumerate(placed)
    ])
    rows = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
            .option("subscribe", topic).option("eventTime.extractor", "kafkasync_dev.testing.extractors:order_time")
            .option("eventTime.onInvalid", "recordTimestamp").load()
            .selectExpr("partition", "offset", "unix_millis(eventTime) AS event").collect())
    assert sorted((r.partition, r.offset, r.event) for r in rows) == [(0, 0, T), (0, 1, WRITTEN + 2), (1, 0, T + 1000)]


def test_partition_time_policy_restarts_from_the_checkpoints_partition_time(
    spark, kafka_cluster, topic_factory, tmp_path
):
    """A restart continues each partition's time from the offsets, so a record taking its
    partition's time gets the same value as in an uninterrupted run."""
    topic = topic_factory(1)
    options = {"eventTime.jsonPath": "$.ts", "eventTime.onInvalid": "partitionTime", "maxOffsetsPerTrigger": 2}

    def run(expected_rows):
        rows: list = []
        query = (reader(spark, kafka_cluster.bootstrap_servers, topic, **options)
                 .selectExpr("offset", "unix_millis(eventTime) AS event").writeStream
                 .foreachBatch(lambda frame, _: rows.extend(frame.collect()))
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(PATIENCE_S)
        assert len(rows) == expected_rows
        return sorted(rows)

    kafka_cluster.produce(topic, [Record(0, WRITTEN + i, None, payload(T + 10 * i)) for i in range(4)])
    first = run(4)
    kafka_cluster.produce(topic, [Record(0, WRITTEN + 4, None, b"{}"), Record(0, WRITTEN + 5, None, payload(T + 99))])
    second = run(2)
    assert [row.event for row in first + second] == [T, T + 10, T + 20, T + 30, T + 30, T + 99]


def test_max_event_time_per_trigger_steps_through_the_payloads_time(spark, kafka_cluster, unique_topic, tmp_path):
    backfill = spans(kafka_cluster, unique_topic("republished"), republished=True)
    query = (reader(spark, kafka_cluster.bootstrap_servers, backfill.subscribe, maxEventTimePerTrigger="1h",
                    **{"eventTime.jsonPath": "$.ts"})
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(PATIENCE_S)
    progress = [json.loads(p.json) for p in query.recentProgress if p.numInputRows]
    stream_times = [as_json(p["sources"][0]["endOffset"])["streamTime"] for p in progress]
    assert sum(p["numInputRows"] for p in progress) == backfill.records
    steps = [b - a for a, b in zip([backfill.first_timestamp_ms] + stream_times, stream_times)]
    assert len(stream_times) >= 12 and max(steps) <= 3_600_000, "12 h of payload time, an hour a batch"


# --- Real data: values that are not times, checkpoints from before, heartbeats -----------------

def _live_rows(spark, bootstrap, topic, checkpoint, expected_rows, timeout_s=PATIENCE_S, **options):
    return event_time_rows(reader(spark, bootstrap, topic, **options), checkpoint,
                           lambda rows: len(rows) >= expected_rows, timeout_s)


@pytest.mark.parametrize("on_invalid", ["skip", "fail"])
def test_a_value_that_only_looks_numeric_neither_stalls_nor_loses_a_live_query(
    spark, kafka_cluster, topic_factory, tmp_path, on_invalid
):
    """"²" passes str.isdigit() and int() refuses it; "1e999999999" is a Decimal beyond any
    context. Both once escaped the seam and ended the driver's fetch thread: a live query then
    read the records planned before them and nothing more, with no error."""
    topic = topic_factory(2)
    values = with_numeric_lookalikes(T)
    kafka_cluster.produce(topic, [Record(i % 2, WRITTEN + i, None, v) for i, v in enumerate(values)])
    rows, query = _live_rows(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp", len(values),
                             **{"eventTime.jsonPath": "$.ts", "eventTime.onInvalid": on_invalid})
    try:
        assert_read_as_on_invalid(rows, query, topic, on_invalid, T)
    finally:
        query.stop()


@pytest.mark.parametrize("trigger", ["availableNow", "live"])
def test_a_checkpoint_planned_on_kafka_timestamps_continues_on_the_payloads_time_with_its_caps(
    spark, kafka_cluster, topic_factory, tmp_path, trigger
):
    """A user who learns that the Kafka timestamp is the write time adds eventTime.jsonPath to
    the running query. The checkpoint's stream time is the write time, hours ahead of the
    payload's: kept, it let the restarted query read its whole backlog in one batch despite
    maxEventTimePerTrigger. The restart re-bases stream and partition times on the new time."""
    topic = topic_factory(2)
    hour = 3_600_000
    # Six hours of payload time per partition, written by a copy job a day later.
    records = [Record(i % 2, WRITTEN + i, None, payload(T + (i // 2) * 10 * 60_000)) for i in range(72)]
    kafka_cluster.produce(topic, records[:4])
    checkpoint = tmp_path / "cp"
    query = (reader(spark, kafka_cluster.bootstrap_servers, topic).writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(PATIENCE_S)
    assert as_json(query.lastProgress["sources"][0]["endOffset"])["streamTime"] >= WRITTEN

    kafka_cluster.produce(topic, records[4:])
    options = {"eventTime.jsonPath": "$.ts", "maxEventTimePerTrigger": "1h"}
    if trigger == "availableNow":
        query = (reader(spark, kafka_cluster.bootstrap_servers, topic, **options).writeStream.format("noop")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(PATIENCE_S)
    else:
        _, query = _live_rows(spark, kafka_cluster.bootstrap_servers, topic, checkpoint, len(records) - 4, **options)
        # The sink has the last batch's rows before Spark posts that batch's progress: wait for it.
        deadline = time.monotonic() + PATIENCE_S
        while sum(p.numInputRows for p in query.recentProgress) < len(records) - 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()
    progress = [json.loads(p.json) for p in query.recentProgress if p.numInputRows]
    ends = [as_json(p["sources"][0]["endOffset"]) for p in progress]
    assert sum(p["numInputRows"] for p in progress) == len(records) - 4
    assert {end["timeSource"] for end in ends} == {"eventTime.jsonPath='$.ts' as epochMillis"}
    stream_times = [end["streamTime"] for end in ends]
    assert len(stream_times) >= 5 and all(b - a <= hour for a, b in zip(stream_times, stream_times[1:])), \
        f"six hours of payload time, at most an hour a batch: {stream_times}"
    assert stream_times[-1] == T + 35 * 10 * 60_000


@pytest.mark.parametrize("order", ["any", "nonDecreasing"])
def test_a_partition_of_heartbeats_idles_and_the_timed_records_flow(spark, kafka_cluster, topic_factory, tmp_path,
                                                                    order):
    """eventTime.onInvalid=skip: a partition whose records carry no time (heartbeats, Debezium
    tombstones) takes no part, as in Kafka Streams: it counts as empty, so it idles, and the
    timed partition's records flow once max.task.idle.ms has passed — though heartbeats keep
    arriving. (Before, each heartbeat took its partition's time, -1, and capped stream time.)"""
    topic = topic_factory(2)
    timed = [Record(1, WRITTEN + i, None, payload(T + i)) for i in range(6)]
    kafka_cluster.produce(topic, timed)
    with Heartbeats(lambda records: kafka_cluster.produce(topic, records),
                    lambda: Record(0, WRITTEN, None, HEARTBEAT)) as heartbeats:
        heartbeats.wait_for(5)  # heartbeats there before the query starts
        before = heartbeats.count
        stream = reader(spark, kafka_cluster.bootstrap_servers, topic, **{
            "eventTime.jsonPath": "$.ts", "eventTime.onInvalid": "skip", "max.task.idle.ms": 1000,
            "eventTime.order": order})
        rows, query = event_time_rows(stream, tmp_path / "cp",
                                      done=lambda rows: sum(row.partition == 1 for row in rows) >= 6)
        planned = [as_json(p["sources"][0]["latestOffset"]).get("planning") for p in query.recentProgress]
        query.stop()
    assert not heartbeats.failures and heartbeats.count > before, "heartbeats kept arriving while the query ran"
    assert sorted(row.event for row in rows if row.partition == 1) == [T + i for i in range(6)]
    heartbeats_read = [row.event for row in rows if row.partition == 0]
    assert heartbeats_read and set(heartbeats_read) == {None}, "heartbeats are read, with no time"
    if order == "nonDecreasing":  # the heartbeats' window idles on records read at chosen offsets
        assert "recordProbes" in planned and "fetch" not in planned, planned


# --- eventTime.order=nonDecreasing: planned from a few records ------------------------------

def bounded_run_batches(options) -> tuple[list[dict], int, str]:
    """A bounded run's batches as end offsets per partition, the records the driver read, and
    the path that planned the last batch."""
    driver = SyncDriver(options)
    try:
        driver.prepare_available_now()
        start, batches = driver.initial_offset(), []
        while (end := driver.available_now.next_offset(driver, start)) is not start:
            batches.append({tp.partition: position.next_offset for tp, position in end.partitions.items()})
            start = end
        return batches, driver.records_read, driver.planning
    finally:
        driver.close()


def test_a_backfill_in_time_order_is_planned_from_under_one_percent_of_its_records(kafka_cluster, topic_factory):
    """What the driver reads grows with the probes, not the backlog: each answer and up to 16
    records the broker sent after it (record_probe.py's ``_MOST_FOLLOWING``)."""
    topic = topic_factory(4)
    per_partition = 25_000
    kafka_cluster.produce(topic, [Record(p, WRITTEN, None, payload(T + 4 * i + p, pad="x" * 150))
                                  for i in range(per_partition) for p in range(4)])
    common = {"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
              "startingOffsets": "earliest", "maxOffsetsPerTrigger": "22500", "eventTime.jsonPath": "$.ts"}
    every_record = bounded_run_batches(parse_options(common, streaming=True))
    promised = bounded_run_batches(parse_options({**common, "eventTime.order": "nonDecreasing"}, streaming=True))
    assert every_record[2] == "fetch" and every_record[1] >= 4 * per_partition
    assert promised[2] == "recordProbes"
    assert promised[0] == every_record[0] and len(promised[0]) >= 5, "the same batches, cut by the same times"
    assert promised[1] < 0.01 * 4 * per_partition, f"the driver read {promised[1]} records"


def test_the_executors_fail_on_a_record_that_breaks_the_promise_naming_it(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    times = [T + 1, T + 2, T + 5, T + 4, T + 6]
    kafka_cluster.produce(topic, [Record(0, WRITTEN, None, payload(t)) for t in times])
    options = parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                             "eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"}, streaming=True)
    range_reader = RangeReader.from_options(options, kafka_schema(False, include_event_time=True))
    assert [row["offset"] for batch in range_reader.read(KafkaRange(topic, 0, 3, 5, T + 3))
            for row in batch.to_pylist()] == [3, 4], "in order from the partition time the range starts at"
    with pytest.raises(Exception, match=rf"{topic}-0 offset 3 has event time {T + 4}, below the partition's "
                                        rf"time {T + 5} before it: eventTime.order=nonDecreasing"):
        list(range_reader.read(KafkaRange(topic, 0, 0, 5, -1)))
    with pytest.raises(Exception, match=rf"{topic}-0 offset 3 has event time {T + 4}, below the partition's "
                                        rf"time {T + 5} before it"):
        list(range_reader.read(KafkaRange(topic, 0, 3, 5, T + 5)))  # the batch before ended at T + 5


def test_a_stream_on_data_that_breaks_the_promise_fails_naming_the_record(spark, kafka_cluster, topic_factory,
                                                                         tmp_path):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, WRITTEN, None, payload(T + t)) for t in (1, 2, 9, 3, 10)]
                          + [Record(1, WRITTEN, None, payload(T + t)) for t in range(1, 12)])
    query = (reader(spark, kafka_cluster.bootstrap_servers, topic, maxOffsetsPerTrigger=3,
                    **{"eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"})
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException, match=rf"{topic}-0 offset 3 has event time {T + 3}, below"):
        query.awaitTermination(PATIENCE_S)


# --- Invalid times under the promise ---------------------------------------------------------

@pytest.mark.parametrize("planning_mode", ["auto", "fetch"])
def test_under_the_promise_a_malformed_record_stamped_now_does_not_fail_a_backfill(
    spark, kafka_cluster, topic_factory, tmp_path, planning_mode
):
    """On both paths: the stand-in takes no part in the promise, the planner's nor the executors'."""
    assert_a_write_time_stands_in_under_the_promise(spark, kafka_cluster, topic_factory(1), str(tmp_path / "cp"),
                                                    WRITTEN, planning_mode)


def test_under_the_promise_an_invalid_time_the_driver_did_not_read_fails_its_whole_batch(
    spark, kafka_cluster, topic_factory, tmp_path
):
    """Spark cannot run a batch in part (event_time/seam.py, "Invalid times")."""
    assert_an_invalid_time_fails_its_whole_batch(spark, kafka_cluster, topic_factory(1), str(tmp_path / "cp"),
                                                 T, WRITTEN)


def test_an_extractor_that_does_not_return_is_named_in_the_live_report(kafka_cluster, topic_factory, monkeypatch):
    """The driver's fetch thread stuck in the user's function: no batch is planned, and the
    live report (reportLatestOffset) names the record, instead of saying nothing."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, T, None, b"{}")])
    monkeypatch.setattr(watch, "STALL_S", 0.2)
    extractors.RELEASE.clear()
    driver = SyncDriver(parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                                       "startingOffsets": "earliest",
                                       "eventTime.extractor": "kafkasync_dev.testing.extractors:waits_for_release"},
                                      streaming=True))
    try:
        start = driver.initial_offset()
        deadline = time.monotonic() + PATIENCE_S
        while "eventTimeStalled" not in driver.report() and time.monotonic() < deadline:
            assert driver.next_offset(start) is start, "nothing planned while the record's time is being taken"
            time.sleep(0.1)
        stalled, = driver.report()["eventTimeStalled"]
        assert re.fullmatch(f"eventTime.extractor 'kafkasync_dev.testing.extractors:waits_for_release' has been "
                            f"taking the time of {topic}-0 offset 0 for \\d+ s", stalled), stalled
        extractors.RELEASE.set()
        while driver.next_offset(start) is start and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "eventTimeStalled" not in driver.report()
    finally:
        extractors.RELEASE.set()
        driver.close()
