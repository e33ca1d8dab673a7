"""A Spark standalone cluster on loopback — a master and workers of 1 core each — started from
the installed PySpark's own ``bin/spark-class``, as an operator starts one
(``org.apache.spark.deploy.master.Master``, ``org.apache.spark.deploy.worker.Worker``).
Executors run in the workers' JVMs, with their own working directories under ``work_dir``:
what they can import is what the application ships them, not this checkout.

:meth:`StandaloneCluster.close` stops every process it started (their process groups), and the
class is a context manager, so a test leaves nothing running whatever its outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Optional

from kafkasync_dev.testing.local_broker import free_port


def spark_home() -> str:
    """The installed PySpark's directory, which holds ``bin/`` and ``jars/`` (pip's layout)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


class StandaloneCluster:
    """``master_url`` (``spark://127.0.0.1:PORT``) once :meth:`start` returns."""

    def __init__(self, workers: int = 2, cores_per_worker: int = 1, memory_per_worker: str = "1g",
                 work_dir: Optional[str] = None) -> None:
        self._workers = workers
        self._cores = cores_per_worker
        self._memory = memory_per_worker
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="kafkasync-standalone-")
        os.makedirs(self.work_dir, exist_ok=True)
        self._port = free_port()
        self._ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self._port}"
        self._processes: list[subprocess.Popen] = []

    def _launch(self, name: str, *arguments: str) -> None:
        log = open(os.path.join(self.work_dir, f"{name}.log"), "ab")
        environment = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                       "SPARK_NO_DAEMONIZE": "1", "SPARK_LOG_DIR": self.work_dir,
                       "SPARK_DAEMON_MEMORY": "256m"}
        # A worker hands its environment to the executors it launches: nothing of this
        # process's Python (a virtualenv, a checkout on PYTHONPATH) may leak to them.
        for variable in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV"):
            environment.pop(variable, None)
        environment["PATH"] = os.pathsep.join(
            part for part in environment.get("PATH", "").split(os.pathsep)
            if not os.path.exists(os.path.join(part, "activate")))
        self._processes.append(subprocess.Popen(
            [os.path.join(spark_home(), "bin", "spark-class"), *arguments],
            stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=self.work_dir, start_new_session=True))
        log.close()

    def start(self, timeout: float = 120.0) -> "StandaloneCluster":
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self._port), "--webui-port", str(self._ui_port))
        for index in range(self._workers):
            worker_dir = os.path.join(self.work_dir, f"worker-{index}")
            os.makedirs(worker_dir, exist_ok=True)
            self._launch(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                         "--host", "127.0.0.1", "--cores", str(self._cores), "--memory", self._memory,
                         "--webui-port", str(free_port()), "--work-dir", worker_dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_workers() == self._workers:
                return self
            if any(process.poll() is not None for process in self._processes):
                break
            time.sleep(0.5)
        logs = self.logs()
        self.close()
        raise RuntimeError(f"the standalone cluster did not come up with {self._workers} workers:\n{logs}")

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (its web UI's JSON)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._ui_port}/json/", timeout=2) as answer:
                state = json.load(answer)
        except OSError:
            return 0
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def logs(self, tail: int = 3000) -> str:
        parts = []
        for name in sorted(os.listdir(self.work_dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.work_dir, name), errors="replace") as handle:
                    parts.append(f"--- {name}\n{handle.read()[-tail:]}")
        return "\n".join(parts)

    def close(self) -> None:
        """Stop the workers, then the master (each process group: executors too)."""
        for process in reversed(self._processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in reversed(self._processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self._processes.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
