"""Executor side: a partition's time before a piece of its range, read from the records before it.

Under ``eventTime.order=nonDecreasing`` a batch's range of a partition is split into pieces like
any other (input_partitions.py), and each piece is read by a task of its own, perhaps at the
same time as the pieces before it. The executors check the promise on every record against its
partition's time before it (the running maximum of the valid times since the batch's start), so
a later piece must know that time at its start. Under the promise the running maximum *is* the
last valid time: the piece's reader reads the last records before its start, through the same
event-time seam (``RecordTime``), and takes the largest of that time and the batch's partition
time. One record read per piece where the record just before is readable and has a time.

Why this is exact. A record breaking the promise inside a piece is found by that piece's reader.
A record breaking it exactly at a split point (its time below the last one before the point) is
found by the later piece, which starts from the time before the point. If the promise broke in
an earlier piece, the time read here may be too low; the earlier piece's task fails, and with it
the batch. Every record is checked by the piece that holds it against every record before it.

"The record before" is the last *readable* record before ``start``: transaction markers, records
of aborted transactions (under read_committed) and compacted-away offsets are never delivered,
and a record whose time is invalid (``SKIPPED``, ``PARTITION_TIME``, ``NO_TIME``) takes no part
in the running maximum. So the look-back reads windows ``[low, high)`` growing backwards from
``start`` (1, 4, 16 ... offsets, as the driver's probes look for a partition's last time), never
below the batch's start offset (``KafkaRange.time_from``): the batch's partition time stands
for everything before it.
"""

from __future__ import annotations

import time
from typing import Optional

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.event_time import RecordTime
from kafkasync_source.executor.consumer_pool import PooledConsumer
from kafkasync_source.spark.input_partitions import KafkaRange

_WINDOW_GROWTH = 4
_POLL_SLICE_S = 0.5
_OUT_OF_RANGE_CODES = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)


def needs_time_before(kafka_range: KafkaRange) -> bool:
    """Whether the partition time before ``kafka_range`` must be read from the records before it."""
    return kafka_range.time_from is not None and kafka_range.time_from < kafka_range.start


def partition_time_before(
    pooled: PooledConsumer, kafka_range: KafkaRange, record_time: RecordTime, poll_timeout_ms: int
) -> int:
    """The partition's time right before ``kafka_range.start``: the largest of the batch's
    partition time and the last valid time in ``[time_from, start)``.

    Moves ``pooled``'s consumer. Where the first window answered (the common case), it is left
    at ``start`` with what it fetched from there on in ``pooled.stash``, so the range's read goes
    on without a new fetch; otherwise ``pooled.position`` is None and the reader assigns anew."""
    assert kafka_range.time_from is not None
    floor, high, span = kafka_range.time_from, kafka_range.start, 1
    first = True
    while high > floor:
        low = max(floor, high - span)
        window, after, log_start = _read_window(pooled, kafka_range, low, high, poll_timeout_ms)
        if log_start is not None:  # records below it are gone (retention, DeleteRecords)
            floor = max(floor, log_start)
            pooled.position, pooled.stash = None, []
            first = False
            continue
        if first and after:  # delivered up to start and past it: the range continues from here
            pooled.position, pooled.stash = kafka_range.start, after
        else:
            pooled.position, pooled.stash = None, []
        valid = [t for t in record_time.times_of(window) if t >= 0]
        if valid:
            return max(kafka_range.partition_time, valid[-1])
        high, span, first = low, span * _WINDOW_GROWTH, False
    return kafka_range.partition_time


def _read_window(
    pooled: PooledConsumer, kafka_range: KafkaRange, low: int, high: int, poll_timeout_ms: int
) -> tuple[list, list, Optional[int]]:
    """The records of offsets ``[low, high)``, what came from ``high`` on (records and events,
    in order; empty where the consumer stopped below ``high``), and None; or, where ``low`` is
    below the log's start, ``([], [], log start)``.

    Every offset below ``high`` has been seen once a record at or past it, or an end-of-partition
    event, arrives (the event's offset is the log end: nothing more is readable before it). A
    log that now ends below ``low`` (truncated) has nothing before ``high`` either; the range's
    reader finds and reports the truncation itself."""
    topic, partition = kafka_range.topic, kafka_range.partition
    consumer = pooled.consumer
    consumer.assign([KafkaTopicPartition(topic, partition, low)])
    window: list = []
    last_error: Optional[KafkaError] = None
    deadline = time.monotonic() + poll_timeout_ms / 1000
    while True:
        messages: list = consumer.consume(num_messages=max(high - low, 1), timeout=_POLL_SLICE_S)
        for index, message in enumerate(messages):
            error = message.error()
            if error is None:
                if message.offset() >= high:
                    return window, messages[index:], None
                window.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                return window, messages[index:] if message.offset() >= high else [], None
            elif error.code() in _OUT_OF_RANGE_CODES:
                log_start, _ = consumer.get_watermark_offsets(KafkaTopicPartition(topic, partition), timeout=10)
                return ([], [], log_start) if log_start > low else (window, [], None)
            elif error.fatal():
                raise KafkaException(error)
            else:
                last_error = error
        if messages:
            deadline = time.monotonic() + poll_timeout_ms / 1000
        elif time.monotonic() > deadline:
            raise TimeoutError(
                f"kafkasync: no record of {topic}-{partition} arrived for {poll_timeout_ms} ms "
                f"(kafkaConsumer.pollTimeoutMs) while reading offsets [{low}, {high}), the records "
                f"before the range [{kafka_range.start}, {kafka_range.end}) whose partition time "
                "eventTime.order=nonDecreasing checks it from"
                + (f"; last error: {last_error.str()}." if last_error is not None else ".")
            )
