"""Durable stop offsets for Trigger.AvailableNow runs, stored in a compacted Kafka topic (KIP-95).

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
``python -m kafkasync_source.driver.autostop reset ...`` writes a tombstone for the key, so the next
start captures new stop offsets. Use one key per checkpoint; two queries sharing a key would
share (and overwrite) one target.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.config.client_config import consumer_group_id, non_consumer_settings
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.config.options import AUTOSTOP_DURABLE, TimestampSpec, parse_options
from kafkasync_source.planning.planner import TopicPartition

__all__ = [
    "DONE",
    "RUNNING",
    "KafkaSyncAutostopError",
    "StopOffsetStore",
    "StopTarget",
    "ending_time",
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

class KafkaSyncAutostopError(RuntimeError):
    """A Trigger.AvailableNow run cannot reach, store or read its stop offsets."""


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


EndingTime = Union[None, int, Mapping[TopicPartition, int]]
"""``endingTimestamp`` (one time), ``endingOffsetsByTimestamp`` (a time per partition) or None."""


def ending_time(spec: Optional[TimestampSpec]) -> EndingTime:
    """An ending timestamp option in the form a target stores and compares."""
    if spec is None or isinstance(spec, int):
        return spec
    return {TopicPartition(topic, partition): time for topic, times in spec.items()
            for partition, time in times.items()}


def _ending_time_from_json(value: object) -> EndingTime:
    if value is None or isinstance(value, int):  # records written before endingTime existed: None
        return value
    if isinstance(value, dict):
        return _offsets_from_json(value)
    raise ValueError(f"endingTime {value!r}")


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
    ending_time: EndingTime = None
    """The ending timestamp option the stop offsets were resolved from (None: end of log). A
    restart with another one is a new run, not a restart of this one."""

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
                "endingTime": (
                    self.ending_time if self.ending_time is None or isinstance(self.ending_time, int)
                    else _offsets_to_json(self.ending_time)
                ),
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
                    ending_time=_ending_time_from_json(value.get("endingTime")),
                )
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            problem = f"it cannot be parsed ({err!r})"
        raise KafkaSyncAutostopError(
            f"kafkasync: the stored stop offsets for autostop.key={key!r} in topic {topic!r} "
            f"are unusable: {problem}. kafkasync will not guess where this run should stop. "
            "If the previous run's target no longer matters, reset it (python -m "
            "kafkasync_source.driver.autostop reset, see docs/bounded-runs.md) and start again."
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

        admin = AdminClient(with_python_logging(
            {**non_consumer_settings(self._client_config),
             "socket.timeout.ms": int(self._timeout_s * 1000)}
        ))
        request = NewTopic(
            self.topic, num_partitions=1, replication_factor=-1, config={"cleanup.policy": "compact"}
        )
        future = admin.create_topics(
            [request], operation_timeout=self._timeout_s, request_timeout=self._timeout_s
        )[self.topic]
        try:
            future.result(timeout=self._timeout_s + 5)
            admin.poll(0)  # hands over its log
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
        return Consumer(with_python_logging(
            {
                **self._client_config,
                "group.id": consumer_group_id(self._client_config),
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        ))

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
                        error, offset = message.error(), message.offset()
                        if offset is None:  # a client-level error names no offset
                            offset = position
                        if error is None:
                            position = offset + 1
                            if message.key() == wanted and offset < high:
                                latest, found = message.value(), True
                        elif error.code() == KafkaError._PARTITION_EOF:
                            position = max(position, offset)
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
        producer = Producer(with_python_logging(
            {
                **non_consumer_settings(self._client_config),
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": False,
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": int(self._timeout_s * 1000),
            }
        ))
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

