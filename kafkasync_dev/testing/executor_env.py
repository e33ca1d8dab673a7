"""The packed Python environment a cluster's executors run kafkasync in, made as the deployment
page (docs/deployment.md) tells users to make it: a virtualenv of the driver's Python version
holding kafkasync's wheel and the packages its executors import, packed by ``venv-pack`` for
``spark.archives``. PySpark itself is left out: every Spark worker puts its own ``pyspark.zip``
on its Python workers' path, and a packed PySpark would add some 400 MB to every application
start.

Usage: ``python -m kafkasync_dev.testing.executor_env OUTPUT.tar.gz`` (from a checkout:
the wheel is built from it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Optional

EXECUTOR_PACKAGES = ("confluent-kafka", "pyarrow", "numpy", "msgspec", "cryptography")
"""What kafkasync's code imports on an executor, besides PySpark (pyproject's dependencies
less ``pyspark``)."""


def _run(command: list[str], **kwargs) -> None:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed:\n{(result.stdout + result.stderr)[-3000:]}")


def build_wheel(checkout: str, directory: str) -> str:
    """kafkasync's wheel, built from ``checkout`` (``pip wheel --no-deps``)."""
    _run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps",
          "-w", directory, checkout])
    wheels = [name for name in os.listdir(directory) if name.startswith("kafkasync-") and name.endswith(".whl")]
    if len(wheels) != 1:
        raise RuntimeError(f"expected one kafkasync wheel in {directory}, found {wheels}")
    return os.path.join(directory, wheels[0])


def pack_executor_env(output: str, *, checkout: str, constraints: Optional[str] = None,
                      python: Optional[str] = None) -> dict[str, float]:
    """Build the wheel, a virtualenv of ``python`` (default: this interpreter's base) with it and
    :data:`EXECUTOR_PACKAGES`, and pack it into ``output``. Returns how long each step took."""
    timings = {}
    python = python or os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    with tempfile.TemporaryDirectory(prefix="kafkasync-executor-env-") as work:
        began = time.monotonic()
        wheel = build_wheel(checkout, os.path.join(work, "wheel"))
        timings["wheel_s"] = time.monotonic() - began
        began = time.monotonic()
        environment = os.path.join(work, "env")
        _run([python, "-m", "venv", environment])
        pip = [os.path.join(environment, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        pinned = ["-c", constraints] if constraints else []
        _run([*pip, *pinned, "--no-deps", wheel])
        _run([*pip, *pinned, *EXECUTOR_PACKAGES])
        timings["install_s"] = time.monotonic() - began
        began = time.monotonic()
        if os.path.exists(output):
            os.remove(output)
        _run([os.path.join(os.path.dirname(sys.executable), "venv-pack"), "-p", environment, "-o", output, "-q"])
        timings["pack_s"] = time.monotonic() - began
    timings["archive_mb"] = os.path.getsize(output) / 1e6
    return timings


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    print(pack_executor_env(sys.argv[1], checkout=root, constraints=os.path.join(root, "constraints.txt")))
