"""librdkafka's log through Python ``logging``, once per broker and cause.

Left alone, librdkafka prints its log to stderr from its own threads: a query pointed at a
broker that is down printed dozens of ``%3|…|FAIL|rdkafka#consumer-1| … Connection refused``
lines before kafkasync's own error said the same in one sentence. confluent-kafka takes a
``logger`` setting instead (an object with ``log(level, msg, *args)``; it calls
``log(level, "%s [%s] %s", facility, client name, message)`` with librdkafka's syslog level
mapped to ``logging``'s) and hands it each line when the application polls the client.

:data:`LIBRDKAFKA_LOG` writes each line to the ``kafkasync_source.librdkafka`` logger, once
per broker and cause: a broker refusing connections every second is one line, and again
after :data:`REPEAT_AFTER_S` with the count of lines held back, so a long outage is still
seen in a long-running query's log. Messages come from librdkafka, which does not print
configuration values; they pass through unchanged.

What it remembers is bounded by the causes seen within one :data:`REPEAT_AFTER_S`, not by the
query's age: a cause not written for that long is dropped (its next line would be written
anyway), and one with lines held back is written then, with their count, so no count is lost.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping

from kafkasync_source.config.java_client_settings import with_shipped_stores_read

LOGGER = logging.getLogger("kafkasync_source.librdkafka")

REPEAT_AFTER_S = 300.0
"""A line held back this long is written again, with how many times it came meanwhile."""

# "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to ... failed: ...", and
# "sasl_ssl://127.0.0.1:9093/1: SSL handshake failed: ..." for a broker known by its id.
_THREAD_AND_BROKER = re.compile(r"^\[thrd:[^\]]*\]: (?:(?P<broker>(?:[a-z_]+://)?\S+?:\d+/[\w-]+): )?")
# librdkafka's own notes on a broker failure, which come and go from one repeat of the same
# failure to the next, so they are no part of its cause. librdkafka's src/rdkafka_broker.c,
# rd_kafka_broker_set_error() (called by rd_kafka_broker_fail()), appends
# " (after %dms in state %s)" to each FAIL line it logs; it holds back repeats of a broker's
# failure for 30 s, and the next one it logs says ", %d identical error(s) suppressed" inside
# the same parentheses: a broker's first failure has no count, its repeat has one. librdkafka
# compares failures on the message before this suffix (and leaves the suffix off a message that
# fills its buffer): the suffix is dropped whole, state included.
_FAIL_SUFFIX = re.compile(r" \(after \d+ms in state [A-Z_]+(?:, \d+ identical error\(s\) suppressed)?\)$")
# rd_kafka_broker_timeout_scan() (same file) adds " (average rtt %.3fms)" to "%i request(s)
# timed out: disconnect" only when a round-trip time has been measured.
_AVERAGE_RTT = re.compile(r" \(average rtt [\d.]+ms\)")
# What else changes between repeats in place: timings and counts ("1 in-flight, 0 retry-queued",
# "timeout #3", "%d retries").
_NUMBERS = re.compile(r"\d+")


def _broker_and_cause(message: str) -> tuple[str, str]:
    """(the broker a line is about, or "", the line without what varies between repeats)."""
    match = _THREAD_AND_BROKER.match(message)
    broker = (match.group("broker") or "") if match else ""
    cause = message[match.end():] if match else message
    cause = _AVERAGE_RTT.sub("", _FAIL_SUFFIX.sub("", cause))
    return broker, _NUMBERS.sub("#", cause)


class _Seen:
    """A cause written at ``written``, and the lines of it held back since (the last one's
    level, client and message, written with their count when the cause expires)."""

    __slots__ = ("written", "held_back", "level", "client", "message")

    def __init__(self, written: float) -> None:
        self.written = written
        self.held_back = 0
        self.level, self.client, self.message = logging.NOTSET, "", ""


class LibrdkafkaLog:
    """confluent-kafka's ``logger``: forwards each distinct (facility, broker, cause) once
    per :data:`REPEAT_AFTER_S`. Shared by every client of the process (the driver's and an
    executor worker's several consumers report the same broker failing), hence the lock:
    clients are polled from more than one thread."""

    def __init__(self, logger: logging.Logger = LOGGER, repeat_after_s: float = REPEAT_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._repeat_after_s = repeat_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, str, str], _Seen] = OrderedDict()
        """Per (facility, broker, cause) written within the last ``repeat_after_s``, in the
        order they were written: the oldest expire first, each in O(1)."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        facility, client, message = (str(arg) for arg in args) if len(args) == 3 else ("", "", msg % args)
        broker, cause = _broker_and_cause(message)
        key = (facility, broker, cause)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.written < self._repeat_after_s:
                seen.held_back += 1
                seen.level, seen.client, seen.message = level, client, message
                return
            held_back = seen.held_back if seen is not None else 0
            self._seen.pop(key, None)
            expired = self._expire(now)
            self._seen[key] = _Seen(now)
        for (old_facility, _, _), old in expired:
            self._write(old.level, old_facility, old.client, old.message,
                        f" ({old.held_back} more since it was last logged, this the last of them)")
        self._write(level, facility, client, message,
                    f" ({held_back} more since it was last logged)" if held_back else "")

    def _expire(self, now: float) -> list[tuple[tuple[str, str, str], _Seen]]:
        """Drop the causes written ``repeat_after_s`` ago or more; those with lines held back
        are returned, to be written with their count."""
        held: list[tuple[tuple[str, str, str], _Seen]] = []
        while self._seen:
            oldest = next(iter(self._seen.items()))
            if now - oldest[1].written < self._repeat_after_s:
                break
            self._seen.popitem(last=False)
            if oldest[1].held_back:
                held.append(oldest)
        return held

    def _write(self, level: int, facility: str, client: str, message: str, suffix: str) -> None:
        self._logger.log(level, "librdkafka %s [%s] %s%s", facility, client, message, suffix)


LIBRDKAFKA_LOG = LibrdkafkaLog()


def with_python_logging(config: Mapping[str, Any]) -> dict[str, Any]:
    """A client configuration whose librdkafka log goes to :data:`LIBRDKAFKA_LOG`, with the
    truststore and keystore a query names by a relative path (shipped with --files) read in this
    process, as the Java client reads them where it runs (java_client_settings): every kafkasync
    client, on the driver and the executors, is created through here. The client hands its log
    over when it is polled: an ``AdminClient`` must be polled for it."""
    return {**with_shipped_stores_read(config), "logger": LIBRDKAFKA_LOG}
