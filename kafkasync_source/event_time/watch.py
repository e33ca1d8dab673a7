"""Extraction calls that may never return, watched: the stuck record is named, not silent.

A user's ``eventTime.extractor`` runs arbitrary code on each record. One that loops or blocks
(a lock, a network call without a timeout) would stall the driver's fetch thread — the query
then plans nothing and reports nothing — or an executor's task, with no error anywhere. Python
cannot give it a deadline: a thread cannot be stopped from outside, and an asynchronous
exception (``PyThreadState_SetAsyncExc``) is not delivered while the thread is inside a C call,
which is where a blocked call sits. So the call is watched instead:

* :func:`watched` wraps a ``read(record)`` so that each call is registered, with its record and
  start, for as long as it runs: a thread id, a clock read and a dict entry set and deleted a
  record, a few plain Python calls' worth, small beside a user's Python function (the JSONPath
  and header readers, which cannot block, are not wrapped);
* :func:`stalled_extractions` lists the calls running longer than :data:`STALL_S`, naming each record: the
  driver's live report shows them (``eventTimeStalled`` in ``reportLatestOffset``);
* a daemon thread, started by the first watched call of a process, logs each such call once, at
  WARNING, naming the record — on the driver and in the executors' logs alike.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Optional, TypeVar

from kafkasync_source.event_time.options import record_name

logger = logging.getLogger(__name__)

STALL_S = 30.0
"""How long one record's time may take before the call is reported as stalled. A Python
function takes microseconds a record; even a remote look-up that takes seconds is far below."""

_running: dict[int, tuple[Any, float, str]] = {}
"""Per thread (``threading.get_ident``): the record whose time is being taken, since when
(``time.monotonic``), and by what (for messages). Written by the calling thread only; read by
the watchdog and the live report (``dict`` operations are atomic under the GIL)."""
_watchdog_lock = threading.Lock()
_T = TypeVar("_T")
_watchdog: list[threading.Thread] = []


def watched(read: Callable[[Any], _T], what: str) -> Callable[[Any], _T]:
    """``read``, registering each call while it runs (see the module doc). ``what`` names the
    reader in messages (``eventTime.extractor 'pkg.mod:fn'``)."""
    _start_watchdog()
    running, get_ident, monotonic = _running, threading.get_ident, time.monotonic

    def watched_read(record: Any) -> _T:
        thread = get_ident()
        running[thread] = (record, monotonic(), what)
        try:
            return read(record)
        finally:
            del running[thread]

    return watched_read


def stalled_extractions(longer_than_s: Optional[float] = None) -> list[str]:
    """The calls running longer than ``longer_than_s`` (default :data:`STALL_S`): "<what> has
    been taking the time of <topic>-<partition> offset <n> for <s> s", oldest first."""
    longer_than_s = STALL_S if longer_than_s is None else longer_than_s
    now = time.monotonic()
    calls = sorted((since, record, what) for record, since, what in list(_running.values())
                   if now - since > longer_than_s)
    return [f"{what} has been taking the time of {record_name(record)} for {now - since:.0f} s"
            for since, record, what in calls]


def _start_watchdog() -> None:
    with _watchdog_lock:
        if not _watchdog:
            thread = threading.Thread(target=_watch, name="kafkasync-event-time-watchdog", daemon=True)
            thread.start()
            _watchdog.append(thread)


def _after_fork_in_child() -> None:
    """A forked process (PySpark's daemon forks its workers) has none of its parent's threads:
    forget the parent's watchdog and calls, so that the child's first watched reader starts its
    own, and a lock held by a parent's thread at the fork cannot hang it."""
    global _watchdog_lock
    _watchdog_lock = threading.Lock()
    _watchdog.clear()
    _running.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _watch() -> None:
    """Log each stalled call once, forever: the thread is a daemon and holds nothing."""
    logged: set[tuple[int, float]] = set()
    while True:
        time.sleep(STALL_S / 3)
        logged = _log_new_stalls(logged)


def _log_new_stalls(logged: set[tuple[int, float]]) -> set[tuple[int, float]]:
    """Log the stalled calls not in ``logged`` (a call is its thread and start); returns the
    logged calls still running."""
    now = time.monotonic()
    calls = list(_running.items())
    for thread, (record, since, what) in calls:
        if now - since > STALL_S and (thread, since) not in logged:
            logged.add((thread, since))
            logger.warning("kafkasync: %s has been taking the time of %s for %.0f s and has not "
                           "returned: the query waits for it (it cannot be interrupted).",
                           what, record_name(record), now - since)
    return logged & {(thread, since) for thread, (_, since, _) in calls}
