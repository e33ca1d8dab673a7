"""Faults only a real broker shows, on a broker the suite controls (Maven or ``KAFKA_HOME``).

Each test that stops or restarts a broker starts one of its own (``own_broker``); the retention
and SASL tests share one per kind (``_module_broker``: retention checked every second, SASL
users), each on topics of its own; the others use the session's broker. Records are stamped in the recent past
and every delivery report is checked (test_kafkasync_broker.produce).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import NO_OWN_BROKER, skip_without_broker
from pyspark.errors import StreamingQueryException
from test_kafkasync_broker import BASE_TS, open_transaction, produce

from kafkasync_dev.testing.broker import create_topic
from kafkasync_dev.testing.live_producer import LiveProducer
from kafkasync_dev.testing.local_broker import SaslUsers
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.spark.source import register


def stream_offsets(spark, bootstrap: str, topic: str, checkpoint, **options):
    """A streaming query whose foreachBatch keeps (partition, offset) per batch id, so that a
    batch Spark replays after a failure counts once (it is the same batch)."""
    batches: dict[int, list[tuple[int, int]]] = {}

    def sink(frame, batch_id):
        batches[batch_id] = [(r.partition, r.offset) for r in frame.select("partition", "offset").collect()]

    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    return query, batches


def wait_until(query, condition, timeout: float = PATIENCE_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def read_pairs(batches) -> Counter:
    return Counter(pair for rows in list(batches.values()) for pair in rows)


def own_broker_with_topic(spark, own_broker, prefix: str, partitions: int):
    """A broker of the test's own (it stops or restarts it) and a fresh topic on it."""
    register(spark)
    broker = own_broker()
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), topic, partitions)
    return broker, broker.bootstrap_servers, topic


@pytest.mark.compat
def test_a_query_streams_through_two_broker_restarts_reading_every_acknowledged_record_once(
    spark, own_broker, tmp_path
):
    broker, bootstrap, topic = own_broker_with_topic(spark, own_broker, "restarts", 2)
    producer = LiveProducer(bootstrap, topic)
    query, batches = stream_offsets(spark, bootstrap, topic, tmp_path / "cp")
    try:
        for _ in range(2):
            wait_until(query, lambda: sum(read_pairs(batches).values()) > len(producer.acknowledged) // 2 > 200,
                       what="records before the restart")
            broker.restart()
        # Records written after the second restart too, and over a thousand in all: counted, not
        # left to how much a busy machine's producer wrote in a 3 s sleep.
        producer.wait_for_more(max(500, 1_001 - len(producer.acknowledged)))
        acknowledged = producer.stop()
        wait_until(query, lambda: set(read_pairs(batches)) >= set(acknowledged), timeout=120,
                   what="every acknowledged record")
    finally:
        producer.stop()
        query.stop()
    counts = read_pairs(batches)
    assert set(acknowledged) <= set(counts) and max(counts.values()) == 1


def test_a_broker_down_longer_than_the_retry_bounds_fails_the_query_naming_it(
    spark, own_broker, tmp_path
):
    broker, bootstrap, topic = own_broker_with_topic(spark, own_broker, "down", 1)
    produce(bootstrap, topic, [(0, BASE_TS + i, b"v") for i in range(50)])
    query, batches = stream_offsets(spark, bootstrap, topic, tmp_path / "cp", **{
        "kafkaConsumer.pollTimeoutMs": 8_000, "fetchOffset.numRetries": 1,
        "fetchOffset.retryIntervalMs": 200, "max.task.idle.ms": -1})
    try:
        wait_until(query, lambda: sum(read_pairs(batches).values()) == 50, what="the first records")
        broker.stop()
        began = time.monotonic()
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(PATIENCE_S)
        assert time.monotonic() - began < 90, "the query hung"
    finally:
        query.stop()
    message = str(failure.value)
    assert bootstrap in message and "for" in message and "s" in message, message


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_topic_deleted_under_a_running_query(spark, bootstrap_servers, admin, tmp_path, fail_on_data_loss):
    register(spark)
    doomed, kept = f"doomed-{uuid.uuid4().hex[:8]}", f"kept-{uuid.uuid4().hex[:8]}"
    for topic in (doomed, kept):
        create_topic(admin, topic, 1)
    produce(bootstrap_servers, kept, [(0, BASE_TS + i, b"k") for i in range(10)])
    produce(bootstrap_servers, doomed, [(0, BASE_TS + 50 + i, b"d") for i in range(10)])
    query, batches = stream_offsets(spark, bootstrap_servers, f"{doomed},{kept}", tmp_path / "cp", **{
        "failOnDataLoss": str(fail_on_data_loss).lower(), "partitionDiscoveryIntervalMs": 500,
        # the doomed topic's records, newer than all of the kept one's, stay unread: they wait
        # for the kept topic's next record for ever (were they read, nothing would be lost)
        "max.task.idle.ms": 9223372036854775807})
    try:
        # Deleted once the query read the kept topic's records (a batch with both topics in its
        # offsets), not after 5 s, which a busy machine may spend starting the query.
        wait_until(query, lambda: sum(read_pairs(batches).values()) >= 10, what="the kept topic's first records")
        admin.delete_topics([doomed], operation_timeout=30)[doomed].result(30)
        if fail_on_data_loss:
            with pytest.raises(StreamingQueryException, match=rf"{doomed}-0 .*no longer exist"):
                query.awaitTermination(PATIENCE_S)
        else:
            produce(bootstrap_servers, kept, [(0, BASE_TS + 100 + i, b"k") for i in range(5)])
            wait_until(query, lambda: sum(read_pairs(batches).values()) >= 15, what="the kept topic's records")
    finally:
        query.stop()


def test_a_new_query_on_a_recreated_topic_reads_every_record(spark, bootstrap_servers, admin, tmp_path):
    """The defect seen on Kafka 4.3: in one application, a topic read, deleted, recreated under
    the same name and read again by a new query failed 3 of 5 times with a data loss over an
    empty range, from an executor's pooled consumer of the first query."""
    register(spark)
    name = f"recreated-{uuid.uuid4().hex[:8]}"
    for attempt in range(3):
        create_topic(admin, name, 2)
        produce(bootstrap_servers, name, [(p, BASE_TS + i, b"r") for i in range(1_000) for p in range(2)])
        rows = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
                .option("subscribe", name).load().count())
        assert rows == 2_000
        query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", name).option("startingOffsets", "earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path / f"cp{attempt}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(PATIENCE_S)
        assert sum(p.numInputRows for p in query.recentProgress) == 2_000
        admin.delete_topics([name], operation_timeout=30)[name].result(30)
        deadline = time.monotonic() + PATIENCE_S  # recreated once gone from the metadata, not after a guessed 2 s
        while name in admin.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, f"{name} still listed {PATIENCE_S:.0f} s after its deletion"
            time.sleep(0.2)


TOTAL = 4_000


def _module_broker(kafka_distribution, **settings):
    """A broker of its own (retention checked every second) shared by a module's tests of one
    kind, each on topics of its own: a broker start is about a fifth of such a test."""
    if kafka_distribution is None:
        skip_without_broker(NO_OWN_BROKER)
    from kafkasync_dev.testing.local_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(kafka_distribution, **settings).start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def retention_broker(kafka_distribution):
    yield from _module_broker(kafka_distribution)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_retention_removing_unread_records(spark, retention_broker, tmp_path, fail_on_data_loss):
    register(spark)
    bootstrap = retention_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"retention-{uuid.uuid4().hex[:8]}"
    # Kafka >= 4.0 refuses segments below 1 MiB: 4 MB of records make four of them.
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "1048576", "retention.ms": "-1"})]
                        )[topic].result(30)
    produce(bootstrap, topic, [(0, int(time.time() * 1000) - 10_000 + i, b"x" * 1_000) for i in range(TOTAL)])
    checkpoint = tmp_path / "cp"
    first = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "300").option("failOnDataLoss", str(fail_on_data_loss).lower())
             .load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="1 second").start())
    try:
        wait_until(first, lambda: sum(p.numInputRows for p in first.recentProgress) >= 300, what="a first batch")
    finally:
        first.stop()
    read_before = sum(p.numInputRows for p in first.recentProgress)
    assert read_before < 1_000
    # Time retention of 1 s deletes every closed segment, and the records with them.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    deadline = time.monotonic() + PATIENCE_S
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "it-retention"})
    try:
        while probe.get_watermark_offsets(KTP(topic, 0), timeout=10)[0] <= read_before:
            assert time.monotonic() < deadline, "retention did not delete the segments"
            time.sleep(1)
        low = probe.get_watermark_offsets(KTP(topic, 0), timeout=10)[0]
    finally:
        probe.close()
    second = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("failOnDataLoss", str(fail_on_data_loss).lower())
              .load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
              .trigger(availableNow=True).start())
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=rf"{topic}-0.*{read_before}"):
            second.awaitTermination(PATIENCE_S)
    else:
        second.awaitTermination(PATIENCE_S)
        assert sum(p.numInputRows for p in second.recentProgress) == TOTAL - low


@pytest.mark.compat
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_open_and_aborted_transactions(spark, bootstrap_servers, admin, tmp_path, isolation):
    register(spark)
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic, 1)
    produce(bootstrap_servers, topic, [(0, BASE_TS + i, b"before") for i in range(10)])
    aborted = open_transaction(bootstrap_servers, topic, [(0, BASE_TS + 100 + i, b"aborted") for i in range(5)])
    aborted.abort_transaction(30)
    produce(bootstrap_servers, topic, [(0, BASE_TS + 200 + i, b"between") for i in range(10)])
    still_open = open_transaction(bootstrap_servers, topic, [(0, BASE_TS + 300 + i, b"open") for i in range(5)])
    try:
        values: list[bytes] = []
        query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", isolation).load()
                 .writeStream.foreachBatch(lambda frame, _id: values.extend(r.value for r in frame.collect()))
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(PATIENCE_S)
        assert query.exception() is None
    finally:
        still_open.abort_transaction(30)
    kinds = Counter(values)
    if isolation == "read_committed":
        # The open transaction holds the last stable offset: the run stops before it, and
        # the aborted records are never returned.
        assert kinds == {b"before": 10, b"between": 10}
    else:
        assert kinds == {b"before": 10, b"aborted": 5, b"between": 10, b"open": 5}


SECRETS = {"alice": "alice-plain-s3cret", "bob": "bob-scram-s3cret"}


@pytest.fixture(scope="module")
def sasl_broker(kafka_distribution):
    """One SASL broker for both mechanisms' tests (it holds both users)."""
    yield from _module_broker(kafka_distribution, sasl=SaslUsers(plain={"alice": SECRETS["alice"]},
                                                                 scram_sha_512={"bob": SECRETS["bob"]}))


@pytest.mark.compat
@pytest.mark.parametrize("mechanism,user,module", [
    ("PLAIN", "alice", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SCRAM-SHA-512", "bob", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_sasl_users_authenticate_through_a_jaas_config_and_no_secret_leaks(
    spark, sasl_broker, tmp_path, caplog, mechanism, user, module
):
    register(spark)
    broker = sasl_broker
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    create_topic(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), topic, 1)
    produce(broker.bootstrap_servers, topic, [(0, BASE_TS + i, b"s") for i in range(20)])

    def jaas(password: str) -> str:  # as a format("kafka") user writes it
        return f'{module} required username="{user}" password="{password}";'

    def query_with(password: str, checkpoint):
        return (spark.readStream.format("kafkasync")
                .option("kafka.bootstrap.servers", broker.sasl_bootstrap_servers)
                .option("kafka.security.protocol", "SASL_PLAINTEXT")
                .option("kafka.sasl.mechanism", mechanism)
                .option("kafka.sasl.jaas.config", jaas(password))
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("fetchOffset.numRetries", "0").option("kafkaConsumer.pollTimeoutMs", "15000")
                .load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True).start())

    caplog.set_level(logging.DEBUG, logger="kafkasync_source")
    good = query_with(SECRETS[user], tmp_path / "good")
    good.awaitTermination(PATIENCE_S)
    assert sum(p.numInputRows for p in good.recentProgress) == 20
    progress = json.dumps([json.loads(p.json) for p in good.recentProgress])
    wrong = query_with("not-the-password", tmp_path / "wrong")
    with pytest.raises(StreamingQueryException) as failure:
        wrong.awaitTermination(PATIENCE_S)
    message = str(failure.value)
    assert "SASL" in message or "uthentication" in message, message
    # At the first failure, as a Java client (KIP-152): not after retrying for 30 s.
    assert "authentication failed, which retrying cannot cure" in message, message
    plan = spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", broker.sasl_bootstrap_servers) \
        .option("kafka.sasl.jaas.config", jaas(SECRETS[user])).option("subscribe", topic).load()
    explained = plan._jdf.queryExecution().toString()
    # kafkasync's own log records (py4j's debug log of this test's calls holds the options).
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("kafkasync_source"))
    for text, where in ((message, "the error"), (progress, "the progress and offsets"),
                        (explained, "explain()"), (logged, "kafkasync's log")):
        for secret in (SECRETS[user], "not-the-password"):
            assert secret not in text, f"a password appears in {where}"
