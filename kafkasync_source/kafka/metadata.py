"""Kafka metadata questions that the driver and the executors both ask."""

from __future__ import annotations

import time
from typing import Iterable, Optional

from confluent_kafka import Consumer, KafkaError

from kafkasync_source.planning.planner import TopicPartition

METADATA_TIMEOUT_S = 30.0
"""How long a metadata or watermark look-up may take before it counts as failed."""
_GONE_CONFIRM_S = 1.0


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
        topics = consumer.list_topics(timeout=METADATA_TIMEOUT_S).topics
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
