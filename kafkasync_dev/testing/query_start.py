"""Streaming queries of the test suites, started so that a busy machine cannot fail them in Spark.

Spark 4.x runs the driver side of a Python streaming source in a process of its own and gives it a
fixed 10 s to start and connect back (``PythonWorkerFactory.createSimpleWorker``:
``Selector.select(10000)``, no setting; executors' workers come from the daemon, which waits 60 s).
What runs in those 10 s is the interpreter's start and the imports of Spark's own worker module
(``pyspark.sql.streaming.python_streaming_source_runner``: pyspark, pyarrow, numpy; 0.65 CPU
seconds, ``python -X importtime``), nothing of kafkasync, which the worker loads only once it has
connected. A 2-core machine beside other jobs does not give it that much CPU in time: a
``make test`` at a load average of 12-17 lost 12 of its 944 tests so, each query failing before
its first batch with "Python worker failed to connect back" (issue 64).

:func:`started` starts such a query again — only such a query: Spark's own error, before the run
planned anything — up to :data:`ATTEMPTS` times in all, with a warning each time (pytest's
summary lists them). Any other failure, and any failure once the source ran, is the test's own.
:func:`surviving_slow_worker_starts` makes every ``DataStreamWriter.start()`` of a session do so.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import time
import warnings
from typing import Any, Callable, Iterator

SLOW_WORKER_START = "Python worker failed to connect back"
"""Spark's error when the source's worker missed its 10 s (``failedToConnectBackPythonWorkerError``)."""
ATTEMPTS = 5
_INITIALIZING = ("Initializing StreamExecution", "Initializing sources")
"""A query's status until its sources run (``StreamExecution``, ``ProgressContext``)."""


class SlowWorkerStartWarning(UserWarning):
    """A query started again because Spark's 10 s for its source's worker ran out."""


def started(start: Callable[[], Any], attempts: int = ATTEMPTS, initializing_s: float = 300.0) -> Any:
    """``start()``'s query once its sources run (or it ended), started again where Spark's
    start of the source's worker timed out before anything was planned."""
    for attempt in range(1, attempts + 1):
        query = start() if attempt == 1 else _start_over(start)
        deadline = time.monotonic() + initializing_s
        while query.isActive and query.status["message"] in _INITIALIZING and time.monotonic() < deadline:
            time.sleep(0.05)
        failed = query.exception()
        if failed is None or SLOW_WORKER_START not in str(failed) or query.lastProgress is not None:
            return query
        if attempt < attempts:
            warnings.warn(SlowWorkerStartWarning(
                f"the query's source did not connect back to Spark within its fixed 10 s (attempt {attempt} of "
                f"{attempts}, nothing planned): started again"), stacklevel=2)
    return query


def _start_over(start: Callable[[], Any]) -> Any:
    """``start()`` again after an attempt that planned nothing. A sink that cannot recover from
    a checkpoint (``memory``) refuses one whose ``offsets`` directory exists, which that attempt
    created (``ResolveWriteToStream``): an empty one goes, and the query starts over."""
    try:
        return start()
    except Exception as refused:
        created = re.search(r"Delete (\S+/offsets) to start over", str(refused))
        if created is None or not os.path.isdir(created[1]) or any(
                not name.startswith(".") for name in os.listdir(created[1])):
            raise
        shutil.rmtree(created[1])
        return start()


@contextlib.contextmanager
def surviving_slow_worker_starts() -> Iterator[None]:
    """Within the block, ``DataStreamWriter.start()`` (classic and Spark Connect) returns its
    query through :func:`started`."""
    undo = start_queries_surviving_slow_worker_starts()
    try:
        yield
    finally:
        undo()


def start_queries_surviving_slow_worker_starts() -> Callable[[], None]:
    """From now on in this process, ``DataStreamWriter.start()`` (classic and Spark Connect)
    returns its query through :func:`started`; what is returned undoes it. The benchmarks' Spark
    sessions run so (``benchmarks/harness/spark.py``): bench-smoke runs in CI beside a real-broker
    suite, whose load can make a source's worker miss Spark's 10 s as in the tests."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    writers: list[Any] = [DataStreamWriter]
    with contextlib.suppress(ImportError):  # Spark Connect's client needs grpc, which tests may lack
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as ConnectDataStreamWriter

        writers.append(ConnectDataStreamWriter)
    # A writer patched already (a second session in one process) keeps its one wrapper: attempts
    # would multiply otherwise.
    originals = {writer: writer.__dict__["start"] for writer in writers
                 if not getattr(writer.__dict__["start"], "surviving_slow_worker_starts", False)}
    for writer, start in originals.items():
        writer.start = _starting_again(start)

    def undo() -> None:
        for writer, start in originals.items():
            writer.start = start

    return undo


def _starting_again(start: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(start)
    def start_surviving_slow_worker_starts(writer: Any, *args: Any, **kwargs: Any) -> Any:
        return started(lambda: start(writer, *args, **kwargs))

    start_surviving_slow_worker_starts.surviving_slow_worker_starts = True  # type: ignore[attr-defined]
    return start_surviving_slow_worker_starts
