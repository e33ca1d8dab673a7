"""Spark Declarative Pipelines with kafkasync, end to end on the real broker.

``spark-pipelines run`` runs the repository's own example project (examples/orders-pipeline):
a streaming table from ``format("kafkasync")`` with ``eventTime.jsonPath`` and a materialized
view counting it per minute of event time. kafkasync is found by Spark's data source discovery
(no ``register()``), in the Python the CLI runs (PYSPARK_PYTHON). The pipeline runs twice, more
records arriving between the runs: each record lands in the streaming table exactly once, and
the view's counts are exact. A Hive metastore (Derby, in the project's directory) keeps the
tables between runs, as the docs tell users to do.

The CLI starts a Spark Connect server of its own (a JVM per run), so the tables are read back
from their files: the streaming table's through its ``_spark_metadata`` log (the files Spark
committed), the view's whole (a batch overwrite).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.mock_cluster import Record

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "orders-pipeline"
PARTITIONS = 4
CONNECT_PORT = 15002
EVENT_STEP_MS = 600
"""Record n's event time is BASE + n * 600 ms: 100 records a minute of event time."""


def _spark_pipelines() -> str:
    cli = Path(sys.executable).with_name("spark-pipelines")
    if not cli.exists():
        pytest.skip(f"no spark-pipelines beside {sys.executable}: it ships with PySpark >= 4.1")
    try:
        import yaml  # noqa: F401 - the CLI reads the spec with it (pyspark[pipelines])
    except ImportError:
        pytest.skip("PyYAML is missing: install pyspark[pipelines] (the test extra does)")
    return str(cli)


@pytest.fixture
def project(tmp_path):
    """A copy of the example, its checkpoints under the test's directory."""
    copy = tmp_path / "orders-pipeline"
    shutil.copytree(EXAMPLE, copy)
    spec = copy / "spark-pipeline.yml"
    lines = spec.read_text().splitlines()
    spec.write_text("\n".join(f"storage: {(tmp_path / 'storage').as_uri()}" if line.startswith("storage:") else line
                              for line in lines) + "\n")
    return copy


def _orders(first: int, count: int, base_ms: int) -> list[Record]:
    """Orders ``first`` .. ``first + count - 1``, spread over the partitions, Kafka-stamped when
    their event happened (in the past: retention.ms=-1 keeps them)."""
    return [Record(n % PARTITIONS, base_ms + n * EVENT_STEP_MS, str(n),
                   json.dumps({"id": n, "ts": base_ms + n * EVENT_STEP_MS}))
            for n in range(first, first + count)]


def _run(cli: str, project: Path, bootstrap: str, topic: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "ORDERS_TOPIC": topic}
    env.pop("PYSPARK_DRIVER_PYTHON", None)  # as a user's shell has it (integration/conftest.py sets it)
    return subprocess.run(
        # The docs' command, from the project's directory (where the CLI finds its spec). With
        # more settings and PYSPARK_DRIVER_PYTHON (the first version of this test), the run got
        # no Hive catalog and the second failed with LOCATION_ALREADY_EXISTS; the metastore's
        # directory is checked after each run.
        [cli, "run", "--conf", "spark.sql.catalogImplementation=hive", "--conf", "spark.ui.enabled=false",
         # The CLI's own Connect server, on loopback only. Its port stays Spark Connect's default
         # (15002): the CLI's client connects to sc://localhost whatever the server binds.
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1"],
        cwd=project, env=env, capture_output=True, text=True, timeout=1200)


def _connect_port_free() -> None:
    """spark-pipelines starts a Spark Connect server on 15002 and its client connects to
    ``sc://localhost`` (PySpark's ``SparkSession.builder.getOrCreate`` in local mode): with the
    port taken by another server the run cannot start."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", CONNECT_PORT))
        except OSError as taken:
            pytest.fail(f"port {CONNECT_PORT} is taken ({taken}): spark-pipelines' Connect server needs it "
                        f"(its client always connects to sc://localhost:{CONNECT_PORT})")


def _committed_rows(table: Path) -> list[dict]:
    """The rows of a streaming table's files that its ``_spark_metadata`` log committed."""
    import pyarrow.parquet as pq

    added: set[str] = set()
    for entry in sorted((table / "_spark_metadata").iterdir()):
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:  # "v1", then one JSON file entry a line
            file = json.loads(line)
            (added.add if file["action"] == "add" else added.discard)(file["path"])
    rows: list[dict] = []
    for uri in sorted(added):
        rows.extend(pq.read_table(uri.removeprefix("file://")).to_pylist())
    return rows


def _view_rows(table: Path) -> list[dict]:
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for file in sorted(table.glob("*.parquet")):
        rows.extend(pq.read_table(file).to_pylist())
    return rows


def _epoch_ms(moment: datetime) -> int:
    """Spark writes UTC instants; a reader may hand them back without a zone."""
    return round((moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def _check_tables(project: Path, total: int, base_ms: int) -> None:
    warehouse = project / "spark-warehouse"
    raw = _committed_rows(warehouse / "orders_raw")
    read = Counter((row["partition"], row["offset"]) for row in raw)
    assert len(raw) == total and len(read) == total, f"{len(raw)} rows, {len(read)} distinct of {total}"
    assert sorted(json.loads(row["order"])["id"] for row in raw) == list(range(total))
    assert all(_epoch_ms(row["eventTime"]) == json.loads(row["order"])["ts"] for row in raw)
    per_minute = {_epoch_ms(row["minute"]): row["count"] for row in _view_rows(warehouse / "orders_per_minute")}
    expected = Counter((base_ms + n * EVENT_STEP_MS) // 60_000 * 60_000 for n in range(total))
    assert per_minute == dict(expected)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_a_pipeline_reads_each_record_once_across_two_runs(bootstrap_servers, topic_factory, project):
    cli = _spark_pipelines()
    topic = topic_factory(PARTITIONS)
    base_ms = (int(time.time() * 1000) // 60_000 - 120) * 60_000  # two hours ago, on a minute
    with KafkaBroker(bootstrap_servers) as broker:
        broker.produce(topic, _orders(0, 4000, base_ms))
        for run, total in enumerate((4000, 4500)):
            if run:
                broker.produce(topic, _orders(4000, 500, base_ms))
            _connect_port_free()
            cpu_before = _children_cpu()
            result = _run(cli, project, bootstrap_servers, topic)
            print(f"\nspark-pipelines run {run + 1}: exit {result.returncode}, "
                  f"{_children_cpu() - cpu_before:.1f} s CPU (CLI and its Spark)", flush=True)
            (project / f"run-{run + 1}.log").write_text(result.stdout + result.stderr)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            assert "Run is COMPLETED" in result.stdout + result.stderr
            assert (project / "metastore_db").is_dir(), "the tables' catalog outlives the run"
            _check_tables(project, total, base_ms)
