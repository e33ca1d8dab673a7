"""The record probe's rounds on the embedded cluster: partitions stay assigned, paused, between
rounds (kafkasync_source/driver/record_probe.py), and every round answers as a fresh consumer
would — whatever an earlier round asked of the same partition, read or left in flight.

A real librdkafka consumer against the librdkafka mock cluster, no mocked client: the seek,
pause, resume and version barriers under test are librdkafka's.
"""

from __future__ import annotations

import random
import time

import pytest

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
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


# --- What a probe costs (issue 53, item 3) ------------------------------------------------------

def test_the_probes_own_sizes_win_over_the_users_and_librdkafka_accepts_them():
    """The probe's queue and fetch sizes are fixed over the query's ``kafka.*`` settings (those
    tune the executors' reads), its queue holds at most one response, and librdkafka takes the
    set as it is: an explicit ``fetch.max.bytes`` below ``message.max.bytes`` is refused at
    creation (rd_kafka_conf_finalize), which no Kafka is needed to see."""
    from confluent_kafka import Consumer

    from kafkasync_source.driver.record_probe import _FETCH_BYTES, _PARTITION_FETCH_BYTES, probe_settings

    user = {"bootstrap.servers": "127.0.0.1:1", "queued.min.messages": "100000",
            "queued.max.messages.kbytes": "65536", "fetch.max.bytes": "52428800",
            "max.partition.fetch.bytes": "1048576", "fetch.queue.backoff.ms": "1000", "client.id": "mine"}
    settings = probe_settings(user)
    assert settings["client.id"] == "mine"
    assert settings["queued.min.messages"] == 1
    assert settings["max.partition.fetch.bytes"] == _PARTITION_FETCH_BYTES
    assert settings["fetch.max.bytes"] == _FETCH_BYTES == settings["queued.max.messages.kbytes"] * 1024
    assert settings["fetch.max.bytes"] >= 1_000_000, "librdkafka's default message.max.bytes"
    Consumer(settings).close()


def test_a_round_gives_up_once_its_pace_says_it_would_not_finish_in_time():
    """Judged from its first answer, after a second of answers: 4,096 partitions answered at 30
    a second (a round trip each, as a broker answers batches larger than the fetch size) give
    up then, not at the deadline; a slow start, a burst, or a pace that makes it do not."""
    from kafkasync_source.driver.record_probe import out_of_time

    deadline = 10.0
    assert out_of_time(4_096, 31, first_answer_at=1.0, now=2.0, deadline=deadline)
    assert not out_of_time(4_096, 31, first_answer_at=1.5, now=2.0, deadline=deadline), "judged after a second"
    assert not out_of_time(4_096, 0, first_answer_at=None, now=9.9, deadline=deadline), "a slow connection"
    assert not out_of_time(4_096, 4_000, first_answer_at=5.0, now=6.0, deadline=deadline), "a burst"
    assert not out_of_time(100, 20, first_answer_at=1.0, now=2.0, deadline=deadline), "80 more in 4 s: in time"
    assert out_of_time(100, 10, first_answer_at=1.0, now=2.0, deadline=deadline), "90 more in 9 s: past it"


def test_a_probe_fetches_the_batch_holding_its_record_not_the_next_ones(kafka_cluster, topic_factory):
    """Producer batches of about 1 MB: each probe costs the brokers the batch holding its
    record (the floor: a batch is used whole or not at all) and not the batches after it,
    which librdkafka fetched while the probe was handing over its answer before it paused the
    partition (2 batches a probe on the embedded cluster before ``queued.min.messages=1``).

    The bytes are those the probe's consumer received, counted by librdkafka (``rx_bytes``) once
    no request of it waits for an answer (ClientStatistics.settled): what it fetched after its
    answers is counted too, however late it came. Sampling the broker's sockets (``ss``) every
    10 ms and sleeping 0.3 s for the rest missed a third of a batch on a loaded machine. Counted
    so, a probe costs 1.01 batches; 1.26-2.27 with librdkafka's default queue sizes.

    Not shown, because it still happens: an answer that is the last record of everything
    fetched leaves librdkafka's queue empty while its partition is unpaused, and the next batch
    is fetched before the pause arrives (the embedded cluster sends it whole; a real broker sends
    an oversized batch to one partition of a response, see record_probe's module docstring)."""
    from kafkasync_dev.testing.client_statistics import ClientStatistics
    from kafkasync_dev.testing.large_batches import BATCH_PAYLOAD_BYTES, BATCH_RECORDS, produce_large_batches

    partitions = 4
    topic = topic_factory(partitions)
    produce_large_batches(kafka_cluster.producer, topic, partitions, 3, BASE_TS)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    statistics = ClientStatistics()
    probe = RecordProbe({"bootstrap.servers": kafka_cluster.bootstrap_servers, **statistics.settings()})
    try:
        received = 0
        for offset in (10, BATCH_RECORDS + 5, 2 * BATCH_RECORDS - 20, 3):
            answers = probe.first_records(dict.fromkeys(tps, offset))
            assert answers == {tp: (offset, BASE_TS + offset) for tp in tps}
            # Every partition is paused now (the probe's rounds end so): nothing more is asked.
            settled = statistics.settled(probe._consumer.poll)["rx_bytes"]
            per_probe, received = (settled - received) / partitions, settled
            assert BATCH_PAYLOAD_BYTES <= per_probe < 1.1 * BATCH_PAYLOAD_BYTES, \
                f"offset {offset}: {per_probe:,.0f} bytes a probe, producer batches of {BATCH_PAYLOAD_BYTES:,} payload bytes"
    finally:
        probe.close()


def _twenty_capped_batches(kafka_cluster, topic: str, **options: str) -> tuple[list[dict], list[int], set]:
    """20 batches of ``maxOffsetsPerTrigger=4`` on the event time ``$.ts`` promised in order:
    each batch's end offsets, the batches before which records were probed, and the planning
    paths that cut them."""
    from kafkasync_source.config.options import parse_options
    from kafkasync_source.planning.offsets import SyncOffset
    from kafkasync_source.spark.schema import kafka_schema
    from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

    parsed = parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4",
                            "eventTime.jsonPath": "$.ts", **options}, streaming=True)
    reader = KafkaSyncStreamReader(parsed, kafka_schema(False))
    ends, probed_at, paths = [], [], set()
    try:
        start = reader.initialOffset()
        index = reader._sync_driver()._time_index
        for batch in range(1, 21):
            rounds = index.records.rounds if index is not None else 0
            deadline = time.monotonic() + PATIENCE_S
            while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) == start:
                assert time.monotonic() < deadline, f"no batch {batch}"
                time.sleep(0.05)
            if index is not None and index.records.rounds > rounds:
                probed_at.append(batch)
            paths.add(reader.reportLatestOffset()["planning"])
            reader.partitions(start, end)
            ends.append(SyncOffset.from_json(end).next_offsets())
            start = end
    finally:
        reader.stop()
    return ends, probed_at, paths


def test_a_round_that_times_out_backs_off_and_the_fetch_path_plans_meanwhile(kafka_cluster, topic_factory,
                                                                              monkeypatch):
    """A probe round that times out is not paid for again at every trigger: of 20 rate-limited
    batches planned on the record-probe path (an event time promised in order), rounds whose
    every attempt times out are tried before the 1st, 2nd, 4th, 8th and 16th, as for any
    answer the index cannot give. The batches in between are the fetch path's, cut where
    ``planningMode=fetch`` cuts them."""
    from kafkasync_source.driver import record_probe

    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(i % 2, BASE_TS + i, None, b'{"ts":%d}' % (BASE_TS + i)) for i in range(80)])
    fetched, _, paths = _twenty_capped_batches(kafka_cluster, topic, planningMode="fetch")
    assert paths == {"fetch"}
    monkeypatch.setattr(record_probe, "_PROBE_TIMEOUT_S", 0.0)  # every round times out
    backed_off, probed_at, paths = _twenty_capped_batches(kafka_cluster, topic, **{"eventTime.order": "nonDecreasing"})
    assert probed_at == [1, 2, 4, 8, 16]
    assert paths == {"fetch"}
    assert backed_off == fetched
