"""Executor side: what a range reader does when records of its range are gone.

A range was planned from offsets the driver saw; by the time a task reads it, retention,
``DeleteRecords``, a deleted topic or an unclean leader election may have removed some of them,
and librdkafka says so only indirectly (an out-of-range error, an end-of-partition event below
the range's end, or silence). These functions tell a real loss from a stale signal by asking
the broker (watermarks, metadata), and then fail or warn and skip as ``failOnDataLoss`` says,
naming the topic, partition and offsets, as format("kafka") does. Kept apart from the read
loop (range_reader.py) so that the loop reads as the happy path with one call per signal.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.kafka.errors import KafkaSyncDataLossError
from kafkasync_source.kafka.metadata import partitions_gone
from kafkasync_source.spark.input_partitions import KafkaRange

logger = logging.getLogger(__name__)

DATA_LOSS_CODES = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
"""Fetch errors that say the range's next offset is no longer in the log (:func:`skip_lost`)."""


def lost_offsets(next_offset: int, end: int, low: int, high: int) -> tuple[int, int, str]:
    """The offsets ``[from, to)`` of ``[next_offset, end)`` that a log ``[low, high)`` no longer
    holds, and why: records deleted below the log start, or a log truncated below its end."""
    if low > next_offset:
        return next_offset, min(low, end), f"the log starts at offset {low}"
    return max(next_offset, high), end, f"the log ends at offset {high}"


def partition_gone(consumer: Consumer, kafka_range: KafkaRange) -> bool:
    """Whether the range's partition was deleted. Metadata that cannot be had (a broker
    restarting, the cluster unreachable) says nothing: the range waits on, bounded by
    kafkaConsumer.pollTimeoutMs. Failing here failed a query through a broker restart."""
    try:
        return bool(partitions_gone(consumer, [kafka_range.topic_partition]))
    except KafkaException as err:
        logger.info("kafkasync: could not tell whether %s-%d still exists (%s); reading on",
                    kafka_range.topic, kafka_range.partition, err)
        return False


def truncated_below_end(consumer: Consumer, kafka_range: KafkaRange, next_offset: int,
                        fail_on_data_loss: bool) -> bool:
    """An end-of-partition event below the range's end: the log was truncated, or the event
    is stale (a pooled consumer reached the log end before this range was planned). The
    broker's high watermark tells which; while it cannot be had (a broker restarting), the
    range reads on, and a later event asks again."""
    tp = KafkaTopicPartition(kafka_range.topic, kafka_range.partition)
    try:
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
    except KafkaException as err:
        logger.info("kafkasync: could not read the log end of %s-%d (%s); reading on",
                    kafka_range.topic, kafka_range.partition, err)
        return False
    if high >= kafka_range.end:
        return False
    report_lost(kafka_range, max(next_offset, high), kafka_range.end, f"the log ends at offset {high}",
                fail_on_data_loss)
    return True


def skip_lost(consumer: Consumer, kafka_range: KafkaRange, next_offset: int,
              fail_on_data_loss: bool) -> tuple[int, bool]:
    """The range's next offset is out of the log's range: fail, or continue where it can.
    Returns the next offset, and whether records were lost (skipped).

    Where the log holds every offset still to read, the error was stale (a fetch of a log
    that has since been replaced): nothing is lost, the reader seeks again. Otherwise,
    under ``auto.offset.reset=error``, librdkafka has stopped fetching the partition (state
    FETCH_NONE, ``rd_kafka_offset_reset`` in rdkafka_offset.c) until it is assigned or
    sought anew; with nothing of the range left to read it stays so, and only a closed
    consumer is safe from it (a seek then answers _STATE, ``rd_kafka_toppar_seek`` in
    rdkafka_partition.c)."""
    tp = KafkaTopicPartition(kafka_range.topic, kafka_range.partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=10)
    lost_from, resume, why = lost_offsets(next_offset, kafka_range.end, low, high)
    if lost_from >= resume:
        logger.info("kafkasync: %s-%d: a fetch error said offset %d is out of range, but "
                    "the log holds [%d, %d): seeking again.", kafka_range.topic,
                    kafka_range.partition, next_offset, low, high)
        consumer.assign([KafkaTopicPartition(kafka_range.topic, kafka_range.partition, next_offset)])
        return next_offset, False
    report_lost(kafka_range, lost_from, resume, why, fail_on_data_loss)
    if resume < kafka_range.end:
        consumer.assign([KafkaTopicPartition(kafka_range.topic, kafka_range.partition, resume)])
    return resume, True


def report_deleted(kafka_range: KafkaRange, next_offset: int, fail_on_data_loss: bool) -> None:
    """The partition was deleted with records of the range unread (see
    ``SyncDriver._report_gone`` for the driver side)."""
    message = (
        f"kafkasync: {kafka_range.topic}-{kafka_range.partition} no longer exists (topic "
        f"deleted) while offsets [{next_offset}, {kafka_range.end}) were still to be read; "
        "some data may have been missed."
    )
    if fail_on_data_loss:
        raise KafkaSyncDataLossError(
            message + " Set failOnDataLoss=false to drop deleted partitions and continue."
        )
    logger.warning("%s Skipping them (failOnDataLoss=false).", message)


def report_lost(kafka_range: KafkaRange, lost_from: int, lost_to: int, why: str, fail_on_data_loss: bool) -> None:
    """Offsets ``[lost_from, lost_to)`` of the range are gone: fail, or warn and skip them."""
    message = (
        f"kafkasync: {kafka_range.topic}-{kafka_range.partition} offsets "
        f"[{lost_from}, {lost_to}) of the range [{kafka_range.start}, {kafka_range.end}) "
        f"are gone: {why}; records were lost (retention or log truncation)."
    )
    if fail_on_data_loss:
        raise KafkaSyncDataLossError(
            message + " Set failOnDataLoss=false to skip them with a warning."
        )
    logger.warning("%s Skipping them (failOnDataLoss=false).", message)
