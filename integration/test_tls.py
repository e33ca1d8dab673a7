"""SCRAM over TLS (a SASL_SSL listener) on a broker of the test's own, with a CA and a broker
certificate the test makes (kafkasync_source/testing/certificates.py).

Trust is configured as a format("kafka") user writes it — a PEM truststore,
``kafka.ssl.truststore.type=PEM`` with ``kafka.ssl.truststore.location`` (KIP-651), which
kafkasync gives librdkafka as ``ssl.ca.location`` — or with librdkafka's own
``kafka.ssl.ca.location``. A CA that did not sign the broker's certificate fails the query at
its start, naming the brokers, and no password appears in the error, the progress, the
offsets or ``explain()``.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException

from kafkasync_source.source import register
from kafkasync_source.testing.broker import create_topic
from kafkasync_source.testing.certificates import make_certificates
from kafkasync_source.testing.local_broker import SaslUsers
from test_kafkasync_broker import BASE_TS, produce

PASSWORD = "tls-scram-s3cret"


@pytest.fixture
def tls_broker(own_broker, tmp_path):
    certificates = make_certificates(str(tmp_path))
    broker = own_broker(sasl=SaslUsers(scram_sha_512={"carol": PASSWORD}), tls_keystore=certificates.keystore)
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    create_topic(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), topic, 2)
    produce(broker.bootstrap_servers, topic, [(i % 2, BASE_TS + i, b"t") for i in range(40)])
    return broker, certificates, topic


def read_over_tls(spark, broker, topic: str, checkpoint, trust: dict[str, str]):
    reader = (spark.readStream.format("kafkasync")
              .option("kafka.bootstrap.servers", broker.sasl_ssl_bootstrap_servers)
              .option("kafka.security.protocol", "SASL_SSL")
              .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
              .option("kafka.sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule "
                                                f'required username="carol" password="{PASSWORD}";')
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("fetchOffset.numRetries", "0").option("kafkaConsumer.pollTimeoutMs", "15000"))
    for key, value in trust.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


@pytest.mark.compat
@pytest.mark.parametrize("trust_as", ["pem-truststore", "ca-location"])
def test_scram_over_tls_with_trust_as_format_kafka_users_write_it(spark, tls_broker, tmp_path, trust_as):
    register(spark)
    broker, certificates, topic = tls_broker
    trust = ({"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certificates.ca}
             if trust_as == "pem-truststore" else {"kafka.ssl.ca.location": certificates.ca})
    query = read_over_tls(spark, broker, topic, tmp_path / "cp", trust)
    query.awaitTermination(180)
    assert query.exception() is None
    assert sum(p.numInputRows for p in query.recentProgress) == 40
    progress = json.dumps([json.loads(p.json) for p in query.recentProgress])
    assert PASSWORD not in progress


def test_a_ca_that_did_not_sign_the_broker_fails_at_start_without_a_secret(spark, tls_broker, tmp_path):
    register(spark)
    broker, certificates, topic = tls_broker
    trust = {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certificates.other_ca}
    query = read_over_tls(spark, broker, topic, tmp_path / "cp", trust)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(180)
    message = str(failure.value)
    assert broker.sasl_ssl_bootstrap_servers in message, message[:2000]
    assert PASSWORD not in message
    plan = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", broker.sasl_ssl_bootstrap_servers)
            .option("kafka.sasl.jaas.config", f'ScramLoginModule required username="carol" password="{PASSWORD}";')
            .option("subscribe", topic).load())
    assert PASSWORD not in plan._jdf.queryExecution().toString()
