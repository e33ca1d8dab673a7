"""SCRAM over TLS (a SASL_SSL listener) on brokers of the module's own, with a CA and broker and
client certificates the test makes (kafkasync_dev/testing/certificates.py): one broker that
any client may reach, one that requires a client certificate (mutual TLS).

Trust and the client's key are configured as a format("kafka") user writes them — a PEM, JKS
or PKCS12 truststore (``kafka.ssl.truststore.*``), a PKCS12, JKS or PEM keystore
(``kafka.ssl.keystore.*``, ``kafka.ssl.key.password``), which kafkasync reads on the driver and
gives librdkafka as PEM text — or with librdkafka's own ``kafka.ssl.ca.location``. A CA that did
not sign the broker's certificate, and a client without a certificate where one is required,
fail the query within seconds, naming the brokers and the reason; no password or key appears
in the error, the progress, the offsets or ``explain()``.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException
from test_kafkasync_broker import BASE_TS, produce

from kafkasync_dev.testing.broker import create_topic
from kafkasync_dev.testing.certificates import make_certificates, make_java_stores
from kafkasync_dev.testing.local_broker import LocalKafkaBroker, SaslUsers
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.kafka.metadata import METADATA_TIMEOUT_S
from kafkasync_source.spark.source import register

PASSWORD = "tls-scram-s3cret"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("certificates"))
    return make_certificates(directory), make_java_stores(directory)


def _broker_with_topic(kafka_distribution, certificates, *, client_ca):
    if kafka_distribution is None:
        pytest.skip("TLS tests start brokers of their own: they need Kafka from Maven Central or KAFKA_HOME")
    broker = LocalKafkaBroker(kafka_distribution, sasl=SaslUsers(scram_sha_512={"carol": PASSWORD}),
                              tls_keystore=certificates.keystore, tls_client_ca=client_ca).start()
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    create_topic(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), topic, 2)
    produce(broker.bootstrap_servers, topic, [(i % 2, BASE_TS + i, b"t") for i in range(40)])
    return broker, topic


@pytest.fixture(scope="module")
def tls_broker(kafka_distribution, certificates):
    broker, topic = _broker_with_topic(kafka_distribution, certificates[0], client_ca=None)
    yield broker, topic
    broker.close()


@pytest.fixture(scope="module")
def mutual_tls_broker(kafka_distribution, certificates):
    broker, topic = _broker_with_topic(kafka_distribution, certificates[0], client_ca=certificates[0].ca)
    yield broker, topic
    broker.close()


def read_over_tls(spark, broker, topic: str, checkpoint, tls: dict[str, str]):
    reader = (spark.readStream.format("kafkasync")
              .option("kafka.bootstrap.servers", broker.sasl_ssl_bootstrap_servers)
              .option("kafka.security.protocol", "SASL_SSL")
              .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
              .option("kafka.sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule "
                                                f'required username="carol" password="{PASSWORD}";')
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("fetchOffset.numRetries", "0").option("kafkaConsumer.pollTimeoutMs", "15000"))
    for key, value in tls.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.format("noop").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def read_all_without_a_secret(spark, broker, topic, checkpoint, tls, secrets: list[str]) -> None:
    query = read_over_tls(spark, broker, topic, checkpoint, tls)
    query.awaitTermination(PATIENCE_S)
    assert query.exception() is None
    assert sum(p.numInputRows for p in query.recentProgress) == 40
    progress = json.dumps([json.loads(p.json) for p in query.recentProgress])
    for secret in secrets:
        assert secret not in progress
    offsets = "".join(path.read_text() for path in (checkpoint / "offsets").iterdir() if path.name.isdigit())
    for secret in secrets:
        assert secret not in offsets


def fails_fast_naming_the_broker(spark, broker, topic, checkpoint, tls, reason: str) -> str:
    began = time.monotonic()
    query = read_over_tls(spark, broker, topic, checkpoint, tls)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(PATIENCE_S)
    took = time.monotonic() - began
    message = str(failure.value)
    print(f"\ntls: the query failed after {took:.1f} s")
    # "Within seconds": the driver stopped at the first such failure, before its 30 s metadata
    # timeout, by the time it says it tried (the query's wall clock, under 15 s asserted
    # before, counted Spark's start on a machine that may be busy; 5 s measured).
    tried = re.findall(r"\(security.protocol=SASL_SSL\) for (\d+) s", message)
    assert tried and int(tried[0]) < METADATA_TIMEOUT_S, message[:2000]
    assert broker.sasl_ssl_bootstrap_servers in message, message[:2000]
    assert reason in message, message[:2000]
    assert PASSWORD not in message
    return message


@pytest.mark.compat
@pytest.mark.parametrize("trust_as", ["pem-truststore", "ca-location"])
def test_scram_over_tls_with_trust_as_format_kafka_users_write_it(spark, tls_broker, certificates, tmp_path,
                                                                   trust_as):
    register(spark)
    broker, topic = tls_broker
    ca = certificates[0].ca
    trust = ({"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": ca}
             if trust_as == "pem-truststore" else {"kafka.ssl.ca.location": ca})
    read_all_without_a_secret(spark, broker, topic, tmp_path / "cp", trust, [PASSWORD])


@pytest.mark.parametrize("store", ["jks", "pkcs12"])
def test_a_java_truststore_as_written(spark, tls_broker, certificates, tmp_path, store):
    register(spark)
    broker, topic = tls_broker
    java = certificates[1]
    trust = {"kafka.ssl.truststore.location": getattr(java, f"truststore_{store}"),
             "kafka.ssl.truststore.password": java.password, "kafka.ssl.truststore.type": store.upper()}
    read_all_without_a_secret(spark, broker, topic, tmp_path / "cp", trust, [PASSWORD, java.password])


@pytest.mark.parametrize("keystore", ["pkcs12", "jks-with-key-password", "pkcs12-by-keytool", "pem"])
def test_mutual_tls_with_the_client_keystore_as_written(spark, mutual_tls_broker, certificates, tmp_path,
                                                        keystore):
    register(spark)
    broker, topic = mutual_tls_broker
    pem, java = certificates
    tls = {"kafka.ssl.truststore.location": java.truststore_jks, "kafka.ssl.truststore.password": java.password}
    if keystore == "pem":
        tls.update({"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": pem.client_keystore})
    else:
        location = {"pkcs12": java.keystore_pkcs12, "jks-with-key-password": java.keystore_jks,
                    "pkcs12-by-keytool": java.keystore_pkcs12_by_keytool}[keystore]
        tls.update({"kafka.ssl.keystore.location": location, "kafka.ssl.keystore.password": java.password,
                    "kafka.ssl.keystore.type": "JKS" if location.endswith(".jks") else "PKCS12",
                    "kafka.ssl.key.password": java.key_password if location.endswith(".jks") else java.password})
    with open(pem.client_keystore) as handle:
        key_lines = [line for line in handle.read().splitlines()[1:-1] if "-----" not in line][:3]
    read_all_without_a_secret(spark, broker, topic, tmp_path / "cp", tls,
                              [PASSWORD, java.password, java.key_password, *key_lines])


def test_mutual_tls_without_a_client_certificate_fails_fast_naming_the_broker(spark, mutual_tls_broker,
                                                                              certificates, tmp_path):
    register(spark)
    broker, topic = mutual_tls_broker
    java = certificates[1]
    fails_fast_naming_the_broker(
        spark, broker, topic, tmp_path / "cp",
        {"kafka.ssl.truststore.location": java.truststore_pkcs12, "kafka.ssl.truststore.password": java.password},
        reason="certificate")


def test_a_ca_that_did_not_sign_the_broker_fails_fast_without_a_secret(spark, tls_broker, certificates, tmp_path):
    register(spark)
    broker, topic = tls_broker
    trust = {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certificates[0].other_ca}
    fails_fast_naming_the_broker(spark, broker, topic, tmp_path / "cp", trust, reason="certificate verify failed")
    plan = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", broker.sasl_ssl_bootstrap_servers)
            .option("kafka.sasl.jaas.config", f'ScramLoginModule required username="carol" password="{PASSWORD}";')
            .option("kafka.ssl.keystore.location", certificates[1].keystore_pkcs12)
            .option("kafka.ssl.keystore.password", certificates[1].password)
            .option("subscribe", topic).load())
    explained = plan._jdf.queryExecution().toString()
    assert PASSWORD not in explained and certificates[1].password not in explained
