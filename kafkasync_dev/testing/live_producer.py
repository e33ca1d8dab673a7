"""A producer that keeps writing while a test stops or restarts a broker under it."""

from __future__ import annotations

import threading
import time
from typing import Callable, Mapping, Sequence

from confluent_kafka import Producer

from kafkasync_dev.testing.patience import PATIENCE_S


class LiveProducer:
    """Writes one record every 5 ms, alternating over ``partitions``, stamped with the current
    time (``value(now_ms)`` is its value), and keeps what the broker acknowledged — through a
    broker restart: a record is retried for two minutes (``message.timeout.ms``), so only
    acknowledged records are owed to a reader. ``config`` adds producer settings (e.g.
    ``enable.idempotence``, which keeps each partition's records in the order sent through
    retries).

    ``acknowledged`` grows while it runs; ``stop()`` flushes and returns every acknowledged
    ``(partition, offset)``. Stopping twice is harmless."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: Sequence[int] = (0, 1),
                 value: Callable[[int], bytes] = lambda now_ms: b"v", config: Mapping[str, object] = {}) -> None:
        self.acknowledged: list[tuple[int, int]] = []
        self._partitions = list(partitions)
        self._value = value
        self._config = dict(config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic), daemon=True)
        self._thread.start()

    def _run(self, bootstrap: str, topic: str) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 120_000,
                             "log_level": 0, **self._config})

        def delivered(err, msg) -> None:
            if err is None:
                self.acknowledged.append((msg.partition(), msg.offset()))
        sent = 0
        while not self._stop.is_set():
            now_ms = int(time.time() * 1000)
            producer.produce(topic, value=self._value(now_ms), partition=self._partitions[sent % len(self._partitions)],
                             timestamp=now_ms, on_delivery=delivered)
            producer.poll(0)
            sent += 1
            time.sleep(0.005)
        producer.flush(150)

    def wait_for_more(self, count: int, timeout_s: float = PATIENCE_S) -> None:
        """Until ``count`` more records than now are acknowledged (records written after a broker
        restart, say): a count, where sleeping gave a busy machine's producer time for few."""
        wanted = len(self.acknowledged) + count
        deadline = time.monotonic() + timeout_s
        while len(self.acknowledged) < wanted:
            assert time.monotonic() < deadline, f"{len(self.acknowledged)} of {wanted} records acknowledged"
            time.sleep(0.05)

    def stop(self) -> list[tuple[int, int]]:
        self._stop.set()
        self._thread.join(180)
        return list(self.acknowledged)
