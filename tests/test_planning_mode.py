"""planningMode on the embedded cluster, which answers -1 to every time look-up.

The cluster cannot give the time-index path what it needs, so ``auto`` must plan from fetched
timestamps (and say so, once, and in the live report), ``timeIndex`` must refuse the query at
its start naming the partition and why, and ``fetch`` never asks the index. The index path
itself is proven on a model broker (test_index_planner.py) and on a real broker
(integration/).
"""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import KafkaError

from kafkasync_dev.testing import ApiKey, Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options
from kafkasync_source.driver.record_probe import ProbedRecords, RecordProbe
from kafkasync_source.driver.time_index import TimeIndexReader
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

BASE_TS = 1_700_000_000_000


def reader_for(cluster, topic, **options) -> KafkaSyncStreamReader:
    parsed = parse_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic,
         "startingOffsets": "earliest", **{k: str(v) for k, v in options.items()}},
        streaming=True,
    )
    return KafkaSyncStreamReader(parsed, kafka_schema(False))


def first_batch(reader, timeout: float = PATIENCE_S) -> dict:
    start = reader.initialOffset()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        end = reader.latestOffset(start, None)
        if end != start:
            return end
        time.sleep(0.05)
    raise AssertionError(f"no batch within {timeout} s: {reader.reportLatestOffset()}")


@pytest.fixture
def backlog(kafka_cluster, topic_factory):
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(40)])
    return topic


def test_the_embedded_cluster_answers_no_time_look_up(kafka_cluster, backlog):
    reader = TimeIndexReader({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    partitions = [TopicPartition(backlog, 0), TopicPartition(backlog, 1)]
    assert reader.latest(partitions) == {partitions[0]: 20, partitions[1]: 20}
    assert reader.largest(partitions) == {partitions[0]: None, partitions[1]: None}
    assert reader.first_offsets({partitions[0]: BASE_TS}) == {partitions[0]: None}
    assert reader.rounds == 3


def test_a_stale_leader_epoch_is_asked_again_with_fresh_metadata_not_fallen_back_on(kafka_cluster, backlog):
    """A leader moved (a rolling restart, an election): the broker answers FENCED_LEADER_EPOCH
    until the client's metadata is fresh. The embedded cluster's error injection answers the
    next ListOffsets request so; auto asks again at once instead of falling back."""
    reader = TimeIndexReader({"bootstrap.servers": kafka_cluster.bootstrap_servers}, fall_back_on_failure=True)
    partitions = [TopicPartition(backlog, 0), TopicPartition(backlog, 1)]
    assert reader.latest(partitions) == {partitions[0]: 20, partitions[1]: 20}
    kafka_cluster.push_request_errors(ApiKey.LIST_OFFSETS, KafkaError.FENCED_LEADER_EPOCH)
    assert reader.latest(partitions) == {partitions[0]: 20, partitions[1]: 20}
    assert (reader.renewals, reader.rounds) == (1, 3)


def test_auto_plans_from_fetched_timestamps_and_says_why_once(kafka_cluster, backlog, caplog):
    caplog.set_level(logging.INFO, logger="kafkasync_source.driver.sync_driver")
    reader = reader_for(kafka_cluster, backlog)
    try:
        end = first_batch(reader)
        report = reader.reportLatestOffset()
    finally:
        reader.stop()
    # Synchronized over every fetched record: partition 0 ends at BASE_TS + 38, so partition 1
    # stops before its last record (BASE_TS + 39).
    assert end["topics"][backlog] == {"0": {"offset": 20, "partitionTime": BASE_TS + 38},
                                      "1": {"offset": 19, "partitionTime": BASE_TS + 37}}
    assert report["planning"] == "fetch"
    assert {entry["planning"] for entry in report["partitions"][backlog].values()} == {"fetch"}
    reasons = [r.getMessage() for r in caplog.records if "time index cannot answer" in r.getMessage()]
    assert len(reasons) == 1 and "does not answer timestamp look-ups" in reasons[0]
    assert f"{backlog}-0, {backlog}-1" in reasons[0]


def test_a_broker_without_max_timestamp_look_ups_makes_auto_fall_back_saying_so_once(
    kafka_cluster, backlog, caplog
):
    """A broker before Kafka 3.0 answers ListOffsets for MAX_TIMESTAMP (KIP-734, ListOffsets v7)
    with UNSUPPORTED_VERSION; the embedded cluster's error injection answers so: the first
    ListOffsets request of the trigger (latest) succeeds, the second (max timestamp) fails."""
    caplog.set_level(logging.INFO, logger="kafkasync_source.driver.sync_driver")
    reader = reader_for(kafka_cluster, backlog)
    try:
        reader.initialOffset()
        kafka_cluster.push_request_errors(ApiKey.LIST_OFFSETS, 0, 35)  # 35: UNSUPPORTED_VERSION
        first_batch(reader)
        assert reader.reportLatestOffset()["planning"] == "fetch"
    finally:
        reader.stop()
    lines = [r.getMessage() for r in caplog.records if "time index cannot answer" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"{backlog}-0, {backlog}-1" in lines[0]
    assert "cannot answer the largest timestamps" in lines[0] and "Kafka 3.0 or newer" in lines[0]


def test_time_index_only_refuses_a_cluster_without_time_look_ups(kafka_cluster, backlog):
    reader = reader_for(kafka_cluster, backlog, planningMode="timeIndex")
    try:
        with pytest.raises(KafkaSyncOptionError, match=(
                rf"planningMode=timeIndex.*{backlog}-0: the brokers answer no largest timestamp "
                r".*offsets \[0, 20\) hold records")):
            reader.initialOffset()
    finally:
        reader.stop()


def test_fetch_mode_never_asks_the_index(kafka_cluster, backlog, caplog):
    caplog.set_level(logging.INFO, logger="kafkasync_source.driver.sync_driver")
    reader = reader_for(kafka_cluster, backlog, planningMode="FETCH")
    try:
        first_batch(reader)
        assert reader.reportLatestOffset()["planning"] == "fetch"
    finally:
        reader.stop()
    assert not [r for r in caplog.records if "time index" in r.getMessage()]


def test_planning_mode_must_be_one_of_three():
    with pytest.raises(KafkaSyncOptionError, match="'planningMode' must be one of auto, timeIndex, fetch; got 'index'"):
        parse_options({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "planningMode": "index"},
                      streaming=True)


def test_auto_asks_the_index_again_after_1_2_4_8_batches_planned_from_fetched_timestamps(kafka_cluster, topic_factory):
    """On a cluster whose index never answers, the look-ups are not paid for at every trigger:
    of 20 rate-limited batches, the index is asked before the 1st, 2nd, 4th, 8th and 16th."""
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b"v") for i in range(80)])
    reader = reader_for(kafka_cluster, topic, maxOffsetsPerTrigger=4)
    asked_at = []
    try:
        start = reader.initialOffset()
        index = reader._sync_driver()._time_index.reader
        for batch in range(1, 21):
            rounds = index.rounds
            deadline = time.monotonic() + PATIENCE_S
            while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) == start:
                assert time.monotonic() < deadline, f"no batch {batch}"
                time.sleep(0.05)
            if index.rounds > rounds:
                asked_at.append(batch)
            start = end
    finally:
        reader.stop()
    assert asked_at == [1, 2, 4, 8, 16]


def test_a_record_found_past_where_the_probe_asked_is_remembered_at_its_own_offset(kafka_cluster, topic_factory):
    """A search that finds the record after a transaction marker asks for that record next
    (Kafka 4.3.1: a window's largest readable record); the broker sends a whole record batch
    for each ask, so the second is answered from what the first found.

    Records 4-6 are one record batch (MockKafkaCluster.produce), which librdkafka queues whole
    (rd_kafka_msgset_reader_run: one response's messages join the queue at once): 5 and 6 are
    there when 4 is handed over, however busy the machine. When a linger cut them into batches
    of their own, the first round ended before they were fetched (``assert 3 == 1``)."""
    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t") for i in range(3)])  # 0-2, marker 3
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"p") for i in range(3)])  # 4-6
    reader = ProbedRecords(RecordProbe({"bootstrap.servers": kafka_cluster.bootstrap_servers}))
    tp = TopicPartition(topic, 0)
    try:
        assert reader.first_records({tp: (3, 7)}) == {tp: (4, BASE_TS + 10)}
        assert reader.rounds == 1
        assert reader.first_records({tp: (4, 7)}) == {tp: (4, BASE_TS + 10)}
        assert reader.first_records({tp: (4, 5)}) == {tp: (4, BASE_TS + 10)}
        assert reader.first_records({tp: (4, 4)}) == {tp: None}  # below the range's end only
        assert reader.rounds == 1
        assert reader.first_records({tp: (5, 7)}) == {tp: (5, BASE_TS + 11)}
        assert reader.first_records({tp: (6, 7)}) == {tp: (6, BASE_TS + 12)}
        assert reader.rounds == 1, "the records after an answer come with it (RecordProbe.read_on)"
        assert reader.first_records({tp: (0, 7)}) == {tp: (0, BASE_TS)}
        assert reader.rounds == 2
    finally:
        reader.close()


def test_an_offset_no_broker_answers_is_no_answer_and_the_fetch_path_plans_the_batch(
        kafka_cluster, topic_factory, monkeypatch):
    """librdkafka's ListOffsets returned offset -1001 without an error for partitions whose
    leader had just been killed (Kafka 4.3.1, integration/test_three_brokers.py). A broker
    answers -1 where no record lies at or past a time; -1001 is no answer at all, and read as
    "none" it made a cut take a whole window. The index cannot answer: the batch falls back."""
    from confluent_kafka.admin import ListOffsetsResultInfo

    from kafkasync_source.driver import time_index
    from kafkasync_source.planning.index_planner import IndexCannotAnswer

    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    real = time_index._AdminClientImpl

    class FirstAnswerLost:
        """librdkafka's C call as it answered right after the leader was killed, then as usual."""
        calls = 0

        @staticmethod
        def list_offsets(admin, partitions, future, **settings):
            FirstAnswerLost.calls += 1
            if FirstAnswerLost.calls == 1:
                future.set_result({partition: ListOffsetsResultInfo(-1001, -1, -1) for partition in partitions})
            else:
                real.list_offsets(admin, partitions, future, **settings)

    monkeypatch.setattr(time_index, "_AdminClientImpl", FirstAnswerLost)
    reader = TimeIndexReader({"bootstrap.servers": kafka_cluster.bootstrap_servers}, fall_back_on_failure=True)
    try:
        with pytest.raises(IndexCannotAnswer, match="-1001") as cannot:
            reader.first_offsets({tp: BASE_TS})
        assert list(cannot.value.reasons) == [tp] and not cannot.value.lookup_failed
        assert reader.first_offsets({tp: BASE_TS}) == {tp: None}  # the embedded cluster answers -1
    finally:
        reader.close()


def test_a_fallback_reason_is_logged_once_per_kind_whatever_offsets_it_names():
    """The kinds of fallback already logged are kept for the query's life: a reason naming a
    new offset at each trigger must not make a new kind, or the set grows with the query's age
    (issue 54)."""
    from kafkasync_source.driver.sync_driver import fallback_kind

    kinds = {fallback_kind(f"offset {offset}, the first entry with a timestamp >= {offset * 7}, is not "
                           f"a readable record") for offset in range(10_000)}
    assert kinds == {"offset #"}
    assert fallback_kind("its largest timestamp (17) is at offset 4, before the position 9") == \
        "its largest timestamp"
