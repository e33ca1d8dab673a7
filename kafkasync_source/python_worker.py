"""What this source's readers do on landing in an executor's Python worker, before each task.

Spark pickles a reader into every task's command; the worker unpickles it (the reader's
``__setstate__``, :func:`landed_in_worker`) before it reads the task's input. Two things there
cost a live stream time on every task, and both are Spark's, fixable from here:

**The input is held back 40 ms.** Spark sends a task to a Python worker over TCP (unless
``spark.python.unix.domain.socket.enabled``) in two writes: the command (the pickled read
function, with this source's reader in it), then the input (for a data source read, one Arrow
batch holding the pickled input partition). The JVM's socket has Nagle's algorithm on (Spark
sets no ``TCP_NODELAY`` on its Python worker sockets), so the input, a small segment, waits until the command is
acknowledged; and the worker, which answered the previous task moments after it arrived, is
in Linux's delayed-ACK ("pingpong") mode: it acknowledges the command only when its delayed-ACK
timer fires, 40 ms later. Seen with ``strace`` on a live stream: the worker's read of the
524-byte input blocked 28-45 ms in most tasks, 1-3 ms over a Unix domain socket.

The command is unpickled before the worker reads the input, and unpickling it runs this
source's reader's ``__setstate__``: setting ``TCP_QUICKACK`` there sends the pending ACK at
once (Linux ``tcp_setsockopt``: leaving pingpong mode pushes a scheduled ACK), and the JVM's
kernel releases the input. Nothing else about the socket changes; where the option does not
exist (not Linux) or the worker talks over a Unix domain socket, this does nothing.

**A full garbage collection after every task.** PySpark's daemon runs ``gc.collect()`` in a
reused worker after each task (``pyspark/daemon.py``), and a full collection scans every object
the worker tracks: PySpark's, pyarrow's, numpy's and confluent-kafka's modules, about 82,000
objects. Measured on a live stream (``benchmarks/runner_trace.py``): 100 ms per collection, on
each worker after each task, on 2 cores whose JVM is meanwhile finishing the batch and starting
the next. The worker's modules live as long as it does, so they are moved out of the
collector's sight once per worker (``gc.freeze()``, made for long-lived processes whose
startup objects are permanent); what later tasks create is collected as before.
"""

from __future__ import annotations

import gc
import socket
from typing import Optional

_worker_sockets: Optional[list[socket.socket]] = None
"""This process's TCP sockets (in a Python worker: the one to the JVM), found once."""
_landings = 0


def landed_in_worker() -> None:
    """Called as a reader is unpickled for a task: see the module's docstring."""
    acknowledge_promptly()
    freeze_startup_objects()


def freeze_startup_objects() -> None:
    """At the second task of a process: the objects alive now are left out of later garbage
    collections."""
    global _landings
    _landings += 1
    if _landings == 2:
        gc.freeze()


def acknowledge_promptly() -> None:
    """Acknowledge what this process's TCP sockets have received, now (``TCP_QUICKACK``)."""
    global _worker_sockets
    quickack = getattr(socket, "TCP_QUICKACK", None)
    if quickack is None:
        return
    if _worker_sockets is None:
        # The worker's socket is a local of PySpark's worker loop: found among live objects,
        # once per process (a few ms); the worker keeps it for its whole life.
        _worker_sockets = [
            candidate for candidate in gc.get_objects()
            if isinstance(candidate, socket.socket) and candidate.fileno() >= 0
            and candidate.type == socket.SOCK_STREAM and candidate.family in (socket.AF_INET, socket.AF_INET6)
        ]
    for python_worker in _worker_sockets:
        try:
            python_worker.setsockopt(socket.IPPROTO_TCP, quickack, 1)
        except OSError:  # closed meanwhile: nothing to acknowledge
            continue
