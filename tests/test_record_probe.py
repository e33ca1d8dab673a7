"""The record probe's rounds on the embedded cluster: partitions stay assigned, paused, between
rounds (kafkasync_source/driver/record_probe.py), and every round answers as a fresh consumer
would — whatever an earlier round asked of the same partition, read or left in flight.

A real librdkafka consumer against the librdkafka mock cluster, no mocked client: the seek,
pause, resume and version barriers under test are librdkafka's.
"""

from __future__ import annotations

import random

import pytest

from kafkasync_dev.testing import Record
from kafkasync_source.driver.record_probe import _MOST_FOLLOWING, RecordProbe
from kafkasync_source.planning.index_planner import IndexCannotAnswer
from kafkasync_source.planning.planner import TopicPartition

BASE_TS = 1_700_000_000_000
RECORDS = 40


@pytest.fixture
def probe(kafka_cluster):
    probe = RecordProbe({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    yield probe
    probe.close()


def fill(kafka_cluster, topic: str, partitions: int, records: int = RECORDS) -> list[TopicPartition]:
    """``records`` records a partition, record ``i`` of partition ``p`` stamped ``BASE_TS + 100 * p + i``."""
    kafka_cluster.produce(topic, [Record(p, BASE_TS + 100 * p + i, None, b"v")
                                  for i in range(records) for p in range(partitions)])
    return [TopicPartition(topic, p) for p in range(partitions)]


def expected(tp: TopicPartition, offset: int, end: int = RECORDS) -> tuple[int, int] | None:
    return (offset, BASE_TS + 100 * tp.partition + offset) if offset < min(end, RECORDS) else None


def test_rounds_over_the_same_partitions_answer_as_a_fresh_consumer_would(kafka_cluster, topic_factory, probe):
    """Offsets up and down between rounds (each partition read on past its answer before it
    was paused, so its position and fetched records lie elsewhere), some partitions left
    out of a round and asked again later, ends inside the log and at it."""
    tps = fill(kafka_cluster, topic_factory(6), 6)
    rng = random.Random(7)
    for _ in range(12):
        asked = rng.sample(tps, rng.randint(1, len(tps)))
        offsets = {tp: rng.randrange(RECORDS + 1) for tp in asked}
        ends = {tp: rng.choice([RECORDS, rng.randint(offsets[tp], RECORDS)]) for tp in asked}
        answers = probe.first_records(offsets, ends)
        assert answers == {tp: expected(tp, offsets[tp], ends[tp]) for tp in asked}
    assert {(p.topic, p.partition) for p in probe._consumer.assignment()} == {(tp.topic, tp.partition) for tp in tps}


def test_a_partition_asked_again_below_where_it_answered_is_read_from_there(kafka_cluster, topic_factory, probe):
    """Offset 0 too, which the probe assigns afresh rather than seeks to (a seek to 0 does not
    wake librdkafka's broker thread)."""
    tp, = fill(kafka_cluster, topic_factory(1), 1)
    for offset in (30, 2, 3, 1, 0, 0, 17, 0, 39):
        assert probe.first_records({tp: offset}) == {tp: expected(tp, offset)}


def test_a_partition_answered_at_its_end_is_answered_again_after_new_records(kafka_cluster, topic_factory, probe):
    """The end-of-partition event is sent once per end offset by librdkafka: after a seek it is
    sent again, and records produced since the last round are read, not a stale end."""
    topic = topic_factory(2)
    tps = fill(kafka_cluster, topic, 2)
    offsets = dict.fromkeys(tps, RECORDS)
    assert probe.first_records(offsets) == dict.fromkeys(tps, None)
    assert probe.first_records(offsets) == dict.fromkeys(tps, None)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 999, None, b"new")])
    assert probe.first_records(offsets) == {tps[0]: (RECORDS, BASE_TS + 999), tps[1]: None}
    assert probe.first_records({tps[0]: RECORDS + 1, tps[1]: 0}) == {tps[0]: None, tps[1]: expected(tps[1], 0)}


def test_a_transaction_marker_is_read_past_in_every_round(kafka_cluster, topic_factory, probe):
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t") for i in range(3)])  # 0-2, marker 3
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"p") for i in range(3)])  # 4-6
    assert probe.first_records({tp: 3}) == {tp: (4, BASE_TS + 10)}
    assert probe.first_records({tp: 0}) == {tp: (0, BASE_TS)}
    assert probe.first_records({tp: 3}, {tp: 4}) == {tp: None}
    assert probe.first_records({tp: 3}) == {tp: (4, BASE_TS + 10)}


def test_after_a_failed_round_the_next_one_assigns_afresh(kafka_cluster, topic_factory, probe):
    """An offset past the log's end fails (``auto.offset.reset=error``); the partitions the
    consumer held are dropped, and the next round reads as the first did."""
    tps = fill(kafka_cluster, topic_factory(2), 2)
    assert probe.first_records({tps[0]: 5, tps[1]: 6}) == {tps[0]: expected(tps[0], 5), tps[1]: expected(tps[1], 6)}
    with pytest.raises(IndexCannotAnswer):
        probe.first_records({tps[0]: RECORDS + 50, tps[1]: 7})
    assert probe._consumer is None or not probe._consumer.assignment()
    assert probe.first_records({tps[0]: 5, tps[1]: 6}) == {tps[0]: expected(tps[0], 5), tps[1]: expected(tps[1], 6)}


def test_the_records_after_each_answer_are_kept_past_a_transaction_marker(kafka_cluster, topic_factory, probe):
    """``read_on``: what asking just after an answer would answer, from the messages the
    consumer hands over after it where they are already fetched (a broker sends the next
    record batches with the answer's, up to 16 KiB; the embedded cluster, one batch a fetch):
    each the first record after the one before, the transaction marker read past."""
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    kafka_cluster.produce_transaction(topic, [Record(0, BASE_TS + i, None, b"t") for i in range(3)])  # 0-2, marker 3
    kafka_cluster.produce(topic, [Record(0, BASE_TS + 10 + i, None, b"p") for i in range(3)])  # 4-6
    after_answers = [(2, BASE_TS + 2), (4, BASE_TS + 10), (5, BASE_TS + 11), (6, BASE_TS + 12)]
    assert probe.first_records({tp: 1}) == {tp: (1, BASE_TS + 1)}
    after, records = probe.read_on[tp]
    assert after == 2 and records and records == after_answers[:len(records)]
    assert probe.first_records({tp: 2}) == {tp: (2, BASE_TS + 2)}
    assert tp not in probe.read_on or (probe.read_on[tp][0] == 3 and probe.read_on[tp][1]
                                       == after_answers[1:1 + len(probe.read_on[tp][1])])
    assert probe.first_records({tp: 6}) == {tp: (6, BASE_TS + 12)}
    assert probe.read_on == {}, "the last record: an end of partition follows it"


def test_the_records_kept_after_an_answer_are_bounded(kafka_cluster, topic_factory, probe):
    """Of a record batch of 100, the answer and the next ``_MOST_FOLLOWING``: a round's cost
    stays per partition, not per record the broker sent."""
    topic = topic_factory(1)
    tp, = fill(kafka_cluster, topic, 1, records=100)
    assert probe.first_records({tp: 10}) == {tp: (10, BASE_TS + 10)}
    after, records = probe.read_on[tp]
    assert after == 11 and records == [(offset, BASE_TS + offset) for offset in range(11, 11 + _MOST_FOLLOWING)]
