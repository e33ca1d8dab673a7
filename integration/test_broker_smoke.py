"""A real broker round-trips records exactly (keys, values, headers, timestamps)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition

from kafkasync_dev.testing.patience import PATIENCE_S


@pytest.mark.compat
def test_records_round_trip_through_a_real_broker(bootstrap_servers, topic_factory):
    topic = topic_factory(3)
    now_ms = int(time.time() * 1000)
    # Timestamps far in the past on purpose: topics are created with
    # retention.ms=-1, so time-based retention must not delete them.
    sent = [
        (i % 3, now_ms - 400 * 24 * 3600 * 1000 + i, f"k{i}".encode(), f"v{i}".encode() * (i % 4),
         [("i", str(i).encode())])
        for i in range(300)
    ]
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "linger.ms": 5})
    offsets = {}

    def on_delivery(err, msg):
        assert err is None, err
        offsets[(msg.partition(), msg.offset())] = msg

    for partition, ts, key, value, headers in sent:
        producer.produce(topic, value, key, partition=partition, timestamp=ts, headers=headers,
                         on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(offsets) == len(sent)

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"it-{topic}",
                         "enable.auto.commit": False})
    try:
        for p in range(3):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert (low, high) == (0, 100)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got = []
        deadline = time.monotonic() + PATIENCE_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += [m for m in consumer.consume(len(sent) - len(got), timeout=1) if m.error() is None]
    finally:
        consumer.close()

    assert len(got) == len(sent)
    by_partition = {p: [m for m in got if m.partition() == p] for p in range(3)}
    for p, msgs in by_partition.items():
        assert [m.offset() for m in msgs] == list(range(100))
        want = [s for s in sent if s[0] == p]
        assert [(m.timestamp(), m.key(), m.value() or b"", m.headers()) for m in msgs] == [
            ((TIMESTAMP_CREATE_TIME, ts), key, value, headers) for _, ts, key, value, headers in want
        ]
