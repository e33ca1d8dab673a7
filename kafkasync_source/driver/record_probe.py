"""Driver side: read the first record at chosen offsets, many partitions in one round.

The time index's answers are checked with it (a transaction marker or an aborted record can hold
an index entry no consumer reads: :mod:`kafkasync_source.planning.index_planner`), and, for an
event time promised in order, it is the index itself (:mod:`kafkasync_source.driver.probe_index`).

What a probe costs the brokers
------------------------------
A probe reads a record, but the brokers send record batches, and a consumer can use none of a
batch it did not receive whole, so **the floor of one probe is the producer batch that holds the
offset** (a producer with ``batch.size=1048576`` writes batches of up to 1 MiB; at 4,096
partitions one round at that floor is 4 GiB). What the sources say:

* Kafka (KIP-74, fetch v3 and later): a partition's ``MaxBytes`` is ignored only for the first
  non-empty partition of a response, which gets at least its first whole batch
  (``ReplicaManager.readFromLocalLog``: ``minOneMessage`` until a partition returned records;
  ``LogSegment.read``); any other partition whose first batch does not fit gets *no* records
  (``ReplicaManager.read``: ``firstEntryIncomplete`` is answered with ``MemoryRecords.EMPTY``).
  So with batches larger than ``max.partition.fetch.bytes`` a response carries one partition's
  batch, and a round costs a fetch round trip per partition: slow at thousands of partitions,
  which :data:`_PROBE_TIMEOUT_S` and the back-off below bound, but not more bytes.
* librdkafka (``rd_kafka_msgset_reader_run``, rdkafka_msgset_reader.c, v2.15): when a
  partition's data held no complete message and no control message, it doubles that
  partition's ``rktp_fetch_msg_max_bytes`` (up to 1 GiB) and never lowers it: the value is set
  once, from ``max.partition.fetch.bytes``, when the partition's object is created
  (``rd_kafka_toppar_new0``, rdkafka_partition.c) and sent as the partition's ``MaxBytes`` in
  every fetch (rdkafka_fetcher.c). On a real broker an oversized batch comes back empty, not
  partial, so this fires where complete batches hold nothing it hands over (aborted
  transactions under read_committed, batches emptied by compaction): the probe's checks of
  transactional topics. A v2 batch it received only in part is not parsed at all
  (``rd_kafka_msgset_reader_v2``: a payload longer than what remains is an underflow).
* librdkafka prefetches: a partition is fetched again as soon as its previous response is
  handled, until the consumer's queue holds ``queued.min.messages`` (100,000) messages or
  ``queued.max.messages.kbytes`` (64 MiB) (``rd_kafka_toppar_fetch_decide``; with the
  high-level consumer both apply to its one queue). A partition the probe pauses once it
  answered was fetched again meanwhile: on the embedded cluster two batches a probe instead of
  one (tests/test_record_probe.py).

Hence :func:`probe_settings`: the consumer holds at most one response ahead of the probe
(``queued.min.messages=1``, looked at again every millisecond), so a partition that answered is
paused before its next fetch; ``fetch.max.bytes`` bounds what one response carries, and so what
a partition whose size librdkafka doubled can cost a probe (4 MiB, or its one whole batch); a
round that times out replaces the consumer, which starts again at ``max.partition.fetch.bytes``,
and is answered by the fetch path, the index paths asking again only after a back-off.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Mapping, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.config.client_config import consumer_group_id
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.event_time import KAFKA_TIMESTAMP, SKIPPED, KafkaSyncEventTimeError, RecordTime
from kafkasync_source.planning.index_planner import IndexCannotAnswer
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.planning.record_facts import RecordFacts

_PROBE_TIMEOUT_S = 10.0
"""A round still without every answer after this gives up (:class:`IndexCannotAnswer`): the
batch is planned from fetched records, and the planning runner asks the index paths again only
after 1, 2, 4 ... 64 such batches (``SyncDriver._fall_back``), not at every trigger."""
_PACE_AFTER_S = 1.0
"""A round whose answers have come for this long is judged by their pace (:func:`out_of_time`)."""
_PARTITION_FETCH_BYTES = 16_384
"""``max.partition.fetch.bytes``: little per partition, many partitions per response. Not 1
byte: a broker sends a batch larger than it only for the first partition of a response (see
the module docstring), so the limit is a typical small producer batch; else a response holds
one partition, and thousands of partitions take thousands of round trips."""
_FETCH_BYTES = 4 * 1024 * 1024
"""``fetch.max.bytes``, and the consumer's queue (``queued.max.messages.kbytes``): what one
response carries beyond the first partition's whole batch. librdkafka requires it to be at
least ``message.max.bytes`` (1,000,000 by default) when set."""
_QUEUE_BACKOFF_MS = 1
"""``fetch.queue.backoff.ms``: with ``queued.min.messages=1`` librdkafka looks at a partition
again this long after it found the queue holding a message; its default (1 s) would make every
response of a round wait a second."""
Following = tuple[int, list[tuple[int, int]]]
"""The records read after an answer at offset ``a``: ``(a + 1, records)``, ``(offset, time)``
each, the first one the first record with a time at or after ``a + 1``, each next one the first
at or after the offset after the one before it."""
_MOST_FOLLOWING = 16
"""Records kept after an answer (:data:`Following`), of those its fetch brought anyway."""
_MOST_SKIPPED = 10_000
"""Records without an event time (``eventTime.onInvalid=skip``) a probe reads past before it
gives up and the fetch path plans the batch: a partition of heartbeats is read in full there
once, not at every probe."""


def out_of_time(asked: int, answered: int, first_answer_at: Optional[float], now: float, deadline: float) -> bool:
    """Whether a round gives up before its deadline: its answers have come for
    :data:`_PACE_AFTER_S` at least, and at their pace so far the partitions still unanswered
    would take it past the deadline. Where batches are larger than the fetch size, a broker
    answers one partition a round trip (module docstring): such a round at thousands of
    partitions would read batches for the whole timeout and still give up. Judged from the
    first answer, not the round's start, so that a slow connection is not taken for a slow
    pace."""
    if first_answer_at is None or now - first_answer_at < _PACE_AFTER_S:
        return False
    return now + (asked - answered) * (now - first_answer_at) / answered > deadline


def probe_settings(client_config: Mapping[str, str]) -> dict[str, Any]:
    """The probe consumer's librdkafka settings: the query's client settings, with what a
    probe needs fixed over them (a user's ``kafka.queued.*``/``kafka.fetch.*`` tune the
    executors' reads, not the probe's). See the module docstring for why each size."""
    return {
        **client_config,
        "group.id": consumer_group_id(client_config),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "max.partition.fetch.bytes": _PARTITION_FETCH_BYTES,
        "fetch.max.bytes": _FETCH_BYTES,
        "fetch.wait.max.ms": 10,
        "queued.min.messages": 1,
        "queued.max.messages.kbytes": _FETCH_BYTES // 1024,
        "fetch.queue.backoff.ms": _QUEUE_BACKOFF_MS,
    }


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
        self._config = probe_settings(client_config)
        self._consumer: Optional[Consumer] = None
        self._assigned: set[TopicPartition] = set()
        """Partitions assigned to the consumer, each paused between rounds."""
        self.read_on: dict[TopicPartition, Following] = {}
        """Of the last round, per partition, the records that came after its answer (the
        broker sends whole record batches): what asking after the answer would answer."""

    def first_records(self, offsets: Mapping[TopicPartition, int], ends: Optional[Mapping[TopicPartition, int]] = None
                      ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """The first readable record at or after each offset, None where the partition ends
        (at the readable end, or at its ``ends`` entry) before one.

        A search asks the same partitions round after round, so they stay assigned between
        rounds, paused: librdkafka's ``assign`` and ``unassign`` of 4,096 partitions took
        0.27 s and more a round, where a partition asked again is moved with one ``seek``.
        After an error the consumer's state is not known, and the next round assigns afresh."""
        ends = ends or {}
        if self._consumer is None:
            self._consumer = Consumer(with_python_logging(self._config))
        consumer = self._consumer
        try:
            self._start(consumer, offsets)
            answers = self._read(consumer, offsets, ends)
        except BaseException:
            self._unassign()
            raise
        missing = {tp: f"no record or end of partition at offset {offset} within {_PROBE_TIMEOUT_S:.0f} s "
                       f"at the round's pace ({len(answers)} of {len(offsets)} partitions answered; reading "
                       "records at chosen offsets is backed off)"
                   for tp, offset in offsets.items() if tp not in answers}
        if missing:
            # Not a failed look-up, which is asked again at the next trigger: a round this slow
            # (at thousands of partitions, one round trip per partition whose batches are larger
            # than the fetch size) would cost every trigger as much again. The new consumer
            # starts at max.partition.fetch.bytes, whatever librdkafka doubled it to.
            self.close()
            raise IndexCannotAnswer(missing)
        return answers

    def _start(self, consumer: Consumer, offsets: Mapping[TopicPartition, int]) -> None:
        """Fetch each partition from its offset: a new one is assigned there; one assigned in
        an earlier round (paused since) is resumed, then moved there with a seek.

        librdkafka serves a partition's seek, pause and resume in the order they were called
        (on its main thread), and ``Consumer.seek`` waits until the seek is served. The seek
        resets the position a pause saved (the last record handed over, plus one) and raises
        the partition's version barrier: nothing fetched before it is handed over — neither
        what the broker's thread fetched from the old position between the resume and the
        seek, nor an end-of-partition event of an earlier round (librdkafka sends that event
        again at an end already reported). The seek comes after the resume because a resume
        does not wake the broker's thread, which then fetched the partitions only at its next
        idle wake-up, up to a second later (Kafka 4.3.1, librdkafka 2.16: one round in five to
        ten), while a seek does — to any offset but 0, where the partition's fetch state does
        not change: those partitions are assigned afresh (after their resume: librdkafka keeps
        a pause across assignments)."""
        again: list[KafkaTopicPartition] = []
        afresh: list[KafkaTopicPartition] = []
        for tp, offset in offsets.items():
            partition = KafkaTopicPartition(tp.topic, tp.partition, offset)
            (again if tp in self._assigned and offset != 0 else afresh).append(partition)
        restarted = [partition for partition in afresh
                     if TopicPartition(partition.topic, partition.partition) in self._assigned]
        if again or restarted:
            consumer.resume(again + restarted)
        for partition in again:
            consumer.seek(partition)
        if restarted:
            consumer.incremental_unassign(restarted)
        if afresh:
            consumer.incremental_assign(afresh)
            self._assigned.update(TopicPartition(partition.topic, partition.partition) for partition in afresh)

    def _read(self, consumer: Consumer, offsets: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
              ) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """One round's answers, and :attr:`read_on`. A partition is paused once it answered
        and what follows a record answer is settled (:meth:`_follow`; the rest of its fetch
        would be bytes nobody reads): all those of one ``consume`` call in one ``pause`` call. When every
        partition answered, what is already fetched is taken without waiting, and the
        partitions still without their next message are paused. Returns before every
        partition answered only at the deadline, or once its pace says it would not make it
        (:func:`out_of_time`; the caller then drops the consumer).

        A record below the offset asked is not an answer: the seek's version barrier keeps
        records fetched before it from being handed over, this keeps any that were from
        answering a round they were not read for."""
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        skipped: dict[TopicPartition, int] = {}
        following: dict[TopicPartition, tuple[int, int]] = {}
        """Per partition whose record answer's followers are not settled (unpaused), the last
        record of answer and followers."""
        settled_partitions: set[tuple[Optional[str], Optional[int]]] = set()
        """Partitions done with this round: the rest of their fetch (a broker sends whole
        record batches, 10-20 records a partition in benchmarks/trigger_cost.py) is skipped
        before anything else is done with it."""
        self.read_on = {}
        deadline = time.monotonic() + _PROBE_TIMEOUT_S
        first_answer_at: Optional[float] = None
        while (now := time.monotonic()) < deadline:
            if out_of_time(len(offsets), len(answers), first_answer_at, now, deadline):
                break
            waiting = len(offsets) - len(answers)
            if not waiting and not following:
                break
            asked = waiting + len(following)
            messages = consumer.consume(asked, 0.1 if waiting else 0)
            if not messages and not waiting:
                break
            self.records_read += len(messages)
            settled = []
            for message in messages:
                key = (message.topic(), message.partition())
                if key in settled_partitions:
                    continue
                topic, partition, offset = *key, message.offset()
                if topic is None or partition is None:  # a client-level error: none here
                    continue
                tp = TopicPartition(topic, partition)
                if tp in following:
                    if self._follow(tp, following, message, ends.get(tp)):
                        settled.append(KafkaTopicPartition(tp.topic, tp.partition))
                        settled_partitions.add(tp)
                    continue
                if tp not in offsets or tp in answers:
                    continue
                error = message.error()
                if error is None:
                    assert offset is not None  # a record read has its offset
                    if offset < offsets[tp]:
                        continue
                    if offset >= ends.get(tp, offset + 1):
                        answers[tp] = None
                        settled.append(KafkaTopicPartition(tp.topic, tp.partition))
                        settled_partitions.add(tp)
                        continue
                    code = self._time_of(tp, message)
                    if code == SKIPPED:
                        skipped[tp] = skipped.get(tp, 0) + 1
                        if skipped[tp] > _MOST_SKIPPED:
                            raise IndexCannotAnswer({tp: f"more than {_MOST_SKIPPED} records from offset "
                                                         f"{offsets[tp]} on have no event time"})
                        continue
                    answers[tp] = following[tp] = (offset, code)
                    continue
                if error.code() == KafkaError._PARTITION_EOF:
                    answers[tp] = None
                else:
                    raise IndexCannotAnswer({tp: f"reading the record at offset {offsets[tp]} failed "
                                                 f"({error.str()})"}, lookup_failed=True)
                settled.append(KafkaTopicPartition(tp.topic, tp.partition))
                settled_partitions.add(tp)
            if len(messages) < asked and following:
                # The queue is drained: the followers its fetches brought are read, and a
                # partition left fetching now would cost its next record batch (the next one
                # after a batch's last record) for records nobody asked.
                settled.extend(KafkaTopicPartition(tp.topic, tp.partition) for tp in following)
                settled_partitions.update(following)
                following.clear()
            if settled:
                consumer.pause(settled)
            if first_answer_at is None and answers:
                first_answer_at = time.monotonic()
        if following:
            consumer.pause([KafkaTopicPartition(tp.topic, tp.partition) for tp in following])
        return answers

    def _follow(self, tp: TopicPartition, following: dict[TopicPartition, tuple[int, int]], message: Any,
                end: Optional[int]) -> bool:
        """Whether ``message``, after the partition's record answer and the followers kept
        (:data:`Following`; the last of them ``following[tp]``), settles what follows it: a
        record with a time is kept, up to :data:`_MOST_FOLLOWING` and up to the first one at
        or past the range's ``end`` (the broker sends whole record batches, so they mostly
        arrive with the answer, and a search that read just below its target learns the
        target without another round; past the end of what it asked none says more than
        that nothing lies before the end); an end of partition, an error, a record without
        a time (or with one that fails) end the followers. A settled partition leaves
        ``following``."""
        offset, last = message.offset(), following[tp]
        if offset is not None and offset <= last[0]:
            return False
        if message.error() is None and offset is not None:
            try:
                code = self._time_of(tp, message)
            except IndexCannotAnswer:  # a time the fetch path is to report when it reads it
                code = SKIPPED
            if code != SKIPPED:
                _, records = self.read_on.setdefault(tp, (last[0] + 1, []))
                records.append((offset, code))
                if len(records) < _MOST_FOLLOWING and (end is None or offset < end):
                    following[tp] = (offset, code)
                    return False
        del following[tp]
        return True

    def _time_of(self, tp: TopicPartition, message: Any) -> int:
        """The record's time code. A time that fails the query (``eventTime.onInvalid=fail``)
        is the fetch path's to report, once every record before it was processed."""
        try:
            return self._record_time.time_of(message)
        except KafkaSyncEventTimeError as err:
            raise IndexCannotAnswer({tp: f"a record read at offset {message.offset()} has no event time "
                                         f"({err})"}) from None

    def _unassign(self) -> None:
        """Drop every partition: the next round assigns the partitions it asks afresh.
        librdkafka keeps a partition's pause across assignments, so all are resumed first;
        a consumer that cannot do either is replaced by a new one."""
        if self._consumer is None or not self._assigned:
            return
        partitions = [KafkaTopicPartition(tp.topic, tp.partition) for tp in self._assigned]
        self._assigned = set()
        try:
            self._consumer.resume(partitions)
            self._consumer.unassign()
        except (KafkaException, RuntimeError):  # RuntimeError: a closed consumer
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()

    def close(self) -> None:
        self._assigned = set()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class ProbedRecords:
    """:data:`~kafkasync_source.planning.index_planner.FirstRecords` read with a
    :class:`RecordProbe` and kept in :class:`~kafkasync_source.planning.record_facts.RecordFacts`:
    a log does not change what lies at an offset until it moves back, so a backfill's largest
    record is read once, not at every trigger, and a search's next round mostly asks where the
    records that came after an answer lie. Whoever sees a log move back calls
    :meth:`forget`; :meth:`pass_positions` at every trigger keeps the facts bounded by the
    partitions."""

    def __init__(self, probe: RecordProbe) -> None:
        self._probe = probe
        self.facts = RecordFacts()
        self.rounds = 0
        """Rounds of fetches since the query started (each: one fetch per leader)."""

    def first_records(
            self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, Optional[tuple[int, int]]]:
        """Per partition ``(offset, end)``, the first record a consumer of the query's isolation
        level reads in ``[offset, end)`` as ``(offset, time)``, or None. The consumer skips
        transaction markers and, under read_committed, aborted records, as the executors' do.
        Answered from the facts where they know, else in one round of fetches, each as small
        as the broker allows (it always sends the whole record batch holding the offset)."""
        facts = self.facts
        answers: dict[TopicPartition, Optional[tuple[int, int]]] = {}
        asking: dict[TopicPartition, int] = {}
        for tp, (offset, end) in ranges.items():
            known = facts.first_record(tp, offset)
            if known is not None:
                answers[tp] = known if known[0] < end else None
            elif facts.nothing_until(tp, offset) >= end:
                answers[tp] = None
            else:
                asking[tp] = offset
        if not asking:
            return answers
        self.rounds += 1
        found = self._probe.first_records(asking, {tp: ranges[tp][1] for tp in asking})
        for tp, record in found.items():
            if record is not None:
                facts.learn_first(tp, asking[tp], record)
            else:  # nothing a consumer reads up to the end the probe reached
                facts.learn_nothing_until(tp, asking[tp], ranges[tp][1])
            answers[tp] = record if record is not None and record[0] < ranges[tp][1] else None
        for tp, (after, records) in self._probe.read_on.items():
            facts.learn_followers(tp, after, records)
        return answers

    def known_first_record(self, tp: TopicPartition, offset: int) -> Optional[tuple[int, int]]:
        """:data:`~kafkasync_source.planning.record_search.KnownFirstRecord`: what
        :meth:`first_records` answers at ``offset`` without reading, where the facts know."""
        return self.facts.first_record(tp, offset)

    def forget(self, tp: TopicPartition, from_offset: int = 0) -> None:
        """``tp``'s log moved back (:meth:`RecordFacts.forget`)."""
        self.facts.forget(tp, from_offset)

    def pass_positions(self, positions: Mapping[TopicPartition, int]) -> None:
        """The query stands at ``positions``: drop the facts it can no longer ask."""
        self.facts.pass_positions(positions)

    @property
    def records_read(self) -> int:
        """Records the driver read to check (or, for an event time, to give) answers."""
        return self._probe.records_read

    def close(self) -> None:
        self._probe.close()
