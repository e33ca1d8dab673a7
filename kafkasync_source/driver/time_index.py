"""Driver side: ask the brokers' ListOffsets what the time-index planning path needs.

:mod:`kafkasync_source.planning.index_planner` is pure; this is its broker-facing half, the second
provider of the planner's input beside :class:`~kafkasync_source.driver.fetcher.DriverFetcher`. One
round of look-ups sends one ListOffsets request per partition leader and 512 partitions
(librdkafka groups each call's partitions by leader), with the query's isolation level, so under
read_committed "latest" is the last stable offset and no answer lies past it
(``ReplicaManager.fetchOffset`` answers -1 for a found offset at or past the last fetchable
one).

A trigger costs, in rounds of ListOffsets requests (each one request per leader):

* 2: latest, then max_timestamp (``OffsetSpec.max_timestamp()``, KIP-734) — in that order, so
  a record produced in between can only put the largest timestamp past the window (then
  searched for), never leave a newer one unseen inside it. max_timestamp only for the
  partitions whose readable end moved since the previous trigger: below an unmoved end the
  records, and so their largest timestamp, are the same;
* +1 where the cut falls inside some partition (``for_timestamp(T + 1)``);
* +log2(span) where a search is needed: ``maxOffsetsPerTrigger`` (over the stream-time
  span of the batch), ``maxEventTimePerTrigger`` across a gap, a partition whose largest
  record lies past the window (a live stream that grew between the first two requests,
  a stop offset, an open transaction).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Iterable, Mapping, Optional

import numpy as np
from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import _AdminClientImpl

from kafkasync_source.config.client_config import non_consumer_settings
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.driver.offset_reader import KafkaSyncConnectionError
from kafkasync_source.driver.record_probe import ProbedRecords
from kafkasync_source.planning.index_planner import FirstOffsets, IndexCannotAnswer, IndexedPartition
from kafkasync_source.planning.known_answers import KnownFirstOffsets
from kafkasync_source.planning.offsets import SyncOffset
from kafkasync_source.planning.planner import PartitionState, TopicPartition

logger = logging.getLogger(__name__)

_EMPTY = np.empty(0, dtype=np.int64)

FirstRecordAnswers = Mapping[TopicPartition, Optional[tuple[int, int]]]
"""What :data:`~kafkasync_source.planning.index_planner.FirstRecords` answers."""

_REQUEST_TIMEOUT_S = 5.0
"""A healthy broker answers ListOffsets in milliseconds; a deleted topic or a broker that is
down makes librdkafka wait for the whole timeout."""
_UNKNOWN_OFFSET = -1
"""A broker's answer where no offset fits the look-up (``ListOffsetsResponse.UNKNOWN_OFFSET``)."""
_LATEST, _EARLIEST, _MAX_TIMESTAMP = -1, -2, -3
"""The ListOffsets protocol's special times (``ListOffsetsRequest.LATEST_TIMESTAMP``,
``EARLIEST_TIMESTAMP``, ``MAX_TIMESTAMP``); any other is a time to look up."""
_PARTITIONS_PER_CALL = 512
"""One ``list_offsets`` call's client-side cost grows faster than its partitions (confluent-kafka
2.16 on Kafka 4.3, loopback: 3.9 ms at 512 partitions, 12.5 at 1,024, 31.8 at 2,048, 91 at
4,096; see docs/concepts.md, "Thousands of partitions"): a round asks in calls of at most this
many, all in flight at once (23-31 ms at 4,096)."""
_UNSUPPORTED = frozenset({KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE,
                          KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT, KafkaError.INVALID_REQUEST})
"""Errors of a broker that cannot answer a time look-up at all (no KIP-734, message format
v0): the planning falls back to the fetch path instead of retrying."""
_LEADER_MOVED = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                           KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                           KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})
"""Answers that say the client's idea of a partition's leader is stale. librdkafka's admin
ListOffsets (confluent-kafka 2.x) sends the leader epoch of its metadata cache and did not
refresh it after a rolling restart of three Kafka 4.3 brokers: FENCED_LEADER_EPOCH for every
request over 120 s (CI, integration/test_three_brokers.py). Kafka's Java client refreshes its
metadata on these errors before asking again (KAFKA-9535); the reader renews its client. A
leader that is down (its connection fails, or the request times out) is asked for the same
way: the cached metadata may still name it."""


class TimeIndexReader:
    """ListOffsets look-ups for a query's partitions; counts its rounds for metrics."""

    def __init__(self, client_config: Mapping[str, str], *, retries: int = 3,
                 retry_interval_ms: int = 1000, fall_back_on_failure: bool = False,
                 give_up_after_ms: int = 120_000) -> None:
        """``fall_back_on_failure`` (``planningMode=auto``): a failed look-up is not retried
        but raises :class:`IndexCannotAnswer`, so that the batch is planned from fetched
        records, whose errors (a deleted topic, lost records) the fetch path reports — until
        look-ups have failed for ``give_up_after_ms`` (``kafkaConsumer.pollTimeoutMs``)
        without one success: the cluster is then unreachable, and the query fails naming the
        brokers, the error and how long. Otherwise a look-up is retried ``retries`` times.
        It keeps no answer: what the index paths remember of records is
        :class:`~kafkasync_source.driver.record_probe.ProbedRecords`' facts."""
        read_committed = client_config.get("isolation.level") == "read_committed"
        self._isolation = (IsolationLevel.READ_COMMITTED if read_committed
                           else IsolationLevel.READ_UNCOMMITTED)
        self._admin_settings: dict[str, str | int | float | bool] = {**non_consumer_settings(client_config)}
        self._admin = AdminClient(with_python_logging(self._admin_settings))
        self._retries = 0 if fall_back_on_failure else retries
        self._fall_back_on_failure = fall_back_on_failure
        self._give_up_after_s = give_up_after_ms / 1000
        self._failing_since: Optional[float] = None
        self._bootstrap = client_config.get("bootstrap.servers", "")
        self._retry_interval_s = retry_interval_ms / 1000
        self.rounds = 0
        """ListOffsets rounds since the query started (each: one request per leader)."""
        self.partitions_asked = 0
        """Partitions asked over those rounds: what the driver's per-partition work scales with."""
        self.renewals = 0
        """Times the admin client was replaced after answers that its leaders are stale."""

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Optional[int]]:
        """The readable end of each partition."""
        answers = self._list(dict.fromkeys(partitions, _LATEST), "the latest offsets")
        return {tp: None if answer is None else answer[0] for tp, answer in answers.items()}

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Optional[int]]:
        """The log start of each partition."""
        answers = self._list(dict.fromkeys(partitions, _EARLIEST), "the earliest offsets")
        return {tp: None if answer is None else answer[0] for tp, answer in answers.items()}

    def largest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """(timestamp, offset) of each partition's largest timestamp; None where the broker
        has none below the readable end (or answers -1, as the embedded cluster always does)."""
        answers = self._list(dict.fromkeys(partitions, _MAX_TIMESTAMP), "the largest timestamps")
        return {
            tp: None if answer is None or answer[0] < 0 or answer[1] < 0 else (answer[1], answer[0])
            for tp, answer in answers.items()
        }

    def first_offsets(self, times: Mapping[TopicPartition, int]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """:data:`~kafkasync_source.planning.index_planner.FirstOffsets`: the first offset whose
        timestamp is >= the time and that timestamp, None where none lies below the readable
        end."""
        answers = self._list(times, "offsets by time")
        lost = {tp: f"the brokers gave no answer for offsets by time (librdkafka returned offset {answer[0]})"
                for tp, answer in answers.items() if answer is not None and answer[0] < _UNKNOWN_OFFSET}
        if lost:
            # A broker answers -1 where no record lies at or past the time. librdkafka's
            # ListOffsets (confluent-kafka 2.16) also returned -1001 (RD_KAFKA_OFFSET_INVALID),
            # without an error, for partitions whose leader had just been killed (Kafka 4.3.1,
            # integration/test_three_brokers.py). Read as "none", it let a cut take such a
            # partition's whole window while cutting the others at a time level. Asking again
            # at once with a renewed client made a restarted broker's query crawl (CI): the
            # batch is planned from fetched records instead, as for a log that moved back.
            raise IndexCannotAnswer(lost)
        return {tp: None if answer is None or answer[0] < 0 else answer
                for tp, answer in answers.items()}

    def close(self) -> None:
        """AdminClient has no close(); dropping the reference destroys the handle."""
        self._admin = None  # type: ignore[assignment]

    def _list(self, specs: Mapping[TopicPartition, int], what: str) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """``(offset, timestamp)`` per partition for a time (or ``_LATEST``...) each, in one
        round, retried after retriable errors (``fetchOffset.numRetries`` /
        ``retryIntervalMs``)."""
        if not specs:
            return {}
        began = time.monotonic()
        attempts = 0
        renewed = False
        while True:
            attempts += 1
            self.rounds += 1
            self.partitions_asked += len(specs)
            answers, failures = self._list_once(specs)
            if not failures:
                self._failing_since = None
                return answers
            if not renewed and any(error.code() in _LEADER_MOVED for error in failures.values()):
                # A stale leader is retried at once with fresh metadata, not counted as a
                # failure: it is what a leader election or a broker restart looks like.
                renewed = True
                self._renew_client(failures)
                attempts -= 1
                continue
            if self._failing_since is None:
                self._failing_since = began
            failing_for = time.monotonic() - self._failing_since
            if self._fall_back_on_failure and failing_for >= self._give_up_after_s:
                named = "; ".join(f"{tp.topic}-{tp.partition}: {error.str()}"
                                  for tp, error in sorted(failures.items())[:5])
                raise KafkaSyncConnectionError(
                    f"kafkasync: the Kafka cluster at kafka.bootstrap.servers={self._bootstrap} "
                    f"answered no ListOffsets request ({what}) for {failing_for:.0f} s "
                    f"(kafkaConsumer.pollTimeoutMs={int(self._give_up_after_s * 1000)}): {named}."
                )
            unsupported = {tp: error for tp, error in failures.items() if error.code() in _UNSUPPORTED}
            if unsupported:
                raise IndexCannotAnswer({tp: f"the broker cannot answer {what} ({error.str()}); "
                                             "planning from the time index needs Kafka 3.0 or newer "
                                             "(KIP-734)" for tp, error in unsupported.items()})
            if self._fall_back_on_failure:
                raise IndexCannotAnswer({tp: f"the ListOffsets look-up of {what} failed ({error.str()})"
                                         for tp, error in failures.items()}, lookup_failed=True)
            if attempts > self._retries or not all(_retriable(e) for e in failures.values()):
                names = ", ".join(f"{tp.topic}-{tp.partition}: {error.str()}"
                                  for tp, error in sorted(failures.items()))
                raise KafkaException(KafkaError(
                    KafkaError._FAIL,
                    f"kafkasync: could not read {what} in {attempts} attempt(s) over "
                    f"{time.monotonic() - began:.0f} s (fetchOffset.numRetries={self._retries}, "
                    f"fetchOffset.retryIntervalMs={int(self._retry_interval_s * 1000)}): {names}",
                ))
            logger.info("kafkasync: reading %s failed for %d partition(s); retrying in %.1f s",
                        what, len(failures), self._retry_interval_s)
            time.sleep(self._retry_interval_s)

    def _renew_client(self, failures: Mapping[TopicPartition, KafkaError]) -> None:
        """A new admin client asks the brokers for metadata before its first request, so it
        sends each partition's current leader and epoch."""
        self.renewals += 1
        logger.info("kafkasync: ListOffsets found stale leaders (%s); asking again with fresh metadata",
                    ", ".join(f"{tp.topic}-{tp.partition}: {error.name()}"
                              for tp, error in sorted(failures.items())[:5]))
        self._admin = AdminClient(with_python_logging(self._admin_settings))

    def _list_once(self, specs: Mapping[TopicPartition, int]) -> tuple[
            dict[TopicPartition, Optional[tuple[int, int]]], dict[TopicPartition, KafkaError]]:
        """One round: calls of at most ``_PARTITIONS_PER_CALL`` partitions, all sent before
        any answer is awaited. Each goes through the C call ``AdminClient.list_offsets``
        wraps (typed in ``confluent_kafka/cimpl.pyi``) with one future for its answers:
        the wrapper's future per partition costs more than the broker's answer at
        thousands of partitions."""
        requested = [KafkaTopicPartition(tp.topic, tp.partition, spec) for tp, spec in specs.items()]
        pending = []
        for begin in range(0, len(requested), _PARTITIONS_PER_CALL):
            chunk = requested[begin:begin + _PARTITIONS_PER_CALL]
            future: Future = Future()
            future.set_running_or_notify_cancel()
            _AdminClientImpl.list_offsets(self._admin, chunk, future, isolation_level_value=self._isolation.value,
                                          request_timeout=_REQUEST_TIMEOUT_S)
            pending.append((chunk, future))
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        failures: dict[TopicPartition, KafkaError] = {}
        for chunk, future in pending:
            try:
                results = future.result()
            except KafkaException as err:  # the whole call failed
                error = _kafka_error(err)
                failures.update({TopicPartition(k.topic, k.partition): error for k in chunk})
                continue
            for kafka_tp, result in results.items():
                tp = TopicPartition(kafka_tp.topic, kafka_tp.partition)
                if isinstance(result, KafkaError):
                    failures[tp] = result
                else:
                    answers[tp] = (result.offset, result.timestamp)
        self._admin.poll(0)  # hands over its log
        return answers, failures


def _kafka_error(err: KafkaException) -> KafkaError:
    return err.args[0] if err.args and isinstance(err.args[0], KafkaError) else KafkaError(KafkaError._FAIL, str(err))


def _retriable(error: KafkaError) -> bool:
    return error.retriable() or error.code() in (
        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN, KafkaError.OFFSET_NOT_AVAILABLE,
    )



class IndexPath:
    """What both index paths share: a :class:`TimeIndexReader` (the readable ends), the records
    read at chosen offsets and what they said (:class:`~kafkasync_source.driver.record_probe.
    ProbedRecords`), and the planner's view of their answers."""

    def __init__(self, reader: TimeIndexReader, records: ProbedRecords, *, past_log_starts: bool = False) -> None:
        self.reader = reader
        self.records = records
        self._past_log_starts = past_log_starts
        """``failOnDataLoss=false``: records deleted below the log start (``DeleteRecords``,
        retention) are skipped by the executors and the query goes on, so what was learnt of
        them must answer nothing. A move of the log start shows in no latest offset, hence one
        more ListOffsets round (earliest) a trigger. With ``failOnDataLoss=true`` such a loss
        fails the query where an executor meets it, and the round is not paid."""

    def latest_ends(
        self, start: SyncOffset, stop_offsets: Optional[Mapping[TopicPartition, int]]
    ) -> tuple[dict[TopicPartition, Optional[int]], dict[TopicPartition, str]]:
        """Both paths' first question of a trigger: the readable end of each partition of
        ``start`` still to read (in a bounded run, those before their stop offset), and the
        partitions whose end moved back below their position, with why (forgotten here: what
        was learnt of them is of a log no longer read). The facts below the positions are
        dropped first (:meth:`pass_positions`)."""
        active = [
            tp for tp, position in start.partitions.items()
            if stop_offsets is None or position.next_offset < stop_offsets.get(tp, position.next_offset)
        ]
        self.pass_positions(start, active)
        latest = self.reader.latest(active)
        moved_back = moved_back_reasons(start, latest)
        for tp in moved_back:
            self.forget(tp)
        return latest, moved_back

    def pass_positions(self, start: SyncOffset, active: list[TopicPartition]) -> None:
        """The query stands at ``start``: drop the facts below each partition's position, or
        below its log start where that moved past the position (see ``_past_log_starts``)."""
        positions = start.next_offsets()
        if self._past_log_starts and active:
            for tp, log_start in self.reader.earliest(active).items():
                if log_start is not None and log_start > positions[tp]:
                    positions[tp] = log_start
        self.records.pass_positions(positions)

    def first_records(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> FirstRecordAnswers:
        """:data:`~kafkasync_source.planning.index_planner.FirstRecords`, remembered."""
        return self.records.first_records(ranges)

    @property
    def records_read(self) -> int:
        """Records the driver's probes read since the query started."""
        return self.records.records_read

    def forget(self, tp: TopicPartition, from_offset: int = 0) -> None:
        """``tp``'s log moved back: nothing remembered of it from ``from_offset`` on holds
        (:meth:`~kafkasync_source.planning.record_facts.RecordFacts.forget`)."""
        self.records.forget(tp, from_offset)

    @staticmethod
    def report_states(states: Mapping[TopicPartition, IndexedPartition]) -> dict[TopicPartition, PartitionState]:
        return report_states(states)

    def close(self) -> None:
        self.reader.close()
        self.records.close()


class TimeIndexPath(IndexPath):
    """The planner's input from the brokers' index: :class:`IndexedPartition` per partition
    of a batch's start, read with two ListOffsets rounds (see the module docstring)."""

    def __init__(self, reader: TimeIndexReader, records: ProbedRecords, *, past_log_starts: bool = False) -> None:
        super().__init__(reader, records, past_log_starts=past_log_starts)
        self._largest: dict[TopicPartition, tuple[int, tuple[int, int]]] = {}
        """Per partition, the readable end when the brokers last answered its largest
        timestamp, and that answer (timestamp, offset)."""
        self._known = KnownFirstOffsets()

    def first_offsets(self, start: SyncOffset) -> FirstOffsets:
        """The planner's by-time look-ups for a batch from ``start``: answered from what
        earlier rounds and triggers learnt where that is exact (:mod:`kafkasync_source.
        known_answers`), from the brokers otherwise."""
        return self._known.remembering(self.reader.first_offsets, start.next_offsets())

    def forget(self, tp: TopicPartition, from_offset: int = 0) -> None:
        """Also the brokers' answers for ``tp`` (its largest timestamp, ``first(t)``): the log
        they were given of is not the one read from now on."""
        super().forget(tp, from_offset)
        self._largest.pop(tp, None)
        self._known.forget(tp)

    def observe(
        self, start: SyncOffset, stop_offsets: Optional[Mapping[TopicPartition, int]]
    ) -> dict[TopicPartition, IndexedPartition]:
        """What the brokers say now of every partition of ``start``. In a bounded run,
        partitions at or past their stop offset (or outside the run) are FINISHED unasked."""
        latest, moved_back = self.latest_ends(start, stop_offsets)
        largest = self._unchanged_largest(start, latest)
        # After latest: see the module docstring.
        largest.update(self.reader.largest([tp for tp in latest if tp not in largest]))
        self._largest = {tp: (latest[tp], answer) for tp, answer in largest.items()  # type: ignore[misc]
                         if answer is not None and latest[tp] is not None and tp not in moved_back}
        if moved_back:
            raise IndexCannotAnswer(moved_back)
        states = {}
        for tp, position in start.partitions.items():
            offset = position.next_offset
            if tp in latest:
                stop = None if stop_offsets is None else stop_offsets[tp]
                states[tp] = IndexedPartition(offset, latest[tp], largest.get(tp), position.partition_time, stop)
            else:
                states[tp] = IndexedPartition(offset, None, None, position.partition_time, stop_offset=offset)
        return states

    def _unchanged_largest(self, start: SyncOffset, latest: Mapping[TopicPartition, Optional[int]]
                           ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """The largest timestamps still known: a partition whose readable end has not moved
        holds the same records below it (the log is append-only), so its largest one there
        is the one the brokers named last time. Asked again where it lies before the
        position (retention may have removed it; the brokers then name another)."""
        return {
            tp: answer for tp, (end, answer) in self._largest.items()
            if tp in latest and latest[tp] == end and answer[1] >= start.partitions[tp].next_offset
        }

    def check_answers(self, partitions: list[TopicPartition]) -> None:
        """``planningMode=timeIndex`` at query start: fail, naming the partition, if the
        brokers answer no largest timestamp for a partition that holds records (a broker
        without KIP-734, or one that answers -1 to every time look-up)."""
        earliest = self.reader.earliest(partitions)
        latest = self.reader.latest(partitions)
        largest = self.reader.largest(partitions)
        silent = {
            tp: f"the brokers answer no largest timestamp (ListOffsets max_timestamp, KIP-734, "
                f"Kafka >= 3.0) although offsets [{earliest[tp]}, {latest[tp]}) hold records"
            for tp in partitions
            if largest.get(tp) is None and earliest.get(tp) is not None
            and latest.get(tp) is not None and latest[tp] > earliest[tp]  # type: ignore[operator]
        }
        if silent:
            raise IndexCannotAnswer(silent)


def moved_back_reasons(start: SyncOffset, latest: Mapping[TopicPartition, Optional[int]]) -> dict[TopicPartition, str]:
    """Partitions whose readable end lies below the batch's start, and why: the fetch path
    plans from where the log restarted."""
    return {
        tp: f"the brokers gave no latest offset (librdkafka returned {end}; see first_offsets)"
        if end < _UNKNOWN_OFFSET else
        f"its log now ends at offset {end}, below the position "
        f"{start.partitions[tp].next_offset} (deleted and recreated, or truncated)"
        for tp, end in latest.items() if end is not None and end < start.partitions[tp].next_offset
    }


def report_states(states: Mapping[TopicPartition, IndexedPartition]) -> dict[TopicPartition, PartitionState]:
    """An index path's view as the live report and bounded runs read a fetch path's state:
    nothing buffered, the readable end as the end offset."""
    return {
        tp: PartitionState(
            start=state.start, offsets=_EMPTY, timestamps=_EMPTY, position=state.start,
            end_offset=state.end_offset, partition_time=state.partition_time,
            stop_offset=state.stop_offset,
        )
        for tp, state in states.items()
    }
