"""librdkafka's log through Python logging, once per broker and cause (client_log.py), checked
on what a real librdkafka client writes: a consumer pointed at two ports nobody listens on."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from confluent_kafka import Consumer

from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.client_log import LibrdkafkaLog, with_python_logging


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _records(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "test.librdkafka"]


class _Recording:
    """The client's ``logger`` in front of a :class:`LibrdkafkaLog`: keeps every line librdkafka
    hands over, so that a test waits until librdkafka has repeated itself rather than for a time
    it hopes is long enough."""

    def __init__(self, log: LibrdkafkaLog) -> None:
        self.lines: list[str] = []
        self._log = log

    def log(self, level: int, msg: str, *args: Any) -> None:
        self.lines.append(msg % args)
        self._log.log(level, msg, *args)


@pytest.mark.parametrize("recovery", ["rebootstrap", "none"])
def test_a_refused_broker_is_logged_once_per_broker_not_once_per_attempt(caplog, recovery):
    """With librdkafka's default ``metadata.recovery.strategy`` (rebootstrap) each retry comes
    from a new broker object and librdkafka holds nothing back; with "none" the same broker
    object fails again and librdkafka writes the repeat "(after 0ms in state CONNECT, 1 identical
    error(s) suppressed)", the line a CI run once logged a second time."""
    ports = (_closed_port(), _closed_port())
    refused = {port: f"127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} failed: Connection refused"
               for port in ports}
    client_log = _Recording(LibrdkafkaLog(logging.getLogger("test.librdkafka")))
    consumer = Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{port}" for port in ports),
                         "group.id": "client-log-test", "logger": client_log,
                         "metadata.recovery.strategy": recovery,
                         "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50})

    def attempts(port: int) -> int:
        return sum(refused[port] in line for line in client_log.lines)

    # librdkafka tries the second bootstrap broker about a second after the first, later on a
    # busy machine: poll until each broker has failed more than once, so that there was a repeat
    # to hold back, however long that takes.
    deadline = time.monotonic() + PATIENCE_S
    try:
        with caplog.at_level(logging.DEBUG, logger="test.librdkafka"):
            while min(map(attempts, ports)) < 2 and time.monotonic() < deadline:
                consumer.poll(0.1)
    finally:
        consumer.close()
    assert min(map(attempts, ports)) >= 2, client_log.lines
    if recovery == "none":
        assert any("identical error(s) suppressed" in line for line in client_log.lines), client_log.lines
    lines = [line for line in _records(caplog) if "Connection refused" in line]
    assert sorted(port for port in ports for line in lines if refused[port] in line) == sorted(ports), lines
    assert len(lines) == 2, lines
    assert all(line.startswith("librdkafka FAIL [rdkafka#consumer-") for line in lines), lines


def test_librdkafkas_notes_on_a_repeat_do_not_make_it_a_new_cause(caplog):
    """The lines as librdkafka's rd_kafka_broker_set_error() writes them: a broker's first
    failure ends "(after 0ms in state CONNECT)", its repeats add ", N identical error(s)
    suppressed" inside the parentheses, a timeout disconnect may carry "(average rtt …)". Each
    broker and cause is logged once, and again after the interval with what was held back."""
    clock = _Clock()
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka"), repeat_after_s=60, clock=clock)

    def refused(host: str, address: str, notes: str) -> str:
        return f"[thrd:{host}:9092/bootstrap]: {host}:9092/bootstrap: Connect to ipv4#{address}:9092 failed: " \
               f"Connection refused ({notes})"

    def timed_out(requests: int, notes: str) -> str:
        return f"[thrd:kafka-1:9092/1]: kafka-1:9092/1: {requests} request(s) timed out: disconnect{notes}"

    def unresolved(notes: str) -> str:
        return "[thrd:kafka-1:9092/bootstrap]: kafka-1:9092/bootstrap: Failed to resolve 'kafka-1:9092': " \
               f"Name or service not known ({notes})"

    lines = [
        refused("kafka-1", "10.0.0.1", "after 0ms in state CONNECT"),
        refused("kafka-1", "10.0.0.1", "after 0ms in state CONNECT, 1 identical error(s) suppressed"),
        refused("kafka-2", "10.0.0.2", "after 0ms in state CONNECT"),
        refused("kafka-1", "10.0.0.1", "after 1000ms in state CONNECT, 3 identical error(s) suppressed"),
        refused("kafka-2", "10.0.0.2", "after 2ms in state CONNECT, 1 identical error(s) suppressed"),
        unresolved("after 2219ms in state CONNECT"),
        refused("kafka-2", "10.0.0.2", "after 1000ms in state CONNECT, 17 identical error(s) suppressed"),
        timed_out(3, " (after 60000ms in state UP)"),
        timed_out(5, " (average rtt 12.345ms) (after 60012ms in state UP, 1 identical error(s) suppressed)"),
        unresolved("after 2100ms in state CONNECT, 1 identical error(s) suppressed"),
    ]
    again = refused("kafka-1", "10.0.0.1", "after 0ms in state CONNECT, 30 identical error(s) suppressed")
    with caplog.at_level(logging.INFO, logger="test.librdkafka"):
        for line in lines:
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", line)
        clock.now = 61
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", again)
    written = [f"librdkafka FAIL [rdkafka#consumer-1] {line}" for line in (lines[0], lines[2], lines[5], lines[7])]
    # The causes not written for the interval expire; those with lines held back are written
    # then (the last line held back, with the count), in the order they were first written.
    expired = [f"librdkafka FAIL [rdkafka#consumer-1] {line} ({count} more since it was last logged, "
               "this the last of them)" for line, count in ((lines[6], 2), (lines[9], 1), (lines[8], 1))]
    assert _records(caplog) == [*written, *expired, f"librdkafka FAIL [rdkafka#consumer-1] {again} "
                                                    f"(2 more since it was last logged)"]


def test_what_is_remembered_is_bounded_by_the_causes_of_one_interval(caplog):
    """A query that runs for weeks meets a new cause now and then (a broker replaced, a
    partition's leader moved): each is remembered for one interval, not for good."""
    clock = _Clock()
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka"), repeat_after_s=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.librdkafka"):
        for second in range(10_000):
            clock.now = second
            log.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#consumer-1",
                    f"[thrd:broker-{second}:9092/{second}]: broker-{second}:9092/{second}: timed out")
            log.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#consumer-1",
                    f"[thrd:broker-{second}:9092/{second}]: broker-{second}:9092/{second}: timed out")
            assert len(log._seen) <= 60
    records = _records(caplog)
    assert len(records) == 2 * 10_000 - 60, "each cause once, and its repeat when it expired (not the last 60)"
    assert records[60] == records[0] + " (1 more since it was last logged, this the last of them)", records[58:62]


def test_a_line_held_back_comes_again_after_the_interval_with_its_count(caplog):
    clock = _Clock()
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka"), repeat_after_s=60, clock=clock)
    line = "[thrd:h:9092/bootstrap]: h:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: " \
           "Connection refused (after {}ms in state CONNECT)"
    with caplog.at_level(logging.INFO, logger="test.librdkafka"):
        for elapsed_ms in (0, 3, 1):
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", line.format(elapsed_ms))
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-2",
                line.replace("h:9092", "other:9092").format(0))
        clock.now = 61
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", line.format(7))
    records = _records(caplog)
    assert len(records) == 3, records
    assert "other:9092" in records[1]
    assert records[2].endswith("(2 more since it was last logged)")
    assert all(record.levelno == logging.ERROR for record in caplog.records if record.name == "test.librdkafka")


def test_a_client_made_by_kafkasync_writes_nothing_raw_to_stderr():
    """The point of it all: librdkafka's ``%3|…|FAIL|`` lines no longer reach stderr."""
    script = textwrap.dedent(f"""
        import logging
        import logging.handlers
        import time
        from confluent_kafka import Consumer
        from kafkasync_source.config.client_log import with_python_logging
        logging.basicConfig(level=logging.WARNING, format="LOGGED %(name)s %(message)s")
        written = logging.handlers.BufferingHandler(capacity=1000)
        logging.getLogger("kafkasync_source.librdkafka").addHandler(written)
        consumer = Consumer(with_python_logging({{"bootstrap.servers": "127.0.0.1:{_closed_port()}",
                                                 "group.id": "g", "reconnect.backoff.ms": 10}}))
        # Until the first failure is written, however long a busy machine takes, then a second
        # of librdkafka's retries (every 10 ms) for it to hold back.
        deadline = time.monotonic() + {PATIENCE_S}
        while not written.buffer and time.monotonic() < deadline:
            consumer.poll(0.1)
        for _ in range(10):
            consumer.poll(0.1)
        consumer.close()
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE_S + 60)
    assert result.returncode == 0, result.stderr
    assert "%3|" not in result.stderr, result.stderr
    logged = [line for line in result.stderr.splitlines() if "Connection refused" in line]
    assert len(logged) == 1 and logged[0].startswith("LOGGED kafkasync_source.librdkafka librdkafka FAIL"), logged


def test_with_python_logging_keeps_the_settings_and_adds_the_logger():
    config = with_python_logging({"bootstrap.servers": "h:1"})
    assert config["bootstrap.servers"] == "h:1" and hasattr(config["logger"], "log")
