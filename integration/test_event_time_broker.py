"""Event time from the record on a real broker, where the Kafka timestamp and the payload's
time disagree: topics re-published by a copy job (each record stamped with its write time, the
event time only in the JSON value). See docs/event-time.md.

* A rate-limited backfill read into a watermarked windowed count on the payload's time drops
  nothing with ``eventTime.jsonPath``; synchronized on the Kafka timestamp it drops hundreds.
* A stream-stream join on event time finds every match.
* A bounded run that fails mid-backfill and restarts from its checkpoint reads every record
  once, in the batches an uninterrupted run cuts.
* Real data in a live query: a payload time that only looks numeric neither stalls nor loses
  it; a checkpoint planned on Kafka timestamps continues on the payload's time with its caps; a
  partition of heartbeats idles and the timed records flow.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.backfills import spans
from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.heartbeats import HEARTBEAT, Heartbeats
from kafkasync_dev.testing.invalid_times import assert_read_as_on_invalid, payload, with_numeric_lookalikes
from kafkasync_dev.testing.live_query import event_time_rows
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_dev.testing.republished import join_matches, orders_and_payments, windowed_count
from kafkasync_source.spark.source import register

EVENT_TIME = {"eventTime.jsonPath": "$.ts"}
CAP = {"maxOffsetsPerTrigger": 200}


@pytest.fixture(scope="module")
def broker(bootstrap_servers, spark):
    register(spark)
    return KafkaBroker(bootstrap_servers)


def prefix() -> str:
    return f"kafkasync-it-republished-{uuid.uuid4().hex[:8]}"


@pytest.mark.compat
def test_a_republished_backfill_drops_nothing_synchronized_on_the_payloads_time(spark, broker, tmp_path):
    backfill = spans(broker, prefix(), republished=True)
    synchronized = windowed_count(spark, "kafkasync", broker.bootstrap_servers, backfill.subscribe,
                                  str(tmp_path / "event-time"), **CAP, **EVENT_TIME)
    on_kafka_time = windowed_count(spark, "kafkasync", broker.bootstrap_servers, backfill.subscribe,
                                   str(tmp_path / "kafka-time"), **CAP)
    print(f"\nre-published backfill, {backfill.records} records, maxOffsetsPerTrigger=200: dropped "
          f"{synchronized.dropped} with eventTime.jsonPath, {on_kafka_time.dropped} on the Kafka timestamp")
    assert synchronized.read == synchronized.counted == backfill.records
    assert synchronized.late_rows == 0
    assert on_kafka_time.read == backfill.records and on_kafka_time.dropped > 500


def test_a_stream_stream_join_on_event_time_finds_every_match(spark, broker, tmp_path):
    data = orders_and_payments(broker, prefix())
    found = join_matches(spark, "kafkasync", broker.bootstrap_servers, data, str(tmp_path / "event-time"),
                         **CAP, **EVENT_TIME)
    on_kafka_time = join_matches(spark, "kafkasync", broker.bootstrap_servers, data, str(tmp_path / "kafka-time"),
                                 **CAP)
    print(f"\njoin: {found} of {data.matches} matches with eventTime.jsonPath, {on_kafka_time} on the Kafka "
          "timestamp")
    assert found == data.matches
    assert on_kafka_time < data.matches


def batch_log(spark, bootstrap: str, topics: str, checkpoint: str, fail_at: int | None = None,
              seen: list | None = None, progress: list | None = None, **options) -> list[tuple]:
    """A bounded run with ``maxOffsetsPerTrigger=200`` on the payload's time; each batch's
    (id, offsets read), also into ``seen``. ``fail_at``: the sink fails at that batch.
    ``progress``: receives the run's progress reports."""
    seen = [] if seen is None else seen

    def sink(frame, batch_id):
        if batch_id == fail_at:
            raise RuntimeError(f"the sink fails at batch {batch_id}")
        seen.append((batch_id, sorted((r.topic, r.partition, r.offset) for r in frame.collect())))

    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics).option("startingOffsets", "earliest"))
    for key, value in {**CAP, **EVENT_TIME, **options}.items():
        reader = reader.option(key, str(value))
    query = (reader.load().select("topic", "partition", "offset").writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(PATIENCE_S)
    finally:
        query.stop()
        if progress is not None:
            progress.extend(json.loads(p.json) for p in query.recentProgress)
    return seen


@pytest.mark.compat
def test_a_restart_mid_backfill_continues_exactly(spark, broker, tmp_path):
    backfill = spans(broker, prefix(), republished=True)
    whole = batch_log(spark, broker.bootstrap_servers, backfill.subscribe, str(tmp_path / "whole"))
    checkpoint = str(tmp_path / "interrupted")
    before: list = []
    with pytest.raises(StreamingQueryException, match="the sink fails at batch 4"):
        batch_log(spark, broker.bootstrap_servers, backfill.subscribe, checkpoint, fail_at=4, seen=before)
    after = batch_log(spark, broker.bootstrap_servers, backfill.subscribe, checkpoint)
    assert len(whole) >= 9 and all(len(rows) <= 200 for _, rows in whole)
    assert sorted(row for _, rows in whole for row in rows) == sorted(
        (topic, partition, offset) for (topic, partition), stamps in backfill.timestamps.items()
        for offset in range(len(stamps))), "every record once"
    assert before == whole[:4] and after == whole[4:], "the same batches, before the failure and after"
    with open(f"{checkpoint}/offsets/{whole[-1][0]}") as logged:
        end = json.loads(logged.read().splitlines()[2])
    last_event_time = {f"{t}-{p}": max(stamps) for (t, p), stamps in backfill.timestamps.items()}
    assert {f"{t}-{p}": e["partitionTime"] for t, ps in end["topics"].items() for p, e in ps.items()} == \
        last_event_time, "the checkpoint's partition times are the payload's"


PROMISED = {"eventTime.order": "nonDecreasing"}


def test_a_backfill_promised_in_time_order_is_cut_the_same_from_few_records_and_restarts_exactly(
        spark, broker, tmp_path):
    """eventTime.order=nonDecreasing on a backfill in time order per partition: the driver plans
    from records read at chosen offsets (RecordProbe on a real broker: whole record batches,
    markers of none here), and the batches are those it cuts reading every record."""
    backfill = spans(broker, prefix(), republished=True)
    every_record = batch_log(spark, broker.bootstrap_servers, backfill.subscribe, str(tmp_path / "all"))
    progress: list = []
    promised = batch_log(spark, broker.bootstrap_servers, backfill.subscribe, str(tmp_path / "promised"),
                         progress=progress, **PROMISED)
    latest = as_json(progress[-1]["sources"][0]["latestOffset"])
    print(f"\n{backfill.records} records in {len(promised)} batches: the driver read "
          f"{latest['driverRecordsRead']} with the promise")
    assert promised == every_record and len(promised) >= 9
    # Not every record: each answer comes with up to 16 records after it (record_probe.py's
    # _MOST_FOLLOWING), about half of a backfill this small (940 of 1,800, Kafka 4.3.1); under
    # 1 % of 100,000 in tests/test_event_time_stream.py and of 1.6 million in make bench.
    assert latest["planning"] == "recordProbes" and latest["driverRecordsRead"] < backfill.records
    checkpoint = str(tmp_path / "interrupted")
    before: list = []
    with pytest.raises(StreamingQueryException, match="the sink fails at batch 4"):
        batch_log(spark, broker.bootstrap_servers, backfill.subscribe, checkpoint, fail_at=4, seen=before, **PROMISED)
    after = batch_log(spark, broker.bootstrap_servers, backfill.subscribe, checkpoint, **PROMISED)
    assert before == every_record[:4] and after == every_record[4:], "the same batches, before the failure and after"


def test_a_record_that_breaks_the_promise_fails_the_query_naming_it(spark, broker, tmp_path):
    topic = prefix()
    broker.create_topic(topic, 1)
    day_ago = now_ms() - 24 * HOUR
    times = [day_ago + MINUTE * i for i in range(300)]
    times[150] = day_ago  # a buffered reading uploaded late
    broker.produce(topic, [Record(0, now_ms(), None, payload(t)) for t in times])
    query = (reader(spark, broker.bootstrap_servers, topic, maxOffsetsPerTrigger=100, **EVENT_TIME, **PROMISED)
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException, match=rf"{topic}-0 offset 150 has event time {day_ago}, below "):
        query.awaitTermination(PATIENCE_S)


# --- Real data: values that are not times, checkpoints from before, heartbeats -----------------
# (tests/test_event_time_stream.py does the same on the embedded cluster.) Kafka >= 4.0 refuses
# records stamped over an hour ahead: Kafka timestamps are the recent past (a copy job's write
# time), payload times a day earlier.

MINUTE, HOUR = 60_000, 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def as_json(offset):
    """A source offset in a progress report: JSON text or already parsed, by PySpark version."""
    return json.loads(offset) if isinstance(offset, str) else offset


def reader(spark, bootstrap: str, topic: str, **options):
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        stream = stream.option(key, str(value))
    return stream.load()


def live_rows(spark, bootstrap: str, topic: str, checkpoint, done, timeout_s: float = 90, **options):
    return event_time_rows(reader(spark, bootstrap, topic, **options), checkpoint, done, timeout_s)


def progress_with_rows(query, expected_rows: int, timeout_s: float = 30) -> list[dict]:
    """The progress reports of the batches that read rows, once they account for
    ``expected_rows`` (a live batch reports after its sink has the rows)."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = [json.loads(p.json) for p in query.recentProgress if p.numInputRows]
        if sum(p["numInputRows"] for p in progress) >= expected_rows or time.monotonic() > deadline:
            return progress
        time.sleep(0.1)


@pytest.mark.parametrize("on_invalid", ["skip", "fail"])
def test_a_value_that_only_looks_numeric_neither_stalls_nor_loses_a_live_query(
    spark, broker, topic_factory, tmp_path, on_invalid
):
    """"²" passes str.isdigit() and int() refuses it; "1e999999999" is a Decimal beyond any
    context. Both once ended the driver's fetch thread: a live query then waited forever, with
    no error."""
    topic = topic_factory(2)
    written, t = now_ms() - 10 * MINUTE, now_ms() - 24 * HOUR
    values = with_numeric_lookalikes(t)
    broker.produce(topic, [Record(i % 2, written + i, None, v) for i, v in enumerate(values)])
    rows, query = live_rows(spark, broker.bootstrap_servers, topic, tmp_path / "cp",
                            lambda rows: len(rows) >= len(values),
                            **{"eventTime.jsonPath": "$.ts", "eventTime.onInvalid": on_invalid})
    try:
        assert_read_as_on_invalid(rows, query, topic, on_invalid, t)
    finally:
        query.stop()


@pytest.mark.parametrize("trigger", ["availableNow", "live"])
def test_a_checkpoint_planned_on_kafka_timestamps_continues_on_the_payloads_time_with_its_caps(
    spark, broker, topic_factory, tmp_path, trigger
):
    """A user who learns that the Kafka timestamp is the write time adds eventTime.jsonPath to
    the running query: the restart re-bases stream and partition times on the payload's time,
    hours behind the checkpoint's, and maxEventTimePerTrigger still cuts its backlog."""
    topic = topic_factory(2)
    written = now_ms() - 10 * MINUTE
    t = now_ms() - 24 * HOUR - 6 * HOUR
    # Six hours of payload time per partition, ending a day ago; written ten minutes ago.
    records = [Record(i % 2, written + i, None, payload(t + (i // 2) * 10 * MINUTE)) for i in range(72)]
    broker.produce(topic, records[:4])
    checkpoint = tmp_path / "cp"
    query = (reader(spark, broker.bootstrap_servers, topic).writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(PATIENCE_S)
    assert query.exception() is None and not query.isActive
    assert as_json(query.lastProgress["sources"][0]["endOffset"])["streamTime"] >= written

    broker.produce(topic, records[4:])
    options = {"eventTime.jsonPath": "$.ts", "maxEventTimePerTrigger": "1h"}
    if trigger == "availableNow":
        rows: list = []
        query = (reader(spark, broker.bootstrap_servers, topic, **options).select("partition", "offset")
                 .writeStream.foreachBatch(lambda frame, _: rows.extend(frame.collect()))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(PATIENCE_S)
        assert query.exception() is None and not query.isActive, "the bounded run did not finish"
        progress = progress_with_rows(query, len(records) - 4)
    else:
        rows, query = live_rows(spark, broker.bootstrap_servers, topic, checkpoint,
                                lambda rows: len(rows) >= len(records) - 4, **options)
        try:
            assert query.exception() is None
            progress = progress_with_rows(query, len(records) - 4)
        finally:
            query.stop()
    assert sorted((row.partition, row.offset) for row in rows) == sorted(
        (i % 2, i // 2) for i in range(4, 72)), "every record once"
    ends = [as_json(p["sources"][0]["endOffset"]) for p in progress]
    assert sum(p["numInputRows"] for p in progress) == len(records) - 4
    assert {end["timeSource"] for end in ends} == {"eventTime.jsonPath='$.ts' as epochMillis"}
    stream_times = [end["streamTime"] for end in ends]
    assert len(stream_times) >= 5 and all(b - a <= HOUR for a, b in zip(stream_times, stream_times[1:])), \
        f"six hours of payload time, at most an hour a batch: {stream_times}"
    assert stream_times[-1] == t + 35 * 10 * MINUTE


def test_a_partition_of_heartbeats_idles_and_the_timed_records_flow(spark, bootstrap_servers, broker,
                                                                     topic_factory, tmp_path):
    """eventTime.onInvalid=skip: a partition whose records carry no time takes no part, as in
    Kafka Streams: it counts as empty, so it idles, and the timed partition's records flow once
    max.task.idle.ms has passed — though heartbeats keep arriving."""
    topic = topic_factory(2)
    t = now_ms() - 24 * HOUR
    broker.produce(topic, [Record(1, now_ms() - 10 * MINUTE + i, None, payload(t + i)) for i in range(6)])
    with KafkaBroker(bootstrap_servers) as heart, \
            Heartbeats(lambda records: heart.produce(topic, records),  # a producer of its own
                       lambda: Record(0, now_ms(), None, HEARTBEAT)) as heartbeats:
        heartbeats.wait_for(5)  # heartbeats there before the query starts
        started = time.monotonic()
        rows, query = live_rows(spark, broker.bootstrap_servers, topic, tmp_path / "cp",
                                lambda rows: sum(row.partition == 1 for row in rows) >= 6, timeout_s=90,
                                **{"eventTime.jsonPath": "$.ts", "eventTime.onInvalid": "skip",
                                   "max.task.idle.ms": 1000})
        waited = time.monotonic() - started
        try:
            assert query.exception() is None
        finally:
            query.stop()
    assert not heartbeats.failures, f"a heartbeat was not delivered: {heartbeats.failures[0]}"
    print(f"\nheartbeats: {heartbeats.count} produced, {sum(row.partition == 0 for row in rows)} read; "
          f"the timed records after {waited:.1f}s")
    assert sorted(row.event for row in rows if row.partition == 1) == [t + i for i in range(6)], \
        f"the timed records within 90 s (heartbeats read: {sum(row.partition == 0 for row in rows)})"
    assert all(row.event is None for row in rows if row.partition == 0)
