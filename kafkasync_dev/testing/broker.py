"""A real Kafka broker with the same small interface as :class:`MockKafkaCluster`.

The demo runs ``format("kafka")`` beside kafkasync only against a real broker (Spark's Java
client cannot talk to the embedded cluster), and the integration tests create their topics the
same way. Topics get ``retention.ms=-1``: a broker's time retention judges records by their
timestamps, and backfill data is stamped hours in the past.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Optional

from kafkasync_dev.testing.mock_cluster import Record, produce_confirmed


def create_topic(admin: Any, name: str, partitions: int = 1, timeout: float = 30.0, *,
                 replication: int = 1) -> None:
    """Create ``name`` (retention.ms=-1) and wait until its leaders are known."""
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication,
                  config={"retention.ms": "-1", "retention.bytes": "-1"})],
        operation_timeout=timeout,
    )
    futures[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tmd = admin.list_topics(timeout=5).topics.get(name)
        if (tmd is not None and tmd.error is None and len(tmd.partitions) == partitions
                and all(p.leader >= 0 for p in tmd.partitions.values())):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} not ready after {timeout}s")


class KafkaBroker:
    """``bootstrap_servers``, ``create_topic``, ``produce`` (delivery reports checked) and
    ``end_offsets`` against a real cluster."""

    def __init__(self, bootstrap_servers: str, producer_settings: Optional[Mapping[str, Any]] = None) -> None:
        """``producer_settings``: librdkafka settings over the defaults, e.g. ``batch.size``."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.bootstrap_servers = bootstrap_servers
        self._admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        # Idempotent, as Java's producer is by default since Kafka 3.0: librdkafka's default
        # (false) lets a retried batch land behind later ones — a topic's first batch, refused
        # while its leader is elected, came back 600 records late in a partition written in
        # time order, and broke eventTime.order=nonDecreasing in benchmarks/event_time.py.
        self._producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all",
                                   "enable.idempotence": True, **(producer_settings or {})})

    def create_topic(self, name: str, partitions: int = 1) -> None:
        create_topic(self._admin, name, partitions)

    def produce(self, topic: str, records: Iterable[Record]) -> None:
        produce_confirmed(self._producer, topic, records)

    def end_offsets(self, topic: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers,
                             "group.id": "kafkasync-demo-offsets", "enable.auto.commit": False})
        try:
            partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                    for p in sorted(partitions)}
        finally:
            consumer.close()

    def close(self) -> None:
        self._producer.flush(10)

    def __enter__(self) -> "KafkaBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
