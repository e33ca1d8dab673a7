"""Offset and metadata look-ups survive transient broker errors (issue 12, item 5), bounded by
fetchOffset.numRetries / fetchOffset.retryIntervalMs as in format("kafka")."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkasync_dev.testing import ApiKey, Record
from kafkasync_source.config.options import KafkaSyncOptionError, Subscription, parse_options
from kafkasync_source.driver.offset_reader import KafkaSyncTopicError, OffsetReader
from kafkasync_source.planning.planner import TopicPartition

pytestmark = pytest.mark.mock_brokers(1)


@pytest.fixture
def topic(fresh_cluster):
    fresh_cluster.create_topic("t", 2)
    fresh_cluster.produce("t", [Record(p, 1_700_000_000_000 + i, None, b"v") for i in range(5) for p in (0, 1)])
    return "t"


def reader(cluster, retries):
    return OffsetReader({"bootstrap.servers": cluster.bootstrap_servers},
                        retries=retries, retry_interval_ms=50)


def test_list_offsets_errors_of_a_leader_election_are_retried(fresh_cluster, topic):
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    fresh_cluster.push_request_errors(ApiKey.LIST_OFFSETS, *[KafkaError.NOT_LEADER_FOR_PARTITION] * 3)
    with reader(fresh_cluster, retries=0) as once:
        with pytest.raises(KafkaException, match=r"t-0 in 1 attempt\(s\).*fetchOffset.numRetries=0"):
            once.watermarks(tps)
    fresh_cluster.clear_request_errors(ApiKey.LIST_OFFSETS)
    fresh_cluster.push_request_errors(ApiKey.LIST_OFFSETS, *[KafkaError.NOT_LEADER_FOR_PARTITION] * 3)
    with reader(fresh_cluster, retries=5) as patient:
        assert patient.watermarks(tps) == {tps[0]: (0, 5), tps[1]: (0, 5)}


@pytest.mark.parametrize("errors", [1, 2, 3])
def test_a_failed_list_offsets_never_yields_a_wrong_log_start(fresh_cluster, topic, errors):
    """librdkafka answered (5, 5) instead of (0, 5) after exactly one NOT_LEADER: "earliest"
    would have skipped the log."""
    fresh_cluster.push_request_errors(ApiKey.LIST_OFFSETS, *[KafkaError.NOT_LEADER_FOR_PARTITION] * errors)
    with reader(fresh_cluster, retries=3) as patient:
        assert patient.watermarks([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): (0, 5)}


def test_a_topic_without_a_leader_yet_is_not_reported_missing(fresh_cluster, topic):
    fresh_cluster.set_topic_error(topic, KafkaError.LEADER_NOT_AVAILABLE)
    subscription = Subscription(topics=(topic,))
    with reader(fresh_cluster, retries=0) as once:
        with pytest.raises(KafkaSyncTopicError, match="do not exist"):
            once.partitions(subscription, must_exist=True)
    heal = threading.Timer(0.3, fresh_cluster.set_topic_error, (topic, 0))
    heal.start()
    try:
        with reader(fresh_cluster, retries=20) as patient:
            assert patient.partitions(subscription, must_exist=True) == [
                TopicPartition(topic, 0), TopicPartition(topic, 1)]
    finally:
        heal.cancel()


@pytest.mark.parametrize("option, value", [("fetchOffset.numRetries", "-1"), ("fetchOffset.numRetries", "x"),
                                           ("fetchOffset.retryIntervalMs", "1.5")])
def test_bad_retry_settings_are_rejected_naming_the_option(option, value):
    with pytest.raises(KafkaSyncOptionError, match=f"'{option}'"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", option: value}, streaming=True)
