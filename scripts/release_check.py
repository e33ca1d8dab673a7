"""``make release-check``: the sdist and wheel build, pass ``twine check``, and the wheel works
on its own.

Builds both into a temporary directory, checks them, makes a clean virtualenv, installs the
wheel there (its dependencies pinned by ``constraints.txt``), and from a directory outside the
checkout — so that the installed wheel, not the source tree, is imported — reads a topic of the
embedded cluster with ``spark.read.format("kafkasync")``, found by Spark's data source
auto-discovery (the wheel's top-level ``pyspark_kafkasync`` module), without ``register()``.
The wheel must hold what a query runs and not the development support (``kafkasync_dev``: the
embedded cluster, certificate factory, cluster launchers, the demo), which the check copies
beside it to start the embedded cluster.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in the clean virtualenv, in an empty directory.
READ_WITH_THE_WHEEL = r"""
import os, sys, tempfile
import kafkasync_source
assert "site-packages" in kafkasync_source.__file__, kafkasync_source.__file__
from kafkasync_dev.testing import MockKafkaCluster, Record
from kafkasync_dev.testing.spark import local_spark_session

with MockKafkaCluster() as cluster:
    cluster.create_topic("wheel-check", 2)
    cluster.produce("wheel-check", [Record(i % 2, 1_700_000_000_000 + i, None, b"v") for i in range(100)])
    spark = local_spark_session("kafkasync-wheel-check", tempfile.mkdtemp())
    try:
        rows = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
                .option("subscribe", "wheel-check").load().count())
    finally:
        spark.stop()
assert rows == 100, rows
print(f"release-check: kafkasync {kafkasync_source.__version__} from the wheel read {rows} records "
      "through format('kafkasync'), auto-discovered")
"""


def run(command: list[str], **kwargs) -> None:
    shown = command[:command.index("-c") + 1] + ["<the read above>"] if "-c" in command else command
    print("release-check: " + " ".join(shown), flush=True)
    subprocess.run(command, check=True, **kwargs)


def main() -> int:
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="kafkasync-release-")
    dist = os.path.join(work, "dist")
    run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", dist, HERE])
    built = sorted(glob.glob(os.path.join(dist, "*")))
    run([sys.executable, "-m", "twine", "check", "--strict", *built])
    wheel = next(path for path in built if path.endswith(".whl"))
    shipped = zipfile.ZipFile(wheel).namelist()
    development = [name for name in shipped if name.startswith("kafkasync_dev/") or "/testing/" in name]
    if development or not any(name.startswith("kafkasync_source/executor/") for name in shipped):
        raise SystemExit(f"release-check: the wheel must hold the runtime packages and no development "
                         f"support; it holds {development[:5] or 'no kafkasync_source/executor/'}")
    venv = os.path.join(work, "venv")
    run([sys.executable, "-m", "venv", venv])
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q",
         "-c", os.path.join(HERE, "constraints.txt"), wheel])
    empty = os.path.join(work, "elsewhere")
    os.makedirs(empty)
    # The embedded cluster the check reads comes from the checkout's development support.
    shutil.copytree(os.path.join(HERE, "kafkasync_dev"), os.path.join(empty, "kafkasync_dev"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    run([python, "-c", READ_WITH_THE_WHEEL], cwd=empty, env={**os.environ, "PYTHONPATH": ""})
    print(f"release-check: {', '.join(os.path.basename(p) for p in built)} ok "
          f"in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
