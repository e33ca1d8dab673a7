"""Range-reader consumers that outlive a Spark task.

A new consumer costs a connection, a metadata request and a first fetch (about 35 ms on the
embedded cluster) before its first record. Spark reuses Python workers
(``spark.python.worker.reuse``, default true), so a module-level pool lets the task that reads
the next range of a partition continue with a consumer that is already positioned there, with
records prefetched: what Spark's own ``KafkaDataConsumer`` cache does for format("kafka").

Pooled consumers are keyed by (client configuration, consumer scope, topic, partition). The
scope is one value per query run or batch read (``KafkaRanges.consumer_scope``): a consumer
kept from an earlier query stays bound to what it read, and when a topic had been deleted and
recreated under the same name, such a consumer answered a new query's first range with a stale
"offset out of range" for records that were all there (measured on Kafka 4.3: 3 of 5 tries).
``format("kafka")`` keys its consumer cache by the query's group id for the same reason. The
configuration may hold secrets: the key is never logged or shown. The pool is bounded (least recently used
consumers are closed first), consumers idle longer than :data:`IDLE_TIMEOUT_S` are closed the
next time the pool is used, and all are closed at interpreter exit.

A pooled consumer is **paused** while it waits in the pool and resumed when a task takes it
(:func:`set_fetching`, which the range reader calls: the pool itself only keeps and closes).
Unpaused, librdkafka fetches for it all the time: a broker answers its open fetch as soon as
a record arrives, so on a live stream each of the up to 16 consumers in each Python worker
(every worker ends up with a consumer of every partition, since Spark gives a batch's tasks to
any worker) cost the broker and the worker a fetch round trip for nearly every produce request,
between tasks as much as in them. Measured on a live stream of 2,000 records/s over 8
partitions (``benchmarks/live_rate.py``): the broker's request threads used twice the CPU they
used for ``format("kafka")``, whose Java consumers fetch only inside a task's ``poll``. Resumed,
a consumer fetches from the offset after the last record it delivered (librdkafka drops what it
had fetched meanwhile), which is ``position`` with the ``stash`` already consumed: the task then
waits one fetch round trip for records a prefetch would have queued, and a range that starts
past ``position`` (the partition's previous range was read in another worker) is assigned afresh
rather than reached through prefetched records.

What a pause or a closed consumer drops, the brokers sent for nothing, so what a range's
reader holds past the range's end is taken before the pause and kept for the next range of the
partition, in any worker of the host (range_tails.py), and each consumer's prefetch is set at
its creation for the range it is created for (``RangeReader``'s ``prefetch_settings``;
librdkafka reads ``queued.max.messages.kbytes`` and ``max.partition.fetch.bytes`` only then,
``rd_kafka_toppar_fetch_decide`` in rdkafka_fetcher.c).
A pooled consumer sized for a range far larger or far smaller than the next one is replaced
rather than reused (:func:`prefetch_fits`). The pool also remembers, per topic, the bytes per
record its ranges held (:meth:`ConsumerPool.learn`), from which the next range's need is estimated.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

from confluent_kafka import Consumer

CAPACITY = 16
IDLE_TIMEOUT_S = 60.0
OVERSIZED, UNDERSIZED = 2, 4
"""A pooled consumer whose prefetch is more than OVERSIZED times what a range wants would make
the brokers send that much more past the range's end; one UNDERSIZED times smaller would read
the range in needlessly many fetches. Either is closed and a consumer sized for the range created."""


@dataclass(eq=False)
class PooledConsumer:
    """A consumer assigned to one partition, and where a read continuing with it starts.

    ``position`` is the offset the next range must start at to reuse the consumer as it is:
    every record below it has been delivered, and records at or past it that were already
    consumed wait in ``stash`` (with any events that came after them), in order."""

    consumer: Consumer
    position: Optional[int] = None
    stash: list = field(default_factory=list)
    last_used: float = 0.0
    prefetch_bytes: int = 0
    """The prefetch it was created with (0: the user's settings fix it, any range fits)."""


def prefetch_fits(have: int, want: int) -> bool:
    """Whether a consumer created with a prefetch of ``have`` bytes may read a range that wants ``want``."""
    return have == want or (have > 0 and want > 0 and want / UNDERSIZED <= have <= want * OVERSIZED)


class ConsumerPool:
    """A bounded, idle-evicting pool. A consumer is taken out while in use, so never shared."""

    def __init__(self, capacity: int = CAPACITY, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._idle: OrderedDict[Hashable, PooledConsumer] = OrderedDict()
        self._lock = threading.Lock()
        self.created = 0
        self.reused = 0
        self.repositioned = 0
        """Reused consumers the range reader had to assign afresh (see range_reader._skip_to)."""
        self.resized = 0
        """Pooled consumers replaced because their prefetch did not fit a range (prefetch_fits)."""
        self._record_bytes: dict[str, float] = {}

    def acquire(self, key: Hashable, create: Callable[[], Consumer], prefetch_bytes: int = 0) -> PooledConsumer:
        """The pooled consumer for ``key`` (taken out of the pool) if its prefetch fits
        ``prefetch_bytes``, or a new one that ``create`` made with that prefetch."""
        with self._lock:
            self._close_idle()
            pooled = self._idle.pop(key, None)
        if pooled is not None and prefetch_fits(pooled.prefetch_bytes, prefetch_bytes):
            self.reused += 1
            return pooled
        if pooled is not None:
            self.resized += 1
            pooled.consumer.close()
        self.created += 1
        return PooledConsumer(create(), prefetch_bytes=prefetch_bytes)

    def learn(self, topic: str, payload_bytes: int, records: int) -> None:
        """What a range of ``topic`` held: its records' key and value bytes, and their number."""
        if records:
            self._record_bytes[topic] = payload_bytes / records

    def record_bytes(self, topic: str) -> Optional[float]:
        """Bytes per record the last range of ``topic`` read in this worker held, if any."""
        return self._record_bytes.get(topic)

    def release(self, key: Hashable, pooled: PooledConsumer) -> None:
        """Return a consumer whose ``position`` and ``stash`` are exact, for the next range."""
        pooled.last_used = self._clock()
        with self._lock:
            replaced = self._idle.pop(key, None)
            self._idle[key] = pooled
            evicted = [self._idle.popitem(last=False)[1] for _ in range(len(self._idle) - self._capacity)]
        for stale in ([replaced] if replaced is not None else []) + evicted:
            stale.consumer.close()

    def __len__(self) -> int:
        return len(self._idle)

    def close_all(self) -> None:
        with self._lock:
            pooled, self._idle = list(self._idle.values()), OrderedDict()
        for entry in pooled:
            entry.consumer.close()

    def _close_idle(self) -> None:
        now = self._clock()
        for key in [k for k, p in self._idle.items() if now - p.last_used > self._idle_timeout_s]:
            self._idle.pop(key).consumer.close()


def set_fetching(consumer: Consumer, fetching: bool) -> None:
    """Resume or pause the fetching of a consumer's assigned partitions: the range reader pauses a
    consumer as it returns it to the pool and resumes it as it takes it (see the module's docstring).
    librdkafka keeps a pause across assignments, so a consumer taken from the pool is always resumed.

    A resume alone does not wake librdkafka's fetcher: it fetched again only at its next idle
    wake-up, up to a second later (700 ms for a consumer paused 300 ms, every time, on Kafka
    4.3.1 with librdkafka 2.16). A seek to the offset it would fetch anyway (its ``position``:
    after the last record it delivered) wakes it: 1-2 ms to the first record."""
    assigned = consumer.assignment()
    if not assigned:
        return
    if not fetching:
        consumer.pause(assigned)
        return
    positions = consumer.position(assigned)
    consumer.resume(assigned)
    for partition in positions:
        if partition.offset >= 0:  # a logical offset: nothing delivered yet, the assignment's own start stands
            consumer.seek(partition)


POOL = ConsumerPool()
atexit.register(POOL.close_all)
