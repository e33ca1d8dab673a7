"""End to end through Spark Connect: a Connect client of the shared session's Connect server.

Spark Connect is how Databricks serverless and shared clusters and Spark 4's thin clients run
PySpark: the client has DataFrames but no ``sparkContext`` and no JVM. Everything below runs
through a ``pyspark.sql.connect`` session talking gRPC to a local server.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source import AsyncMetrics, KafkaSyncListener, async_map
from kafkasync_source.spark.source import register

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def connect_mode():
    """``pyspark.sql.functions`` build Connect columns only while SPARK_CONNECT_MODE_ENABLED is
    set (``builder.remote()`` sets it in a Connect-only process); this process also runs
    classic tests, so set it for this module only."""
    previous = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SPARK_CONNECT_MODE_ENABLED"]
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = previous


@pytest.fixture
def remote(spark, spark_connect_port, connect_mode):
    """A fresh Connect session per test (its own listener bus), with kafkasync registered."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{spark_connect_port}").create()
    assert not hasattr(session, "_jsc"), "a Connect session, not the classic one"
    register(session)
    try:
        yield session
    finally:
        session.streams.close()  # remove its listeners while it can; its __del__ would warn it cannot
        session.stop()


@pytest.fixture
def orders(kafka_cluster, topic_factory):
    """2 partitions x 40 records; partition 1's timestamps go backwards once (offset 20)."""
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [
        Record(p, BASE_TS + 10 * i - (500 if (p, i) == (1, 20) else 0), f"k{p}-{i % 3}", f"v{p}-{i}")
        for i in range(40) for p in (0, 1)])
    return topic


def _options(kafka_cluster, topic, **extra):
    return {"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
            "startingOffsets": "earliest", **{k: str(v) for k, v in extra.items()}}


def test_batch_read_with_partition_time(remote, kafka_cluster, orders):
    rows = (remote.read.format("kafkasync").options(**_options(kafka_cluster, orders, includePartitionTime="true"))
            .load().collect())
    got = sorted((r.partition, r.offset, bytes(r.value).decode()) for r in rows)
    assert got == sorted((p, i, f"v{p}-{i}") for i in range(40) for p in (0, 1))
    late = [r for r in rows if r.timestamp < r.partitionTime]
    assert [(r.partition, r.offset) for r in late] == [(1, 20)], "the one out-of-order record"
    assert late[0].partitionTime.timestamp() * 1000 == BASE_TS + 190


def test_stream_with_the_listener(remote, kafka_cluster, orders, tmp_path):
    updates = []
    remote.streams.addListener(KafkaSyncListener(on_update=updates.append, spark=remote))
    sink = f"connect_stream_{uuid.uuid4().hex[:8]}"
    query = (remote.readStream.format("kafkasync")
             .options(**_options(kafka_cluster, orders, maxOffsetsPerTrigger=30)).load()
             .writeStream.format("memory").queryName(sink)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(PATIENCE_S)
    assert [p.numInputRows for p in query.recentProgress if p.numInputRows] == [30, 30, 20]
    assert remote.table(sink).count() == 80
    deadline = time.monotonic() + PATIENCE_S
    while len({u.batch_id for u in updates}) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {u.batch_id for u in updates} >= {0, 1, 2}, "the listener got every batch's progress"
    assert all(u.query_id == str(query.id) for u in updates)
    assert updates[-1].stream_time == BASE_TS + 390


async def _double(row):
    return {"n": row["offset"] * 2}


def test_async_map_with_metrics_in_a_batch_query(remote, kafka_cluster, orders):
    double = _by_value(_double)
    metrics = AsyncMetrics(remote)
    frame = remote.read.format("kafkasync").options(**_options(kafka_cluster, orders)).load().select("offset")
    out = async_map(frame, double, returns="n long", metrics=metrics)
    rows = out.collect()
    assert sorted(r.n for r in rows) == sorted(2 * i for i in range(40) for _ in (0, 1))
    assert {r.async_status for r in rows} == {"ok"}
    assert (metrics.rows, metrics.ok, metrics.calls, metrics.failures) == (80, 80, 80, 0)
    assert metrics.latency_p50 is not None


def test_async_map_with_metrics_in_a_stream(remote, kafka_cluster, orders, tmp_path):
    """The first listener of this session is AsyncMetrics', added after a kafkasync DataFrame was
    analyzed: the case that stops PySpark 4.3.0's Connect listener bus (SPARK-59135)."""
    double = _by_value(_double)
    metrics = AsyncMetrics(remote)
    stream = (remote.readStream.format("kafkasync")
              .options(**_options(kafka_cluster, orders, maxOffsetsPerTrigger=30)).load().select("offset"))
    query = (async_map(stream, double, returns="n long", metrics=metrics).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(PATIENCE_S)
    per_batch = [metrics.of_batch(p) for p in query.recentProgress if p.numInputRows]
    assert [counts["rows"] for counts in per_batch] == [30, 30, 20]
    deadline = time.monotonic() + PATIENCE_S
    while metrics.batches < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (metrics.rows, metrics.batches) == (80, 3), "the listener delivered every batch"
    assert metrics.catch_up(query).snapshot()["calls"] == 80


def _by_value(fn):
    """``fn`` re-created outside this module: cloudpickle sends module-level functions of a module
    the workers cannot import (a test module) by reference, and they would fail to load it."""
    import types

    return types.FunctionType(fn.__code__, {}, fn.__name__)
