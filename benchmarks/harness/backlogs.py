"""The data measurements read: backlogs written before a read, and live streams written during one.

* On the embedded cluster (librdkafka's mock, :func:`produce_uniform`): it keeps at most 5 MiB
  and about 100,000 messages a partition and silently drops the oldest beyond that, so every
  topic is checked after producing (low watermark 0, high watermark what was produced): a
  benchmark over silently truncated data would be worthless.
* On a real broker: fixed-size values (:func:`produce_backlog`), the same in transactions
  (:func:`produce_transactional_backlog`), JSON orders with their time in ``$.ts``
  (:func:`produce_orders`); every delivery report checked (``KafkaBroker.produce``), records
  stamped in the last hours (a Kafka 4 broker refuses future timestamps; the benchmarks' topics
  keep old records, ``retention.ms=-1``).
* Live (:func:`produce_paced`): a rate held for a while, in a thread or a process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from kafkasync_dev.testing import MockKafkaCluster, Record

BASE_TS = 1_704_096_000_000  # 2024-01-01 08:00:00 UTC: the embedded cluster keeps any timestamp
PARTITIONS, RECORDS_PER_PARTITION, VALUE_BYTES, KEY_BYTES = 8, 50_000, 1_000, 8
"""The real broker's backlog: 8 x 50,000 records of 1,000 B (400 MB of values), 8-byte keys."""


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    records_per_partition: int

    @property
    def records(self) -> int:
        return self.partitions * self.records_per_partition


def produce_uniform(cluster: MockKafkaCluster, name: str, partitions: int, per_partition: int,
                    *, value_bytes: int = 100, step_ms: int = 10) -> Topic:
    """``per_partition`` records on each partition of the embedded cluster (or of a broker with the
    same ``create_topic``/``produce``): 8-byte key, ``value_bytes`` value, and in-order timestamps
    ``BASE_TS + i * step_ms + p`` (partitions interleave in event time)."""
    cluster.create_topic(name, partitions)
    value = b"v" * value_bytes
    cluster.produce(name, (Record(p, BASE_TS + i * step_ms + p, b"k%07d" % i, value)
                           for i in range(per_partition) for p in range(partitions)))
    topic = Topic(name, partitions, per_partition)
    if isinstance(cluster, MockKafkaCluster):
        check_complete(cluster, topic)
    return topic


def check_complete(cluster: MockKafkaCluster, topic: Topic) -> None:
    """Fail unless every partition holds exactly what was produced, from offset 0."""
    marks = cluster.end_offsets(topic.name)
    bad = {p: (low, high) for p, (low, high) in marks.items() if low != 0 or high != topic.records_per_partition}
    if len(marks) != topic.partitions or bad:
        raise RuntimeError(
            f"topic {topic.name}: the embedded cluster does not hold all produced records "
            f"(partition: (low, high) watermarks {bad}, expected (0, {topic.records_per_partition})). It keeps "
            "at most 5 MiB / ~100,000 messages per partition and drops the oldest beyond that: use fewer or "
            "smaller records.")


def write_topic(bootstrap: str, topic: str, records: Iterable[Record], partitions: int = PARTITIONS,
                config: Optional[dict[str, Any]] = None) -> None:
    """A new topic on a real broker and ``records`` in it, every delivery report checked."""
    from kafkasync_dev.testing.broker import KafkaBroker

    with KafkaBroker(bootstrap, config) as broker:
        broker.create_topic(topic, partitions)
        broker.produce(topic, records)


def produce_backlog(bootstrap: str, topic: str, records_per_partition: int = RECORDS_PER_PARTITION,
                    value_bytes: int = VALUE_BYTES, batch_bytes: Optional[int] = None,
                    partitions: int = PARTITIONS) -> int:
    """The backlog of ``partitions`` x ``records_per_partition`` records of ``value_bytes``, 10 ms
    apart in time and partitions interleaved, ending a minute ago. Returns the payload bytes (keys
    and values). ``batch_bytes``: the producer's ``batch.size``; by default librdkafka's
    (1,000,000), whose batches of a backlog written at full speed reach hundreds of KB."""
    base = int(time.time() * 1000) - partitions * records_per_partition * 10 - 60_000
    value = b"v" * value_bytes
    write_topic(bootstrap, topic, (Record(p, base + (i * partitions + p) * 10, b"k%07d" % i, value)
                                   for i in range(records_per_partition) for p in range(partitions)),
                partitions, None if batch_bytes is None else {"batch.size": batch_bytes})
    return partitions * records_per_partition * (value_bytes + KEY_BYTES)


def produce_transactional_backlog(bootstrap: str, topic: str, records_per_partition: int,
                                  per_transaction: int = 500, abort_every: int = 10, *, live: bool = False) -> int:
    """The backlog's shape written in transactions (one partition each); every
    ``abort_every``-th transaction is aborted. Returns the committed records.

    Event times are a backfill's (``live=False``: spread over the minutes before the run, so
    every transaction marker, stamped with the broker's clock, is newer than every record) or
    a live stream's (``live=True``: each record stamped with the producer's clock as it is
    written, so the markers lie among the records in time order)."""
    import uuid

    from confluent_kafka import Producer

    from kafkasync_dev.testing import produce_confirmed

    base = int(time.time() * 1000) - PARTITIONS * records_per_partition * 10 - 60_000
    value = b"v" * VALUE_BYTES
    write_topic(bootstrap, topic, ())
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex}",
                         "enable.idempotence": True, "linger.ms": 20})
    producer.init_transactions(30)
    committed = number = 0
    for first in range(0, records_per_partition, per_transaction):
        for p in range(PARTITIONS):
            producer.begin_transaction()
            chunk = range(first, min(first + per_transaction, records_per_partition))
            now = int(time.time() * 1000)
            produce_confirmed(producer, topic, [
                Record(p, now if live else base + (i * PARTITIONS + p) * 10, b"k%07d" % i, value)
                for i in chunk], 60)
            number += 1
            if number % abort_every == 0:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
                committed += len(chunk)
    return committed


def order(partition: int, i: int, event_time: int) -> bytes:
    """A JSON order of about 200 bytes with its event time in ``ts``."""
    return json.dumps({
        "id": f"order-{partition}-{i:08d}", "ts": event_time, "customer": f"c{(i * 7919) % 1_000_000:07d}",
        "amount": round((i % 10_000) / 7, 2), "currency": "EUR", "channel": "web", "status": "confirmed",
        "country": "DE",
        "items": [{"sku": f"s{i % 97}", "qty": 1 + i % 3}, {"sku": f"s{i % 89}", "qty": 1}],
    }, separators=(",", ":")).encode()


def produce_orders(bootstrap: str, topic: str, records_per_partition: int) -> int:
    """8 partitions of JSON orders (:func:`order`), their event times over 6 hours in order within
    each partition, their Kafka timestamps a copy job's (1 ms a record); the payload bytes."""
    now = int(time.time() * 1000)
    event_start = now - 6 * 3_600_000
    step = 6 * 3_600_000 // records_per_partition
    copy_started = now - 60_000 - PARTITIONS * records_per_partition
    payload = [0]

    def records() -> Iterable[Record]:
        for i in range(records_per_partition):
            for partition in range(PARTITIONS):
                value = order(partition, i, event_start + i * step + partition)
                payload[0] += KEY_BYTES + len(value)
                yield Record(partition, copy_started + i * PARTITIONS + partition, b"k%07d" % i, value)

    write_topic(bootstrap, topic, records())
    return payload[0]


# -- live: a rate held for a while --------------------------------------------------------------

def produce_paced(bootstrap: str, topic: str, rate: int, seconds: float, *, partitions: int = PARTITIONS,
                  value: Callable[[int], bytes] = lambda now_ms: b"v" * 100, config: Optional[dict] = None,
                  flush_s: float = 60) -> dict[str, Any]:
    """``rate`` records a second for ``seconds``, round robin over ``partitions``, paced every
    1/100 s (CreateTime is stamped at ``produce()``; ``value(ms)`` makes a value from the clock
    at the last pacing step). When it began (epoch ms), how many it sent and how long it took,
    how many deliveries failed and how many were left undelivered after ``flush_s``."""
    from confluent_kafka import Producer

    failed = [0]

    def delivered(err: Any, _message: Any) -> None:
        if err is not None:
            failed[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(config or {})})
    total, chunk = int(rate * seconds), max(1, rate // 100)
    began, began_ms, now_ms = time.monotonic(), time.time() * 1000, 0
    for i in range(total):
        if i % chunk == 0:
            lag = began + i / rate - time.monotonic()
            if lag > 0:
                time.sleep(lag)
            producer.poll(0)
            now_ms = max(now_ms, int(time.time() * 1000))
        while True:
            try:
                producer.produce(topic, value=value(now_ms), partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: a starved machine's producer waits
                producer.poll(0.01)
    left = producer.flush(flush_s)
    return {"began_ms": began_ms, "records": total, "seconds": time.monotonic() - began, "failed": failed[0],
            "undelivered": left}


JSON_VALUE_BYTES = 200
_PAD = "x" * (JSON_VALUE_BYTES - len('{"ts":1700000000000,"pad":""}'))
_VALUE = b"v" * 100


def _paced(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`produce_paced` as :class:`PacedProducer` asks for it: 100-byte values, or JSON ones
    (``{"ts": <epoch ms>, "pad": "..."}`` of :data:`JSON_VALUE_BYTES`, ``ts`` non-decreasing)
    written idempotently (a retried batch must not land behind later ones: ``eventTime.order``)."""
    json_values = spec.pop("json_values")
    return produce_paced(**spec, value=(lambda now_ms: f'{{"ts":{now_ms},"pad":"{_PAD}"}}'.encode())
                         if json_values else (lambda now_ms: _VALUE),
                         config={"enable.idempotence": True, "acks": "all"} if json_values else {},
                         flush_s=120 if json_values else 60)


class PacedProducer:
    """:func:`produce_paced` in a thread of this process, or (``process=True``) in a child process
    of its own, so that no measured process pays for producing; ``result()`` waits for its end and
    fails if records were left undelivered, unless ``lost_ok`` (a run that counts losses itself)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seconds: float, *, process: bool = False,
                 partitions: int = PARTITIONS, json_values: bool = False) -> None:
        spec = {"bootstrap": bootstrap, "topic": topic, "rate": rate, "seconds": seconds, "partitions": partitions,
                "json_values": json_values}
        self._outcome: dict[str, Any] = {}
        self._process: Optional[subprocess.Popen] = None
        self._thread: Optional[threading.Thread] = None
        if process:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.harness.backlogs", json.dumps(spec)], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        else:
            self._thread = threading.Thread(target=self._run, args=(spec,), daemon=True)
            self._thread.start()

    def _run(self, spec: dict[str, Any]) -> None:
        try:
            self._outcome["result"] = _paced(spec)
        except BaseException as err:  # raised in result()
            self._outcome["error"] = err

    def result(self, timeout_s: float = 300, lost_ok: bool = False) -> dict[str, Any]:
        if self._thread is not None:
            self._thread.join()
            if "error" in self._outcome:
                raise self._outcome["error"]
            figures: dict[str, Any] = self._outcome["result"]
        else:
            assert self._process is not None
            out, err = self._process.communicate(timeout=timeout_s)
            found = [line for line in out.splitlines() if line.startswith("PRODUCED ")]
            if not found:
                raise RuntimeError(f"producer failed (exit {self._process.returncode}): {err[-2000:]}")
            figures = json.loads(found[-1][len("PRODUCED "):])
        if figures["undelivered"] and not lost_ok:
            raise RuntimeError(f"records left undelivered: {figures}")
        return figures

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()


if __name__ == "__main__":  # PacedProducer's child process
    print("PRODUCED " + json.dumps(_paced(json.loads(sys.argv[1]))), flush=True)
