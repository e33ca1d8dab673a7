"""python_worker: what a reader does on landing in a Python worker.

It acknowledges its task's command at once (TCP_QUICKACK) on the worker's own socket to its JVM
and no other: on a real loopback TCP connection the receiving end is put into delayed-ACK
(pingpong) mode, as a worker is after answering a task; landing must take it out, which Linux
reports through getsockopt(TCP_QUICKACK). And it leaves the worker's startup objects, after one
last collection, out of later garbage collections, once per process. Both only in a worker forked
by PySpark's daemon: the tests run PySpark's own ``pyspark/daemon.py`` ``worker(sock, ...)`` with
``pyspark.worker.main`` replaced by a task that lands readers, as the real main does when it
unpickles a task's command. Neither may ever fail a task, and ``KAFKASYNC_PYTHON_WORKER_TUNING``
switches them off."""

from __future__ import annotations

import gc
import logging
import pickle
import signal
import socket
import sys
import weakref

import pytest

from kafkasync_source.spark import python_worker

needs_quickack = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"),
                                    reason="TCP_QUICKACK is Linux's; elsewhere acknowledge_promptly() does nothing")


@pytest.fixture
def fresh_process(monkeypatch):
    """As in a new worker: nothing found, switched or frozen yet; this process's heap unfrozen after."""
    monkeypatch.setattr(python_worker, "_active", None)
    monkeypatch.setattr(python_worker, "_landings", 0)
    monkeypatch.setattr(python_worker, "_jvm_connection", None)
    monkeypatch.delenv(python_worker.TUNING_VARIABLE, raising=False)
    gc.unfreeze()  # an earlier test may have unpickled a reader in this process
    yield
    gc.unfreeze()


@pytest.fixture
def loopback():
    """loopback() -> (near, far): a loopback TCP connection, closed after the test."""
    opened = []

    def connect() -> tuple[socket.socket, socket.socket]:
        with socket.create_server(("127.0.0.1", 0)) as server:
            near = socket.create_connection(server.getsockname())
            far, _ = server.accept()
        opened.extend((near, far))
        return near, far

    yield connect
    for sock in opened:
        sock.close()


@pytest.fixture
def daemon_worker(fresh_process, monkeypatch):
    """run_task(sock, task): one task of a Python worker forked by PySpark's daemon, holding ``sock`` as its
    connection to the JVM: PySpark's own ``pyspark.daemon.worker``, whose ``pyspark.worker.main`` runs
    ``task()`` (where the real one unpickles the command). Called again, it is the same worker reused."""
    import pyspark.daemon
    import pyspark.worker

    monkeypatch.setattr(sys, "argv", ["pyspark.daemon"])  # else worker() imports main from sys.argv[1]
    handlers = {signum: signal.getsignal(signum)
                for signum in (signal.SIGHUP, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)}
    task_files = []

    def run_task(sock: socket.socket, task) -> None:
        def main(infile, outfile):
            task_files.extend((infile, outfile))
            task()

        monkeypatch.setattr(pyspark.worker, "main", main)
        assert pyspark.daemon.worker(sock, True) == 0

    yield run_task
    for task_file in task_files:
        task_file.close()
    for signum, handler in handlers.items():  # worker() resets them as a forked child would
        signal.signal(signum, handler)


def _quickack(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)


def _delay_acks(*socks: socket.socket) -> None:
    """Puts each into pingpong mode, as a worker's socket is after answering a task."""
    for sock in socks:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
        assert _quickack(sock) == 0


def _land_twice() -> None:
    python_worker.landed_in_worker()
    python_worker.landed_in_worker()


class _Unexaminable:
    """An object that isinstance() cannot examine, as a dead weakref.proxy or a lazy proxy."""

    @property
    def __class__(self):
        raise RuntimeError("isinstance() looked at me")


@needs_quickack
def test_only_the_workers_socket_to_its_jvm_is_acknowledged(daemon_worker, loopback):
    to_jvm, _ = loopback()
    udf_connection, _ = loopback()  # the user's, in the same worker: not kafkasync's to tune
    seen = []

    def task() -> None:
        python_worker.landed_in_worker()
        seen.append((_quickack(to_jvm), _quickack(udf_connection)))

    for _ in range(2):  # a reused worker: each task's command is acknowledged
        _delay_acks(to_jvm, udf_connection)
        daemon_worker(to_jvm, task)
    assert seen == [(1, 0), (1, 0)]


@needs_quickack
def test_outside_a_daemon_worker_nothing_is_touched(fresh_process, loopback):
    near, far = loopback()
    _delay_acks(near, far)
    _land_twice()
    assert (_quickack(near), _quickack(far)) == (0, 0)
    assert gc.get_freeze_count() == 0


def test_over_a_unix_domain_socket_only_the_freeze_applies(daemon_worker, caplog):
    to_jvm, jvm_end = socket.socketpair()  # spark.python.unix.domain.socket.enabled
    with to_jvm, jvm_end:
        daemon_worker(to_jvm, _land_twice)
    assert gc.get_freeze_count() > 0
    assert [record for record in caplog.records if record.levelno >= logging.WARNING] == []


@needs_quickack
def test_objects_isinstance_cannot_examine_do_not_matter(daemon_worker, loopback, caplog):
    unexaminable = _Unexaminable()
    with pytest.raises(RuntimeError):  # what a scan of all objects would meet
        isinstance(unexaminable, socket.socket)
    to_jvm, _ = loopback()
    acknowledged = []
    for _ in range(2):  # a tuning that failed would be off at the second task
        _delay_acks(to_jvm)
        daemon_worker(to_jvm, python_worker.landed_in_worker)
        acknowledged.append(_quickack(to_jvm))
    assert acknowledged == [1, 1]
    assert [record for record in caplog.records if record.levelno >= logging.WARNING] == []
    del unexaminable


def test_a_failing_tuning_is_logged_once_and_not_retried(daemon_worker, loopback, monkeypatch, caplog):
    calls = []

    def broken_lookup() -> socket.socket:
        calls.append(1)
        raise RuntimeError("a broken lookup")

    monkeypatch.setattr(python_worker, "_connection_to_jvm", broken_lookup)
    to_jvm, _ = loopback()
    daemon_worker(to_jvm, _land_twice)
    daemon_worker(to_jvm, python_worker.landed_in_worker)  # a third task: nothing raised, nothing retried
    assert len(calls) == 2  # once for each tuning, at the first task
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all("a broken lookup" in warning for warning in warnings)
    assert gc.get_freeze_count() == 0


@needs_quickack
@pytest.mark.parametrize("value", ["off", "OFF", "false", "0"])
def test_switched_off_it_does_neither(daemon_worker, loopback, monkeypatch, value):
    monkeypatch.setenv(python_worker.TUNING_VARIABLE, value)
    to_jvm, _ = loopback()
    _delay_acks(to_jvm)
    daemon_worker(to_jvm, _land_twice)
    assert _quickack(to_jvm) == 0
    assert gc.get_freeze_count() == 0


@needs_quickack
@pytest.mark.parametrize("value, acknowledged, frozen", [("quickack", 1, False), ("freeze", 0, True)])
def test_each_tuning_can_run_alone(daemon_worker, loopback, monkeypatch, value, acknowledged, frozen):
    monkeypatch.setenv(python_worker.TUNING_VARIABLE, value)
    to_jvm, _ = loopback()
    _delay_acks(to_jvm)
    daemon_worker(to_jvm, _land_twice)
    assert _quickack(to_jvm) == acknowledged
    assert (gc.get_freeze_count() > 0) == frozen


@needs_quickack
def test_an_unknown_value_switches_both_off_with_a_warning(daemon_worker, loopback, monkeypatch, caplog):
    monkeypatch.setenv(python_worker.TUNING_VARIABLE, "fast")
    to_jvm, _ = loopback()
    _delay_acks(to_jvm)
    daemon_worker(to_jvm, _land_twice)
    assert (_quickack(to_jvm), gc.get_freeze_count()) == (0, 0)
    (warning,) = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert python_worker.TUNING_VARIABLE in warning and "'fast'" in warning and "off, false, 0" in warning


def test_startup_objects_are_frozen_at_the_second_task(daemon_worker, loopback):
    to_jvm, _ = loopback()
    daemon_worker(to_jvm, python_worker.landed_in_worker)  # the first task may still import what tasks need
    assert gc.get_freeze_count() == 0
    daemon_worker(to_jvm, python_worker.landed_in_worker)
    assert gc.get_freeze_count() > 1000  # the modules of this process
    ballast = [[] for _ in range(10)]
    daemon_worker(to_jvm, python_worker.landed_in_worker)  # a later task: what it made stays collectable
    # Frozen objects are not in gc.get_objects() (CPython lists generations 0-2 only). The
    # freeze count itself is no witness: a frozen object freed by its refcount meanwhile (any
    # thread of the test run) lowers it.
    collectable = {id(candidate) for candidate in gc.get_objects()}
    assert all(id(item) in collectable for item in ballast)


def test_garbage_is_collected_before_the_freeze(daemon_worker, loopback):
    class Node:
        pass

    to_jvm, _ = loopback()
    collecting = gc.isenabled()
    gc.disable()  # only an explicit collection may free the cycle
    try:
        node = Node()
        node.itself = node
        witness = weakref.ref(node)
        del node
        daemon_worker(to_jvm, _land_twice)
    finally:
        if collecting:
            gc.enable()
    assert gc.get_freeze_count() > 0
    assert witness() is None  # collected, not frozen for the worker's life


@needs_quickack
@pytest.mark.parametrize("streaming", [True, False], ids=["stream reader", "batch reader"])
def test_unpickling_a_reader_acknowledges_and_freezes(daemon_worker, loopback, streaming):
    from kafkasync_source.config.options import parse_options
    from kafkasync_source.spark.schema import kafka_schema
    from kafkasync_source.spark.source import KafkaSyncBatchReader
    from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}, streaming=streaming)
    reader = (KafkaSyncStreamReader if streaming else KafkaSyncBatchReader)(options, kafka_schema(False))
    shipped = pickle.dumps(reader)
    to_jvm, _ = loopback()
    _delay_acks(to_jvm)
    daemon_worker(to_jvm, lambda: pickle.loads(shipped))
    assert _quickack(to_jvm) == 1
    daemon_worker(to_jvm, lambda: pickle.loads(shipped))  # a second task
    assert gc.get_freeze_count() > 0
