"""kafkasync on a real Spark cluster, deployed as docs/deployment.md tells users to deploy it.

A Spark standalone master and two workers of 1 core each, started from the installed PySpark's
``bin/spark-class`` on loopback (kafkasync_dev/testing/spark_standalone.py); an environment
made the documented way — kafkasync's wheel and the packages its executors import, in a
virtualenv packed by ``venv-pack`` (kafkasync_dev/testing/executor_env.py) — shipped to the
executors with ``spark.archives`` and unpacked for the driver too, which runs from it with
``PYSPARK_PYTHON=./environment/bin/python``; and ``spark-submit`` in client mode of
integration/spark_cluster_app.py. Nothing runs from this checkout: the app is copied out of it,
and both the driver and the executors report where they import kafkasync from.

On a broker of the test's own (Apache Kafka from Maven Central): a synchronized stream with
``maxOffsetsPerTrigger`` stopped after three batches and restarted from its checkpoint, a batch
read, and a stream that reads on while the broker restarts under it. The cluster and the broker
are stopped whatever the outcome (context managers and ``finally``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from kafkasync_dev.testing.backfills import spans
from kafkasync_dev.testing.broker import KafkaBroker, create_topic
from kafkasync_dev.testing.executor_env import pack_executor_env
from kafkasync_dev.testing.live_producer import LiveProducer
from kafkasync_dev.testing.spark_standalone import StandaloneCluster, spark_home

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(CHECKOUT, "integration", "spark_cluster_app.py")
QUERY_START = os.path.join(CHECKOUT, "kafkasync_dev", "testing", "query_start.py")
"""Copied beside the app, which starts its queries through it (the archive holds no test tools)."""
APP_TIMEOUT_S = 900


def _next_offsets(logged: dict) -> dict[str, int]:
    return {f"{topic}-{partition}": entry["offset"]
            for topic, partitions in logged["topics"].items() for partition, entry in partitions.items()}


def _submit(cluster: StandaloneCluster, archive: str, driver_dir: str, arguments: list[str], log_path: str):
    """``spark-submit`` in client mode from ``driver_dir``, whose ``environment`` is the unpacked
    archive: the driver, Spark's driver-side Python runners and the executors all run
    ``./environment/bin/python`` (docs/deployment.md says why all three)."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    environment["PYSPARK_PYTHON"] = "./environment/bin/python"
    command = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", cluster.master_url,
               "--archives", f"{archive}#environment",
               "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=768m",
               "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", "spark.sql.session.timeZone=UTC",
               os.path.basename(APP), *arguments]
    log = open(log_path, "w")
    return subprocess.Popen(command, cwd=driver_dir, env=environment, stdout=subprocess.PIPE, stderr=log,
                            text=True), log


def test_kafkasync_on_a_standalone_cluster_deployed_as_the_docs_say(kafka_distribution, tmp_path):
    if kafka_distribution is None:
        pytest.skip("the cluster test starts (and restarts) a broker of its own: it needs Kafka from "
                    "Maven Central or KAFKA_HOME")
    from kafkasync_dev.testing.local_broker import LocalKafkaBroker

    timings: dict[str, float] = {}
    began = time.monotonic()
    archive = str(tmp_path / "kafkasync-env.tar.gz")
    built = pack_executor_env(archive, checkout=CHECKOUT, constraints=os.path.join(CHECKOUT, "constraints.txt"))
    timings["environment_s"] = time.monotonic() - began
    driver_dir = tmp_path / "driver"
    with tarfile.open(archive) as packed:
        packed.extractall(driver_dir / "environment")
    shutil.copy(APP, driver_dir / os.path.basename(APP))
    shutil.copy(QUERY_START, driver_dir / os.path.basename(QUERY_START))
    work = tmp_path / "work"
    work.mkdir()

    broker = LocalKafkaBroker(kafka_distribution).start()
    results: dict[str, object] = {}
    log_path = str(tmp_path / "spark-submit.log")
    try:
        backfill = spans(KafkaBroker(broker.bootstrap_servers), f"cluster-{uuid.uuid4().hex[:6]}")
        live_topic = f"cluster-live-{uuid.uuid4().hex[:6]}"
        create_topic(AdminClient({"bootstrap.servers": broker.bootstrap_servers}), live_topic, 2)
        began = time.monotonic()
        with StandaloneCluster(workers=2, cores_per_worker=1, work_dir=str(tmp_path / "cluster")) as cluster:
            timings["cluster_start_s"] = time.monotonic() - began
            began = time.monotonic()
            producer = LiveProducer(broker.bootstrap_servers, live_topic)
            app, log = _submit(cluster, archive, str(driver_dir),
                               [broker.bootstrap_servers, backfill.subscribe, live_topic, str(work)], log_path)
            try:
                deadline = time.monotonic() + APP_TIMEOUT_S
                for line in app.stdout:
                    if not line.startswith("kafkasync-cluster "):
                        continue
                    _, stage, payload = line.rstrip("\n").split(" ", 2)
                    results[stage] = json.loads(payload)
                    if stage == "restart-ready":
                        broker.restart()
                        producer.wait_for_more(500)  # records produced after the restart too
                        acknowledged = producer.stop()
                        (work / "acknowledged.tmp").write_text(json.dumps(acknowledged))
                        os.rename(work / "acknowledged.tmp", work / "acknowledged.json")
                    if time.monotonic() > deadline:
                        break
                returncode = app.wait(timeout=max(1.0, deadline - time.monotonic()))
            finally:
                producer.stop()
                if app.poll() is None:
                    app.kill()
                    app.wait(30)
                log.close()
            timings["application_s"] = time.monotonic() - began
            executor_logs = cluster.logs(tail=2000)
    finally:
        broker.close()
    print(f"\ncluster: environment {built}, timings {({k: round(v, 1) for k, v in timings.items()})}")
    with open(log_path) as handle:
        submit_log = handle.read()[-6000:]
    assert returncode == 0 and "live" in results, f"spark-submit exited {returncode}:\n{submit_log}\n{executor_logs}"

    # Nothing of this checkout was imported: the driver and every executor ran the archive.
    assert results["driver"]["kafkasync"].startswith(str(driver_dir / "environment")), results["driver"]
    for python, module in results["executors"]:
        assert python.startswith(str(tmp_path / "cluster")) and "/environment/" in python, python
        assert module.startswith(str(tmp_path / "cluster")) and "/environment/" in module, module
        assert not module.startswith(CHECKOUT)

    stream = results["stream"]
    ends = [_next_offsets(logged) for logged in stream["batches"]]
    sizes = [sum(end.values()) - sum(before.values()) for before, end in zip([{}] + ends, ends)]
    print(f"cluster: stream batches {sizes} (first run {stream['first_run_batches']}, restart at batch "
          f"{stream['second_run_first_batch']}), dropped {stream['dropped']}; live {results['live']}")
    per_partition = {f"{topic}-{partition}": len(stamps) for (topic, partition), stamps in backfill.timestamps.items()}
    assert ends[-1] == per_partition
    assert sum(sizes) == backfill.records and max(sizes) <= 400, sizes
    assert 0 < stream["first_run_batches"] and stream["second_run_first_batch"] >= stream["first_run_batches"] - 1
    assert stream["dropped"] == 0, "a synchronized, rate-limited backfill dropped records behind the watermark"

    assert results["batch"] == per_partition

    live = results["live"]
    assert live["failed"] is None and live["missing"] == 0 and live["most_reads_of_one_record"] == 1, live
    assert live["acknowledged"] > 200
