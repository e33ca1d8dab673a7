"""A partition of heartbeats beside timed ones: records without an event time, written from a
thread for as long as a test's query runs (``eventTime.onInvalid=skip`` must let such a
partition idle, as Kafka Streams lets a partition of records it drops)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from kafkasync_dev.testing.mock_cluster import Record

HEARTBEAT = b'{"heartbeat": true}'
"""A heartbeat's value: JSON without a time."""


class Heartbeats:
    """``produce([heartbeat()])`` every ``interval_s`` from a thread, from entering the block to
    leaving it. ``produce`` checks each delivery (``MockKafkaCluster.produce`` and
    ``KafkaBroker.produce`` do); a failure ends the thread and is kept in ``failures``, for the
    test to assert on: it must not pass on heartbeats that were never written."""

    def __init__(self, produce: Callable[[list[Record]], Any], heartbeat: Callable[[], Record],
                 interval_s: float = 0.1) -> None:
        self.count = 0
        self.failures: list[BaseException] = []
        self._produce, self._heartbeat, self._interval_s = produce, heartbeat, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeats", daemon=True)

    def __enter__(self) -> "Heartbeats":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def wait_for(self, count: int, timeout_s: float = 60.0) -> None:
        """Until ``count`` heartbeats were delivered (a count, not the time they would take on
        an idle machine); fails after ``timeout_s`` or at a failed delivery."""
        deadline = time.monotonic() + timeout_s
        while self.count < count:
            assert not self.failures, f"a heartbeat was not delivered: {self.failures[0]}"
            assert time.monotonic() < deadline, f"{self.count} of {count} heartbeats after {timeout_s:.0f} s"
            time.sleep(self._interval_s)

    def _beat(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._produce([self._heartbeat()])
            except Exception as err:  # noqa: BLE001 - kept for the test to assert on
                self.failures.append(err)
                return
            self.count += 1
