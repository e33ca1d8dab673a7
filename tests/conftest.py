"""Shared fixtures: a local Spark session and in-process Kafka (librdkafka mock).

Fixtures:
    spark           session-scoped SparkSession (local[2], UTC, no UI, quiet logs) that also
                    serves Spark Connect clients on ``spark_connect_port``
    kafka_cluster   session-scoped MockKafkaCluster (1 broker) shared by all tests
    topic_factory   function-scoped: ``topic_factory(partitions=1)`` creates a
                    uniquely named topic on ``kafka_cluster`` and returns its name
    unique_topic    function-scoped: ``unique_topic()`` returns a fresh topic
                    name without creating it
    fresh_cluster   function-scoped MockKafkaCluster of its own, for fault
                    injection (3 brokers; ``@pytest.mark.mock_brokers(n)`` to change)
    schema_registry_url  session-scoped Confluent-compatible Schema Registry URL (Apicurio,
                    started on first use; kafkasync_dev/testing/schema_registry.py)
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import sys
import uuid

import pytest

# Spark's Python workers must run this interpreter (the virtualenv's), and the
# driver must not try to resolve the machine's hostname. Set before any
# SparkSession exists.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("TZ", "UTC")

try:  # Property tests: no per-example deadline (CI machines are slow and noisy).
    from hypothesis import settings as _hyp_settings

    from property_budget import examples

    _hyp_settings.register_profile("kafkasync", deadline=None, print_blob=True, max_examples=examples(100))
    _hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kafkasync"))
except ImportError:  # pragma: no cover
    pass

from kafkasync_dev.testing import MockKafkaCluster  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "mock_brokers(n): number of brokers for the fresh_cluster fixture"
    )


_CLUSTERS = {"kafka_cluster", "fresh_cluster"}


def pytest_collection_modifyitems(items):
    """Tests that run through Spark (the shared session, directly or through another fixture)
    are marked ``spark``, tests that talk to the embedded cluster ``kafka``: ``make test-core``
    runs the rest on every promised Python, and one smoke through both instead."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        if fixtures & _CLUSTERS:
            item.add_marker(pytest.mark.kafka)
        if "schema_registry_url" in fixtures:
            item.add_marker(pytest.mark.registry)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def spark_connect_port() -> int:
    """The port of the Spark Connect server that the shared session runs (tests/test_connect.py)."""
    return _free_port()


@pytest.fixture(scope="session")
def spark(tmp_path_factory, spark_connect_port):
    from kafkasync_dev.testing.query_start import surviving_slow_worker_starts
    from kafkasync_dev.testing.spark import SUITE_JVM_OPTIONS, local_spark_session, workers_on_the_installed_pyspark

    session = local_spark_session(
        "kafkasync-tests",
        str(tmp_path_factory.mktemp("spark-warehouse")),
        {
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
            "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC {SUITE_JVM_OPTIONS}",
            "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
            # One JVM serves classic tests and, through this plugin, Connect clients: a second
            # JVM for the Connect tests would cost a minute of the 2-core CI budget.
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(spark_connect_port),
        },
        # Workers that import the installed pyspark: a third of the CPU a start takes from
        # Spark's zip, where a busy machine missed the 10 s Spark gives a source's worker.
        worker_python=workers_on_the_installed_pyspark(str(tmp_path_factory.mktemp("spark-python"))),
    )
    try:
        # Spark's fixed 10 s for a streaming source's worker to start, which a busy machine
        # misses before any kafkasync code runs (kafkasync_dev/testing/query_start.py).
        with surviving_slow_worker_starts():
            yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def schema_registry_url():
    """A real Schema Registry for the whole run, started only when a test asks for it; skips
    saying why where none can be had (fails under ``KAFKASYNC_REQUIRE_REGISTRY=1``)."""
    from kafkasync_dev.testing.schema_registry import registry_fixture

    yield from registry_fixture()


@pytest.fixture(scope="session")
def kafka_cluster():
    """One mock cluster for the whole run; give each test its own topics."""
    with MockKafkaCluster(brokers=1) as cluster:
        yield cluster


_topic_counter = itertools.count()


def _topic_name(request, prefix=None):
    base = prefix or re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80].strip("-.")
    return f"{base or 'topic'}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def unique_topic(request):
    """``unique_topic(prefix=None) -> str``: a topic name no other test uses."""
    return lambda prefix=None: _topic_name(request, prefix)


@pytest.fixture
def topic_factory(request, kafka_cluster):
    """``topic_factory(partitions=1, *, prefix=None, cluster=None) -> name``.

    Creates a uniquely named topic (on the shared ``kafka_cluster`` unless
    ``cluster`` is given) and waits until it is visible in metadata.
    """

    def make(partitions=1, *, prefix=None, cluster=None, replication=1):
        name = _topic_name(request, prefix)
        (cluster or kafka_cluster).create_topic(name, partitions, replication)
        return name

    return make


@pytest.fixture
def fresh_cluster(request):
    """A cluster of this test's own, so fault injection cannot leak into others."""
    marker = request.node.get_closest_marker("mock_brokers")
    brokers = marker.args[0] if marker else 3
    with MockKafkaCluster(brokers=brokers) as cluster:
        yield cluster
