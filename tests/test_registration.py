"""``register(spark)`` where a session can be changed and where it cannot.

* A pipeline definition file (Spark Declarative Pipelines) runs under PySpark's own
  ``block_session_mutations()``: ``spark.conf.set`` raises there, and ``register()`` must still
  register, warn once and say where the redaction regex goes instead; with the regex set where
  the session is configured, plans still mask every secret option.
* Spark's streaming source runner puts four environment entries, unsynchronized, into the
  registered data source's shared map at every query start (``STREAMING_RUNNER_ENVIRONMENT``):
  a classic ``register()`` carries them from the start, so a query start changes nothing in the
  map's structure, and queries started at once, many times, leave it whole.
"""

from __future__ import annotations

import os
import threading
import time
import warnings

import pytest

from kafkasync_dev.testing import Record
from kafkasync_source.config.client_config import SPARK_OPTIONS_REDACTION_REGEX
from kafkasync_source.spark import source
from kafkasync_source.spark.source import REDACTION_SETTING, STREAMING_RUNNER_ENVIRONMENT, register

BASE_TS = 1_700_000_000_000
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
REDACTION = "spark.sql.redaction.options.regex"


@pytest.fixture
def connect_session(spark, spark_connect_port):
    """A Connect client of the shared session's server, as the ``spark-pipelines`` CLI has one
    (``SPARK_CONNECT_MODE_ENABLED`` for this test only: the process runs classic tests too)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    previous = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{spark_connect_port}").create()
    try:
        yield session
    finally:
        session.stop()
        if previous is None:
            del os.environ["SPARK_CONNECT_MODE_ENABLED"]
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = previous


@pytest.fixture
def warned_afresh(monkeypatch):
    """The warning is once per process: each test here starts from 'not warned yet'."""
    monkeypatch.setattr(source, "_said", set())


def test_register_where_the_session_refuses_the_setting_registers_and_warns_once(connect_session, warned_afresh):
    from pyspark.pipelines.block_session_mutations import block_session_mutations

    connect_session.conf.set(REDACTION, "(?i)url")  # what a pipeline's session has by default
    with block_session_mutations(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register(connect_session)
        register(connect_session)  # a second definition file: no second warning
    said = [str(w.message) for w in caught if "kafkasync" in str(w.message)]
    assert len(said) == 1, said
    assert "SESSION_MUTATION_IN_DECLARATIVE_PIPELINE" in said[0]
    assert REDACTION_SETTING in said[0], "says what to set, ready to paste"
    assert connect_session.conf.get(REDACTION) == "(?i)url", "nothing was set"
    # Registered all the same: the session plans a kafkasync read (no broker needed to plan).
    schema = (connect_session.readStream.format("kafkasync").option("kafka.bootstrap.servers", "127.0.0.1:1")
              .option("subscribe", "t").load().schema)
    assert schema.fieldNames()[:2] == ["key", "value"]


class _DefinitionsBeingRegistered:
    """What ``spark-pipelines`` holds while it imports a definition file: an active graph
    element registry (nothing is registered into it here)."""

    def __enter__(self):
        from pyspark.pipelines.graph_element_registry import (
            GraphElementRegistry,
            graph_element_registration_context,
        )

        class Registry(GraphElementRegistry):
            def register_output(self, output): ...
            def register_flow(self, flow): ...
            def register_auto_cdc_flow(self, flow): ...
            def register_sql(self, sql_text, file_path): ...

        self._context = graph_element_registration_context(Registry())
        self._context.__enter__()

    def __exit__(self, *exc):
        self._context.__exit__(*exc)


def test_register_in_a_pipeline_definition_leaves_the_session_to_discovery(connect_session, warned_afresh):
    """A session-registered Python data source makes spark-pipelines exit 1 after its run
    (UNKNOWN_RESPONSE): where discovery finds kafkasync, register() there registers nothing.
    (On PySpark < 4.2 it refuses instead, naming the version: checked by hand on 4.1.4, as
    make test runs 4.3.)"""
    from pyspark.pipelines.block_session_mutations import block_session_mutations

    key, value = REDACTION_SETTING.split("=", 1)
    connect_session.conf.set(key, value)
    with _DefinitionsBeingRegistered(), block_session_mutations(), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register(connect_session)
    assert not [w for w in caught if "kafkasync" in str(w.message)], "nothing to say: discovery serves it"
    # Found all the same, by the server's discovery (this virtualenv's compat editable install).
    schema = (connect_session.readStream.format("kafkasync").option("kafka.bootstrap.servers", "127.0.0.1:1")
              .option("subscribe", "t").load().schema)
    assert schema.fieldNames()[:2] == ["key", "value"]


def test_a_pipeline_configured_with_the_setting_needs_no_change_and_masks_secrets(
        connect_session, warned_afresh, capsys):
    """The pipeline's ``configuration:`` sets the regex before any definition file runs:
    ``register()`` inside the file has nothing to set, says nothing, and plans mask the key."""
    from pyspark.pipelines.block_session_mutations import block_session_mutations

    key, value = REDACTION_SETTING.split("=", 1)
    connect_session.conf.set(key, value)
    with block_session_mutations(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register(connect_session)
        frame = (connect_session.readStream.format("kafkasync").option("kafka.bootstrap.servers", "127.0.0.1:1")
                 .option("subscribe", "t").option("kafka.ssl.key.pem", PEM)
                 .option("kafka.sasl.jaas.config", 'PlainLoginModule required password="jaas-pw-5521" username="svc";').load())
        frame.explain(extended=True)
    assert not [w for w in caught if "kafkasync" in str(w.message)]
    printed = capsys.readouterr().out
    assert "kafka.ssl.key.pem=*********(redacted)" in printed
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" not in printed and "jaas-pw-5521" not in printed


def test_register_keeps_the_users_pattern_and_adds_kafkasyncs_once(connect_session, warned_afresh):
    connect_session.conf.set(REDACTION, "(?i)internal[.]url")
    register(connect_session)
    register(connect_session)
    assert connect_session.conf.get(REDACTION) == f"(?i)internal[.]url|{SPARK_OPTIONS_REDACTION_REGEX}"


def _registered_environment(spark):
    """The Java map Spark shares between the registered source's functions
    (``UserDefinedPythonDataSource.dataSourceCls.envVars``)."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return manager.lookupDataSource("kafkasync").dataSourceCls().envVars()


def _entries_and_size(java_map) -> tuple[int, int]:
    """How many entries iterating the map finds, and the size it says it has: a HashMap put
    into from two threads at once can lose a size update, and then these differ."""
    entries, iterator = 0, java_map.entrySet().iterator()
    while iterator.hasNext():
        iterator.next()
        entries += 1
    return entries, java_map.size()


def _read(spark, kafka_cluster, topic, checkpoint):
    return (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .writeStream.format("noop").option("checkpointLocation", checkpoint))


def test_a_query_start_adds_nothing_to_the_registered_sources_environment(spark, kafka_cluster, topic_factory,
                                                                          tmp_path):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(5)])
    register(spark)
    environment = _registered_environment(spark)
    before = {key: environment.get(key) for key in environment.keySet()}
    assert set(STREAMING_RUNNER_ENVIRONMENT) <= set(before)
    assert not set(STREAMING_RUNNER_ENVIRONMENT) & set(spark.sparkContext.environment), \
        "the context's environment (later UDFs') is left as it was"
    query = _read(spark, kafka_cluster, topic, str(tmp_path / "cp")).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert set(environment.keySet()) == set(before), "the runner only replaced values"
    assert _entries_and_size(environment) == (len(before), len(before))


@pytest.mark.slow
def test_queries_started_at_once_many_times_leave_the_map_whole(spark, kafka_cluster, topic_factory, tmp_path):
    """Each round registers afresh (a new map, as a new application has) and starts
    ``KAFKASYNC_RACE_QUERIES`` (4) kafkasync queries from as many threads at once, so that
    their runners' first puts meet; every query must read its records and the map must stay whole. With Spark's own
    ``spark.dataSource.register`` in place of ``register`` (``KAFKASYNC_RACE_RAW=1``) the
    same rounds measure how often the race corrupts the map on this machine. Spark gives each
    starting source runner 10 s to connect back: on a busy machine a failure may be that, and
    says so."""
    rounds = int(os.environ.get("KAFKASYNC_RACE_ROUNDS", "6"))
    queries = int(os.environ.get("KAFKASYNC_RACE_QUERIES", "4"))
    raw = os.environ.get("KAFKASYNC_RACE_RAW") == "1"
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + i, None, b"v") for i in range(3)])
    corrupted, failed = [], []
    for round_number in range(rounds):
        if raw:
            spark.dataSource.register(source.KafkaSyncDataSource)
        else:
            register(spark)
        environment = _registered_environment(spark)
        barrier = threading.Barrier(queries)
        started: list = []

        def start(index: int) -> None:
            writer = _read(spark, kafka_cluster, topic, str(tmp_path / f"cp-{round_number}-{index}"))
            barrier.wait()
            started.append(writer.start())

        threads = [threading.Thread(target=start, args=(index,)) for index in range(queries)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        for query in started:
            try:
                query.processAllAvailable()
            except Exception as error:  # a corrupted map fails the first batch's tasks
                failed.append(f"round {round_number}: {type(error).__name__}: {str(error)[:300]}")
            finally:
                query.stop()
        entries, size = _entries_and_size(environment)
        if entries != size:
            corrupted.append(f"round {round_number}: {entries} entries, size {size}")
    print(f"\nconcurrent starts: {rounds} rounds x {queries} queries, {'raw' if raw else 'register()'}: "
          f"{len(corrupted)} maps corrupted, {len(failed)} queries failed", flush=True)
    assert len(started) == queries
    if not raw:
        assert (corrupted, failed) == ([], [])
