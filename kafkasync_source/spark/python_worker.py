"""What this source's readers do on landing in an executor's Python worker, before each task.

Spark pickles a reader into every task's command; the worker unpickles it (the reader's
``__setstate__``, :func:`landed_in_worker`) before it reads the task's input. Two things there
cost a live stream time on every task, and both are Spark's, fixable from here:

**The input is held back 40 ms.** Spark sends a task to a Python worker over TCP (unless
``spark.python.unix.domain.socket.enabled``) in two writes: the command (the pickled read
function, with this source's reader in it), then the input (for a data source read, one Arrow
batch holding the pickled input partition). The JVM's socket has Nagle's algorithm on (Spark
sets no ``TCP_NODELAY`` on its Python worker sockets), so the input, a small segment, waits until
the command is acknowledged; and the worker, which answered the previous task moments after it
arrived, is in Linux's delayed-ACK ("pingpong") mode: it acknowledges the command only when its
delayed-ACK timer fires, 40 ms later. Seen with ``strace`` on a live stream: the worker's read of
the 524-byte input blocked 28-45 ms in most tasks, 1-3 ms over a Unix domain socket.

The command is unpickled before the worker reads the input, and unpickling it runs this
source's reader's ``__setstate__``: setting ``TCP_QUICKACK`` there sends the pending ACK at
once (Linux ``tcp_setsockopt``: leaving pingpong mode pushes a scheduled ACK), and the JVM's
kernel releases the input. Only the worker's own connection to its JVM is touched, nothing else
about it changes, and no other socket of the process (a UDF's connections, Kafka's) is touched.

**A full garbage collection after every task.** PySpark's daemon runs ``gc.collect()`` in a
reused worker after each task (``pyspark/daemon.py``), and a full collection scans every object
the worker tracks: PySpark's, pyarrow's, numpy's and confluent-kafka's modules, about 82,000
objects. Measured on a live stream (``benchmarks/harness/runner_trace.py``): 50-100 ms per collection, on
each worker after each task, on 2 cores whose JVM is meanwhile finishing the batch and starting
the next. So at the worker's second task (the first may still import what tasks need) the
garbage is collected once more and every object alive then is moved out of the collector's
sight (``gc.freeze()``, made for long-lived processes whose startup objects are permanent):
PySpark's, pyarrow's and kafkasync's modules, whatever the user's first task left alive (its
modules, their caches), and the second task's command being unpickled. That is bounded: it
happens once per process, the collection first means no garbage is frozen, a frozen object is
still freed when its last reference goes (``gc.freeze`` hides it from the cycle collector only),
so what a freeze can keep is a cycle among objects alive at that moment that is dropped later,
never more than the heap held at the second task. What later tasks create is collected as
before.

**Where.** Both apply only in a Python worker forked by PySpark's daemon (``spark.python.use.daemon``,
Spark's default except on Windows): only such a worker is reused and collected after every task,
and its socket to the JVM is found exactly (:func:`_connection_to_jvm`). Elsewhere (the driver, a
worker started without the daemon, a test) they do nothing. ``KAFKASYNC_PYTHON_WORKER_TUNING``
(:data:`TUNING_VARIABLE`) in the worker's environment switches them: ``on`` (the default),
``off``, or only ``quickack`` or only ``freeze``; an unknown value switches both off, with a
warning (``docs/deployment.md``). Neither may fail a task: a tuning that raises is logged once
and left off for the rest of the process.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
from types import FrameType
from typing import Callable, Optional

logger = logging.getLogger(__name__)

TUNING_VARIABLE = "KAFKASYNC_PYTHON_WORKER_TUNING"
"""The environment variable, read in the worker, that switches the tunings (:data:`TUNING_VALUES`)."""

QUICKACK = "quickack"
FREEZE = "freeze"
TUNING_VALUES: dict[str, frozenset[str]] = {
    "on": frozenset({QUICKACK, FREEZE}),
    "true": frozenset({QUICKACK, FREEZE}),
    "1": frozenset({QUICKACK, FREEZE}),
    "off": frozenset(),
    "false": frozenset(),
    "0": frozenset(),
    QUICKACK: frozenset({QUICKACK}),
    FREEZE: frozenset({FREEZE}),
}
"""Each value :data:`TUNING_VARIABLE` may take (case-insensitive), and the tunings it switches on."""


class _NotApplicable(Exception):
    """This process is not one a tuning applies to (not a failure: the message says why)."""


_active: Optional[set[str]] = None
"""The tunings this process still runs: switched on, applicable and never failed; read at the first landing."""
_landings = 0
"""Readers unpickled in this process so far: one a task."""
_jvm_connection: Optional[socket.socket] = None
"""The socket PySpark's daemon handed this worker, found at the first landing; the worker keeps it for its life."""


def landed_in_worker() -> None:
    """Called as a reader is unpickled for a task: tunes this Python worker (see the module's docstring).

    Never raises an error: it runs inside PySpark's unpickling of the task's command, where any error would fail
    the task, and a tuning is worth no task. A tuning that fails is logged once and not tried again."""
    global _landings
    _landings += 1
    active = _active_tunings()
    if QUICKACK in active:
        _run(QUICKACK, acknowledge_promptly)
    if FREEZE in active:
        _run(FREEZE, freeze_startup_objects)


def acknowledge_promptly() -> None:
    """Acknowledge what the worker's socket to its JVM has received, now (``TCP_QUICKACK``): the JVM's
    kernel then sends the task's input, which it holds back until the command is acknowledged."""
    connection = _connection_to_jvm()
    quickack = getattr(socket, "TCP_QUICKACK", None)
    if quickack is None:
        raise _NotApplicable("TCP_QUICKACK is Linux's; this OS has no delayed-ACK switch to flip")
    if connection.family not in (socket.AF_INET, socket.AF_INET6) or connection.type != socket.SOCK_STREAM:
        raise _NotApplicable(f"the worker's connection to its JVM is not TCP ({connection.family!r}): "
                             "no delayed ACK to skip")
    connection.setsockopt(socket.IPPROTO_TCP, quickack, 1)


def freeze_startup_objects() -> None:
    """At the second task of a reused worker: collect the garbage, then leave every object alive now
    out of later collections (``gc.freeze()``), once per process."""
    _connection_to_jvm()  # only a worker forked by PySpark's daemon is reused and collected after each task
    if _landings == 2:
        gc.collect()  # what is garbage now must not be frozen: a frozen cycle is never freed
        gc.freeze()


def _active_tunings() -> set[str]:
    global _active
    if _active is None:
        _active = set(_switched_on(os.environ.get(TUNING_VARIABLE)))
    return _active


def _switched_on(value: Optional[str]) -> frozenset[str]:
    """The tunings :data:`TUNING_VARIABLE`'s value switches on. An unknown value switches both off: whoever
    set the variable meant to change the default, and off cannot cost a task more than Spark's own."""
    if value is None or not value.strip():
        return TUNING_VALUES["on"]
    tunings = TUNING_VALUES.get(value.strip().lower())
    if tunings is None:
        logger.warning("kafkasync: %s=%r is none of %s; its Python worker tunings are off in this worker",
                       TUNING_VARIABLE, value, ", ".join(TUNING_VALUES))
        return frozenset()
    return tunings


def _run(tuning: str, apply: Callable[[], None]) -> None:
    """Runs one tuning; one that does not apply or fails is dropped for the rest of the process."""
    try:
        apply()
    except _NotApplicable as reason:
        _active_tunings().discard(tuning)
        logger.debug("kafkasync: Python worker tuning %r does nothing in this process (pid %d): %s",
                     tuning, os.getpid(), reason)
    except Exception as cause:  # never fail the task being unpickled
        _active_tunings().discard(tuning)
        logger.warning("kafkasync: Python worker tuning %r failed and is off in this worker (pid %d): %r",
                       tuning, os.getpid(), cause)


def _connection_to_jvm() -> socket.socket:
    """The socket PySpark's daemon accepted from the JVM for this worker, from the daemon's frame on the
    call stack: found once, without looking at any other object of the process.

    ``pyspark/daemon.py``, ``manager()``: the daemon (run as ``python -m pyspark.daemon``) accepts the
    JVM's connection as ``sock``, forks, and the child calls ``worker(sock, authenticated)`` for each of
    its tasks (again and again with ``spark.python.worker.reuse``, with ``gc.collect()`` in between);
    ``worker()`` calls ``pyspark.worker.main(infile, outfile)``, which unpickles the command, and so this
    reader, below it on the same stack. ``infile`` and ``outfile`` are ``os.fdopen`` files on ``dup()``s
    of the socket's descriptor, new for each task: the daemon's ``sock`` is the socket itself.
    Without the daemon (``spark.python.use.daemon=false``, Windows), ``pyspark/worker.py``'s
    ``__main__`` connects through ``worker_util.get_sock_file_to_executor()``, whose socket is a local
    of a suspended generator, on no stack: such a worker, never reused, is left alone."""
    global _jvm_connection
    if _jvm_connection is None:
        frame: Optional[FrameType] = sys._getframe(1)
        while frame is not None and not _is_pyspark_daemon_worker(frame):
            frame = frame.f_back
        if frame is None:
            raise _NotApplicable("not a Python worker forked by PySpark's daemon "
                                 "(pyspark/daemon.py's worker() is not on the stack)")
        connection = frame.f_locals.get("sock")
        if not isinstance(connection, socket.socket):
            raise _NotApplicable(f"pyspark/daemon.py's worker() holds no socket as 'sock': {type(connection)!r}")
        _jvm_connection = connection
    return _jvm_connection


def _is_pyspark_daemon_worker(frame: FrameType) -> bool:
    if frame.f_code.co_name != "worker":
        return False
    spec = frame.f_globals.get("__spec__")  # run with -m, the daemon's __name__ is "__main__"; its spec's is not
    module = spec.name if spec is not None else frame.f_globals.get("__name__")
    return module == "pyspark.daemon"
