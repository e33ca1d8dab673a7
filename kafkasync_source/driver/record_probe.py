"""Driver side: read the first record at chosen offsets, many partitions in one round.

The time index's answers are checked with it (a transaction marker or an aborted record can hold
an index entry no consumer reads: :mod:`kafkasync_source.planning.index_planner`), and, for an
event time promised in order, it is the index itself (:mod:`kafkasync_source.driver.probe_index`).
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.config.client_config import consumer_group_id
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.event_time import KAFKA_TIMESTAMP, SKIPPED, KafkaSyncEventTimeError, RecordTime
from kafkasync_source.planning.index_planner import IndexCannotAnswer
from kafkasync_source.planning.planner import TopicPartition

_PROBE_TIMEOUT_S = 10.0
_MOST_SKIPPED = 10_000
"""Records without an event time (``eventTime.onInvalid=skip``) a probe reads past before it
gives up and the fetch path plans the batch: a partition of heartbeats is read in full there
once, not at every probe."""


class RecordProbe:
    """A consumer that reads the first record at given offsets: for checking what the time
    index answered (:data:`~kafkasync_source.planning.index_planner.FirstRecords`), and, with
    ``eventTime.order=nonDecreasing``, as the index itself (:mod:`kafkasync_source.driver.
    probe_index`). Its consumer is created on first use: most queries on plain topics need few
    checks, and the reader is pickled.

    A record's time comes from ``record_time``, the one event-time seam the fetcher and the
    executors use. A record that takes no part in synchronization (:data:`SKIPPED`) is read
    past, as the fetcher does not buffer it: the answer is the first record that does."""

    def __init__(self, client_config: Mapping[str, str], record_time: RecordTime = KAFKA_TIMESTAMP) -> None:
        self._record_time = record_time
        self.records_read = 0
        """Records this probe's consumer handed over since the query started."""
        self._config = {
            **client_config,
            "group.id": consumer_group_id(client_config),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            # Little per partition, many partitions per request. A broker sends whole record
            # batches, and a batch larger than max.partition.fetch.bytes only for the first
            # partition of a response (ReplicaManager.readFromLog's minOneMessage), so the
            # limit is a typical producer batch, not 1 byte: else a response holds one
            # partition, and thousands of partitions take thousands of round trips.
            "max.partition.fetch.bytes": 16_384,
            "fetch.max.bytes": 16 * 1024 * 1024,
            "fetch.wait.max.ms": 10,
        }
        self._consumer: Optional[Consumer] = None

    def first_records(self, offsets: Mapping[TopicPartition, int], ends: Optional[Mapping[TopicPartition, int]] = None
                      ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """The first readable record at or after each offset, None where the partition ends
        (at the readable end, or at its ``ends`` entry) before one."""
        ends = ends or {}
        if self._consumer is None:
            self._consumer = Consumer(with_python_logging(self._config))
        consumer = self._consumer
        consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()])
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        skipped: dict[TopicPartition, int] = {}
        paused: list[KafkaTopicPartition] = []
        deadline = time.monotonic() + _PROBE_TIMEOUT_S
        try:
            while len(answers) < len(offsets) and time.monotonic() < deadline:
                answered = []
                messages = consumer.consume(len(offsets) - len(answers), 0.1)
                self.records_read += len(messages)
                for message in messages:
                    topic, partition, offset = message.topic(), message.partition(), message.offset()
                    if topic is None or partition is None:  # a client-level error: none here
                        continue
                    tp = TopicPartition(topic, partition)
                    if tp not in offsets or tp in answers:
                        continue
                    error = message.error()
                    if error is None:
                        assert offset is not None  # a record read has its offset
                        if offset >= ends.get(tp, offset + 1):
                            answers[tp] = None
                            answered.append(KafkaTopicPartition(tp.topic, tp.partition))
                            continue
                        code = self._time_of(tp, message)
                        if code == SKIPPED:
                            skipped[tp] = skipped.get(tp, 0) + 1
                            if skipped[tp] > _MOST_SKIPPED:
                                raise IndexCannotAnswer({tp: f"more than {_MOST_SKIPPED} records from offset "
                                                             f"{offsets[tp]} on have no event time"})
                            continue
                        answers[tp] = (offset, code)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        answers[tp] = None
                    else:
                        raise IndexCannotAnswer({tp: f"reading the record at offset {offsets[tp]} failed "
                                                     f"({error.str()})"}, lookup_failed=True)
                    answered.append(KafkaTopicPartition(tp.topic, tp.partition))
                if answered:  # fetch no more of them: the rest would be bytes nobody reads
                    consumer.pause(answered)
                    paused += answered
        finally:
            if paused:  # librdkafka keeps a partition's pause across assignments
                consumer.resume(paused)
            consumer.unassign()
        missing = {tp: f"no record or end of partition at offset {offset} within "
                       f"{_PROBE_TIMEOUT_S:.0f} s" for tp, offset in offsets.items() if tp not in answers}
        if missing:
            raise IndexCannotAnswer(missing, lookup_failed=True)
        return answers

    def _time_of(self, tp: TopicPartition, message: Any) -> int:
        """The record's time code. A time that fails the query (``eventTime.onInvalid=fail``)
        is the fetch path's to report, once every record before it was processed."""
        try:
            return self._record_time.time_of(message)
        except KafkaSyncEventTimeError as err:
            raise IndexCannotAnswer({tp: f"a record read at offset {message.offset()} has no event time "
                                         f"({err})"}) from None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
