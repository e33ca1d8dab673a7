"""Bounded runs: Trigger.AvailableNow that stops at end-of-log, with durable stop offsets (KIP-95).

Users run the same streaming query as a periodic "process everything written so far" job
(``trigger(availableNow=True)``). A run must stop at the end of the log *as it was when the run
first started*: if a restart after a failure captured a new end, the run would not stop where
the user expects, and a job that keeps failing while producers keep writing might never finish.
A run that finishes cleanly must clear its target, so the next run picks up new data.

Stop offsets
------------
``prepareForTriggerAvailableNow()`` captures every subscribed partition's end offset (high
watermark; the last stable offset with ``kafka.isolation.level=read_committed``). From then on
:meth:`AvailableNowRun.next_offset` hands the planner these *stop offsets*: records at or after
them are invisible, and a partition that reached its stop offset is FINISHED — it no longer
holds batches back, is never idle-waited for, and is no longer fetched. Synchronization still
applies among the partitions that are not finished. The run ends (``latestOffset`` returns its
start) once every partition is finished.

Spark ends an AvailableNow query as soon as ``latestOffset`` returns its start, so while any
partition is unfinished, ``next_offset`` waits for the fetcher (the records below a stop offset
exist, so a fetch is all that is missing) instead of returning "no new data". The wait is
bounded by ``kafkaConsumer.pollTimeoutMs`` without progress, then fails with an error naming
the partitions. While it waits it checks every few seconds that the unfinished partitions
still exist.

Partitions that are not part of the target — created after the capture, or created between a
failed run and its restart — are not read in this run; the next run captures them and reads
them from their beginning. A partition whose topic is deleted during the run fails the run with
an error naming it (its remaining records are gone); a restarted run leaves out partitions
that no longer exist, so it finishes.

Durable stop offsets (``autostop.offsets=durable``)
---------------------------------------------------
With the default ``transient``, every start captures new stop offsets (Spark's behaviour). With
``durable``, a run stores its target under ``autostop.key`` in a compacted Kafka topic
(``autostop.topic``, KIP-95's metadata topic) before it reads anything, and a restart reuses a
stored target that is not yet finished. Why Kafka and not a file beside the checkpoint: the
source never learns Spark's checkpoint location or query id, the driver's Python worker cannot
reach HDFS/S3/ABFS without extra dependencies, and every kafkasync deployment can already write
to its Kafka cluster, with the same credentials.

One record per key holds the whole target: JSON with the stop offsets, the offsets the run
started from, a run id and a state (``running`` or ``done``). A Kafka record is written
entirely or not at all, so a target can never be read half-written — the problem KIP-95's
completed marker solves for its one-record-per-partition layout. (A target is roughly 15
bytes per partition; Kafka's default 1 MB record limit allows ~50,000 partitions.) A record
that cannot be parsed is reported, never guessed around.

On start, with the stored record for the key:

* none, or ``done``                  -> capture new stop offsets and store them (``running``);
* ``running``, not yet reached       -> a failure restart: reuse them;
* ``running``, already reached by
  the checkpoint's offsets            -> the previous run finished but could not record it
                                        (crash after its last batch): treat as ``done``;
* ``running``, but the checkpoint
  starts *below* where that run
  started                             -> not a restart of that run (new or rolled-back
                                        checkpoint): capture new stop offsets, with a warning.

When the run reaches its target it overwrites the record with ``done`` (failure to do so is
only logged: the third rule above covers it). Reset: :func:`reset_stop_offsets` or
``python -m kafkasync_source.autostop reset ...`` writes a tombstone for the key, so the next
start captures new stop offsets. Use one key per checkpoint; two queries sharing a key would
share (and overwrite) one target.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.offsets import PartitionOffset, SyncOffset
from kafkasync_source.options import AUTOSTOP_DURABLE, SourceOptions, parse_options
from kafkasync_source.planner import PartitionState, TopicPartition

if TYPE_CHECKING:  # pragma: no cover
    from kafkasync_source.offset_reader import OffsetReader
    from kafkasync_source.stream import SyncDriver

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0/4.1 have no AvailableNow for Python sources

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: the stream reader declares the mixin on every PySpark version."""


__all__ = [
    "AvailableNowRun",
    "KafkaSyncAutostopError",
    "StopOffsetStore",
    "StopTarget",
    "SupportsTriggerAvailableNow",
    "bounded_states",
    "read_stop_offsets",
    "reset_stop_offsets",
]

logger = logging.getLogger(__name__)

RUNNING = "running"
DONE = "done"
RECORD_FORMAT = "kafkasync-autostop"
RECORD_VERSION = 1
STORE_PARTITION = 0
"""The store is read and written on partition 0 only (KIP-95: single-partitioned topic)."""

STORE_TIMEOUT_S = 30.0
"""Bound on every store operation (metadata, create, read, write)."""
WAIT_POLL_S = 0.05
"""How often a waiting AvailableNow ``latestOffset`` asks the planner again."""
EXISTENCE_CHECK_S = 2.0
"""While waiting, how often to check that the unfinished partitions still exist."""

_EMPTY = np.empty(0, dtype=np.int64)


class KafkaSyncAutostopError(RuntimeError):
    """A Trigger.AvailableNow run cannot reach, store or read its stop offsets."""


def _describe(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    topics: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        topics.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return topics


def _offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(str(topic), int(partition)): int(offset)
        for topic, partitions in data.items()
        for partition, offset in partitions.items()
    }


@dataclass(frozen=True)
class StopTarget:
    """One bounded run's target, as stored under its key."""

    key: str
    run_id: str
    state: str
    stop_offsets: Mapping[TopicPartition, int]
    started_from: Mapping[TopicPartition, int] = field(default_factory=dict)
    """Where the run's first batch started: a checkpoint below it is not this run's."""
    captured_at_ms: int = 0
    finished_at_ms: Optional[int] = None

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "format": RECORD_FORMAT,
                "version": RECORD_VERSION,
                "key": self.key,
                "runId": self.run_id,
                "state": self.state,
                "capturedAt": self.captured_at_ms,
                "finishedAt": self.finished_at_ms,
                "stopOffsets": _offsets_to_json(self.stop_offsets),
                "startedFrom": _offsets_to_json(self.started_from),
            },
            separators=(",", ":"),
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, key: str, data: bytes, *, topic: str) -> "StopTarget":
        problem = None
        try:
            value = json.loads(data)
            if not isinstance(value, dict) or value.get("format") != RECORD_FORMAT:
                problem = "it is not a kafkasync stop-offset record"
            elif int(value.get("version", 0)) > RECORD_VERSION:
                problem = (
                    f"it has format version {value['version']}; this kafkasync understands up "
                    f"to {RECORD_VERSION} (upgrade kafkasync)"
                )
            elif value.get("state") not in (RUNNING, DONE):
                problem = f"unknown state {value.get('state')!r}"
            else:
                return cls(
                    key=key,
                    run_id=str(value["runId"]),
                    state=value["state"],
                    stop_offsets=_offsets_from_json(value["stopOffsets"]),
                    started_from=_offsets_from_json(value.get("startedFrom") or {}),
                    captured_at_ms=int(value.get("capturedAt") or 0),
                    finished_at_ms=None if value.get("finishedAt") is None else int(value["finishedAt"]),
                )
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            problem = f"it cannot be parsed ({err!r})"
        raise KafkaSyncAutostopError(
            f"kafkasync: the stored stop offsets for autostop.key={key!r} in topic {topic!r} "
            f"are unusable: {problem}. kafkasync will not guess where this run should stop. "
            "If the previous run's target no longer matters, reset it (python -m "
            "kafkasync_source.autostop reset, see the README) and start again."
        )


class StopOffsetStore:
    """Stop offsets in a compacted Kafka topic, one record per ``autostop.key``.

    Clients are short-lived: a run uses the store a handful of times (start, finish)."""

    def __init__(
        self, client_config: Mapping[str, str], topic: str, *, timeout_s: float = STORE_TIMEOUT_S
    ) -> None:
        self._client_config = dict(client_config)
        self.topic = topic
        self._timeout_s = timeout_s

    def ensure_topic(self) -> None:
        """Create the topic (1 partition, ``cleanup.policy=compact``) unless it exists."""
        if self._exists():
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(
            {**self._client_config, "socket.timeout.ms": int(self._timeout_s * 1000)}
        )
        request = NewTopic(
            self.topic, num_partitions=1, replication_factor=-1, config={"cleanup.policy": "compact"}
        )
        future = admin.create_topics(
            [request], operation_timeout=self._timeout_s, request_timeout=self._timeout_s
        )[self.topic]
        try:
            future.result(timeout=self._timeout_s + 5)
            logger.info("kafkasync: created the stop-offset topic %r (compacted)", self.topic)
        except KafkaException as err:
            if err.args and getattr(err.args[0], "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            raise self._missing(err) from None
        except Exception as err:  # a future that never completes, a closed client
            raise self._missing(err) from None

    def _missing(self, err: object) -> KafkaSyncAutostopError:
        return KafkaSyncAutostopError(
            f"kafkasync: the stop-offset topic {self.topic!r} (option 'autostop.topic') does not "
            f"exist and could not be created: {err}. Create it with one partition and "
            f"cleanup.policy=compact (kafka-topics.sh --create --topic {self.topic} "
            "--partitions 1 --config cleanup.policy=compact) or name an existing one."
        )

    def _exists(self) -> bool:
        consumer = self._consumer()
        try:
            # List all topics: asking for one by name can auto-create it on brokers with
            # auto.create.topics.enable (as a non-compacted topic).
            metadata = consumer.list_topics(timeout=self._timeout_s)
        finally:
            consumer.close()
        found = metadata.topics.get(self.topic)
        return found is not None and found.error is None

    def _consumer(self) -> Consumer:
        return Consumer(
            {
                **self._client_config,
                "group.id": "kafkasync-autostop",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )

    def load(self, key: str) -> Optional[StopTarget]:
        """The latest record for ``key`` (None when there is none or it was reset)."""
        consumer = self._consumer()
        tp = KafkaTopicPartition(self.topic, STORE_PARTITION)
        try:
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=self._timeout_s)
            except KafkaException as err:
                raise KafkaSyncAutostopError(
                    f"kafkasync: cannot read the stop-offset topic {self.topic!r} "
                    f"(option 'autostop.topic'): {err}"
                ) from None
            latest: Optional[bytes] = None
            found = False
            if high > low:
                consumer.assign([KafkaTopicPartition(self.topic, STORE_PARTITION, low)])
                position = low
                deadline = time.monotonic() + self._timeout_s
                wanted = key.encode()
                while position < high:
                    if time.monotonic() > deadline:
                        raise KafkaSyncAutostopError(
                            f"kafkasync: reading the stop-offset topic {self.topic!r} timed out "
                            f"at offset {position} of {high}."
                        )
                    # Ask for what is left: consume() waits out its timeout for fewer.
                    for message in consumer.consume(min(1000, high - position), timeout=0.5):
                        error = message.error()
                        if error is None:
                            position = message.offset() + 1
                            if message.key() == wanted and message.offset() < high:
                                latest, found = message.value(), True
                        elif error.code() == KafkaError._PARTITION_EOF:
                            position = max(position, message.offset())
                        else:
                            raise KafkaSyncAutostopError(
                                f"kafkasync: cannot read the stop-offset topic {self.topic!r}: "
                                f"{error.str()}"
                            )
        finally:
            consumer.close()
        if not found or latest is None:  # never written, or a tombstone (reset)
            return None
        return StopTarget.from_bytes(key, latest, topic=self.topic)

    def save(self, target: StopTarget) -> None:
        self._write(target.key, target.to_bytes())

    def delete(self, key: str) -> None:
        """Tombstone: the next run captures new stop offsets; compaction drops the key."""
        self._write(key, None)

    def _write(self, key: str, value: Optional[bytes]) -> None:
        producer = Producer(
            {
                **_producer_settings(self._client_config),
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": False,
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": int(self._timeout_s * 1000),
            }
        )
        errors: list = []
        producer.produce(
            self.topic, key=key.encode(), value=value, partition=STORE_PARTITION,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
        remaining = producer.flush(self._timeout_s + 5)
        if remaining or errors:
            producer.purge()
            producer.flush(1)
            reason = errors[0].str() if errors else "not acknowledged in time"
            raise KafkaSyncAutostopError(
                f"kafkasync: could not write the stop offsets for autostop.key={key!r} to "
                f"topic {self.topic!r}: {reason}."
            )


_CONSUMER_ONLY = ("fetch.", "isolation.level", "queued.", "check.crcs", "max.poll.interval.ms",
                  "session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy",
                  "group.", "auto.commit", "enable.auto", "enable.partition.eof")


def _producer_settings(client_config: Mapping[str, str]) -> dict[str, str]:
    """The query's client settings minus consumer-only ones (librdkafka warns about them)."""
    return {k: v for k, v in client_config.items() if not k.startswith(_CONSUMER_ONLY)}


def _reached(stops: Mapping[TopicPartition, int], start: SyncOffset) -> bool:
    """Whether ``start`` is at or past every stop offset (a partition ``start`` does not
    cover yet has reached only an empty target)."""
    return all(
        (start.partitions[tp].next_offset if tp in start.partitions else 0) >= stop
        for tp, stop in stops.items()
    )


def _below(start: SyncOffset, started_from: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    """Partitions where ``start`` lies before where a stored run started."""
    return sorted(
        tp for tp, offset in started_from.items()
        if tp in start.partitions and start.partitions[tp].next_offset < offset
    )


def unfinished(start: SyncOffset, stops: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Next offsets of the partitions that still have records to read before their stop."""
    return {
        tp: position.next_offset
        for tp, position in start.partitions.items()
        if tp in stops and position.next_offset < stops[tp]
    }


def missing_partitions(
    start: SyncOffset, stops: Mapping[TopicPartition, int], offset_reader: "OffsetReader"
) -> dict[TopicPartition, PartitionOffset]:
    """Target partitions the offsets do not cover yet (created since the checkpoint's last
    batch): they enter at their log start, as partitions discovered while streaming do."""
    missing = sorted(tp for tp in stops if tp not in start.partitions)
    if not missing:
        return {}
    marks = offset_reader.watermarks(missing)
    logger.info(
        "kafkasync: AvailableNow run adds partition(s) %s from their beginning",
        ", ".join(_describe(tp) for tp in missing),
    )
    return {tp: PartitionOffset(marks[tp][0]) for tp in missing}


def bounded_states(
    start: SyncOffset,
    fetched: Mapping[TopicPartition, PartitionState],
    stops: Mapping[TopicPartition, int],
) -> dict[TopicPartition, PartitionState]:
    """The planner's input for a bounded run: a state for every partition of ``start``.

    Fetched partitions get their stop offset, and an end offset and fetch horizon of at least
    the stop offset: the records below it existed when it was captured, so such a partition
    waits for a fetch, is never treated as idle, and its buffer is complete only once fetched
    up to the stop offset (or full). Partitions that are not fetched (finished, or outside the
    target) get an empty state at their start, which the planner reports as FINISHED.
    """
    states: dict[TopicPartition, PartitionState] = {}
    for tp, position in start.partitions.items():
        stop = stops.get(tp)
        state = fetched.get(tp)
        if state is not None and stop is not None and position.next_offset < stop:
            end = state.end_offset
            states[tp] = replace(
                state, stop_offset=stop, end_offset=stop if end is None else max(end, stop),
                fetch_horizon=stop,
            )
            continue
        offset = position.next_offset
        states[tp] = PartitionState(
            start=offset,
            offsets=_EMPTY,
            timestamps=_EMPTY,
            position=offset,
            end_offset=None,
            partition_time=position.partition_time,
            stop_offset=offset if stop is None else min(stop, offset),
        )
    return states


def _wall_ms() -> int:
    return int(time.time() * 1000)


class AvailableNowRun:
    """One Trigger.AvailableNow run of one query, on the driver.

    Created by ``prepareForTriggerAvailableNow()``: captures the end offsets and, in durable
    mode, reads the stored target. The stop offsets are decided on the first ``latestOffset``,
    the first moment the run knows where the checkpoint stands."""

    def __init__(
        self,
        options: SourceOptions,
        offset_reader: "OffsetReader",
        *,
        store: Optional[StopOffsetStore] = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._options = options
        self._offset_reader = offset_reader
        self._monotonic = monotonic
        self._sleep = sleep
        self._store = store
        if self._store is None and options.autostop_offsets == AUTOSTOP_DURABLE:
            self._store = StopOffsetStore(options.client_config, options.autostop_topic)
        self._stored: Optional[StopTarget] = None
        if self._store is not None:
            # Before the capture: a missing or unreadable store fails the query at start.
            self._store.ensure_topic()
            self._stored = self._store.load(self._key)
        partitions = offset_reader.partitions(options.subscription, must_exist=False)
        self.captured: dict[TopicPartition, int] = {
            tp: high for tp, (_, high) in offset_reader.watermarks(partitions).items()
        }
        self.captured_at_ms = _wall_ms()
        self.target: Optional[StopTarget] = None
        """The durable target this run stops at (durable mode, after the first call)."""
        self.stop_offsets: Optional[dict[TopicPartition, int]] = None
        self.finished = False

    @property
    def _key(self) -> str:
        assert self._options.autostop_key is not None
        return self._options.autostop_key

    def resolve(self, start: SyncOffset) -> dict[TopicPartition, int]:
        """This run's stop offsets; decided once, on the first call (see the module docs)."""
        if self.stop_offsets is not None:
            return self.stop_offsets
        stored = self._stored
        if stored is not None and stored.state == RUNNING:
            kept = {tp: o for tp, o in stored.stop_offsets.items() if tp in self.captured}
            below = _below(start, stored.started_from)
            if below:
                logger.warning(
                    "kafkasync: ignoring the unfinished AvailableNow target of autostop.key=%r "
                    "(run %s): this checkpoint starts before that run did (%s), so it is not "
                    "a restart of it. Capturing new stop offsets.",
                    self._key, stored.run_id, ", ".join(_describe(tp) for tp in below[:5]),
                )
            elif not _reached(kept, start):
                gone = sorted(set(stored.stop_offsets) - set(kept))
                logger.warning(
                    "kafkasync: restarting the unfinished AvailableNow run %s "
                    "(autostop.key=%r): it stops at the offsets stored when it first started%s.",
                    stored.run_id, self._key,
                    (f"; left out, no longer existing or subscribed: "
                     f"{', '.join(_describe(tp) for tp in gone)}") if gone else "",
                )
                self.target, self.stop_offsets = stored, kept
                return kept
            else:
                logger.info(
                    "kafkasync: the previous AvailableNow run %s (autostop.key=%r) had reached "
                    "its stop offsets; starting a new run.", stored.run_id, self._key,
                )
        self.stop_offsets = dict(self.captured)
        if self._store is not None:
            target = StopTarget(
                key=self._key,
                run_id=uuid.uuid4().hex,
                state=RUNNING,
                stop_offsets=self.stop_offsets,
                started_from=start.next_offsets(),
                captured_at_ms=self.captured_at_ms,
            )
            self._store.save(target)  # before any batch of this run is planned
            self.target = target
        logger.info(
            "kafkasync: AvailableNow run stops at %s",
            ", ".join(f"{_describe(tp)}@{o}" for tp, o in sorted(self.stop_offsets.items())) or "nothing",
        )
        return self.stop_offsets

    def next_offset(
        self, driver: "SyncDriver", start: SyncOffset, *, read_all: bool = False
    ) -> SyncOffset:
        """The next batch's end, waiting for fetches as needed; ``start`` once all partitions
        reached their stop offsets (Spark then ends the query)."""
        stops = self.resolve(start)
        since = self._monotonic()
        next_check = since + EXISTENCE_CHECK_S
        timeout_s = self._options.poll_timeout_ms / 1000
        while True:
            end = driver.next_offset(start, stop_offsets=stops, read_all=read_all)
            if end is not start:
                return end
            cut = driver.last_cut
            if cut is not None and cut.all_finished:
                # Offsets before a stop offset that hold no records (transaction markers,
                # compaction) yield no batch; carry them in a last, record-less batch so the
                # checkpoint ends exactly at the stop offsets.
                gaps = {
                    tp: PartitionOffset(min(state.position, state.stop_offset), state.partition_time)
                    for tp, state in driver.last_states.items()
                    if state.stop_offset is not None
                    and min(state.position, state.stop_offset) > start.partitions[tp].next_offset
                }
                if gaps:
                    return start.with_partitions({**start.partitions, **gaps})
                self._finish()
                return start
            now = self._monotonic()
            if now >= next_check:
                self._fail_if_deleted(start, stops)
                next_check = now + EXISTENCE_CHECK_S
            if now - since >= timeout_s:
                waiting = cut.blocking if cut is not None else {}
                raise KafkaSyncAutostopError(
                    f"kafkasync: the AvailableNow run made no progress for "
                    f"{self._options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs): "
                    + ", ".join(
                        f"{_describe(tp)} is {d.status.value} at offset "
                        f"{start.partitions[tp].next_offset}, stop offset {stops.get(tp)}"
                        for tp, d in sorted(waiting.items())
                    )
                    + ". These records existed when the run started; check that the brokers "
                    "are reachable, or raise kafkaConsumer.pollTimeoutMs."
                )
            self._sleep(WAIT_POLL_S)

    def _fail_if_deleted(self, start: SyncOffset, stops: Mapping[TopicPartition, int]) -> None:
        remaining = unfinished(start, stops)
        if not remaining:
            return
        existing = set(self._offset_reader.partitions(self._options.subscription, must_exist=False))
        gone = sorted(tp for tp in remaining if tp not in existing)
        if gone:
            raise KafkaSyncAutostopError(
                "kafkasync: partition(s) "
                + ", ".join(f"{_describe(tp)} (at offset {remaining[tp]}, stop offset {stops[tp]})" for tp in gone)
                + " no longer exist (topic deleted?) but this AvailableNow run had not read up "
                "to their stop offsets; their remaining records are gone. Restart the query: "
                "a restarted run leaves out partitions that no longer exist."
            )

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        logger.info("kafkasync: AvailableNow run reached its stop offsets")
        if self._store is None or self.target is None:
            return
        done = replace(self.target, state=DONE, finished_at_ms=_wall_ms())
        try:
            self._store.save(done)
            self.target = done
        except KafkaSyncAutostopError as err:
            # Harmless: the next run sees a "running" target the checkpoint has reached.
            logger.warning("%s The next run will start a new target anyway.", err)


# ------------------------------------------------------------------ reset path


def _store_for(options: Mapping[str, str]) -> tuple[StopOffsetStore, str]:
    parsed = parse_options({**options, "autostop.offsets": AUTOSTOP_DURABLE}, streaming=True)
    assert parsed.autostop_key is not None
    return StopOffsetStore(parsed.client_config, parsed.autostop_topic), parsed.autostop_key


def read_stop_offsets(options: Mapping[str, str]) -> Optional[StopTarget]:
    """The stored target of the query these (readStream) options describe, or None."""
    store, key = _store_for(options)
    return store.load(key)


def reset_stop_offsets(options: Mapping[str, str]) -> Optional[StopTarget]:
    """Forget the stored target: the next AvailableNow start captures new stop offsets.

    Pass the query's readStream options (``kafka.*``, the subscription, ``autostop.key`` and,
    if set, ``autostop.topic``). Returns what was cleared. Stop the query first."""
    store, key = _store_for(options)
    previous = store.load(key)
    store.delete(key)
    return previous


def _main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafkasync_source.autostop",
        description="Show or reset the durable Trigger.AvailableNow stop offsets of a kafkasync query.",
    )
    parser.add_argument("command", choices=("show", "reset"))
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--key", required=True, help="the query's autostop.key")
    parser.add_argument("--topic", help="the query's autostop.topic, if set")
    parser.add_argument(
        "--option", action="append", default=[], metavar="NAME=VALUE",
        help="further source options, e.g. kafka.security.protocol=SASL_SSL (repeatable)",
    )
    args = parser.parse_args(argv)
    options = {"kafka.bootstrap.servers": args.bootstrap_servers, "autostop.key": args.key,
               "subscribe": "-"}  # the subscription is irrelevant to the store
    if args.topic:
        options["autostop.topic"] = args.topic
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--option needs NAME=VALUE, got {item!r}")
        options[name] = value
    target = (reset_stop_offsets if args.command == "reset" else read_stop_offsets)(options)
    if target is None:
        print(f"no stored stop offsets for autostop.key={args.key!r}")
    else:
        print(json.dumps(json.loads(target.to_bytes()), indent=2))
        if args.command == "reset":
            print(f"reset: the next run of autostop.key={args.key!r} captures new stop offsets")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
