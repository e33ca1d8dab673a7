"""Slow (``make test-slow``): a long-lived Python worker's memory does not grow because of the freeze.

The test process plays a reused executor worker, as ``pyspark/daemon.py`` runs one: PySpark's
own ``worker(sock, authenticated)`` for each task (``pyspark.worker.main`` replaced by the task),
then ``gc.collect()``. Each task unpickles a command holding a cycle and a kafkasync reader (so
the reader lands, and the worker's objects are frozen at the second task, while that task's
command is alive), then makes and drops what a read task makes, cycles included. Its resident
set size (``/proc/self/statm``) after a warm-up must stay within :data:`RSS_GROWTH_BOUND` for
``KAFKASYNC_SOAK_SECONDS`` (default 1800: the issue's 30 minutes). A freeze that kept garbage
would grow it: freezing at every task would keep each command's cycle, 16 KiB a task.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import socket
import sys
import time
import warnings

import pytest

from kafkasync_source.spark import python_worker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from Linux's /proc/self/statm"),
]

SOAK_SECONDS = float(os.environ.get("KAFKASYNC_SOAK_SECONDS", "1800"))
WARM_UP_SECONDS = min(60.0, SOAK_SECONDS / 4)
"""Time for the allocator's arenas and the interpreter's caches to reach their working size."""
RSS_GROWTH_BOUND = 5 * 1024 * 1024
SAMPLE_EVERY_SECONDS = 1.0


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _command() -> bytes:
    """A task's command, as the JVM ships it: something cyclic (a pickled function and its globals
    often are), then the reader, whose unpickling lands it while the cycle is alive."""
    from kafkasync_source.config.options import parse_options
    from kafkasync_source.spark.schema import kafka_schema
    from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}, streaming=True)
    cyclic = [bytes(16 * 1024)]
    cyclic.append(cyclic)
    return pickle.dumps((cyclic, KafkaSyncStreamReader(options, kafka_schema(False))))


def _read_task(command: bytes) -> None:
    """Unpickles the command (landing the reader), then makes and drops a read task's objects."""
    _function, _reader = pickle.loads(command)
    records = [(offset, b"k", bytes(100)) for offset in range(2_000)]
    for offset in range(200):
        batch = {"offset": offset, "values": bytearray(256)}
        batch["itself"] = batch  # garbage only the collector frees


@pytest.fixture
def fresh_worker(monkeypatch):
    """A new worker's kafkasync state, PySpark's daemon worker for its tasks, this process restored after."""
    import pyspark.worker

    monkeypatch.setattr(python_worker, "_active", None)
    monkeypatch.setattr(python_worker, "_landings", 0)
    monkeypatch.setattr(python_worker, "_jvm_connection", None)
    monkeypatch.delenv(python_worker.TUNING_VARIABLE, raising=False)
    monkeypatch.setattr(sys, "argv", ["pyspark.daemon"])  # else worker() imports main from sys.argv[1]
    command = _command()
    monkeypatch.setattr(pyspark.worker, "main", lambda infile, outfile: _read_task(command))
    handlers = {signum: signal.getsignal(signum)
                for signum in (signal.SIGHUP, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)}
    gc.unfreeze()
    yield
    gc.unfreeze()
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_a_long_lived_workers_rss_does_not_grow(fresh_worker):
    import pyspark.daemon

    samples: list[tuple[float, int]] = []
    tasks = 0
    with socket.create_server(("127.0.0.1", 0)) as server:
        to_jvm = socket.create_connection(server.getsockname())
        jvm_end, _ = server.accept()
    with to_jvm, jvm_end, warnings.catch_warnings():
        # worker() opens each task's files on dup()s of the socket and leaves them to the refcount
        warnings.simplefilter("ignore", ResourceWarning)
        start = time.monotonic()
        next_sample = start
        while (now := time.monotonic()) - start < SOAK_SECONDS:
            assert pyspark.daemon.worker(to_jvm, True) == 0
            gc.collect()  # pyspark/daemon.py, between a reused worker's tasks
            tasks += 1
            if now >= next_sample:
                samples.append((now - start, _rss_bytes()))
                next_sample += SAMPLE_EVERY_SECONDS

    assert gc.get_freeze_count() > 1000  # the worker's objects were frozen at its second task
    after_warm_up = [rss for elapsed, rss in samples if elapsed >= WARM_UP_SECONDS]
    growth = max(after_warm_up) - after_warm_up[0]
    mib = 1024 * 1024
    print(f"\nsoak: {tasks} tasks in {SOAK_SECONDS:.0f} s, {gc.get_freeze_count()} objects frozen; RSS "
          f"{samples[0][1] / mib:.1f} MiB at the start, {after_warm_up[0] / mib:.1f} after {WARM_UP_SECONDS:.0f} s "
          f"of warm-up, {after_warm_up[-1] / mib:.1f} at the end, {max(after_warm_up) / mib:.1f} at most: "
          f"{growth / mib:.2f} MiB of growth after the warm-up")
    assert growth < RSS_GROWTH_BOUND
