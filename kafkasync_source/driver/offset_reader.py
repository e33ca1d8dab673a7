"""Driver side: which partitions exist, and where their logs start and end.

The counterpart of Spark's ``KafkaOffsetReader``: metadata and watermark look-ups on the
driver, used to turn ``startingOffsets``/``endingOffsets`` into concrete offsets and to find
partitions that appear while a query runs. These are remote calls, so the stream reader makes
them at query start and at most once per partition-discovery interval — never per decision.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from typing import Any, Iterable, Mapping, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.config.client_config import consumer_group_id, scrub
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.config.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, Subscription, TimestampSpec
from kafkasync_source.kafka.metadata import METADATA_TIMEOUT_S, partitions_gone
from kafkasync_source.planning.planner import TopicPartition

logger = logging.getLogger(__name__)

_METADATA_FIRST_SLICE_S = 0.5
"""The metadata wait is cut into slices, this long at first and twice as long each time (a
cluster far away still gets the time to answer one request), so that a failure no retry can
cure (a broker certificate the client does not trust) ends it early, not after the whole wait."""
_CLIENT_ERRORS_KEPT = 10
_ATTEMPT_TIMING = re.compile(r" \(after \d+ms in state \w+\)")


class KafkaSyncTopicError(ValueError):
    """A subscribed topic or assigned partition does not exist."""


class KafkaSyncConnectionError(ConnectionError):
    """The cluster could not be reached; the message names the brokers and what failed."""


# Errors of a look-up that a leader election, a broker restart or a just-created topic cause,
# and that a later attempt can overcome (librdkafka's KafkaError.retriable() covers most).
_RETRIABLE_CODES = frozenset({
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_COORDINATOR,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
})


def _incurable(error: KafkaError) -> Optional[str]:
    """Why retrying cannot cure a client error, or None where it may.

    * SASL authentication failed (wrong password, unknown user, mechanism not enabled): the
      same credentials fail the same way on every retry. Java clients raise an
      ``AuthenticationException`` at once instead of retrying (KIP-152, "Authentication failures
      should be treated as non-retriable exceptions"; its javadoc: "clients abort the operation
      requested"), so ``format("kafka")`` fails there too; librdkafka retried for the whole 30 s.
    * A TLS handshake refused for a certificate reason — one side does not trust the other's
      certificate, or a certificate is missing, expired or for another host. librdkafka reports
      the client's refusal as ``_SSL`` ("SSL handshake failed: ... certificate verify failed");
      the broker's, which a TLS 1.3 client reads only after its handshake, as a transport error
      ("Receive failed: ... ssl/tls alert bad certificate", "tlsv13 alert certificate required")."""
    if error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return "authentication failed, which retrying cannot cure"
    text = error.str().lower()
    if error.code() in (KafkaError._SSL, KafkaError._TRANSPORT) and "certificate" in text and "ssl" in text:
        return "the TLS handshake failed for a certificate reason, which retrying cannot cure"
    return None


def _retriable(error: Any) -> bool:
    if not isinstance(error, KafkaError):
        return False
    return error.code() in _RETRIABLE_CODES or error.retriable()


class OffsetReader:
    """Metadata and watermark look-ups through one short-lived-per-call consumer handle.

    A look-up that fails with a retriable error (a leader election, a broker restart, a topic
    created a moment ago) is tried again ``retries`` times, ``retry_interval_ms`` apart:
    ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``, format("kafka")'s options for
    the same purpose. Their defaults are Spark's code defaults, 3 and 1000 ms
    (``KafkaOffsetReaderAdmin``: ``FETCH_OFFSET_NUM_RETRIES`` "3",
    ``FETCH_OFFSET_RETRY_INTERVAL_MS`` "1000"; the docs table says 10 ms).
    """

    def __init__(
        self, client_config: Mapping[str, str], *, retries: int = 3, retry_interval_ms: int = 1000
    ) -> None:
        self._client_config = client_config
        self._retries = retries
        self._retry_interval_s = retry_interval_ms / 1000
        # What failed, per broker (connection refused, name not resolved, SASL or SSL
        # handshake): librdkafka tells it only to the error callback, not in the exception.
        self._client_errors: deque[str] = deque(maxlen=_CLIENT_ERRORS_KEPT)
        self._incurable: dict[str, deque[str]] = {}  # why retrying cannot cure them: what failed
        self._consumer = Consumer(with_python_logging(
            {
                **client_config,
                "group.id": consumer_group_id(client_config),
                "enable.auto.commit": False,
                "error_cb": self._on_client_error,
            }
        ))

    def _on_client_error(self, error: KafkaError) -> None:
        self._client_errors.append(error.str())
        why = _incurable(error)
        if why is not None:
            self._incurable.setdefault(why, deque(maxlen=_CLIENT_ERRORS_KEPT)).append(error.str())

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
        for _ in range(self._retries if must_exist else 0):
            # A topic created a moment ago answers LEADER_NOT_AVAILABLE for a while: it exists.
            if not self._unavailable(metadata, subscription):
                break
            time.sleep(self._retry_interval_s)
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

    @staticmethod
    def _unavailable(metadata: Any, subscription: Subscription) -> list[str]:
        """Named topics whose metadata carries a retriable error (they exist, but have no
        leader yet); topics that do not exist answer UNKNOWN_TOPIC_OR_PART, not retriable."""
        named = set(subscription.topics) | {tp.topic for tp in subscription.assigned}
        return sorted(
            name for name in named
            if (topic := metadata.topics.get(name)) is not None and _retriable(topic.error)
        )

    def _metadata(self) -> Any:
        """The cluster's metadata; an error that names the brokers, what failed and how long
        it was tried, instead of librdkafka's bare "Broker transport failure".

        librdkafka keeps trying every broker for the whole timeout, so a failure means the
        cluster was unreachable that long; but a TLS handshake that fails for a certificate
        reason fails the same way on every retry (librdkafka retried one for the whole 30 s),
        so the wait stops at the first such failure, as it does at a failed authentication
        (:func:`_incurable`). A topic without a leader yet is retried by partitions()."""
        self._client_errors.clear()
        self._incurable.clear()
        began = time.monotonic()
        wait_s = _METADATA_FIRST_SLICE_S
        while True:
            remaining = began + METADATA_TIMEOUT_S - time.monotonic()
            wait_s = max(0.001, min(wait_s, remaining))
            try:
                return self._consumer.list_topics(timeout=wait_s)
            except KafkaException as err:
                self._consumer.poll(0)  # serves the client's error events (and its log)
                if self._incurable:
                    why, failures = next(iter(self._incurable.items()))  # the first reported
                    raise self._unreachable(began, err, why, failures) from None
                if remaining <= wait_s:
                    self._consumer.poll(0.1)
                    raise self._unreachable(began, err, "", self._client_errors) from None
                wait_s *= 2

    def _unreachable(self, began: float, err: KafkaException, why: str, failures: Iterable[str]
                     ) -> KafkaSyncConnectionError:
        config = self._client_config
        # One line per failure, not one per attempt ("after 2ms" then "after 1ms in state X").
        reported = list(dict.fromkeys(_ATTEMPT_TIMING.sub("", failure) for failure in failures))[:3]
        return KafkaSyncConnectionError(scrub(
            f"kafkasync could not reach the Kafka cluster at kafka.bootstrap.servers="
            f"{config.get('bootstrap.servers')} (security.protocol="
            f"{config.get('security.protocol', 'plaintext')}) for "
            f"{time.monotonic() - began:.0f} s: " + (f"{why}. " if why else "")
            + f"{err.args[0].str() if err.args else err}."
            + (f" The client reported: {'; '.join(reported)}." if reported else ""),
            config,
        ))

    def gone(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The partitions among ``partitions`` that no longer exist (see :func:`partitions_gone`)."""
        return partitions_gone(self._consumer, partitions)

    def watermarks(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, log end offset) per partition, asked of the leaders. ListOffsets
        carries the client's isolation level (librdkafka writes ``isolation.level`` into the
        request), so under read_committed the end is the last stable offset: what
        AvailableNow captures as stop offsets is then what the query can read."""
        result = {}
        for tp in partitions:
            kafka_tp = KafkaTopicPartition(tp.topic, tp.partition)
            began = time.monotonic()
            try:
                result[tp] = self._retrying(
                    f"the offsets of {tp.topic}-{tp.partition}",
                    lambda kafka_tp=kafka_tp: self._watermarks_read_twice(kafka_tp),
                )
            except KafkaException as err:
                raise KafkaException(
                    f"kafkasync: could not read the offsets of {tp.topic}-{tp.partition} in "
                    f"{1 + self._retries} attempt(s) over {time.monotonic() - began:.0f} s "
                    f"(fetchOffset.numRetries={self._retries}, fetchOffset.retryIntervalMs="
                    f"{int(self._retry_interval_s * 1000)}): {err}"
                ) from err
        return result

    def _watermarks_read_twice(self, tp: KafkaTopicPartition) -> tuple[int, int]:
        """(low, high), asked twice. After one NOT_LEADER_FOR_PARTITION answer to its ListOffsets
        requests, librdkafka 2.16's query_watermark_offsets was seen to succeed with the *high*
        watermark as the low one (embedded cluster, tests/test_offset_retries.py): "earliest"
        would then skip the whole log. A log's start only moves forward, so the smaller of two
        answers is the right one; the later high watermark is the current one."""
        first_low, _ = self._consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S)
        low, high = self._consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S)
        return min(first_low, low), high

    def _retrying(self, what: str, call: Any) -> Any:
        """``call()``, again after a retriable KafkaException, up to ``retries`` more times."""
        retries_left = self._retries
        while True:
            try:
                return call()
            except KafkaException as err:
                error = err.args[0] if err.args else None
                if not retries_left or not _retriable(error):
                    raise
                retries_left -= 1
                logger.info("kafkasync: reading %s failed (%s); retrying in %.1f s",
                            what, error.str() if isinstance(error, KafkaError) else err,
                            self._retry_interval_s)
                time.sleep(self._retry_interval_s)

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

    def starting_offsets(self, options: SourceOptions, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where a query starts: a timestamp option if set (it takes precedence), else
        startingOffsets."""
        spec = options.timestamps.starting
        if spec is None:
            return self.resolve(options.starting_offsets, partitions, option="startingOffsets")
        return self.resolve_timestamps(
            spec, partitions, is_start=True, strategy=options.timestamps.strategy,
            option=options.timestamps.starting_option,
        )

    def ending_offsets(self, options: SourceOptions, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where a batch read or a trigger(availableNow=True) run ends: a timestamp option if
        set, else endingOffsets (always ``latest`` in a streaming query)."""
        spec = options.timestamps.ending
        if spec is None:
            return self.resolve(options.ending_offsets, partitions, option="endingOffsets",
                                missing=LATEST)
        return self.resolve_timestamps(
            spec, partitions, is_start=False, strategy=options.timestamps.strategy,
            option=options.timestamps.ending_option,
        )

    def resolve_timestamps(
        self, spec: TimestampSpec, partitions: list[TopicPartition], *, option: str,
        is_start: bool, strategy: str,
    ) -> dict[TopicPartition, int]:
        """Offsets for a timestamp option, through the brokers' ListOffsets-by-time
        (``offsets_for_times``: the earliest offset whose record timestamp is >= the time)."""
        timestamps = timestamps_per_partition(spec, partitions, option=option)
        found = self._retrying(f"the offsets at the times of option '{option}'",
                               lambda: self.offsets_for_times(timestamps))
        no_match = [tp for tp in partitions if found.get(tp, -1) < 0]
        latest = {tp: high for tp, (_, high) in self.watermarks(no_match).items()} if no_match else {}
        return offsets_at_times(timestamps, found, latest, option=option, is_start=is_start,
                                strategy=strategy)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The brokers' ListOffsets-by-time answer: per partition, the earliest offset whose
        record timestamp is >= the time, or -1 where no record is (the embedded cluster
        answers -1 always). The one place kafkasync asks for it, so tests of what is built on
        it can stand in a broker's answer."""
        answers = self._consumer.offsets_for_times(
            [KafkaTopicPartition(tp.topic, tp.partition, ts) for tp, ts in timestamps.items()],
            timeout=METADATA_TIMEOUT_S,
        )
        return {TopicPartition(a.topic, a.partition): a.offset for a in answers}

    @staticmethod
    def _describe_cluster(metadata: object) -> str:
        brokers = getattr(metadata, "brokers", {}) or {}
        return f"cluster {getattr(metadata, 'cluster_id', '?')} ({len(brokers)} broker(s))"


def timestamps_per_partition(
    spec: TimestampSpec, partitions: list[TopicPartition], *, option: str
) -> dict[TopicPartition, int]:
    """The time to look up per partition. A per-partition JSON must name exactly the
    subscribed partitions, as Spark asserts ("If starting/endingOffsetsByTimestamp contains
    specific offsets, you must specify all topics", ``KafkaOffsetReaderConsumer``)."""
    if isinstance(spec, int):
        return {tp: spec for tp in partitions}
    named = {TopicPartition(t, p): ts for t, ps in spec.items() for p, ts in ps.items()}
    if set(named) != set(partitions):
        missing = sorted(set(partitions) - set(named))
        unknown = sorted(set(named) - set(partitions))
        raise KafkaSyncTopicError(
            f"Option '{option}' must name every subscribed partition, as format(\"kafka\") "
            "requires"
            + (f"; missing: {', '.join(f'{t}-{p}' for t, p in missing)}" if missing else "")
            + (f"; not subscribed or not existing: {', '.join(f'{t}-{p}' for t, p in unknown)}"
               if unknown else "")
            + "."
        )
    return {tp: named[tp] for tp in partitions}


def offsets_at_times(
    timestamps: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *, option: str, is_start: bool, strategy: str,
) -> dict[TopicPartition, int]:
    """Offsets from a ListOffsets-by-time answer (``found``; -1 where no record has a timestamp
    at or after the time), as Spark's ``readTimestampOffsets`` decides: for a start, no match
    is an error (``startingOffsetsByTimestampStrategy=error``) or the latest offset
    (``latest``); for an end it is always the latest offset. Pure: the look-up is the caller's."""
    offsets = {}
    for tp, timestamp in timestamps.items():
        offset = found.get(tp, -1)
        if offset >= 0:
            offsets[tp] = offset
        elif is_start and strategy == "error":
            raise KafkaSyncTopicError(
                f"Option '{option}': no record of {tp.topic}-{tp.partition} has a timestamp at "
                f"or after {timestamp} (the broker answered no offset). Set "
                "startingOffsetsByTimestampStrategy=latest to start such partitions at their "
                "latest offset."
            )
        else:
            offsets[tp] = latest[tp]
    return offsets
