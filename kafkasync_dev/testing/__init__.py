"""Test support for kafkasync: an in-process Kafka cluster (librdkafka mock)."""

from kafkasync_dev.testing.mock_cluster import (
    ApiKey,
    MockClusterError,
    MockKafkaCluster,
    MockRequest,
    Record,
    librdkafka_path,
    produce_confirmed,
)

__all__ = [
    "ApiKey",
    "MockClusterError",
    "MockKafkaCluster",
    "MockRequest",
    "Record",
    "librdkafka_path",
    "produce_confirmed",
]
