"""Driver side: keep per-partition buffers of fetched ``(offset, timestamp)`` pairs filled.

The planner can only cut a synchronized batch from what the driver has *seen*: it needs each
partition's upcoming timestamps and whether a partition is empty because the broker has no
more data (idle) or only because nothing has been fetched yet. This fetcher owns one
confluent-kafka consumer, assigned (no consumer group), and a background thread that keeps
the buffers filled while Spark executes the previous batch. Each record's time is taken by the
``eventTime.*`` seam (event_time/seam.py: its Kafka timestamp, or a time read from its value or
headers) and its payload dropped at once — executors re-read the records by offset range — so
the driver holds 16 bytes per record.

Memory is bounded by a budget for all partitions (``driver.buffer.bytes``, split evenly over
the partitions; ``buffered.records.per.partition`` can lower it): a full partition is paused,
and resumed as soon as a batch has taken records from it, so that it refills to capacity. "Full"
must be a state the planner can rely on (a full buffer counts as complete, and the cut must not
depend on fetch progress), hence no hysteresis. Records a consume call returns beyond the bound
are discarded without advancing the position, and the partition is re-seeked to its position
when resumed. librdkafka's own prefetch queue is capped too, so driver memory stays bounded
however large the backlog.

Lag follows KIP-695's ``currentLag``: the log end offset the client already knows (from fetch
responses and end-of-partition events) minus the fetch *position* — never "last offset + 1",
because transaction markers and compaction leave offset gaps that would keep such a lag above
zero forever. No remote call is made per planning decision.

"Log end" is what this consumer can read: the high watermark under ``read_uncommitted``, the
last stable offset (LSO) under ``read_committed``, where a fetch stops at the first offset of
the oldest open transaction. librdkafka caches only the high watermark for the application
(``get_watermark_offsets(cached=True)`` returns ``rktp_hi_offset``); the LSO shows up as the
offset of the end-of-partition event, which librdkafka raises when the fetch position reaches
the fetch response's end offset — the LSO under read_committed, the high watermark otherwise
(``rd_kafka_fetch_reply_handle_partition`` in rdkafka_fetcher.c). Measuring against the high
watermark there would keep an open transaction's partition "waiting for fetch" until the
transaction ends (up to ``transaction.max.timeout.ms``), stalling every batch.

One thread steers the consumer: the fetch thread makes every call that moves it (``assign``,
``pause``, ``resume``), between two ``consume()`` calls. The driver thread only edits the
buffers (under the lock) and wakes the fetch thread, which applies what they need before it
consumes again. So every batch ``consume()`` returns was fetched for the assignment the fetch
thread itself last made, and a record is only ever dropped where the consumer will be sent back
to it (the partition's ``needs_seek``). Before confluent-kafka 2.16 nothing else guarantees
this: ``Consumer_consume`` only releases the GIL around ``rd_kafka_consume_batch_queue``, and
``Consumer_assign``/``Consumer_pause``/``Consumer_resume``/``Consumer_seek`` take no lock of
the handle (src/confluent_kafka/src/Consumer.c, v2.15.0), so an ``assign`` from the driver
thread landed inside an in-flight ``consume()``, which then returned records of the new
assignment (librdkafka purges only the older versions' messages at the barrier,
``rd_kafka_q_serve_rkmessages`` in rdkafka_queue.c). From 2.16 a per-consumer gate
(``Handle_serialize_enter`` in confluent_kafka.c) makes the other thread's call wait for the
whole ``consume()`` instead.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping, Optional

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.config.client_config import consumer_group_id
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.event_time import KAFKA_TIMESTAMP, SKIPPED, KafkaSyncEventTimeError, RecordTime
from kafkasync_source.planning.planner import NO_TIMESTAMP, PartitionState, TopicPartition

logger = logging.getLogger(__name__)

_CONSUME_BATCH = 5_000
# Short on purpose. The consumer is moved (a resumed partition re-seeked, a new position
# assigned) only between two consume() calls, and a consume() with fewer than _CONSUME_BATCH
# records queued returns only at this timeout: it bounds how long a buffer the planner freed
# waits before it is refilled. It also bounds snapshot()'s wait for the cached watermarks:
# from confluent-kafka 2.16 every Consumer method waits for a consume() in flight on another
# thread (Handle_serialize_enter in confluent_kafka.c); before 2.16 nothing waits, and
# nothing serialises the calls (see the module docstring). 0.1 s put up to 0.2 s of waiting
# on every trigger's latestOffset.
_CONSUME_TIMEOUT_S = 0.01
_FATAL_PARTITION_ERRORS = {
    KafkaError._AUTO_OFFSET_RESET: "its fetch position is no longer in the log (data loss)",
    KafkaError.OFFSET_OUT_OF_RANGE: "its fetch position is no longer in the log (data loss)",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic or partition no longer exists",
    KafkaError._UNKNOWN_PARTITION: "the topic or partition no longer exists",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "the client is not authorized to read the topic",
}


def readable_end(
    *, read_committed: bool, eof_offset: Optional[int], position: int, high_watermark: int
) -> Optional[int]:
    """The log end to measure a partition's lag against (None: not known yet).

    ``eof_offset`` is the offset of the partition's last end-of-partition event: the high
    watermark under read_uncommitted, the LSO under read_committed. ``high_watermark`` is the
    one librdkafka cached from its last fetch response (-1 before any).

    read_committed: once the fetch position has caught up with the last end-of-partition
    event, that event's offset is the LSO, and the records between it and the high watermark
    (an open transaction) cannot be read yet: lag 0, not "waiting for fetch". Records fetched
    past it mean the LSO has moved on; until the next end-of-partition event, the high
    watermark says whether more is coming."""
    if read_committed and eof_offset is not None and eof_offset >= position:
        return eof_offset
    known = [end for end in (high_watermark, eof_offset) if end is not None and end >= 0]
    return max(known) if known else None


class KafkaSyncFetchError(RuntimeError):
    """The driver's fetcher hit an error it cannot recover from; the message names the partition."""


class _PartitionBuffer:
    """Fetched, not yet emitted records of one partition, in offset order.

    The records live in ``offsets[:count]`` / ``timestamps[:count]`` of arrays sized to the
    bound. Records are only ever appended behind ``count`` (the fetch thread stages them in
    lists and stores them at the end of each consume batch), and dropping emitted records
    moves what is left into new arrays. So the slices ``snapshot()`` hands to the planner
    never change afterwards and need no copy: at 512 partitions with full buffers, copying
    them cost ~40 ms per trigger.
    """

    __slots__ = ("start", "position", "capacity", "offsets", "timestamps", "count",
                 "staged_offsets", "staged_timestamps", "paused", "needs_seek", "log_end",
                 "moved_back", "failure")

    def __init__(self, start: int, capacity: int) -> None:
        self.start = start
        self.position = start
        self.capacity = capacity
        # np.empty reserves address space only: pages are touched as records arrive.
        self.offsets = np.empty(capacity, dtype=np.int64)
        self.timestamps = np.empty(capacity, dtype=np.int64)
        self.count = 0  # records buffered, staged ones included
        self.staged_offsets: list[int] = []
        self.staged_timestamps: list[int] = []
        self.paused = False  # as the fetch thread last told the consumer
        # The consumer's fetch position for this partition is not ``position``: records past
        # the bound were discarded, or the buffer (re)starts here. Whatever arrives for it is
        # dropped until the fetch thread assigns the partition at ``position`` again.
        self.needs_seek = True
        self.log_end: Optional[int] = None
        # Offset the log restarted at below ``position`` (topic deleted and recreated, or
        # truncated): nothing more is buffered until the driver repositions the partition.
        self.moved_back: Optional[int] = None
        # The record at ``position`` has no event time and eventTime.onInvalid=fail (or the
        # extractor raised): nothing from it on is buffered, and the buffer counts as full, so
        # that batches take every record before it; the query fails once none is left.
        self.failure: Optional[KafkaSyncEventTimeError] = None

    def __len__(self) -> int:
        return self.count

    @property
    def full(self) -> bool:
        return self.count >= self.capacity or self.failure is not None

    def store_staged(self) -> None:
        """Move the staged records into the arrays, behind what is already there."""
        staged = len(self.staged_offsets)
        if staged:
            self.offsets[self.count - staged:self.count] = self.staged_offsets
            self.timestamps[self.count - staged:self.count] = self.staged_timestamps
            self.staged_offsets.clear()
            self.staged_timestamps.clear()

    def covers(self, offset: int) -> bool:
        return self.start <= offset <= self.position

    def drop_before(self, offset: int, capacity: int) -> None:
        """Forget the records before ``offset`` (emitted) and take the new ``capacity`` (the
        budget is re-split when partitions come or go)."""
        emitted = int(np.searchsorted(self.offsets[:self.count], offset))
        if emitted or capacity != self.capacity:
            # New arrays: the views snapshot() handed out keep seeing what they saw. Records
            # beyond a lowered capacity are dropped again (re-fetched later) so "full" is exact.
            left = min(self.count - emitted, capacity)
            offsets = np.empty(capacity, dtype=np.int64)
            timestamps = np.empty(capacity, dtype=np.int64)
            offsets[:left] = self.offsets[emitted:emitted + left]
            timestamps[:left] = self.timestamps[emitted:emitted + left]
            if emitted + left < self.count:
                self.position = int(self.offsets[emitted + left])
                self.needs_seek = True
            self.offsets, self.timestamps, self.count = offsets, timestamps, left
            self.capacity = capacity
        self.start = offset


class DriverFetcher:
    """Owns the driver's consumer and the per-partition buffers the planner reads."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        *,
        buffer_capacity: Callable[[int], int],
        fail_on_data_loss: bool,
        record_time: RecordTime = KAFKA_TIMESTAMP,
    ) -> None:
        self._buffer_capacity = buffer_capacity  # records per partition, given the partition count
        self._record_time = record_time  # each record's time for the planner (event_time/seam.py)
        # librdkafka's own default when unset (kafkasync's options always set it).
        self._read_committed = client_config.get("isolation.level", "read_committed") == "read_committed"
        self._consumer = Consumer(with_python_logging(
            {
                **client_config,
                "group.id": consumer_group_id(client_config),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
                # Cap librdkafka's prefetch so driver memory does not grow with the backlog.
                "queued.max.messages.kbytes": 16_384,
                # librdkafka backs off fetching for 1 s (its default) whenever the prefetch
                # queue holds more than queued.min.messages; this thread drains it at once, so
                # with the default the driver sat idle for most of a backlog: measured on the
                # 8 x 40,000 backlog, 220k -> 550-700k records/s.
                "fetch.queue.backoff.ms": 10,
            }
        ))
        self._lock = threading.Lock()
        self._buffers: dict[TopicPartition, _PartitionBuffer] = {}
        self._assigned: frozenset[TopicPartition] = frozenset()  # the fetch thread's last assign()
        self._error: Optional[KafkaSyncFetchError] = None
        self._taking: Any = None  # the record whose time is being taken, named in errors
        self.records_read = 0
        """Messages this consumer handed over since the query started (the live report's
        ``driverRecordsRead``): what planning costs in records read twice."""
        self._stopping = threading.Event()
        self._has_work = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkasync-fetcher", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()
        self._has_work.set()
        self._thread.join(timeout=30)
        self._consumer.close()

    def position_at(self, starts: Mapping[TopicPartition, int]) -> None:
        """Make each partition's buffer begin at ``starts[tp]``: drop what was emitted, and
        restart partitions whose buffer does not cover the offset (a restart, a replay Spark
        asks for, or a log that moved back: its buffer holds the old log's records).
        Partitions not in ``starts`` stop being fetched.

        Only the buffers change here, so this returns at once; the fetch thread moves the
        consumer to match before its next consume() (:meth:`_steer`)."""
        capacity = self._buffer_capacity(len(starts))
        with self._lock:
            for tp, start in starts.items():
                buffer = self._buffers.get(tp)
                if buffer is not None and buffer.moved_back is None and buffer.covers(start):
                    buffer.drop_before(start, capacity)
                else:
                    self._buffers[tp] = _PartitionBuffer(start, capacity)
            for tp in set(self._buffers) - set(starts):
                del self._buffers[tp]
        self._has_work.set()

    def _assign_at_positions(self) -> None:
        """(Re)start fetching every partition at its buffer's position (fetch thread only).
        librdkafka drops what it fetched for the previous assignment: assign() bumps each
        partition's version barrier, and consume() discards older versions' messages
        (rd_kafka_toppar_op_fetch_stop/_start in rdkafka_partition.c, rd_kafka_q_serve_rkmessages
        in rdkafka_queue.c)."""
        # librdkafka keeps a partition's pause flag across assign(): set both ways explicitly,
        # and *before* assign(). A pause() or resume() right after assign() can outdate the
        # assignment's pending fetch start (it bumps the partition's op version before the
        # start is served), which leaves the partition stopped for good: librdkafka logs "Not
        # resuming stopped ..." and "received outdated op FETCH_START", and no record of it
        # ever arrives again (librdkafka #5591; reproduced here under bench load).
        paused: list[KafkaTopicPartition] = []
        fetching: list[KafkaTopicPartition] = []
        for tp, buffer in self._buffers.items():
            buffer.needs_seek = False
            (paused if buffer.paused else fetching).append(KafkaTopicPartition(tp.topic, tp.partition))
        if paused:
            self._consumer.pause(paused)
        if fetching:
            self._consumer.resume(fetching)
        self._consumer.assign(
            [KafkaTopicPartition(tp.topic, tp.partition, b.position) for tp, b in self._buffers.items()]
        )
        self._assigned = frozenset(self._buffers)

    def snapshot(
        self,
        partition_times: Mapping[TopicPartition, int],
        horizons: Optional[Callable[[TopicPartition, Optional[int]], Optional[int]]] = None,
    ) -> dict[TopicPartition, PartitionState]:
        """What the planner needs of every partition, taken under the lock. The arrays are
        views that never change afterwards (see :class:`_PartitionBuffer`). ``horizons``
        gives a partition's fetch horizon from its known end offset."""
        with self._lock:
            if self._error is not None:
                raise self._error
            states = {}
            for tp, buffer in self._buffers.items():
                if buffer.failure is not None and not buffer.count:
                    raise buffer.failure  # every record before it has been planned
                end_offset = self._known_log_end(tp, buffer)
                states[tp] = PartitionState(
                    start=buffer.start,
                    offsets=buffer.offsets[:buffer.count],
                    timestamps=buffer.timestamps[:buffer.count],
                    position=buffer.position,
                    end_offset=end_offset,
                    partition_time=partition_times.get(tp, NO_TIMESTAMP),
                    fetch_horizon=horizons(tp, end_offset) if horizons else None,
                    buffer_full=buffer.full,
                )
            return states

    def buffered(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: len(buffer) for tp, buffer in self._buffers.items()}

    def _known_log_end(self, tp: TopicPartition, buffer: _PartitionBuffer) -> Optional[int]:
        """The end of what this consumer can read, as far as known without a remote call.
        Reading the cached watermarks does not move the consumer, so the driver thread may."""
        try:
            _, high = self._consumer.get_watermark_offsets(
                KafkaTopicPartition(tp.topic, tp.partition), cached=True
            )
        except KafkaException:
            high = -1
        return readable_end(
            read_committed=self._read_committed, eof_offset=buffer.log_end,
            position=buffer.position, high_watermark=high,
        )

    def logs_moved_back(self) -> dict[TopicPartition, tuple[int, int]]:
        """``{partition: (fetch position, offset the log now restarts at)}`` for partitions whose
        log moved below the fetch position since the last call (failOnDataLoss=false only:
        otherwise librdkafka's offset reset is an error). The caller repositions them."""
        with self._lock:
            return {
                tp: (buffer.position, buffer.moved_back)
                for tp, buffer in self._buffers.items() if buffer.moved_back is not None
            }

    def _describe_log(self, topic: str, partition: int) -> str:
        """", the log now holds offsets [low, high)" as librdkafka last saw it, if it did."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), cached=True
            )
        except KafkaException:
            return ""
        return f"; the log now holds offsets [{low}, {high})" if 0 <= low <= high else ""

    def _run(self) -> None:
        """The fetch loop. Whatever ends it other than close() — a consumer failure, or any
        exception at all — is kept as the fetcher's error, which the next snapshot() raises:
        a dead fetch thread must fail the query with its cause, never leave it waiting."""
        try:
            while not self._stopping.is_set():
                self._fetch_once()
        except BaseException as err:  # noqa: BLE001 - see the docstring
            with self._lock:
                if self._error is None:
                    taking = self._taking
                    where = ("the driver's fetch loop" if taking is None else
                             f"{taking.topic()}-{taking.partition()} offset {taking.offset()}")
                    self._error = KafkaSyncFetchError(
                        f"kafkasync's driver fetcher stopped at {where}: {type(err).__name__}: {err}")
                    self._error.__cause__ = err
            if not isinstance(err, Exception):
                raise

    def _fetch_once(self) -> None:
        """Steer the consumer to what the buffers need (what position_at and the last batch
        asked for), then one consume() call. A consumer-level failure (closed, fatal) raises
        out of here like any other, to :meth:`_run`."""
        self._has_work.wait(timeout=1.0)
        with self._lock:
            self._steer()
            idle = not self._buffers or all(b.paused for b in self._buffers.values())
            if idle:
                # Under the lock: position_at sets the event after it releases the lock, so
                # a wake-up for work that this round did not see cannot be lost.
                self._has_work.clear()
        if idle:
            return
        messages = self._consumer.consume(_CONSUME_BATCH, timeout=_CONSUME_TIMEOUT_S)
        # Each record's time is taken outside the lock: with a Python extractor that is
        # 5-20 us a record, which latestOffset (snapshot) would otherwise wait for.
        self.records_read += len(messages)
        times = self._times_of(messages)
        self._taking = None
        with self._lock:
            self._absorb(messages, times)

    def _times_of(self, messages: list) -> list:
        """Each record's time code, or the KafkaSyncEventTimeError its time ends in (None for
        an event that is not a record)."""
        if all(message.error() is None for message in messages):
            try:
                # The seam's batch reader: about a third less a JSON record (event_time/json_path.py).
                return self._record_time.times_of(messages)
            except Exception:  # noqa: BLE001 - a time that fails, or worse: the loop below names its record
                pass
        time_of = self._record_time.time_of
        times: list = []
        append = times.append
        for message in messages:
            if message.error() is not None:
                append(None)
                continue
            # The record itself, named only if taking its time ends the thread: formatting its
            # name for every record cost as much as taking a Kafka timestamp (0.4 us a record).
            self._taking = message
            try:
                append(time_of(message))
            except KafkaSyncEventTimeError as failure:
                append(failure)
        return times

    def _absorb(self, messages: list, times: list) -> None:
        buffers = self._buffers
        try:
            for message, timestamp in zip(messages, times):
                error = message.error()
                buffer = buffers.get((message.topic(), message.partition()))  # type: ignore[call-overload]
                if buffer is None:
                    continue
                if error is None:
                    offset = message.offset()
                    if offset < buffer.position or buffer.needs_seek or buffer.moved_back is not None:
                        if offset < buffer.position and not buffer.needs_seek and buffer.moved_back is None:
                            buffer.moved_back = offset  # an older record: the log moved back
                        continue
                    if buffer.failure is not None:  # nothing past a failed record, for good
                        continue
                    if isinstance(timestamp, KafkaSyncEventTimeError):
                        buffer.failure = timestamp
                        continue
                    if timestamp == SKIPPED:
                        # eventTime.onInvalid=skip: the executors read it with the records
                        # around it (it lies within the batch's offset range), but it takes no
                        # part in planning, as Kafka Streams drops it: like an offset gap.
                        buffer.position = offset + 1
                        continue
                    if buffer.count >= buffer.capacity:
                        # The consumer moves on past it: _steer re-assigns the partition at
                        # ``position``, this record's offset or a gap before it, on resume.
                        buffer.needs_seek = True
                        continue
                    if timestamp < NO_TIMESTAMP:
                        # The planner sees no difference between a record without time and one
                        # that takes its partition's time: both take the partition time so far.
                        timestamp = NO_TIMESTAMP
                    buffer.staged_offsets.append(offset)
                    buffer.staged_timestamps.append(timestamp)
                    buffer.count += 1
                    buffer.position = offset + 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    # Every record below the high watermark has been seen: the fetch position is
                    # the log end even when offset gaps (markers, compaction) precede it.
                    if message.offset() < buffer.position and not buffer.needs_seek:
                        if buffer.moved_back is None:
                            buffer.moved_back = message.offset()  # the log ends below us
                        continue
                    if not buffer.needs_seek and buffer.failure is None:
                        buffer.position = max(buffer.position, message.offset())
                    buffer.log_end = message.offset()
                elif error.code() in _FATAL_PARTITION_ERRORS:
                    self._error = KafkaSyncFetchError(
                        f"kafkasync cannot read {message.topic()}-{message.partition()} at offset "
                        f"{buffer.position}: {_FATAL_PARTITION_ERRORS[error.code()]}"
                        f"{self._describe_log(message.topic(), message.partition())} ({error.str()})."
                        + (" Set failOnDataLoss=false to continue from the log start."
                           if error.code() in (KafkaError._AUTO_OFFSET_RESET,
                                               KafkaError.OFFSET_OUT_OF_RANGE) else "")
                    )
                else:
                    logger.debug("kafkasync fetcher: transient error %s", error.str())
        finally:
            for buffer in buffers.values():
                buffer.store_staged()

    def _steer(self) -> None:
        """Move the consumer to what the buffers need (fetch thread only, under the lock):
        pause full partitions, resume them as soon as they are not full (see the module
        docstring). When the partitions changed, or a partition to fetch ``needs_seek``, every
        partition is re-assigned at its position, with its pause flag set before assignment."""
        to_pause, to_resume = [], []
        for tp, buffer in self._buffers.items():
            if not buffer.paused and buffer.full:
                buffer.paused = True
                to_pause.append(KafkaTopicPartition(tp.topic, tp.partition))
            elif buffer.paused and not buffer.full:
                buffer.paused = False
                to_resume.append(KafkaTopicPartition(tp.topic, tp.partition))
        if self._buffers.keys() != self._assigned or any(
            buffer.needs_seek and not buffer.paused for buffer in self._buffers.values()
        ):
            # librdkafka would resume after the last record it handed out, past the ones
            # discarded here; restart from the buffers' own positions instead. This also
            # applies the pauses, before the assignment (see _assign_at_positions).
            self._assign_at_positions()
        else:
            if to_pause:
                self._consumer.pause(to_pause)
            if to_resume:
                self._consumer.resume(to_resume)
