"""Event time from the record on a real broker, where the Kafka timestamp and the payload's
time disagree: topics re-published by a copy job (each record stamped with its write time, the
event time only in the JSON value). See docs/event-time.md.

* A rate-limited backfill read into a watermarked windowed count on the payload's time drops
  nothing with ``eventTime.jsonPath``; synchronized on the Kafka timestamp it drops hundreds.
* A stream-stream join on event time finds every match.
* A bounded run that fails mid-backfill and restarts from its checkpoint reads every record
  once, in the batches an uninterrupted run cuts.
"""

from __future__ import annotations

import json
import uuid

import pytest
from pyspark.errors import StreamingQueryException

from kafkasync_source.spark.source import register
from kafkasync_source.testing.backfills import spans
from kafkasync_source.testing.broker import KafkaBroker
from kafkasync_source.testing.republished import join_matches, orders_and_payments, windowed_count

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
              seen: list | None = None) -> list[tuple]:
    """A bounded run with ``maxOffsetsPerTrigger=200`` on the payload's time; each batch's
    (id, offsets read), also into ``seen``. ``fail_at``: the sink fails at that batch."""
    seen = [] if seen is None else seen

    def sink(frame, batch_id):
        if batch_id == fail_at:
            raise RuntimeError(f"the sink fails at batch {batch_id}")
        seen.append((batch_id, sorted((r.topic, r.partition, r.offset) for r in frame.collect())))

    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics).option("startingOffsets", "earliest"))
    for key, value in {**CAP, **EVENT_TIME}.items():
        reader = reader.option(key, str(value))
    query = (reader.load().select("topic", "partition", "offset").writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(300)
    finally:
        query.stop()
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
