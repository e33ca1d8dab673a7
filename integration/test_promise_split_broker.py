"""A later piece of a range split under ``eventTime.order=nonDecreasing`` learns the time it
checks from past commit and abort markers and an aborted transaction, on Apache Kafka.

The embedded cluster (tests/test_promise_split.py) has the commit marker; an aborted
transaction's records are a real broker's: a read_committed consumer never receives them, a
read_uncommitted one does, and they are then part of the batch and of the promise's check
(executor/time_before.py: "the record before" is the last one the reader receives).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer

from kafkasync_dev.testing import Record, produce_confirmed
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor.range_reader import RangeReader
from kafkasync_source.spark.input_partitions import KafkaRange
from kafkasync_source.spark.schema import kafka_schema

T = 1_700_000_000_000


@pytest.mark.parametrize("isolation, time_before", [("read_committed", 5), ("read_uncommitted", 101)])
def test_the_time_before_a_piece_is_the_last_record_its_isolation_level_reads(
    bootstrap_servers, topic_factory, isolation, time_before
):
    """Under read_uncommitted (kafkasync's default, as format("kafka")) the aborted records are
    read, so they are the records before offset 9; under read_committed the last is offset 4."""
    topic = topic_factory(1)
    written = int(time.time() * 1000)  # Kafka >= 4.0 refuses records stamped an hour ahead

    def records(*times: int) -> list[Record]:
        return [Record(0, written, None, json.dumps({"ts": T + t}).encode()) for t in times]

    producer = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": f"it-{uuid.uuid4().hex}",
                         "enable.idempotence": True})
    producer.init_transactions(30)
    producer.begin_transaction()
    produce_confirmed(producer, topic, records(1, 2, 3, 4, 5), 30)  # offsets 0-4, commit marker 5
    producer.commit_transaction(30)
    producer.begin_transaction()
    produce_confirmed(producer, topic, records(100, 101), 30)  # offsets 6-7 aborted, marker 8
    producer.abort_transaction(30)
    producer.begin_transaction()
    produce_confirmed(producer, topic, records(3, 6, 7), 30)  # offsets 9-11, commit marker 12
    producer.commit_transaction(30)
    producer.flush(30)

    options = parse_options({"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic,
                             "kafka.isolation.level": isolation,
                             "eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"}, streaming=True)
    reader = RangeReader.from_options(options, kafka_schema(False, include_event_time=True))
    with pytest.raises(Exception, match=rf"{topic}-0 offset 9 has event time {T + 3}, below the partition's "
                                        rf"time {T + time_before} before it"):
        list(reader.read(KafkaRange(topic, 0, 9, 13, -1, 0)))
    assert [row["offset"] for batch in reader.read(KafkaRange(topic, 0, 10, 13, -1, 0))
            for row in batch.to_pylist()] == [10, 11]


def test_a_piece_whose_records_before_were_deleted_starts_from_the_batchs_partition_time(
    bootstrap_servers, topic_factory, admin
):
    """Offsets 0-3 deleted (retention, DeleteRecords): the look-back's fetch below the log start
    is out of range, so the piece checks from the batch's partition time, and reads its records
    (the earlier piece is the one that reports the loss, under failOnDataLoss)."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    topic = topic_factory(1)
    written = int(time.time() * 1000)
    produce_confirmed(Producer({"bootstrap.servers": bootstrap_servers}), topic,
                      [Record(0, written, None, json.dumps({"ts": T + t}).encode()) for t in (1, 2, 3, 9, 4, 5)], 30)
    for future in admin.delete_records([KafkaTopicPartition(topic, 0, 4)]).values():
        future.result(30)
    options = parse_options({"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic,
                             "eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"}, streaming=True)
    reader = RangeReader.from_options(options, kafka_schema(False, include_event_time=True))
    assert [row["offset"] for batch in reader.read(KafkaRange(topic, 0, 4, 6, T + 2, 0))
            for row in batch.to_pylist()] == [4, 5]
    with pytest.raises(Exception, match=rf"{topic}-0 offset 4 has event time {T + 4}, below the partition's "
                                        rf"time {T + 5} before it"):
        list(reader.read(KafkaRange(topic, 0, 4, 6, T + 5, 0)))
