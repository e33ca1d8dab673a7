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
from typing import Mapping, Optional

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasync_source.offsets import SyncOffset

logger = logging.getLogger(__name__)


def commit_metadata(partition_time: int) -> str:
    """Commit metadata for one partition: readable by people and by tools."""
    return json.dumps({"source": "kafkasync", "partitionTime": partition_time}, separators=(",", ":"))


class GroupCommitter:
    """Commits processed offsets to one consumer group; counts failures."""

    def __init__(self, client_config: Mapping[str, str], group_id: str) -> None:
        self._client_config = dict(client_config)
        self._group_id = group_id
        self._consumer: Optional[Consumer] = None
        self._committed: Optional[dict] = None
        self.failures = 0

    def commit(self, processed: SyncOffset) -> None:
        """Commit ``processed`` unless it is what was committed last (Spark reports a batch
        end both through ``commit`` and as the next ``latestOffset`` start)."""
        positions = {tp: (p.next_offset, p.partition_time) for tp, p in processed.partitions.items()}
        if positions == self._committed:
            return
        offsets = [
            KafkaTopicPartition(tp.topic, tp.partition, position.next_offset,
                                metadata=commit_metadata(position.partition_time))
            for tp, position in sorted(processed.partitions.items())
        ]
        try:
            if self._consumer is None:
                self._consumer = Consumer(
                    {**self._client_config, "group.id": self._group_id, "enable.auto.commit": False}
                )
            results = self._consumer.commit(offsets=offsets, asynchronous=False) or []
            failed = [tp for tp in results if tp.error is not None]
            if failed:
                raise KafkaException(failed[0].error)
            self._committed = positions
        except KafkaException as err:
            self.failures += 1
            logger.warning(
                "kafkasync: committing offsets to consumer group %r failed (%s); the query "
                "continues (Spark's checkpoint is the source of truth). Failures so far: %d.",
                self._group_id, err, self.failures,
            )

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
