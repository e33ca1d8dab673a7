"""python_worker: a Python worker acknowledges its task's command at once (TCP_QUICKACK).

On a real loopback TCP connection: the receiving end is put into delayed-ACK (pingpong) mode,
as a worker is after answering a task; acknowledge_promptly() must take it out, which Linux
reports through getsockopt(TCP_QUICKACK). And the reader Spark ships to a worker does it
when it is unpickled, which is before the worker reads the task's input."""

from __future__ import annotations

import pickle
import socket

import pytest

from kafkasync_source import python_worker

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"),
                                reason="TCP_QUICKACK is Linux's; elsewhere acknowledge_promptly() does nothing")


@pytest.fixture
def connected(monkeypatch):
    """(sender, receiver): a loopback TCP connection; the module finds sockets afresh."""
    monkeypatch.setattr(python_worker, "_worker_sockets", None)
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()
    with sender, receiver:
        yield sender, receiver


def _quickack(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)


def test_leaves_delayed_ack_mode(connected):
    _, receiver = connected
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)  # pingpong, as after a reply
    assert _quickack(receiver) == 0
    python_worker.acknowledge_promptly()
    assert _quickack(receiver) == 1


def test_closed_sockets_are_skipped(connected):
    sender, receiver = connected
    python_worker.acknowledge_promptly()  # finds both
    sender.close()
    receiver.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
    python_worker.acknowledge_promptly()  # the closed one raises inside, and is passed over
    assert _quickack(receiver) == 1


@pytest.mark.parametrize("streaming", [True, False], ids=["stream reader", "batch reader"])
def test_unpickling_a_reader_acknowledges(connected, streaming):
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
