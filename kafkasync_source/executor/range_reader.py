"""Executor side: read exactly the records of one offset range ``[start, end)``.

A batch is fully determined by its logged start and end offsets, so reading a range must not
depend on any driver state: each Spark task opens its own assigned consumer, reads the range
and returns pyarrow RecordBatches (column-wise; no per-row tuples through Spark's converter).

Offset gaps are normal in Kafka (transaction markers, compaction, aborted records), so a range
may hold fewer records than ``end - start``. The reader therefore stops at whichever comes
first: a record at or past ``end``, or the partition's end-of-log event (every record below
the high watermark has then been seen, and a range never ends beyond the high watermark).

This module is the read loop: where a pooled consumer starts, what each ``consume()`` brings,
and when the range is done. What the loop leans on lives beside it, one concern a module:
record_columns.py (records to Arrow columns), consumer_settings.py (the consumer's settings and
prefetch), consumer_tails.py (what a consumer fetched past its range, kept for the next),
data_loss.py (records gone from the log), garbage_collection.py (the collector held off),
consumer_pool.py (consumers kept between tasks) and time_before.py (a split range's time).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Generator, Iterator, Mapping, Optional, Union

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.types import StructType

from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.config.options import SourceOptions
from kafkasync_source.event_time import EventTimeOptions, record_time
from kafkasync_source.executor.consumer_pool import POOL, PooledConsumer, set_fetching
from kafkasync_source.executor.consumer_settings import consumer_settings, prefetch_settings
from kafkasync_source.executor.consumer_tails import TailKey, pause_keeping_tail, take_tail
from kafkasync_source.executor.data_loss import (
    DATA_LOSS_CODES,
    partition_gone,
    report_deleted,
    skip_lost,
    truncated_below_end,
)
from kafkasync_source.executor.decode_policy import DecodePolicy
from kafkasync_source.executor.garbage_collection import collection_held
from kafkasync_source.executor.record_columns import RecordColumns
from kafkasync_source.executor.time_before import needs_time_before, partition_time_before
from kafkasync_source.formats import FormatOptions
from kafkasync_source.spark.input_partitions import KafkaRange, KafkaRanges
from kafkasync_source.spark.schema import arrow_schema, decoded_column

logger = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000
"""Rows per RecordBatch handed to Spark: large enough to amortise per-batch overhead."""

_POLL_SLICE_S = 0.5
_GONE_CHECK_S = 5.0
"""A range that makes no progress this long checks whether its partition was deleted."""
_FATAL_CODES = (
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._INVALID_ARG,
)
"""Errors no retry can fix. Any other fetch error (request timeouts, unknown server errors, a
leader moving, a dropped connection) is retried: librdkafka keeps fetching by itself, and the
range fails only after kafkaConsumer.pollTimeoutMs without a record."""
_TRANSIENT_LOG_INTERVAL_S = 10.0


@dataclass(frozen=True)
class RangeReader:
    """Reads :class:`KafkaRange` s on an executor. Holds only picklable configuration."""

    client_config: Mapping[str, str] = field(repr=False)
    """librdkafka settings, secrets among them (sasl.password, ssl.key.pem): kept out of the
    repr, as in SourceOptions, since a reader is shown in logs and tracebacks."""
    arrow_schema: pa.Schema
    include_headers: bool
    include_partition_time: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    event_time: Optional[EventTimeOptions] = None
    """``eventTime.*``: where each record's event time is (None: no ``eventTime`` column)."""
    tracks_partition_time: bool = False
    """Follow each partition's time through a range (see SourceOptions.tracks_partition_time)."""
    decoded_formats: tuple[FormatOptions, ...] = ()
    """``key.decode`` / ``value.decode``: the ``keyDecoded`` / ``valueDecoded`` columns, in that order."""

    @classmethod
    def from_options(cls, options: SourceOptions, schema: StructType) -> "RangeReader":
        return cls(
            client_config=options.client_config,
            arrow_schema=arrow_schema(schema),
            include_headers=options.include_headers,
            include_partition_time=options.include_partition_time,
            fail_on_data_loss=options.fail_on_data_loss,
            poll_timeout_ms=options.poll_timeout_ms,
            event_time=options.event_time,
            tracks_partition_time=options.tracks_partition_time,
            decoded_formats=options.decoded_formats,
        )

    def read(self, partition: Union[KafkaRange, KafkaRanges]) -> Iterator[pa.RecordBatch]:
        """The records of one range, or of an input partition's ranges one after another,
        each with this worker's pooled consumer of its partition (see consumer_pool.py)."""
        config = consumer_settings(self.client_config)
        frozen_config = tuple(sorted((key, str(value)) for key, value in config.items()))
        scope = partition.consumer_scope if isinstance(partition, KafkaRanges) else ""
        for kafka_range in partition.ranges if isinstance(partition, KafkaRanges) else (partition,):
            key = (frozen_config, scope, kafka_range.topic, kafka_range.partition)
            tails = TailKey(scope, str(self.client_config.get("bootstrap.servers", "")), kafka_range.topic,
                             kafka_range.partition)
            prefetch_bytes, sized = prefetch_settings(
                kafka_range.end - kafka_range.start, POOL.record_bytes(kafka_range.topic), self.client_config)
            pooled = POOL.acquire(key, functools.partial(_new_consumer, {**config, **sized}), prefetch_bytes)
            poolable = False
            try:
                poolable = yield from collection_held(self._read(pooled, kafka_range, tails))
            finally:
                # A range left half-read (an error, Spark stopping early), or read past a data
                # loss, leaves the consumer somewhere unknown: close it rather than pool it.
                # So does a consumer that could not be resumed: Spark's retry of the task
                # then starts with a new one.
                if poolable:
                    pause_keeping_tail(pooled, tails)
                    POOL.release(key, pooled)
                else:
                    pooled.consumer.close()

    def _read(self, pooled: PooledConsumer, kafka_range: KafkaRange,
              tails: TailKey) -> Generator[pa.RecordBatch, None, bool]:
        """Yields the range's batches; returns whether the consumer may be pooled, positioned
        at the range's end. After a data loss it may not: librdkafka then stands where the
        loss left it, not at the range's end (a log truncated below the end: at the log's
        end; records deleted past the end: in state FETCH_NONE, see :func:`data_loss.skip_lost`)."""
        topic, partition, end = kafka_range.topic, kafka_range.partition, kafka_range.end
        consumer = pooled.consumer
        # A later piece of a range split under eventTime.order=nonDecreasing: its partition time
        # is read from the records before it (time_before.py), leaving the consumer at its start.
        if needs_time_before(kafka_range):
            set_fetching(consumer, True)
            partition_time = partition_time_before(pooled, kafka_range, record_time(self.event_time),
                                                   self.poll_timeout_ms)
        else:
            partition_time = kafka_range.partition_time
        self._position(pooled, kafka_range, tails, resumed=needs_time_before(kafka_range))
        next_offset = kafka_range.start
        columns = RecordColumns(
            topic, self.include_headers,
            partition_time=partition_time if self.tracks_partition_time else None,
            partition_time_column=self.include_partition_time,
            event_time=None if self.event_time is None else record_time(self.event_time),
            check_order=self.event_time is not None and self.event_time.non_decreasing,
            decoders=[DecodePolicy(f, self.arrow_schema.field(decoded_column(f)).type) for f in self.decoded_formats],
        )
        stalled_since = gone_checked = time.monotonic()
        last_error: Optional[KafkaError] = None
        lost = False
        logged_at = -_TRANSIENT_LOG_INTERVAL_S
        while next_offset < end:
            messages = self._next_messages(pooled, min(end - next_offset, ARROW_BATCH_ROWS))
            # Errors (end-of-partition events above all) are rare: find them in one cheap pass
            # instead of filtering every record.
            events = [i for i, m in enumerate(messages) if m.error() is not None]
            last_record = next((m for m in reversed(messages) if m.error() is None), None)
            reached_end = last_record is not None and last_record.offset() >= end
            if reached_end:
                # A record at or past the end: every offset before it has been seen, so the
                # rest of the range is an offset gap (e.g. a transaction marker just before
                # the end). Without this the reader would go on, one record per call, until
                # the end of the log. What came from that record on is kept, in order, for
                # the next range of this partition, ahead of what the stash still holds
                # (messages came from its head when it held more than the range needed).
                cut = next(i for i, m in enumerate(messages) if m.error() is None and m.offset() >= end)
                pooled.stash = messages[cut:] + pooled.stash
                messages, events = messages[:cut], [i for i in events if i < cut]
            progressed = False
            # Records and events in the order they came: an event speaks of the offsets after
            # the records before it. (An out-of-range error taken before the records ahead of
            # it in the same call re-sought below them, and they were read twice.)
            begin = 0
            for index in events + [len(messages)]:
                if index > begin:
                    columns.extend(messages[begin:index])
                    next_offset = max(next_offset, messages[index - 1].offset() + 1)
                    progressed = True
                if index == len(messages):
                    break
                event, begin = messages[index], index + 1
                error = event.error()
                if error.code() == KafkaError._PARTITION_EOF:
                    # Everything below the event's offset has been seen: the rest of the range
                    # is an offset gap, unless the log was truncated below the range's end.
                    if event.offset() >= end:
                        next_offset = end
                    elif truncated_below_end(consumer, kafka_range, next_offset, self.fail_on_data_loss):
                        # What came after it in this call (the log growing again) lies in
                        # what was just skipped.
                        next_offset, lost = end, True
                        break
                elif error.code() in DATA_LOSS_CODES:
                    # What this call returned after the error came before the new assignment
                    # (if any): the reader goes on from what the assignment fetches.
                    next_offset, lost_some = skip_lost(consumer, kafka_range, next_offset, self.fail_on_data_loss)
                    pooled.stash, lost, reached_end = [], lost or lost_some, False
                    break
                elif error.fatal() or error.code() in _FATAL_CODES:
                    raise KafkaException(error)
                else:
                    last_error = error
                    if time.monotonic() - logged_at >= _TRANSIENT_LOG_INTERVAL_S:
                        logged_at = time.monotonic()
                        logger.warning(
                            "kafkasync: transient error reading %s-%d at offset %d, retrying "
                            "for up to %d ms (kafkaConsumer.pollTimeoutMs): %s",
                            topic, partition, next_offset, self.poll_timeout_ms, error.str(),
                        )
            if reached_end:
                next_offset = end
            if progressed:
                stalled_since = time.monotonic()
            elif next_offset < end and time.monotonic() - stalled_since > self.poll_timeout_ms / 1000:
                raise TimeoutError(
                    f"kafkasync: no record of {topic}-{partition} arrived for "
                    f"{self.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs) while reading "
                    f"offsets [{next_offset}, {end})"
                    + (f"; last error: {last_error.str()}." if last_error is not None else ".")
                )
            elif next_offset < end and time.monotonic() >= max(stalled_since, gone_checked) + _GONE_CHECK_S:
                # librdkafka reports no error for a deleted partition: it only stops fetching.
                gone_checked = time.monotonic()
                if partition_gone(consumer, kafka_range):
                    report_deleted(kafka_range, next_offset, self.fail_on_data_loss)
                    if len(columns):
                        yield columns.to_batch(self.arrow_schema)
                    return False
                # Still there: fetch it afresh. A pooled consumer once waited 120 s, through a
                # broker restart, for two records the driver had seen (CI, Kafka 4.3.1); a new
                # assignment restarts librdkafka's fetch of the partition from the broker's state.
                logger.info("kafkasync: no record of %s-%d for %.0f s at offset %d; fetching it afresh",
                            topic, partition, time.monotonic() - stalled_since, next_offset)
                consumer.assign([KafkaTopicPartition(topic, partition, next_offset)])
                pooled.stash = []
            if len(columns) >= ARROW_BATCH_ROWS:
                yield columns.to_batch(self.arrow_schema)
        if len(columns):
            yield columns.to_batch(self.arrow_schema)
        pooled.position = end
        POOL.learn(topic, columns.payload_bytes, columns.records)
        return not lost

    @classmethod
    def _position(cls, pooled: PooledConsumer, kafka_range: KafkaRange, tails: TailKey, resumed: bool) -> None:
        """Make the consumer's next records the range's: where the pooled consumer stands (its
        position, its stash or what it queued), from the tail an earlier range of the partition
        kept (range_tails.py) and then fetching on after it, or fetching from the range's start.

        A paused consumer (consumer_pool.py) is resumed only once it stands where the range
        reads on: resumed elsewhere, it sent a fetch from its old position whose answer (a
        whole producer batch) the new assignment then dropped."""
        consumer, start = pooled.consumer, kafka_range.start
        if pooled.position == start or cls._skip_to(pooled, start):
            if not resumed:  # resumed already where time_before.py left it, with what it fetched queued
                set_fetching(consumer, True)
            return
        tail = take_tail(consumer, kafka_range, tails)
        fetch_from = start if tail is None else tail.end
        pooled.stash = [] if tail is None else tail.records
        if pooled.position != fetch_from:
            POOL.repositioned += pooled.position is not None
            # A pause outlives an assignment: resumed first, without the seek that would wake
            # the fetcher at the old position (consumer_pool.set_fetching); the assignment wakes it.
            consumer.resume(consumer.assignment())
            consumer.assign([KafkaTopicPartition(kafka_range.topic, kafka_range.partition, fetch_from)])
            pooled.position = fetch_from
        else:
            set_fetching(consumer, True)

    @staticmethod
    def _skip_to(pooled: PooledConsumer, start: int) -> bool:
        """Move a pooled consumer that stopped below ``start`` up to it through the records it
        has queued (stashed, or fetched since it was taken from the pool and resumed), dropping
        those below ``start``; False (the caller assigns it afresh) where they do not reach it
        or an event comes first.

        A pooled consumer is paused while it waits in the pool (``consumer_pool.set_fetching``:
        unpaused, it cost the broker a fetch for nearly every produce request), and a resume
        drops what librdkafka had fetched, so a range that starts past the records already
        delivered is usually assigned afresh now; what this saves is the case where the gap is
        within the records queued. Only what is already queued is taken (a zero-timeout
        consume), so this never fetches records below ``start``."""
        if pooled.position is None or pooled.position > start:
            return False
        last_seen = pooled.position - 1
        while True:
            if pooled.stash:
                messages, pooled.stash = pooled.stash, []
            else:
                messages = pooled.consumer.consume(num_messages=ARROW_BATCH_ROWS, timeout=0)
            if not messages:
                # Every offset below start delivered: the next record the consumer gives is
                # at or past start. Otherwise the rest may be still unfetched, or a gap.
                return last_seen == start - 1
            for index, message in enumerate(messages):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    return False
                if message.offset() >= start + (error is not None):
                    pooled.stash = messages[index:]
                    return True
                # A record, or an end-of-partition event: every offset below it delivered.
                last_seen = message.offset() - (error is not None)

    @staticmethod
    def _next_messages(pooled: PooledConsumer, count: int) -> list:
        """Stashed messages first (consumed earlier, at or past the previous range's end)."""
        if pooled.stash:
            messages, pooled.stash = pooled.stash[:count], pooled.stash[count:]
            return messages
        return pooled.consumer.consume(num_messages=count, timeout=_POLL_SLICE_S)


def _new_consumer(settings: Mapping[str, object]) -> Consumer:
    return Consumer(with_python_logging(dict(settings)))

