"""python_worker: what a reader does on landing in a Python worker.

It acknowledges its task's command at once (TCP_QUICKACK): on a real loopback TCP connection
the receiving end is put into delayed-ACK (pingpong) mode, as a worker is after answering a
task; acknowledge_promptly() must take it out, which Linux reports through
getsockopt(TCP_QUICKACK). And it leaves the worker's startup objects out of later garbage
collections, once per process. The readers Spark ships to a worker do both when unpickled,
which is before the worker reads the task's input."""

from __future__ import annotations

import gc
import pickle
import socket

import pytest

from kafkasync_source import python_worker

needs_quickack = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"),
                                    reason="TCP_QUICKACK is Linux's; elsewhere acknowledge_promptly() does nothing")


@pytest.fixture
def fresh_process(monkeypatch):
    """As in a new worker: nothing found or frozen yet; this process's heap unfrozen after."""
    monkeypatch.setattr(python_worker, "_worker_sockets", None)
    monkeypatch.setattr(python_worker, "_landings", 0)
    gc.unfreeze()  # an earlier test may have unpickled a reader in this process
    yield
    gc.unfreeze()


@pytest.fixture
def connected(fresh_process):
    """(sender, receiver): a loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    with sender, receiver:
        yield sender, receiver


def _quickack(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)


@needs_quickack
def test_leaves_delayed_ack_mode(connected):
    _, receiver = connected
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)  # pingpong, as after a reply
    assert _quickack(receiver) == 0
    python_worker.acknowledge_promptly()
    assert _quickack(receiver) == 1


@needs_quickack
def test_closed_sockets_are_skipped(connected):
    sender, receiver = connected
    python_worker.acknowledge_promptly()  # finds both
    sender.close()
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
    python_worker.acknowledge_promptly()  # the closed one raises inside, and is passed over
    assert _quickack(receiver) == 1


def test_startup_objects_are_frozen_at_the_second_task(fresh_process):
    python_worker.landed_in_worker()  # the first task may still import what tasks need
    assert gc.get_freeze_count() == 0
    python_worker.landed_in_worker()
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # the modules of this process
    ballast = [[] for _ in range(10)]
    python_worker.landed_in_worker()  # a later task: what it made stays collectable
    # Frozen objects are not in gc.get_objects() (CPython lists generations 0-2 only). The
    # freeze count itself is no witness: a frozen object freed by its refcount meanwhile (any
    # thread of the test run) lowers it.
    collectable = {id(candidate) for candidate in gc.get_objects()}
    assert all(id(item) in collectable for item in ballast)


@needs_quickack
@pytest.mark.parametrize("streaming", [True, False], ids=["stream reader", "batch reader"])
def test_unpickling_a_reader_acknowledges_and_freezes(connected, streaming):
    from kafkasync_source.options import parse_options
    from kafkasync_source.schema import kafka_schema
    from kafkasync_source.source import KafkaSyncBatchReader
    from kafkasync_source.stream import KafkaSyncStreamReader

    _, receiver = connected
    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}, streaming=streaming)
    reader = (KafkaSyncStreamReader if streaming else KafkaSyncBatchReader)(options, kafka_schema(False))
    shipped = pickle.dumps(reader)
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
    pickle.loads(shipped)
    assert _quickack(receiver) == 1
    pickle.loads(shipped)  # a second task
    assert gc.get_freeze_count() > 0
