"""Integration tests against a real Kafka broker.

Where the broker comes from, in order:
  1. ``KAFKASYNC_BOOTSTRAP=host:port``: a running broker (e.g. ``docker compose up -d --wait``
     and ``KAFKASYNC_BOOTSTRAP=localhost:9092``);
  2. ``KAFKA_HOME``: an Apache Kafka installation (3.7 or newer, e.g. an unpacked binary
     download): the suite formats a single-node KRaft broker in a temporary directory on free
     loopback ports, starts it, and stops it and removes its data at the end
     (kafkasync_source/testing/kafka_home.py);
  3. a throw-away ``apache/kafka`` container started with testcontainers, when a
     Docker engine answers;
  4. otherwise every test here is skipped, with the reason printed.

Tests that stop and restart a broker, or need SASL users, run only with ``KAFKA_HOME`` (the
``kafka_home_broker`` factory); elsewhere they are skipped, saying so.

Fixtures:
    bootstrap_servers   session-scoped "host:port"
    kafka_home_broker   ``kafka_home_broker(sasl=None) -> KafkaHomeBroker``: a broker of its
                        own for the test, started; closed at the end of the test
    admin               session-scoped confluent_kafka AdminClient
    topic_factory       ``topic_factory(partitions=1) -> name``: creates a unique
                        topic with ``retention.ms=-1`` (records stamped in the past
                        must not be deleted by time-based retention); deleted at
                        the end of the test
    spark               session-scoped local SparkSession (same settings as tests/)
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

from kafkasync_source.testing.broker import create_topic

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

KAFKA_IMAGE = os.environ.get("KAFKASYNC_KAFKA_IMAGE", "apache/kafka:4.0.0")
NO_BROKER = (
    "no Kafka broker: set KAFKASYNC_BOOTSTRAP=host:port, or KAFKA_HOME to an Apache Kafka "
    "installation (3.7+), or start a Docker engine (docker compose up -d)"
)
NO_KAFKA_HOME = "needs a broker the suite controls: set KAFKA_HOME to an Apache Kafka installation (3.7+)"


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
def bootstrap_servers():
    env = os.environ.get("KAFKASYNC_BOOTSTRAP", "").strip()
    if env:
        _wait_for_broker(env, 60)
        yield env
        return
    home = os.environ.get("KAFKA_HOME", "").strip()
    if home:
        from kafkasync_source.testing.kafka_home import KafkaHomeBroker

        broker = KafkaHomeBroker(home).start()
        print(f"\nintegration: Kafka {broker.version()} from KAFKA_HOME at {broker.bootstrap_servers}")
        try:
            yield broker.bootstrap_servers
        finally:
            broker.close()
        return
    why_not = _docker_engine_reachable()
    if why_not is not None:
        pytest.skip(f"{NO_BROKER} [docker: {why_not}]")
    container = ApacheKafkaContainer().start()
    try:
        yield container.bootstrap_servers
    finally:
        container.stop()


@pytest.fixture
def kafka_home_broker():
    """A broker of the test's own from KAFKA_HOME, which the test may stop and restart."""
    home = os.environ.get("KAFKA_HOME", "").strip()
    if not home:
        pytest.skip(NO_KAFKA_HOME)
    from kafkasync_source.testing.kafka_home import KafkaHomeBroker

    brokers = []

    def make(sasl=None):
        broker = KafkaHomeBroker(home, sasl=sasl).start()
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.close()


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


# ---------------------------------------------------------------------- spark


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from kafkasync_source.testing.spark import local_spark_session

    extra = {"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"}
    if os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS"):  # format("kafka") beside kafkasync
        extra["spark.jars"] = os.environ["KAFKASYNC_SPARK_KAFKA_JARS"]
    session = local_spark_session(
        "kafkasync-integration", str(tmp_path_factory.mktemp("spark-warehouse")), extra,
    )
    try:
        yield session
    finally:
        session.stop()
