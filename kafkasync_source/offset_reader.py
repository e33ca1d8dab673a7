"""Driver side: which partitions exist, and where their logs start and end.

The counterpart of Spark's ``KafkaOffsetReader``: metadata and watermark look-ups on the
driver, used to turn ``startingOffsets``/``endingOffsets`` into concrete offsets and to find
partitions that appear while a query runs. These are remote calls, so the stream reader makes
them at query start and at most once per partition-discovery interval — never per decision.
"""

from __future__ import annotations

import re
import time
from collections import deque
from typing import Any, Iterable, Mapping, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.options import EARLIEST, LATEST, OffsetSpec, Subscription, scrub
from kafkasync_source.planner import TopicPartition

_METADATA_TIMEOUT_S = 30.0
_GONE_CONFIRM_S = 1.0
_CLIENT_ERRORS_KEPT = 10


class KafkaSyncTopicError(ValueError):
    """A subscribed topic or assigned partition does not exist."""


class KafkaSyncConnectionError(ConnectionError):
    """The cluster could not be reached; the message names the brokers and what failed."""


class OffsetReader:
    """Metadata and watermark look-ups through one short-lived-per-call consumer handle."""

    def __init__(self, client_config: Mapping[str, str]) -> None:
        self._client_config = client_config
        # What failed, per broker (connection refused, name not resolved, SASL or SSL
        # handshake): librdkafka tells it only to the error callback, not in the exception.
        self._client_errors: deque[str] = deque(maxlen=_CLIENT_ERRORS_KEPT)
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": "kafkasync-offset-reader",
                "enable.auto.commit": False,
                "error_cb": lambda error: self._client_errors.append(error.str()),
            }
        )

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> "OffsetReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, subscription: Subscription, *, must_exist: bool) -> list[TopicPartition]:
        """The partitions the subscription covers, sorted. With ``must_exist``, a named topic
        or assigned partition that is missing is an error naming it (a typo would otherwise
        read nothing, forever)."""
        metadata = self._metadata()
        existing = {
            TopicPartition(name, partition)
            for name, topic in metadata.topics.items()
            if topic.error is None
            for partition in topic.partitions
        }
        if subscription.pattern is not None:
            pattern = re.compile(subscription.pattern)
            return sorted(tp for tp in existing if pattern.fullmatch(tp.topic))
        if subscription.assigned:
            missing = [tp for tp in subscription.assigned if tp not in existing]
            if missing and must_exist:
                raise KafkaSyncTopicError(
                    "Option 'assign': partition(s) "
                    + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
                    + " do not exist."
                )
            return sorted(set(subscription.assigned) - set(missing))
        found = sorted(tp for tp in existing if tp.topic in subscription.topics)
        missing_topics = sorted(set(subscription.topics) - {tp.topic for tp in found})
        if missing_topics and must_exist:
            raise KafkaSyncTopicError(
                f"Option 'subscribe': topic(s) {', '.join(missing_topics)} do not exist "
                f"on {self._describe_cluster(metadata)}."
            )
        return found

    def _metadata(self) -> Any:
        """The cluster's metadata; an error that names the brokers, what failed and how long
        it was tried, instead of librdkafka's bare "Broker transport failure"."""
        self._client_errors.clear()
        began = time.monotonic()
        try:
            return self._consumer.list_topics(timeout=_METADATA_TIMEOUT_S)
        except KafkaException as err:
            self._consumer.poll(0.1)  # serves the client's error events into _client_errors
            config = self._client_config
            failures = list(dict.fromkeys(self._client_errors))[:3]
            raise KafkaSyncConnectionError(scrub(
                f"kafkasync could not reach the Kafka cluster at kafka.bootstrap.servers="
                f"{config.get('bootstrap.servers')} (security.protocol="
                f"{config.get('security.protocol', 'plaintext')}) for "
                f"{time.monotonic() - began:.0f} s: {err.args[0].str() if err.args else err}."
                + (f" The client reported: {'; '.join(failures)}." if failures else ""),
                config,
            )) from None

    def gone(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The partitions among ``partitions`` that no longer exist (see :func:`partitions_gone`)."""
        return partitions_gone(self._consumer, partitions)

    def watermarks(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, log end offset) per partition, asked of the leaders."""
        result = {}
        for tp in partitions:
            try:
                result[tp] = self._consumer.get_watermark_offsets(
                    KafkaTopicPartition(tp.topic, tp.partition), timeout=_METADATA_TIMEOUT_S
                )
            except KafkaException as err:
                raise KafkaException(
                    f"kafkasync: could not read the offsets of {tp.topic}-{tp.partition}: {err}"
                ) from err
        return result

    def resolve(
        self, spec: OffsetSpec, partitions: list[TopicPartition], *, option: str,
        missing: int = EARLIEST,
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for ``earliest``/``latest``/JSON. Partitions a JSON spec leaves out
        get ``missing``: EARLIEST for a start (as Spark does for partitions it discovers
        later), LATEST for a batch read's end."""
        marks = self.watermarks(partitions)
        if isinstance(spec, str):
            side = 0 if spec == "earliest" else 1
            return {tp: marks[tp][side] for tp in partitions}
        named = {
            TopicPartition(topic, partition)
            for topic, offsets in spec.items()
            for partition in offsets
        }
        unknown = sorted(named - set(partitions))
        if unknown:
            raise KafkaSyncTopicError(
                f"Option '{option}' names partition(s) "
                + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown)
                + " that the subscription does not cover or that do not exist."
            )
        resolved = {}
        for tp in partitions:
            low, high = marks[tp]
            offset = spec.get(tp.topic, {}).get(tp.partition, missing)
            if offset == EARLIEST:
                resolved[tp] = low
            elif offset == LATEST:
                resolved[tp] = high
            elif offset > high:
                raise KafkaSyncTopicError(
                    f"Option '{option}': offset {offset} for {tp.topic}-{tp.partition} is past "
                    f"the end of its log ({high})."
                )
            else:
                resolved[tp] = offset
        return resolved

    @staticmethod
    def _describe_cluster(metadata: object) -> str:
        brokers = getattr(metadata, "brokers", {}) or {}
        return f"cluster {getattr(metadata, 'cluster_id', '?')} ({len(brokers)} broker(s))"


def partitions_gone(consumer: Consumer, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions that no longer exist: their topic is missing from the cluster's metadata
    (or reported UNKNOWN_TOPIC_OR_PART), or has fewer partitions now (it was deleted and
    recreated; Kafka never shrinks a topic). A topic with any other error (e.g.
    LEADER_NOT_AVAILABLE in an election) is not gone. Two metadata answers a second apart
    must agree, so one broker's stale view cannot drop a partition."""
    suspects = sorted(partitions)
    for attempt in range(2):
        if attempt:
            time.sleep(_GONE_CONFIRM_S)
        topics = consumer.list_topics(timeout=_METADATA_TIMEOUT_S).topics
        suspects = [tp for tp in suspects if _absent(topics.get(tp.topic), tp.partition)]
        if not suspects:
            break
    return suspects


def _absent(topic: Optional[object], partition: int) -> bool:
    """Whether metadata says a partition does not exist (not merely: is unavailable now)."""
    if topic is None:
        return True
    error = getattr(topic, "error", None)
    if error is not None:
        return error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    return partition not in getattr(topic, "partitions", {})
