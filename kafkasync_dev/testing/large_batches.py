"""Partitions written in producer batches of about 1 MB, for what reading one record costs.

A consumer gets records in whole batches, so the bytes a read of one record makes the brokers
send depend on the producer's batch size (``batch.size``, up to 1 MB by default in librdkafka).
:func:`produce_large_batches` writes ``batches`` batches of :data:`BATCH_RECORDS` records of
:data:`VALUE_BYTES` each per partition: one flush per batch with ``batch.size`` above it and a
long ``linger.ms``, so each flush sends each partition's records as one batch (the embedded
cluster keeps one message set per produce request; a broker appends the batch as it came).
Record ``i`` of a partition is stamped ``base_ts + i``, and its value is JSON carrying the same
time (:func:`value_at`). Every delivery report is checked.
"""

from __future__ import annotations

from typing import Any, Callable

from kafkasync_dev.testing.mock_cluster import Record, produce_confirmed

BATCH_RECORDS = 900
VALUE_BYTES = 1_000
BATCH_PAYLOAD_BYTES = BATCH_RECORDS * VALUE_BYTES
"""Payload bytes of one batch (about 0.93 MB on the wire with record headers, under the
brokers' default ``max.message.bytes`` of 1 MiB)."""
PRODUCER_SETTINGS = {"linger.ms": 5_000, "batch.size": 1_048_576, "batch.num.messages": 100_000,
                     "queue.buffering.max.messages": 1_000_000, "compression.type": "none"}
"""librdkafka producer settings under which a flush of :data:`BATCH_RECORDS` records of a
partition goes out as one batch."""
PARTITIONS_PER_FLUSH = 256
"""Partitions produced between flushes: their batches (about 240 MB) wait in the producer's
queue together, which must hold them whole, or batches would go out at ``linger.ms`` cut short."""


def value_at(ts: int) -> bytes:
    """A JSON value of :data:`VALUE_BYTES` bytes carrying ``ts`` (``eventTime.jsonPath=$.ts``)."""
    head = b'{"ts":%d,"pad":"' % ts
    return head + b"x" * (VALUE_BYTES - len(head) - 2) + b'"}'


def produce_large_batches(make_producer: Callable[[dict[str, Any]], Any], topic: str, partitions: int,
                          batches: int, base_ts: int, timeout: float = 60.0) -> None:
    """``batches`` batches per partition of ``topic``, produced with
    ``make_producer(PRODUCER_SETTINGS)``, each flush waiting at most ``timeout`` seconds."""
    producer = make_producer(dict(PRODUCER_SETTINGS))
    for batch in range(batches):
        first = batch * BATCH_RECORDS
        for low in range(0, partitions, PARTITIONS_PER_FLUSH):
            produce_confirmed(producer, topic, (Record(p, base_ts + first + i, None, value_at(base_ts + first + i))
                                                for p in range(low, min(low + PARTITIONS_PER_FLUSH, partitions))
                                                for i in range(BATCH_RECORDS)), timeout)
