"""groupIdPrefix and kafka.group.id choose the group id of kafkasync's internal consumers, as
format("kafka") does, so the group ACLs written for format("kafka") cover kafkasync."""

from __future__ import annotations

import logging

import pytest

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.client_config import consumer_group_id
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options
from kafkasync_source.executor.consumer_settings import consumer_settings
from kafkasync_source.executor.range_reader import RangeReader
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.source import register

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "orders"}


def group_of(**extra: str) -> str:
    return parse_options({**BASE, **extra}, streaming=True).client_config["group.id"]


def test_default_group_starts_with_format_kafkas_stream_prefix():
    assert group_of() == "spark-kafka-source-kafkasync"
    assert group_of().startswith("spark-kafka-source")


def test_batch_reads_default_to_format_kafkas_batch_prefix():
    options = parse_options({**BASE, "startingOffsets": "earliest"}, streaming=False)
    assert options.client_config["group.id"] == "spark-kafka-relation-kafkasync"


def test_group_id_prefix_starts_every_internal_group_id():
    assert group_of(groupIdPrefix="team-a-etl") == "team-a-etl-kafkasync"


def test_kafka_group_id_is_used_for_every_consumer_and_the_prefix_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="kafkasync_source.config.options"):
        options = parse_options({**BASE, "kafka.group.id": "acl-fixed", "groupIdPrefix": "p"},
                                streaming=True)
    assert options.client_config["group.id"] == "acl-fixed"
    assert options.commit_group_id == "acl-fixed"
    assert "groupIdPrefix" in caplog.text and "ignored" in caplog.text


def test_without_kafka_group_id_nothing_is_committed():
    assert parse_options({**BASE, "groupIdPrefix": "p"}, streaming=True).commit_group_id is None


@pytest.mark.parametrize("option", ["groupIdPrefix", "kafka.group.id"])
def test_empty_group_settings_are_refused(option):
    with pytest.raises(KafkaSyncOptionError, match=f"'{option}' must not be empty"):
        parse_options({**BASE, option: "  "}, streaming=True)


def test_executor_range_readers_carry_the_group_id():
    options = parse_options({**BASE, "groupIdPrefix": "team-b"}, streaming=True)
    reader = RangeReader.from_options(options, kafka_schema(options.include_headers))
    assert consumer_settings(reader.client_config)["group.id"] == "team-b-kafkasync"


def test_client_configs_not_made_by_parse_options_get_the_default_group():
    assert consumer_group_id({"bootstrap.servers": "h:1"}) == "spark-kafka-source-kafkasync"
    assert consumer_group_id({"group.id": "g"}) == "g"


def test_a_stream_with_group_id_prefix_reads_every_record(spark, kafka_cluster, topic_factory, tmp_path):
    register(spark)
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(p, 1_700_000_000_000 + i, None, f"v{p}-{i}")
                                  for i in range(5) for p in (0, 1)])
    query = (spark.readStream.format("kafkasync")
             .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("groupIdPrefix", "team-c").load()
             .writeStream.format("memory").queryName("group_id_prefix_stream")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(PATIENCE_S), f"the AvailableNow query did not finish in {PATIENCE_S:.0f} s"
        assert query.exception() is None
        values = sorted(bytes(r.value).decode() for r in spark.table("group_id_prefix_stream").collect())
    finally:
        query.stop()
    assert values == sorted(f"v{p}-{i}" for i in range(5) for p in (0, 1))
