"""Executor side: the consumer's part in keeping range tails (range_tails.py keeps the files).

When a range's consumer goes back to the pool, what it fetched past the range's end is taken
from it (:func:`pause_keeping_tail`) before the pause purges librdkafka's queue; when the next
range of the partition starts where that one ended, the tail is handed to it
(:func:`take_tail`) once the broker says the log still holds it. Kept apart from the read loop
(range_reader.py) and from the file store (range_tails.py, which knows no Kafka consumer): this
is where a consumer and the store meet, with the timing rules of librdkafka's prefetch.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.executor.consumer_pool import POOL, PooledConsumer, set_fetching
from kafkasync_source.executor.consumer_settings import GUESSED_RECORD_BYTES
from kafkasync_source.executor.range_tails import MIN_TAIL_BYTES, TAILS, Tail, record_bytes
from kafkasync_source.spark.input_partitions import KafkaRange

logger = logging.getLogger(__name__)

_MAX_TAIL_RECORDS = 100_000
"""A range's consumer holding more past its end (a live stream read while it grew) keeps none of it."""
_TAIL_CHUNK = 64


class TailKey(NamedTuple):
    """Where the tails of one partition's ranges are kept (range_tails.py), bar the range's start."""

    scope: str
    cluster: str
    topic: str
    partition: int


def pause_keeping_tail(pooled: PooledConsumer, tails: TailKey) -> None:
    """Pause the consumer for the pool, keeping what it holds past the range just read (its
    stash and what librdkafka has queued, taken without waiting) for the partition's next range
    (range_tails.py): the pause purges librdkafka's queue. The consumer then stands after what
    it held, or where an event leaves it in doubt at an unknown place (None): a next range
    starting elsewhere assigns it anew.

    The pause comes as soon as the queue is empty, the file after: an emptied queue is below
    librdkafka's prefetch threshold, and its fetcher sends the next fetch within
    ``fetch.queue.backoff.ms`` (1 ms here), whose answer, a whole producer batch, the pause drops.
    ``consume`` empties librdkafka's queue before it builds the records it took, so the queue is
    taken in small chunks: the one that empties it is built in microseconds, not milliseconds."""
    start = pooled.position
    if start is None or not _worth_a_tail(pooled, tails, start):
        set_fetching(pooled.consumer, False)  # a stash stays with the consumer, for this worker
        return
    messages, pooled.stash = pooled.stash, []
    while len(messages) <= _MAX_TAIL_RECORDS:
        queued = pooled.consumer.consume(num_messages=_TAIL_CHUNK, timeout=0)
        messages += queued
        if len(queued) < _TAIL_CHUNK:
            break
    set_fetching(pooled.consumer, False)
    if all(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF for m in messages):
        return  # nothing past the range: the consumer stands at its end
    # Every record up to the first event: an end-of-partition event says only that the
    # records before it were all there was; any other leaves what follows it in doubt.
    first_event = next((i for i, m in enumerate(messages) if m.error() is not None), len(messages))
    records = messages[:first_event]
    clean = all(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF
                for m in messages[first_event:]) and len(messages) <= _MAX_TAIL_RECORDS
    if clean:
        TAILS.keep(*tails, start, records)
    pooled.position = records[-1].offset() + 1 if clean else None


def _worth_a_tail(pooled: PooledConsumer, tails: TailKey, start: int) -> bool:
    """Whether the reader may hold enough past ``start`` to be kept (range_tails.MIN_TAIL_BYTES):
    its stash (a kept tail's rest, records of the ``consume()`` that passed the range's end) and
    what librdkafka queued, judged from the log end its last fetch answer gave (its cached high
    watermark, no request) and the bytes per record of the topic's last range. A capped range's
    reader holds the rest of the producer batch the range ended in, a live stream's about
    nothing. Records taken from the queue and then not kept would be fetched again."""
    held = record_bytes([m for m in pooled.stash if m.error() is None])
    if held >= MIN_TAIL_BYTES:
        return True
    try:
        _, high = pooled.consumer.get_watermark_offsets(KafkaTopicPartition(tails.topic, tails.partition),
                                                        cached=True)
    except KafkaException:
        return False
    return (high - start) * (POOL.record_bytes(tails.topic) or GUESSED_RECORD_BYTES) >= MIN_TAIL_BYTES


def _log_holds(consumer: Consumer, kafka_range: KafkaRange, tail: Tail) -> bool:
    """Whether the partition's log still holds every offset ``tail`` stands for: records fetched
    earlier may have been deleted since (DeleteRecords, retention) or truncated away. A log
    that cannot be asked counts as not holding it: the range then fetches, as without tails."""
    tp = KafkaTopicPartition(kafka_range.topic, kafka_range.partition)
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    except KafkaException as err:
        logger.info("kafkasync: could not read the log start of %s-%d (%s); fetching its range afresh",
                    kafka_range.topic, kafka_range.partition, err)
        return False
    return low <= tail.start and tail.end <= high


def take_tail(consumer: Consumer, kafka_range: KafkaRange, tails: TailKey) -> Optional[Tail]:
    """The tail an earlier range of the partition kept where this range starts, if the log still
    holds every offset of it (:func:`_log_holds`); None: the range fetches from its start."""
    tail = TAILS.take(*tails, kafka_range.start)
    if tail is not None and not _log_holds(consumer, kafka_range, tail):
        TAILS.refused += 1
        return None
    return tail
