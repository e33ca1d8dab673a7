"""The in-process Kafka used by the whole suite behaves like Kafka where we rely on it."""

from __future__ import annotations

import gc
import os
import random
import threading
import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from kafkasync_dev.testing import ApiKey, MockClusterError, MockKafkaCluster, Record
from kafkasync_dev.testing.patience import PATIENCE_S

BASE_TS = 1_700_000_000_000  # 2023-11-14, ms


def _consume_exactly(consumer: Consumer, n: int, timeout: float = PATIENCE_S):
    """Consume ``n`` records (ignoring transient error events) or fail."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(out)} of {n} records consumed after {timeout}s"
        # Ask for what is left: consume() waits its whole timeout for a full batch.
        for msg in consumer.consume(min(n - len(out), 10000), timeout=min(left, 1.0)):
            if msg.error() is None:
                out.append(msg)
    return out


def _data_records(consumer: Consumer, max_wait: float):
    """Non-error records a consumer delivers within ``max_wait`` seconds."""
    got = []
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        got += [m for m in consumer.consume(100, timeout=0.1) if m.error() is None]
    return got


# --------------------------------------------------------------------- topics


def test_topic_with_8_partitions_is_visible_to_a_new_client(kafka_cluster, unique_topic):
    name = unique_topic()
    kafka_cluster.create_topic(name, partitions=8)

    consumer = kafka_cluster.consumer()
    try:
        md = consumer.list_topics(timeout=5)
        assert name in md.topics
        tmd = md.topics[name]
        assert tmd.error is None
        assert sorted(tmd.partitions) == list(range(8))
        assert all(p.leader == 1 for p in tmd.partitions.values())
    finally:
        consumer.close()
    assert kafka_cluster.partitions(name) == list(range(8))
    assert kafka_cluster.end_offsets(name) == {p: (0, 0) for p in range(8)}


def test_creating_an_existing_topic_fails(kafka_cluster, topic_factory):
    name = topic_factory(2)
    with pytest.raises(MockClusterError, match="TOPIC_ALREADY_EXISTS"):
        kafka_cluster.create_topic(name, partitions=2)


def test_replication_cannot_exceed_brokers(kafka_cluster, unique_topic):
    with pytest.raises(ValueError):
        kafka_cluster.create_topic(unique_topic(), partitions=1, replication=2)


# ----------------------------------------------------------------- round trip


def _records(n: int, partitions: int, seed: int = 7):
    rnd = random.Random(seed)
    recs = []
    for i in range(n):
        kind = i % 5
        key = None if kind == 0 else (b"" if kind == 1 else f"key-{i}".encode())
        value = None if kind == 2 else (b"" if kind == 3 else rnd.randbytes(rnd.randint(1, 64)))
        if kind == 4:
            headers = None
        elif kind == 0:
            # Duplicate header keys, a null header value and binary bytes.
            headers = [("h", b"1"), ("h", b"2"), ("null", None), ("bin", bytes([0, 255, i % 256]))]
        else:
            headers = [("i", str(i).encode())]
        # Out-of-order (but explicit) timestamps within a partition.
        ts = BASE_TS + i * 10 + rnd.randint(-5000, 5000)
        recs.append(Record(partition=i % partitions, timestamp_ms=ts, key=key, value=value, headers=headers))
    return recs


@pytest.mark.mock_brokers(1)
def test_50k_records_round_trip_exactly(fresh_cluster):
    kafka_cluster, n, parts = fresh_cluster, 50_000, 8
    topic = "round-trip"
    kafka_cluster.create_topic(topic, parts)
    records = _records(n, parts)

    kafka_cluster.start_request_tracking()
    positions = kafka_cluster.produce(topic, records)
    # A bulk load is fast because it is batched (a batch goes out full or at the flush), which
    # the produce requests show, not the seconds it took (under 20 s, asserted before, was the
    # machine's speed): 6,250 records a partition fit one batch each.
    assert len(kafka_cluster.requests(ApiKey.PRODUCE)) <= parts
    kafka_cluster.stop_request_tracking()

    assert len(positions) == n
    assert [p for p, _ in positions] == [r.partition for r in records]
    # Ordered helper producer: offsets are dense and in input order per partition.
    per_part = {}
    for (p, off) in positions:
        assert off == per_part.get(p, 0)
        per_part[p] = off + 1
    assert kafka_cluster.end_offsets(topic) == {p: (0, n // parts) for p in range(parts)}

    consumer = kafka_cluster.consumer()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
        msgs = _consume_exactly(consumer, n)
    finally:
        consumer.close()

    by_pos = {}
    for m in msgs:
        assert m.topic() == topic
        pos = (m.partition(), m.offset())
        assert pos not in by_pos, f"duplicate delivery of {pos}"
        by_pos[pos] = m
    assert set(by_pos) == set(positions)

    mismatches = []
    for rec, pos in zip(records, positions):
        m = by_pos[pos]
        ts_type, ts = m.timestamp()
        got = (ts_type, ts, m.key(), m.value(), m.headers())
        want = (TIMESTAMP_CREATE_TIME, rec.timestamp_ms, rec.key, rec.value, rec.headers)
        if got != want:
            mismatches.append((pos, want, got))
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


def test_produce_raises_on_unknown_partition(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    with pytest.raises(KafkaException) as info:
        kafka_cluster.produce(topic, [Record(partition=3, timestamp_ms=BASE_TS, value=b"x")])
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION


def test_mock_does_not_support_timestamp_lookup(kafka_cluster, topic_factory):
    """Documented limit: code under test must not rely on offsets_for_times."""
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i) for i in range(10)])
    consumer = kafka_cluster.consumer()
    try:
        (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 5)], timeout=5)
        assert tp.offset == -1
    finally:
        consumer.close()


# ------------------------------------------------------------ fault injection


@pytest.mark.mock_brokers(1)
def test_downed_broker_stalls_clients_until_it_is_back(fresh_cluster):
    cluster = fresh_cluster
    cluster.create_topic("t", partitions=1)
    cluster.produce("t", [Record(0, BASE_TS + i, value=b"before") for i in range(10)])

    cluster.broker_down(1)
    quick = {"log_level": 0, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100}
    producer = cluster.producer(quick)
    consumer = cluster.consumer(quick)
    try:
        delivered = []
        producer.produce("t", b"during", partition=0, timestamp=BASE_TS + 10,
                         on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        assert producer.flush(1.0) == 1, "a produce completed while the only broker was down"
        assert delivered == []

        consumer.assign([TopicPartition("t", 0, 0)])
        assert _data_records(consumer, 1.0) == [], "records fetched while the broker was down"

        cluster.broker_up(1)
        assert producer.flush(30) == 0
        assert delivered == [(None, 10)]
        msgs = _consume_exactly(consumer, 11)
        assert [m.value() for m in msgs] == [b"before"] * 10 + [b"during"]
    finally:
        consumer.close()
        producer.flush(5)


def test_set_rtt_delays_responses(fresh_cluster):
    cluster = fresh_cluster
    cluster.create_topic("t", partitions=3)
    consumer = cluster.consumer()
    try:
        consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=5)  # connect first
        cluster.set_rtt(-1, 400)
        t0 = time.monotonic()
        consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=10)
        assert time.monotonic() - t0 >= 0.35
        cluster.set_rtt(-1, 0)
    finally:
        consumer.close()


def test_partition_leader_can_be_moved(fresh_cluster):
    cluster = fresh_cluster
    cluster.create_topic("t", partitions=2, replication=3)
    cluster.set_partition_leader("t", 0, 2)
    cluster.set_partition_leader("t", 1, 3)
    md = cluster.wait_for_topic("t", 2)
    assert {p: pm.leader for p, pm in md.topics["t"].partitions.items()} == {0: 2, 1: 3}
    assert cluster.produce("t", [Record(0, BASE_TS), Record(1, BASE_TS)]) == [(0, 0), (1, 0)]


@pytest.mark.mock_brokers(1)
def test_request_error_injection_is_observable(fresh_cluster):
    cluster = fresh_cluster
    cluster.create_topic("t", partitions=1)
    cluster.produce("t", [Record(0, BASE_TS)])  # producer connected, ids assigned
    cluster.start_request_tracking()

    # Retriable errors: the producer retries and the records still land.
    cluster.push_request_errors(
        ApiKey.PRODUCE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION
    )
    assert cluster.produce("t", [Record(0, BASE_TS + 1)]) == [(0, 1)]
    assert len(cluster.requests(ApiKey.PRODUCE)) >= 3  # two failed attempts + success

    # A non-retriable error fails the delivery, and produce() raises it.
    cluster.push_request_errors(ApiKey.PRODUCE, KafkaError.INVALID_RECORD)
    with pytest.raises(KafkaException) as info:
        cluster.produce("t", [Record(0, BASE_TS + 2)])
    assert info.value.args[0].code() == KafkaError.INVALID_RECORD



@pytest.mark.mock_brokers(1)
def test_fetch_errors_are_retried_by_the_consumer(fresh_cluster):
    cluster = fresh_cluster
    cluster.create_topic("t", partitions=1)
    cluster.produce("t", [Record(0, BASE_TS + i, value=b"%d" % i) for i in range(20)])
    cluster.start_request_tracking()
    cluster.push_request_errors(ApiKey.FETCH, *[KafkaError.NOT_LEADER_FOR_PARTITION] * 3)
    consumer = cluster.consumer({"log_level": 0, "fetch.error.backoff.ms": 20})
    try:
        consumer.assign([TopicPartition("t", 0, 0)])
        msgs = _consume_exactly(consumer, 20)
    finally:
        consumer.close()
    assert [m.offset() for m in msgs] == list(range(20))
    assert len(cluster.requests(ApiKey.FETCH)) >= 4  # three failed fetches + one that worked


@pytest.mark.mock_brokers(1)
def test_list_offsets_errors_can_corrupt_the_low_watermark(fresh_cluster):
    """Quirk (librdkafka 2.16): get_watermark_offsets sends two ListOffsets
    requests; when one gets an error the call either raises it or returns
    (high, high) - a wrong low watermark. The high watermark is never wrong."""
    cluster = fresh_cluster
    cluster.create_topic("t", partitions=1)
    cluster.produce("t", [Record(0, BASE_TS + i) for i in range(5)])
    cluster.start_request_tracking()
    outcomes = set()
    for _ in range(10):
        cluster.push_request_errors(ApiKey.LIST_OFFSETS, KafkaError.NOT_LEADER_FOR_PARTITION)
        try:
            low, high = cluster.end_offsets("t")[0]
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
            outcomes.add("raised")
        else:
            assert high == 5 and low in (0, 5)
            outcomes.add("returned")
        cluster.clear_request_errors(ApiKey.LIST_OFFSETS)
    assert outcomes
    assert cluster.requests(ApiKey.LIST_OFFSETS)
    assert cluster.end_offsets("t") == {0: (0, 5)}


# ----------------------------------------------------------------- lifecycle


def _process_state():
    threads = {t.ident for t in threading.enumerate()}
    tasks = set(os.listdir("/proc/self/task"))
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return threads, tasks, fds


def _settled_diff(before, timeout_s=30.0):
    """What the process holds beyond ``before``, once nothing is left or after ``timeout_s`` (a
    deadline for native threads to end, however busy the machine; 5 s was a guess)."""
    deadline = time.monotonic() + timeout_s
    while True:
        gc.collect()
        after = _process_state()
        new_threads = after[0] - before[0]
        new_tasks = after[1] - before[1]
        new_fds = {fd: t for fd, t in after[2].items() if before[2].get(fd) != t}
        if not (new_threads or new_tasks or new_fds):
            return None
        if time.monotonic() > deadline:
            return new_threads, new_tasks, new_fds
        time.sleep(0.1)


def test_close_leaks_no_threads_or_sockets():
    before = _process_state()
    cluster = MockKafkaCluster(brokers=3)
    cluster.create_topic("t", partitions=4, replication=2)
    cluster.produce("t", [Record(p, BASE_TS, value=b"x") for p in range(4)] * 100)
    assert cluster.end_offsets("t") == {p: (0, 100) for p in range(4)}
    consumer = cluster.consumer()
    consumer.assign([TopicPartition("t", p, 0) for p in range(4)])
    assert len(_consume_exactly(consumer, 400)) == 400
    consumer.close()
    during = _process_state()
    assert len(during[1]) > len(before[1]), "expected native threads while the cluster runs"

    cluster.close()
    cluster.close()  # idempotent
    assert cluster.closed
    leaked = _settled_diff(before)
    assert leaked is None, f"leaked (threads, native tasks, fds): {leaked}"

    with pytest.raises(RuntimeError, match="closed"):
        cluster.create_topic("u")


def test_context_manager_closes_cluster():
    with MockKafkaCluster() as cluster:
        assert cluster.bootstrap_servers.startswith("127.0.0.1:")
        assert not cluster.closed
    assert cluster.closed
