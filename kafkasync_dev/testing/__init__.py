"""Test support for kafkasync: an in-process Kafka cluster (librdkafka mock)."""

from kafkasync_dev.testing.librdkafka_mock import MockClusterError, librdkafka_path
from kafkasync_dev.testing.mock_cluster import ApiKey, MockKafkaCluster, MockRequest, Record, produce_confirmed

__all__ = [
    "ApiKey",
    "MockClusterError",
    "MockKafkaCluster",
    "MockRequest",
    "Record",
    "librdkafka_path",
    "produce_confirmed",
]
