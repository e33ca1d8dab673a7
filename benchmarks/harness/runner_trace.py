"""Where a Python streaming source's batch time goes, from inside the Python processes.

Spark's ``durationMs`` says how long each phase of a trigger took in the JVM; it cannot say
how much of that was spent in the Python source runner (``pyspark.sql.streaming.
python_streaming_source_runner``, the process where a Python source's ``latestOffset``,
``partitions`` and ``commit`` run) or in the executors' Python workers (``read()``). This module
records both, for a benchmark only:

* **Runner calls.** Importing this module in the runner process (it happens when the runner
  unpickles a traced data source, :class:`TracedKafkaSync` or the floor source) wraps the
  runner's call handlers — the functions its ``main`` loop dispatches to, looked up as module
  globals at each call — so that each call Spark makes records when it arrived, how long the
  handler took (the source's method plus the runner's JSON and pickling), and how long the
  source's own method took.
* **Tasks.** :func:`traced_read` wraps a ``read()``: when the task started in its Python worker,
  when its first Arrow batch was ready and when it ended, and the worker's pid.
* **Garbage collections** in those workers: PySpark's daemon runs a full ``gc.collect()`` in a
  reused worker after every task (``pyspark/daemon.py``), whose time grows with the objects the
  worker holds; each full collection's duration and the objects it had to scan are recorded.

Each record is a JSON line appended to the file named by ``KAFKASYNC_RUNNER_TRACE`` (set before
Spark starts: the runner and the workers inherit the JVM's environment, which inherits the
driver's). Without it nothing is wrapped or written. Times are ``time.time()`` (all processes
share the clock); durations are ``time.perf_counter()`` differences.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
from typing import Any, Callable, Iterator, Optional

TRACE_ENV = "KAFKASYNC_RUNNER_TRACE"
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
HANDLERS = {  # the runner's handler function -> the call Spark makes
    "latest_offset_func": "latestOffset",
    "latest_offset_admission_control_func": "latestOffset",
    "partitions_func": "partitions",
    "commit_func": "commit",
    "report_latest_offset_func": "reportLatestOffset",
    "initial_offset_func": "initialOffset",
    "get_default_read_limit_func": "getDefaultReadLimit",
    "check_support_func": "checkSupportedFeatures",
    "prepare_for_trigger_available_now_func": "prepareForTriggerAvailableNow",
}
_source_ms: dict[str, float] = {}
"""The latest call's time in the source's own method, by method name (set by TracedMethods)."""


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    with open(path, "a") as out:  # one short line per write: O_APPEND keeps lines whole
        out.write(json.dumps(record) + "\n")


def _runner_module() -> Optional[Any]:
    """The runner's module when this process is the source runner (run as ``-m``: ``__main__``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return main if spec is not None and spec.name == RUNNER_MODULE else None


def _wrap_handler(name: str, handler: Callable) -> Callable:
    call = HANDLERS[name]

    @functools.wraps(handler)
    def traced(*args: Any, **kwargs: Any) -> Any:
        arrived, started = time.time(), time.perf_counter()
        _source_ms.pop(call, None)
        try:
            return handler(*args, **kwargs)
        finally:
            _write({"kind": "runner", "call": call, "at": arrived,
                    "handler_ms": (time.perf_counter() - started) * 1000,
                    "source_ms": _source_ms.get(call), "pid": os.getpid()})

    traced.__wrapped_by_trace__ = True  # type: ignore[attr-defined]
    return traced


def install_runner_trace() -> None:
    """Wrap the runner's handlers, once, if this is the runner and a trace file is named."""
    runner = _runner_module()
    if runner is None or not os.environ.get(TRACE_ENV):
        return
    for name in HANDLERS:
        handler = getattr(runner, name, None)
        if handler is not None and not getattr(handler, "__wrapped_by_trace__", False):
            setattr(runner, name, _wrap_handler(name, handler))


def timed_method(call: str, method: Callable) -> Callable:
    """``method`` with its duration remembered for the runner record of ``call``."""

    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            _source_ms[call] = (time.perf_counter() - started) * 1000

    return timed


def traced_read(read: Callable[[Any], Iterator], partition: Any) -> Iterator:
    """``read(partition)``'s batches, recording the task's timing in this Python worker."""
    if not os.environ.get(TRACE_ENV):
        yield from read(partition)
        return
    _trace_collections()
    began, started = time.time(), time.perf_counter()
    first_ms: Optional[float] = None
    rows = 0
    for batch in read(partition):
        if first_ms is None:
            first_ms = (time.perf_counter() - started) * 1000
        rows += getattr(batch, "num_rows", 0)
        yield batch
    _write({"kind": "task", "at": began, "ms": (time.perf_counter() - started) * 1000,
            "first_batch_ms": first_ms, "rows": rows, "pid": os.getpid()})


_collection_started: list[float] = []


def _on_collection(phase: str, info: dict) -> None:
    if info.get("generation") != 2:
        return
    if phase == "start":
        _collection_started[:] = [time.perf_counter()]
    elif _collection_started:
        _write({"kind": "gc", "at": time.time(), "ms": (time.perf_counter() - _collection_started[0]) * 1000,
                "tracked": len(gc.get_objects()), "pid": os.getpid()})


def _trace_collections() -> None:
    """Record this worker's full collections (once per process)."""
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


install_runner_trace()

