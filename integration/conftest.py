"""Integration tests against a real Kafka broker.

Where the broker comes from, in order:
  1. ``KAFKASYNC_BOOTSTRAP=host:port``: a running broker (e.g. ``docker compose up -d --wait``
     and ``KAFKASYNC_BOOTSTRAP=localhost:9092``);
  2. ``KAFKA_HOME``: an Apache Kafka installation (3.7 or newer, e.g. an unpacked binary
     download);
  3. Maven: the official Apache Kafka release jars from Maven Central (``KAFKA_VERSION``,
     default 4.3.1), resolved once into ``~/.cache/kafkasync/`` (``make integration`` resolves
     them before pytest starts and says how long it took);
  4. a throw-away ``apache/kafka`` container started with testcontainers, when a
     Docker engine answers;
  5. otherwise every test here is skipped, with the reason printed — or fails, when
     ``KAFKASYNC_REQUIRE_BROKER=1`` (CI sets it: a suite that skipped everything proved nothing).

With 2 and 3 the suite formats single-node KRaft brokers in temporary directories on free
loopback ports, starts them, and stops them and removes their data at the end
(kafkasync_dev/testing/local_broker.py). Tests that stop and restart a broker, or need SASL
users, need such a distribution (the ``own_broker`` factory); with 1 or 4 they are skipped,
saying so.

Fixtures:
    kafka_distribution  session-scoped KafkaDistribution (KAFKA_HOME or Maven), or None
    bootstrap_servers   session-scoped "host:port"
    own_broker          ``own_broker(sasl=None, tls_keystore=None, tls_client_ca=None) -> LocalKafkaBroker``: a broker of its
                        own for the test, started; closed at the end of the test
    admin               session-scoped confluent_kafka AdminClient
    topic_factory       ``topic_factory(partitions=1) -> name``: creates a unique
                        topic with ``retention.ms=-1`` (records stamped in the past
                        must not be deleted by time-based retention); deleted at
                        the end of the test
    spark               session-scoped local SparkSession (same settings as tests/)
    schema_registry_url session-scoped Confluent-compatible Schema Registry URL: Apicurio
                        Registry from Maven Central on a Java 21+, started on first use
                        (kafkasync_dev/testing/schema_registry.py), or
                        ``KAFKASYNC_SCHEMA_REGISTRY_URL``; skips saying why, or fails under
                        ``KAFKASYNC_REQUIRE_REGISTRY=1``
"""

from __future__ import annotations

import io
import os
import re
import sys
import tarfile
import time
import uuid

import pytest

from kafkasync_dev.testing.broker import create_topic

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

KAFKA_IMAGE = os.environ.get("KAFKASYNC_KAFKA_IMAGE", "apache/kafka:4.3.1")
NO_BROKER = (
    "no Kafka broker: install Maven ('mvn') and Java 17+ so that the suite resolves Apache Kafka "
    "from Maven Central, or set KAFKASYNC_BOOTSTRAP=host:port, or KAFKA_HOME to an Apache Kafka "
    "installation (3.7+), or start a Docker engine (docker compose up -d)"
)
NO_OWN_BROKER = ("needs brokers the suite starts and stops: Maven and Java 17+, or KAFKA_HOME "
                 "(not KAFKASYNC_BOOTSTRAP or Docker)")


def skip_without_broker(reason: str) -> None:
    """Skip, saying why — or fail, where a run must prove something (CI sets
    ``KAFKASYNC_REQUIRE_BROKER=1``)."""
    if os.environ.get("KAFKASYNC_REQUIRE_BROKER", "") not in ("", "0"):
        pytest.fail(f"KAFKASYNC_REQUIRE_BROKER is set, but: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.integration)


# --------------------------------------------------------------------- broker


def _docker_engine_reachable() -> str | None:
    """None if a Docker engine answers a ping, else why not."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - part of the test extra
        return f"docker SDK not installed ({exc})"
    try:
        client = docker.from_env(timeout=5)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        client.ping()
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        try:
            client.close()
        except Exception:
            pass


def _wait_for_broker(bootstrap: str, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=5)
            if md.brokers:
                return
        except Exception as exc:
            last = exc
        time.sleep(0.5)
    raise RuntimeError(f"Kafka at {bootstrap} did not answer within {timeout:.0f}s: {last}")


class ApacheKafkaContainer:
    """Single-node KRaft broker from the official ``apache/kafka`` image.

    testcontainers' own ``KafkaContainer`` drives Confluent images only, so
    this follows its recipe for the Apache image: the container waits for a
    start script that we write once the host port mapping is known, so the
    advertised listener is reachable from the host.
    """

    PORT = 9092  # client listener, advertised as host:mapped-port
    START_SCRIPT = "/testcontainers_start.sh"

    def __init__(self, image: str = KAFKA_IMAGE):
        from testcontainers.core.container import DockerContainer

        self._c = DockerContainer(image)
        self._c.with_exposed_ports(self.PORT)
        env = {
            "CLUSTER_ID": "MkU3OEVBNTcwNTJENDM2Qk",  # any base64 UUID
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9094",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        }
        for key, value in env.items():
            self._c.with_env(key, value)
        script = self.START_SCRIPT
        self._c.with_command(f'sh -c "while [ ! -f {script} ]; do sleep 0.1; done; sh {script}"')

    def start(self, timeout: float = 120.0) -> "ApacheKafkaContainer":
        self._c.start()
        host = self._c.get_container_host_ip()
        port = self._c.get_exposed_port(self.PORT)
        self.bootstrap_servers = f"{host}:{port}"
        script = (
            "#!/bin/sh\n"
            f"export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://{host}:{port},BROKER://localhost:9093\n"
            "exec /etc/kafka/docker/run\n"
        ).encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(self.START_SCRIPT.lstrip("/"))
            info.size = len(script)
            info.mode = 0o755
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(script))
        self._c.get_wrapped_container().put_archive("/", buf.getvalue())
        _wait_for_broker(self.bootstrap_servers, timeout)
        return self

    def stop(self) -> None:
        self._c.stop()


@pytest.fixture(scope="session")
def kafka_distribution():
    """The Kafka release brokers are started from: ``KAFKA_HOME``, else Maven Central's jars
    (``KAFKA_VERSION``); None where ``KAFKASYNC_BOOTSTRAP`` names a broker, or neither can be
    had (why is in ``kafka_distribution_problem``)."""
    from kafkasync_dev.testing.kafka_dist import DEFAULT_KAFKA_VERSION, KafkaHome, maven_kafka

    if os.environ.get("KAFKASYNC_BOOTSTRAP", "").strip():
        return None
    home = os.environ.get("KAFKA_HOME", "").strip()
    if home:
        return KafkaHome(home)
    try:
        return maven_kafka(os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION)
    except RuntimeError as exc:
        _DISTRIBUTION_PROBLEM.append(str(exc))
        return None


_DISTRIBUTION_PROBLEM: list[str] = []


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_distribution):
    env = os.environ.get("KAFKASYNC_BOOTSTRAP", "").strip()
    if env:
        _wait_for_broker(env, 60)
        yield env
        return
    if kafka_distribution is not None:
        from kafkasync_dev.testing.kafka_dist import SUITE_BROKER_JVM
        from kafkasync_dev.testing.local_broker import LocalKafkaBroker

        broker = LocalKafkaBroker(kafka_distribution, jvm=SUITE_BROKER_JVM).start()
        print(f"\nintegration: Apache Kafka {broker.version()} at {broker.bootstrap_servers}")
        try:
            yield broker.bootstrap_servers
        finally:
            broker.close()
        return
    why_not = _docker_engine_reachable()
    if why_not is not None:
        skip_without_broker(f"{NO_BROKER} [maven: {'; '.join(_DISTRIBUTION_PROBLEM) or 'not tried'}] "
                            f"[docker: {why_not}]")
    container = ApacheKafkaContainer().start()
    try:
        yield container.bootstrap_servers
    finally:
        container.stop()


@pytest.fixture
def own_broker(kafka_distribution):
    """A broker of the test's own, which the test may stop and restart."""
    if kafka_distribution is None:
        skip_without_broker(NO_OWN_BROKER)
    from kafkasync_dev.testing.kafka_dist import SUITE_BROKER_JVM
    from kafkasync_dev.testing.local_broker import LocalKafkaBroker

    brokers = []

    def make(sasl=None, tls_keystore=None, tls_client_ca=None):
        broker = LocalKafkaBroker(kafka_distribution, sasl=sasl, tls_keystore=tls_keystore,
                                  tls_client_ca=tls_client_ca, jvm=SUITE_BROKER_JVM).start()
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.close()


@pytest.fixture(scope="module")
def three_brokers(kafka_distribution):
    """Three KRaft nodes of the module's own (broker and controller each), left whole by every
    test that stops one. Each is sized for a 2-core machine that runs the three beside Spark
    (:class:`~kafkasync_dev.testing.local_broker.LocalKafkaCluster`)."""
    if kafka_distribution is None:
        skip_without_broker(NO_OWN_BROKER)
    from kafkasync_dev.testing.local_broker import LocalKafkaCluster

    cluster = LocalKafkaCluster(kafka_distribution, nodes=3).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def admin(bootstrap_servers):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap_servers})


@pytest.fixture
def topic_factory(request, admin):
    created = []

    def make(partitions: int = 1, *, prefix: str | None = None) -> str:
        base = prefix or re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80].strip("-.")
        name = f"kafkasync-it-{base}-{uuid.uuid4().hex[:8]}"
        create_topic(admin, name, partitions)
        created.append(name)
        return name

    yield make
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            try:
                future.result(30)
            except Exception:
                pass


@pytest.fixture(scope="session")
def schema_registry_url():
    from kafkasync_dev.testing.schema_registry import registry_fixture

    yield from registry_fixture()


# ---------------------------------------------------------------------- spark


SPARK_CONNECTOR_PROBLEM: list[str] = []
"""Why Spark's own Kafka connector is not on the session's classpath, if it is not."""
SPARK_PROTOBUF_PROBLEM: list[str] = []
"""Why Spark's own from_protobuf (spark-protobuf) is not on the session's classpath, if it is not."""


def spark_kafka_connector_jars() -> str:
    """format("kafka")'s jars for the session's ``spark.jars``; "" (and the reason noted) where
    there are none (:func:`kafkasync_dev.testing.spark.format_kafka_jars`)."""
    from kafkasync_dev.testing.spark import format_kafka_jars

    jars, problem = format_kafka_jars()
    if problem:
        SPARK_CONNECTOR_PROBLEM.append(problem)
    return jars or ""


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from kafkasync_dev.testing.query_start import surviving_slow_worker_starts
    from kafkasync_dev.testing.spark import SUITE_JVM_OPTIONS, local_spark_session, workers_on_the_installed_pyspark

    # No setting gives a starting Python worker longer: Spark 4.x waits a fixed 10 s for the
    # driver-side worker of a Python streaming source to connect back (PythonWorkerFactory.
    # createSimpleWorker; spark.python.authenticate.socketTimeout covers only the handshake after
    # it, and executors' workers come from the daemon, 60 s). Tests that start a query on a busy
    # machine leave it the CPU (integration/test_three_brokers.py), and a query whose source
    # missed it before anything was planned is started again (kafkasync_dev/testing/query_start.py).
    extra = {"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
             "spark.driver.extraJavaOptions": SUITE_JVM_OPTIONS}
    jars = spark_kafka_connector_jars()
    if jars:  # format("kafka") beside kafkasync, and from_avro beside it for Avro values
        from kafkasync_dev.testing.spark import spark_avro_jars, spark_protobuf_jars

        avro, problem = spark_avro_jars()
        if problem:
            SPARK_CONNECTOR_PROBLEM.append(problem)
        protobuf, problem = spark_protobuf_jars()
        if problem:
            SPARK_PROTOBUF_PROBLEM.append(problem)
        extra["spark.jars"] = ",".join(filter(None, (jars, avro, protobuf)))
    session = local_spark_session(
        "kafkasync-integration", str(tmp_path_factory.mktemp("spark-warehouse")), extra,
        worker_python=workers_on_the_installed_pyspark(str(tmp_path_factory.mktemp("spark-python"))),
    )
    try:
        with surviving_slow_worker_starts():
            yield session
    finally:
        session.stop()
