"""What a librdkafka client was sent, from its own statistics: bytes a test can count exactly.

Sampling a broker's sockets (``ss``) every few milliseconds while a client reads, then sleeping
for what it fetched afterwards, measures how fast the machine ran as much as what was fetched:
on a loaded machine a sample missed bytes, or the sleep ended before a fetch did (issue 64).
librdkafka counts every byte it receives from the brokers (``rx_bytes``), and says per broker how
many requests wait to be sent (``outbuf_cnt``) or answered (``waitresp_cnt``)
(``STATISTICS.md``). A snapshot taken after the client stopped asking, with no request waiting
anywhere, holds every byte of every answer to what it asked: counted after the fact, however
long the answers took.

    statistics = ClientStatistics()
    consumer = Consumer({**settings, **statistics.settings()})
    ...  # the reads to count; then, with nothing left to ask (partitions paused):
    received = statistics.settled(consumer.poll)["rx_bytes"]
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable, Optional


def librdkafka_clock_us() -> int:
    """Now on librdkafka's clock, which stamps each snapshot (``ts``): ``rd_clock()``
    (rdtime.h) is ``CLOCK_MONOTONIC`` in microseconds, the wall clock on macOS."""
    return int((time.time() if sys.platform == "darwin" else time.monotonic()) * 1_000_000)


class ClientStatistics:
    """The latest statistics snapshot of one client, emitted every ``interval_ms``
    (``statistics.interval.ms``) and delivered by the client's ``poll``/``consume`` calls."""

    def __init__(self, interval_ms: int = 20) -> None:
        self._interval_ms = interval_ms
        self.latest: Optional[dict[str, Any]] = None

    def settings(self) -> dict[str, Any]:
        """The client settings that make it report here."""
        return {"statistics.interval.ms": self._interval_ms, "stats_cb": self._keep}

    def _keep(self, text: str) -> None:
        self.latest = json.loads(text)

    def settled(self, serve: Callable[[float], Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """The first snapshot taken from now on in which no broker connection has a request
        waiting to be sent or answered: every answer to what the client asked before this call
        is in it (``rx_bytes`` counts a response before the request leaves ``waitresp``).

        ``serve(seconds)`` runs the client's callbacks (its ``poll``). The client must have
        stopped asking — a consumer's partitions paused, or a long-poll fetch would always
        wait — or this fails after ``timeout_s``, a deadline no loaded machine reaches."""
        since = librdkafka_clock_us()
        deadline = time.monotonic() + timeout_s
        while True:
            latest = self.latest
            if latest is not None and latest["ts"] >= since and not _waiting(latest):
                return latest
            assert time.monotonic() < deadline, (
                f"requests still waiting after {timeout_s:.0f} s: {_waiting(latest) if latest else 'no statistics'}")
            serve(self._interval_ms / 1000)


def _waiting(snapshot: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per broker with any, (requests waiting to be sent, requests waiting for an answer)."""
    return {name: (broker["outbuf_cnt"], broker["waitresp_cnt"]) for name, broker in snapshot["brokers"].items()
            if broker["outbuf_cnt"] or broker["waitresp_cnt"]}
