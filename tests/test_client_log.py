"""librdkafka's log through Python logging, once per broker and cause (client_log.py), checked
on what a real librdkafka client writes: a consumer pointed at two ports nobody listens on."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap

from confluent_kafka import Consumer

from kafkasync_source.client_log import LibrdkafkaLog, with_python_logging


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


def test_a_refused_broker_is_logged_once_per_broker_not_once_per_attempt(caplog):
    ports = (_closed_port(), _closed_port())
    log = LibrdkafkaLog(logging.getLogger("test.librdkafka"))
    consumer = Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{port}" for port in ports),
                         "group.id": "client-log-test", "logger": log,
                         "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50})
    try:
        with caplog.at_level(logging.DEBUG, logger="test.librdkafka"):
            for _ in range(15):  # librdkafka reconnects every 10-50 ms: dozens of failures
                consumer.poll(0.1)
    finally:
        consumer.close()
    lines = [line for line in _records(caplog) if "Connection refused" in line]
    assert sorted(port for port in ports for line in lines if f"127.0.0.1:{port}/bootstrap:" in line) == sorted(ports)
    assert len(lines) == 2, lines
    assert all(line.startswith("librdkafka FAIL [rdkafka#consumer-") for line in lines), lines


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
        from confluent_kafka import Consumer
        from kafkasync_source.client_log import with_python_logging
        logging.basicConfig(level=logging.WARNING, format="LOGGED %(name)s %(message)s")
        consumer = Consumer(with_python_logging({{"bootstrap.servers": "127.0.0.1:{_closed_port()}",
                                                 "group.id": "g", "reconnect.backoff.ms": 10}}))
        for _ in range(10):
            consumer.poll(0.1)
        consumer.close()
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "%3|" not in result.stderr, result.stderr
    logged = [line for line in result.stderr.splitlines() if "Connection refused" in line]
    assert len(logged) == 1 and logged[0].startswith("LOGGED kafkasync_source.librdkafka librdkafka FAIL"), logged


def test_with_python_logging_keeps_the_settings_and_adds_the_logger():
    config = with_python_logging({"bootstrap.servers": "h:1"})
    assert config["bootstrap.servers"] == "h:1" and hasattr(config["logger"], "log")
