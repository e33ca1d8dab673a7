"""Opt-in offset commits to a Kafka consumer group, for monitoring only.

Spark's built-in Kafka source never commits, so lag tools (kafka-consumer-groups, Burrow,
Cruise Control, Grafana exporters) cannot see Spark queries. With ``kafka.group.id`` set,
kafkasync commits each finished micro-batch's end offsets to that group, with the partition
time in the commit metadata (where Kafka Streams keeps it, KIP-472). Spark's checkpoint stays
the source of truth for recovery: the group is never read back, and a failed commit is
logged and counted but never fails the query.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Mapping, Optional

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.planning.offsets import SyncOffset

logger = logging.getLogger(__name__)

RETRY_INTERVAL_S = 5.0
"""After a failed commit, the same offsets are not tried again for this long: the driver may
ask many times a second while it waits for data, and a down coordinator must not flood logs."""


def commit_metadata(partition_time: int) -> str:
    """Commit metadata for one partition: readable by people and by tools."""
    return json.dumps({"source": "kafkasync", "partitionTime": partition_time}, separators=(",", ":"))


class GroupCommitter:
    """Commits processed offsets to one consumer group, asynchronously, and counts failures.

    Commits run on the driver while it plans batches, so they must never wait for the group
    coordinator: each is sent asynchronously and its outcome arrives through a callback,
    served on the next call.
    """

    def __init__(self, client_config: Mapping[str, str], group_id: str) -> None:
        self._client_config = dict(client_config)
        self._group_id = group_id
        self._consumer: Optional[Consumer] = None
        self._sent: Optional[dict] = None
        self._failed: Optional[dict] = None
        self._retry_at = 0.0
        self.failures = 0

    def commit(self, processed: SyncOffset) -> None:
        """Send ``processed`` unless it is what was sent last (Spark reports a batch end both
        through ``commit`` and as the next ``latestOffset`` start) or it failed moments ago."""
        consumer = self._client()
        consumer.poll(0)  # serve the callbacks of earlier commits
        positions = {tp: (p.next_offset, p.partition_time) for tp, p in processed.partitions.items()}
        if positions == self._sent or (positions == self._failed and time.monotonic() < self._retry_at):
            return
        offsets = [
            KafkaTopicPartition(tp.topic, tp.partition, position.next_offset,
                                metadata=commit_metadata(position.partition_time))
            for tp, position in sorted(processed.partitions.items())
        ]
        self._sent = positions
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as err:
            self._record_failure(err)

    def serve_callbacks(self, timeout_s: float = 0.0) -> None:
        if self._consumer is not None:
            self._consumer.poll(timeout_s)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.poll(1.0)  # let the last commit complete
            self._consumer.close()
            self._consumer = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(with_python_logging(
                {**self._client_config, "group.id": self._group_id, "enable.auto.commit": False,
                 "on_commit": self._on_commit}
            ))
        return self._consumer

    def _on_commit(self, error: Optional[KafkaError], partitions: list) -> None:
        failed = error or next((tp.error for tp in partitions if tp.error is not None), None)
        if failed is not None:
            self._record_failure(failed)

    def _record_failure(self, error: object) -> None:
        self.failures += 1
        self._failed, self._sent = self._sent, None
        self._retry_at = time.monotonic() + RETRY_INTERVAL_S
        logger.warning(
            "kafkasync: committing offsets to consumer group %r failed (%s); the query "
            "continues (Spark's checkpoint is the source of truth). Failures so far: %d.",
            self._group_id, error, self.failures,
        )
