"""Observability: live report, progress parsing, the listener, consumer-group commits."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import numpy as np
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.metrics.listener import (
    KafkaSyncListener,
    emit_event_time_lag_ms,
    live_report,
    metrics_from_progress,
    offsets_behind_latest,
    pending_records,
    watermark_lag_ms,
)
from kafkasync_source.planning.offsets import PartitionOffset, SyncOffset
from kafkasync_source.planning.planner import WAIT_FOREVER, PartitionState, TopicPartition, plan_batch
from kafkasync_source.spark.source import register

BASE_TS = 1_700_000_000_000
A, B = TopicPartition("a", 0), TopicPartition("b", 0)


def state(offsets, timestamps, *, start=0, position=None, end_offset=None):
    offsets = np.array(offsets, dtype=np.int64)
    return PartitionState(
        start=start, offsets=offsets, timestamps=np.array(timestamps, dtype=np.int64),
        position=position if position is not None else (int(offsets[-1]) + 1 if len(offsets) else start),
        end_offset=end_offset,
    )


def test_live_report_says_which_partition_holds_the_batch_and_until_when():
    states = {A: state([0, 1, 2], [10, 20, 30], end_offset=8), B: state([], [], start=5, end_offset=5)}
    cut = plan_batch(states, now_ms=1_000, max_task_idle_ms=500, idle_since={})
    report = live_report(cut, states, group_commit_failures=2)
    assert report["batch"] is False
    assert report["waitingOn"] == [{"partition": "b-0", "state": "idle-waiting", "until": 1_500}]
    assert report["partitions"]["a"]["0"] == {
        "nextOffset": 0, "endOffset": 8, "lag": 8, "partitionTime": -1, "buffered": 3,
        "state": "ready", "idleDeadline": -1,
    }
    assert report["groupCommitFailuresTotal"] == 2
    json.dumps(report)  # Spark needs plain JSON values

    # Once a's fetch has caught up, the batch proceeds without b.
    states[A] = replace(states[A], end_offset=3)
    later = plan_batch(states, now_ms=1_600, max_task_idle_ms=500, idle_since=cut.idle_since)
    enforced = live_report(later, states, group_commit_failures=0)
    assert enforced["batch"] and enforced["enforced"] and enforced["givenUp"] == ["b-0"]
    assert enforced["partitions"]["a"]["0"]["buffered"] == 0


def test_offsets_behind_latest_as_format_kafka_defines_them():
    # a: log end 8, the planned batch takes nothing yet (next offset 0) -> 8 behind;
    # b: caught up -> 0 behind (Spark: latest available offset - consumed offset, min/max/avg).
    states = {A: state([0, 1, 2], [10, 20, 30], end_offset=8), B: state([], [], start=5, end_offset=5)}
    report = live_report(plan_batch(states, now_ms=1_000, max_task_idle_ms=500, idle_since={}),
                         states, group_commit_failures=0)
    assert (report["minOffsetsBehindLatest"], report["maxOffsetsBehindLatest"],
            report["avgOffsetsBehindLatest"]) == (0, 8, 4.0)
    assert offsets_behind_latest([-1, None]) == {
        "minOffsetsBehindLatest": -1, "maxOffsetsBehindLatest": -1, "avgOffsetsBehindLatest": -1}


def test_flink_named_metrics_pending_records_emit_lag_and_watermark_lag():
    states = {A: state([0, 1, 2], [10, 20, 30], end_offset=8), B: state([], [], start=5, end_offset=5)}
    cut = plan_batch(states, now_ms=1_000, max_task_idle_ms=500, idle_since={})
    report = live_report(cut, states, group_commit_failures=0, emit_event_time_lag_ms=4_000)
    assert report["pendingRecords"] == 8 + 0, "the sum of the partitions' lags"
    assert report["emitEventTimeLagMs"] == 4_000
    assert live_report(cut, states, group_commit_failures=0)["emitEventTimeLagMs"] == -1
    assert pending_records([-1, None]) == -1

    assert emit_event_time_lag_ms(planned_at_ms=BASE_TS + 5_000, stream_time=BASE_TS) == 5_000
    assert emit_event_time_lag_ms(planned_at_ms=BASE_TS, stream_time=-1) is None, "no timestamp yet"

    at = {"timestamp": "2026-11-21T10:00:00.000Z"}
    assert watermark_lag_ms({**at, "eventTime": {"watermark": "2026-11-21T09:59:30.000Z"}}) == 30_000
    assert watermark_lag_ms(at) is None, "no withWatermark: no watermark"
    assert watermark_lag_ms({**at, "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}}) is None, \
        "Spark's watermark before the first one is computed"


def progress(batch_id, start, end, latest, *, sources_before=()):
    source = {"description": "kafkasync", "startOffset": json.dumps(start),
              "endOffset": json.dumps(end), "latestOffset": json.dumps(latest)}
    return {"id": "q1", "batchId": batch_id, "timestamp": "2026-11-21T10:00:00.000Z",
            "sources": [*sources_before, source]}


def test_metrics_from_progress_computes_deltas_and_ignores_other_sources():
    start = SyncOffset({A: PartitionOffset(0)}, enforced_processing_total=2, late_records_total=5).to_json()
    end = SyncOffset({A: PartitionOffset(9, BASE_TS)}, stream_time=BASE_TS,
                     enforced_processing_total=3, late_records_total=7).to_json()
    states = {A: state([0], [1], end_offset=1), B: state([], [], end_offset=0)}
    latest = live_report(plan_batch(states, now_ms=0, max_task_idle_ms=0, idle_since={}), states,
                         group_commit_failures=0, emit_event_time_lag_ms=1_234)
    rate_source = {"description": "RateStreamV2", "startOffset": "1", "endOffset": "2", "latestOffset": "2"}
    [metrics] = metrics_from_progress(progress(4, start, end, latest, sources_before=[rate_source]),
                                      previous=None, interval_s=2.0)
    assert (metrics.batch_id, metrics.enforced_processing_total, metrics.enforced_processing) == (4, 3, 1)
    assert metrics.enforced_processing_rate == pytest.approx(0.5)
    assert (metrics.late_records_total, metrics.late_records) == (7, 2)
    assert metrics.stream_time == BASE_TS
    assert metrics.given_up == (B,)
    assert metrics.partitions[B].state == "idle" and metrics.partitions[A].lag == 0
    assert metrics.offsets_behind_latest == (0, 0, 0.0)
    assert (metrics.pending_records, metrics.emit_event_time_lag_ms, metrics.watermark_lag_ms) == (0, 1_234, None)


def test_listener_warns_once_per_enforced_update_and_calls_back(caplog):
    updates = []
    listener = KafkaSyncListener(on_update=updates.append)
    start = SyncOffset({A: PartitionOffset(0)}).to_json()
    end = SyncOffset({A: PartitionOffset(3)}, enforced_processing_total=1).to_json()
    latest = {"kafkasync": 1, "givenUp": ["b-0"], "waitingOn": [], "partitions": {}}

    class Event:
        def __init__(self, payload):
            self.progress = type("P", (), {"json": json.dumps(payload)})()

    with caplog.at_level(logging.WARNING, logger="kafkasync_source.metrics.listener"):
        listener.onQueryProgress(Event(progress(1, start, end, latest)))
        listener.onQueryProgress(Event(progress(2, end, end, {**latest, "givenUp": []})))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "b-0" in warnings[0] and "enforced processing" in warnings[0]
    assert [u.batch_id for u in updates] == [1, 2]
    assert listener.latest("q1").enforced_processing == 0


def test_listener_adds_up_observed_decode_errors_per_query_and_shows_the_reader_schemas(caplog):
    """Issue 61, "nothing null without a count": what observe_decode_errors counted in each
    batch (progress.observedMetrics), per batch and added up over the query's batches (a batch
    seen twice, as onQueryIdle re-reads lastProgress, counts once), and the reader schema the
    offsets record. One warning per query."""
    updates = []
    listener = KafkaSyncListener(on_update=updates.append)
    pin = {"value": {"subject": "orders-value", "version": 2, "id": 7}}
    start = SyncOffset({A: PartitionOffset(0)}).read_as(pin).to_json()
    end = SyncOffset({A: PartitionOffset(3)}).read_as(pin).to_json()
    latest = {"kafkasync": 1, "givenUp": [], "waitingOn": [], "partitions": {}}

    def batch(batch_id, not_framed, unknown):
        counts = {"valueNotFramed": not_framed, "valueUnknownSchema": unknown, "valueMalformed": 0,
                  "valueIncompatible": 0, "valueUndecodable": not_framed + unknown}
        return {**progress(batch_id, start, end, latest), "observedMetrics": {"kafkasync_decode_errors": counts}}

    with caplog.at_level(logging.WARNING, logger="kafkasync_source.metrics.listener"):
        for payload in (batch(1, 0, 0), batch(2, 2, 1), batch(2, 2, 1), batch(3, 1, 0)):
            listener._update(payload)
    metrics = listener.latest("q1")
    assert metrics.decode_errors == {"valueNotFramed": 1, "valueUnknownSchema": 0, "valueMalformed": 0,
                                     "valueIncompatible": 0, "valueUndecodable": 1}
    assert metrics.decode_errors_total == {"valueNotFramed": 3, "valueUnknownSchema": 1, "valueMalformed": 0,
                                           "valueIncompatible": 0, "valueUndecodable": 4}
    assert metrics.reader_schemas == pin
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith("kafkasync query q1 batch 2: 3 record(s) could not be decoded")


def test_a_batch_that_follows_an_idle_trigger_is_added_to_the_totals():
    """What Spark 4.3 hands a listener when a stream idles between two batches (seen through
    Spark, test below): batch 1's progress; then, at each idle trigger, ``onQueryIdle``, whose
    ``query.lastProgress`` is a no-data progress already numbered as the *next* batch (2), without
    observed metrics; then batch 2's progress with its counts. Before, batch 2 counted as 'seen
    twice' (the previous update was numbered 2 too) and was left out of ``decode_errors_total``."""
    listener = KafkaSyncListener()
    end = SyncOffset({A: PartitionOffset(3)}).to_json()
    latest = {"kafkasync": 1, "givenUp": [], "waitingOn": [], "partitions": {}}

    def counts(not_framed):
        return {"kafkasync_decode_errors": {"valueNotFramed": not_framed, "valueUnknownSchema": 0, "valueMalformed": 0,
                                            "valueIncompatible": 0, "valueUndecodable": not_framed}}

    def idle(next_batch_id):
        return {**progress(next_batch_id, end, end, latest), "numInputRows": 0, "observedMetrics": {}}

    for payload in ({**progress(1, end, end, latest), "observedMetrics": counts(2)}, idle(2), idle(2),
                    {**progress(2, end, end, latest), "observedMetrics": counts(3)}, idle(3)):
        listener._update(payload)
    assert listener.latest("q1").decode_errors_total["valueNotFramed"] == 5


# ----------------------------------------------------------------- end to end (embedded Kafka)


@pytest.fixture
def listener(spark):
    register(spark)
    listener = KafkaSyncListener()
    spark.streams.addListener(listener)
    previous = spark.conf.get("spark.sql.streaming.noDataProgressEventInterval")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "500")
    yield listener
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", previous)
    spark.streams.removeListener(listener)


def start_query(spark, bootstrap, topic, checkpoint, **options):
    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return (reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def wait_for(query, condition, timeout=PATIENCE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_listener_reports_enforcement_lag_partition_time_and_group_commits(
    spark, kafka_cluster, topic_factory, tmp_path, listener, caplog
):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(20)])
    group = f"monitor-{topic}"
    # Every report, not only the latest: a no-data trigger's report replaces the enforced
    # batch's within 500 ms, and a poll on a loaded machine can miss that window.
    reports = []
    report_progress = listener.onQueryProgress

    def recording(event):
        report_progress(event)
        reports.append(listener.latest(event.progress.id))

    listener.onQueryProgress = recording
    with caplog.at_level(logging.WARNING, logger="kafkasync_source.metrics.listener"):
        query = start_query(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp",
                            **{"kafka.group.id": group})
        try:
            # The report of the enforced batch itself (a later no-data trigger gives up nothing).
            metrics = wait_for(query, lambda: next(
                (m for m in list(reports) if m and m.partitions.get(TopicPartition(topic, 0))
                 and m.partitions[TopicPartition(topic, 0)].next_offset == 20
                 and TopicPartition(topic, 1) in m.given_up), None))
            wait_for(query, lambda: any("enforced processing" in r.getMessage() for r in caplog.records))
            # A no-data trigger passes the finished batch's end to latestOffset, which commits it
            # to the group: wait for that commit, not for a second a busy machine may not give it.
            committed = wait_for(query, lambda: _committed_once_past(kafka_cluster, group, topic, 20))
        finally:
            query.stop()
    assert metrics.enforced_processing_total >= 1
    assert TopicPartition(topic, 1) in metrics.given_up
    p0, p1 = metrics.partitions[TopicPartition(topic, 0)], metrics.partitions[TopicPartition(topic, 1)]
    assert (p0.end_offset, p0.lag, p0.partition_time, p0.buffered) == (20, 0, BASE_TS + 19, 0)
    assert (p1.end_offset, p1.lag, p1.state) == (0, 0, "idle")
    assert any(f"{topic}-1" in r.getMessage() for r in caplog.records)

    assert [(c.offset, json.loads(c.metadata)["partitionTime"]) for c in committed] == [
        (20, BASE_TS + 19), (0, -1)
    ]


def _committed_once_past(cluster, group: str, topic: str, offset: int) -> list | None:
    """The group's committed offsets of the topic's two partitions, once partition 0's is
    ``offset`` (an earlier trigger may have committed where the query began)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        committed = consumer.committed([KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)], timeout=10)
    finally:
        consumer.close()
    return committed if committed[0].offset == offset else None


def test_the_listener_adds_up_decode_errors_of_batches_between_idle_triggers(
        spark, kafka_cluster, topic_factory, schema_registry_url, tmp_path, listener):
    """A stream that idles between two batches of records that cannot be decoded (PERMISSIVE,
    observe_decode_errors): the listener's total is every record of both. Spark 4.3 reports idle
    triggers through onQueryIdle, whose lastProgress is numbered as the next batch; before,
    that batch's own progress then looked seen already, and its records were not added."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from kafkasync_source.metrics.decode_errors import observe_decode_errors

    topic = topic_factory(1)
    SchemaRegistryClient({"url": schema_registry_url}).register_schema(f"{topic}-value", Schema(json.dumps(
        {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}), "AVRO"))
    idle_triggers, batches_seen = [], []
    report_idle, report_progress = listener.onQueryIdle, listener.onQueryProgress

    def idle(event):
        report_idle(event)
        idle_triggers.append(event)

    def progressed(event):
        report_progress(event)
        batches_seen.append(event.progress.batchId)

    listener.onQueryIdle, listener.onQueryProgress = idle, progressed
    kafka_cluster.produce(topic, [Record(0, BASE_TS, None, b"{}") for _ in range(2)])
    frame = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("schema.registry.url", schema_registry_url).option("value.format", "avro-confluent")
             .option("value.decode", "true").option("value.decode.mode", "PERMISSIVE").load())
    query = (observe_decode_errors(frame).writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(query, lambda: any(p.numInputRows for p in query.recentProgress), timeout=240)  # Python workers start
        wait_for(query, lambda: len(idle_triggers) >= 2)
        kafka_cluster.produce(topic, [Record(0, BASE_TS, None, b"{}") for _ in range(3)])
        wait_for(query, lambda: sum(p.numInputRows for p in query.recentProgress) == 5)
        last = max(p.batchId for p in query.recentProgress if p.numInputRows)
        wait_for(query, lambda: last in batches_seen)  # the listener has taken that batch's progress
    finally:
        query.stop()
    assert listener.latest(query.id).decode_errors_total["valueNotFramed"] == 5


def test_wait_forever_never_enforces_and_shows_why_it_waits(spark, kafka_cluster, topic_factory,
                                                            tmp_path, listener):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(5)])
    # "buffered" counts the driver's fetched records: the fetch path's (the time-index path
    # reads none, and plans this wait without them).
    query = start_query(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp",
                        **{"max.task.idle.ms": WAIT_FOREVER, "planningMode": "fetch"})
    try:
        metrics = wait_for(query, lambda: (m := listener.latest(query.id)) and m.waiting_on and
                           m.waiting_on[0][1] == "idle-waiting" and m)
    finally:
        query.stop()
    assert metrics.enforced_processing_total == 0
    assert [(tp, state) for tp, state, _ in metrics.waiting_on] == [(TopicPartition(topic, 1), "idle-waiting")]
    assert metrics.partitions[TopicPartition(topic, 0)].buffered == 5


def test_counters_survive_a_restart(spark, kafka_cluster, topic_factory, tmp_path, listener):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(5)])
    query = start_query(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp")
    try:
        before = wait_for(query, lambda: (m := listener.latest(query.id)) and m.enforced_processing_total >= 1 and m)
    finally:
        query.stop()
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 100 + i, None, b"v") for i in range(5)])
    again = start_query(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp")
    try:
        after = wait_for(again, lambda: (m := listener.latest(again.id)) and
                         m.partitions.get(TopicPartition(topic, 0)) and
                         m.partitions[TopicPartition(topic, 0)].next_offset == 10 and m)
    finally:
        again.stop()
    assert after.enforced_processing_total > before.enforced_processing_total
    assert after.partitions[TopicPartition(topic, 0)].partition_time == BASE_TS + 104


def test_listener_reports_emit_lag_and_the_lag_of_sparks_watermark(spark, kafka_cluster, topic_factory,
                                                                   tmp_path, listener):
    from pyspark.sql import functions as F

    topic = topic_factory(1)
    began_ms = time.time() * 1000
    newest = int(began_ms) - 60_000  # records stamped a minute ago
    kafka_cluster.produce(topic, [Record(0, newest - 19 + i, None, b"v") for i in range(20)])
    counts = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest").load()
              .withWatermark("timestamp", "10 seconds").groupBy(F.window("timestamp", "1 minute")).count())
    query = (counts.writeStream.format("noop").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="200 milliseconds").start())
    try:
        metrics = wait_for(query, lambda: (m := listener.latest(query.id)) and m.watermark_lag_ms is not None and m)
    finally:
        query.stop()
    took_ms = time.time() * 1000 - began_ms
    # Planned after the records were written: at least their age, at most that plus the test's run time.
    assert 60_000 <= metrics.emit_event_time_lag_ms <= 60_000 + took_ms
    # Spark's watermark is the newest event time minus the delay: 70 s behind, plus the time since.
    assert 70_000 <= metrics.watermark_lag_ms <= 70_000 + took_ms
    assert metrics.pending_records == 0


def test_failed_group_commits_are_counted_never_block_and_are_not_retried_at_once(fresh_cluster):
    from kafkasync_dev.testing import ApiKey
    from kafkasync_source.driver.group_commit import GroupCommitter

    group_authorization_failed = 30
    fresh_cluster.create_topic("monitored", 1)
    committer = GroupCommitter({"bootstrap.servers": fresh_cluster.bootstrap_servers}, "monitor")
    tp = TopicPartition("monitored", 0)
    try:
        fresh_cluster.push_request_errors(ApiKey.OFFSET_COMMIT, group_authorization_failed)
        committer.commit(SyncOffset({tp: PartitionOffset(3, 7)}))
        deadline = time.monotonic() + PATIENCE_S
        while committer.failures == 0 and time.monotonic() < deadline:
            committer.serve_callbacks(0.1)
        assert committer.failures == 1
        committer.commit(SyncOffset({tp: PartitionOffset(3, 7)}))  # within the retry interval
        committer.commit(SyncOffset({tp: PartitionOffset(4, 8)}))  # new offsets: sent at once
        committer.serve_callbacks(1.0)
        assert committer.failures == 1
    finally:
        committer.close()
    consumer = Consumer({"bootstrap.servers": fresh_cluster.bootstrap_servers, "group.id": "monitor"})
    try:
        [committed] = consumer.committed([KafkaTopicPartition("monitored", 0)], timeout=10)
    finally:
        consumer.close()
    assert (committed.offset, json.loads(committed.metadata)["partitionTime"]) == (4, 8)
