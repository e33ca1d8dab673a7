"""What reading a backlog once costs a real broker: bytes sent per payload byte, and seconds.

Runs on a real broker (``testing.local_broker.real_broker``: ``KAFKASYNC_BOOTSTRAP``, or Apache
Kafka from Maven Central started for the run; one broker: its port is the one sampled). On it,
a fresh topic of 8 x 50,000 records of 1,000 B (400 MB of values, in-order timestamps near the
present, ``retention.ms=-1``, every delivery report checked) is read once into the ``noop`` sink
with ``trigger(availableNow=True)`` by

* kafkasync, ``planningMode=timeIndex``: the driver reads no record;
* kafkasync, ``planningMode=fetch``: the driver fetches every record's timestamp;
* ``format("kafka")``, when ``KAFKASYNC_SPARK_KAFKA_JARS`` puts its connector on Spark's
  classpath (``run.py`` does that when it starts Spark);
* kafkasync (``timeIndex``) and ``format("kafka")`` again, capped: ``maxOffsetsPerTrigger`` of one
  partition's records, the rate-limited backfill where each range ends mid-log and what a
  consumer prefetched past its end is dropped (issue 53: 3.5 bytes per payload byte before the
  prefetch was sized to the range).

``python -m benchmarks.broker_bytes`` reads backlogs of 1,000 B and of 200 B values.

And a transactional backlog (8 x 10,000 x 1,000 B, in transactions of 500 records of one
partition, one in ten aborted), read under read_committed by kafkasync's default
(``planningMode=auto``, which checks what the index answers against the records a consumer
reads, and plans from fetched timestamps where a transaction marker decides the answer) and by
``planningMode=fetch``.

Bytes the broker sent: ``bytes_sent`` of every TCP connection whose local port is the
broker's (``ss -tin``, Linux tcp_info), sampled every 0.1 s while the query runs, the largest
value seen per connection summed; a connection that closes between two samples loses at most
its last 0.1 s. Payload bytes: keys and values of the records read.

``python -m benchmarks.broker_bytes`` runs it alone (it starts its own Spark session).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from typing import Any, Optional, TypeVar

from kafkasync_dev.testing.spark import has_format_kafka

SHAPES = (("live", True), ("backfill", False))
PARTITIONS, RECORDS_PER_PARTITION, VALUE_BYTES, KEY_BYTES = 8, 50_000, 1_000, 8
_CONNECTION = re.compile(r"^\S+\s+\S+\s+(\S+)\s+(\S+)")  # Recv-Q Send-Q local peer
_BYTES_SENT = re.compile(r"bytes_sent:(\d+)")


_Sampler = TypeVar("_Sampler", bound="PeriodicSampler")


class PeriodicSampler:
    """Samples something when entered, every ``interval_s`` in a thread while a run goes on, and
    once more when left: what a figure read only after the run would miss (a process that
    exited with its query, a connection closed) is seen while it lasts."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self.sampler_cpu_s = 0.0
        """CPU seconds the sampling thread used (to take out of its own process's figure)."""

    def __enter__(self: _Sampler) -> _Sampler:
        self._begin()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _begin(self) -> None:
        self._sample()

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self._interval_s):
            self._sample()
        self.sampler_cpu_s = time.thread_time() - started

    def _sample(self) -> None:
        raise NotImplementedError


class BrokerBytesSampler(PeriodicSampler):
    """Largest ``bytes_sent`` per TCP connection of a local port, sampled in a thread."""

    def __init__(self, port: int, interval_s: float = 0.1) -> None:
        super().__init__(interval_s)
        self._port = port
        self._sent: dict[tuple[str, str], int] = {}

    def _begin(self) -> None:
        self._sample()  # connections open before the run: count only what they send from now
        self._baseline = dict(self._sent)
        self._sent.clear()

    @property
    def bytes_sent(self) -> int:
        return sum(sent - self._baseline.get(key, 0) for key, sent in self._sent.items())

    def _sample(self) -> None:
        output = subprocess.run(
            ["ss", "-tinH", "state", "established", f"( sport = :{self._port} )"],
            capture_output=True, text=True, check=True,
        ).stdout
        connection: Optional[tuple[str, str]] = None
        for line in output.splitlines():
            found = _CONNECTION.match(line)
            if found and not line.startswith((" ", "\t")):
                connection = (found.group(1), found.group(2))
                continue
            sent = _BYTES_SENT.search(line)
            if connection is not None and sent:
                self._sent[connection] = max(self._sent.get(connection, 0), int(sent.group(1)))
                connection = None


def skipped_because(spark: Any) -> Optional[str]:
    if not os.environ.get("KAFKASYNC_BOOTSTRAP"):
        return "no real broker (kafkasync_dev.testing.local_broker.real_broker)"
    if subprocess.run(["ss", "-V"], capture_output=True).returncode != 0:
        return "ss (iproute2) is not installed"
    return None


def _read_once(spark: Any, bootstrap: str, topic: str, source: str, options: dict[str, str],
               progress: Optional[list] = None) -> int:
    """Rows of one ``availableNow`` read into ``noop``; its progress reports into ``progress``."""
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except Exception as err:  # awaitTermination raises the query's exception
        raise RuntimeError(f"{source} {options}: {err}") from err
    if progress is not None:
        progress.extend(query.recentProgress)
    return sum(p.numInputRows for p in query.recentProgress)


def produce_backlog(bootstrap: str, topic: str, records_per_partition: int = RECORDS_PER_PARTITION,
                    value_bytes: int = VALUE_BYTES, batch_bytes: Optional[int] = None) -> int:
    """The backlog, stamped in the last hours (a Kafka 4 broker refuses future timestamps,
    time retention is off). Returns the payload bytes. ``batch_bytes``: the producer's
    ``batch.size``; by default librdkafka's (1,000,000), whose batches of a backlog written at
    full speed reach hundreds of KB."""
    from kafkasync_dev.testing import Record
    from kafkasync_dev.testing.broker import KafkaBroker

    base = int(time.time() * 1000) - PARTITIONS * records_per_partition * 10 - 60_000
    value = b"v" * value_bytes
    with KafkaBroker(bootstrap, None if batch_bytes is None else {"batch.size": batch_bytes}) as broker:
        broker.create_topic(topic, PARTITIONS)
        broker.produce(topic, (Record(p, base + (i * PARTITIONS + p) * 10, b"k%07d" % i, value)
                               for i in range(records_per_partition) for p in range(PARTITIONS)))
    return PARTITIONS * records_per_partition * (value_bytes + KEY_BYTES)


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

    from kafkasync_dev.testing import Record, produce_confirmed
    from kafkasync_dev.testing.broker import KafkaBroker

    base = int(time.time() * 1000) - PARTITIONS * records_per_partition * 10 - 60_000
    value = b"v" * VALUE_BYTES
    with KafkaBroker(bootstrap) as broker:
        broker.create_topic(topic, PARTITIONS)
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


def _measure_reads(spark: Any, bootstrap: str, topic: str, payload: int, records: int,
                   variants: list[tuple[str, str, dict[str, str]]]) -> dict[str, Any]:
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    results: dict[str, Any] = {}
    for label, source, options in variants:
        with BrokerBytesSampler(port) as sampler:
            started = time.perf_counter()
            rows = _read_once(spark, bootstrap, topic, source, options)
            seconds = time.perf_counter() - started
        if rows != records:
            raise RuntimeError(f"{label} read {rows} of {records} records")
        results[label] = {"seconds": seconds, "bytes_sent": sampler.bytes_sent,
                          "bytes_per_payload_byte": sampler.bytes_sent / payload}
    return results


def compare_transactional(spark: Any, records_per_partition: int = 10_000) -> dict[str, Any]:
    """Bytes per payload byte on transactional topics — event times of a live stream and of
    a backfill — for kafkasync's default and its fetch path, each after an unmeasured read."""
    reason = skipped_because(spark)
    if reason:
        return {"skipped": reason}
    bootstrap = os.environ["KAFKASYNC_BOOTSTRAP"]
    committed_reads = {"kafka.isolation.level": "read_committed"}
    results: dict[str, Any] = {}
    for shape, live in SHAPES:
        topic = f"kafkasync-bytes-txn-{shape}-{int(time.time())}"
        committed = produce_transactional_backlog(bootstrap, topic, records_per_partition, live=live,
                                                  per_transaction=max(1, min(500, records_per_partition // 5)))
        payload = committed * (VALUE_BYTES + KEY_BYTES)
        _read_once(spark, bootstrap, topic, "kafkasync", {**committed_reads, "planningMode": "fetch"})
        results[shape] = {"records": committed, "payload_bytes": payload}
        results[shape].update(_measure_reads(spark, bootstrap, topic, payload, committed, [
            ("kafkasync auto", "kafkasync", committed_reads),
            ("kafkasync fetch", "kafkasync", {**committed_reads, "planningMode": "fetch"}),
        ]))
    return results


def compare(spark: Any, records_per_partition: int = RECORDS_PER_PARTITION,
            value_bytes: int = VALUE_BYTES) -> dict[str, Any]:
    """Bytes per payload byte and seconds per variant, or ``{"skipped": reason}``."""
    reason = skipped_because(spark)
    if reason:
        return {"skipped": reason}
    bootstrap = os.environ["KAFKASYNC_BOOTSTRAP"]
    topic = f"kafkasync-bytes-{value_bytes}-{int(time.time())}"
    payload = produce_backlog(bootstrap, topic, records_per_partition, value_bytes)
    capped = {"maxOffsetsPerTrigger": str(records_per_partition)}
    variants = [("kafkasync timeIndex", "kafkasync", {"planningMode": "timeIndex"}),
                ("kafkasync fetch", "kafkasync", {"planningMode": "fetch"}),
                ("kafkasync timeIndex capped", "kafkasync", {"planningMode": "timeIndex", **capped})]
    if has_format_kafka(spark):
        variants += [('format("kafka")', "kafka", {}), ('format("kafka") capped', "kafka", capped)]
    results: dict[str, Any] = {"broker": bootstrap, "payload_bytes": payload, "value_bytes": value_bytes,
                               "records": PARTITIONS * records_per_partition}
    if not has_format_kafka(spark):
        results["format_kafka_skipped"] = "KAFKASYNC_SPARK_KAFKA_JARS is not set"
    # Warm-up, not measured: the JVM's JIT and Spark's Python workers would otherwise weigh
    # on whichever variant runs first.
    _read_once(spark, bootstrap, topic, "kafkasync", {"planningMode": "fetch"})
    results.update(_measure_reads(spark, bootstrap, topic, payload, results["records"], variants))
    for suffix in ("", " capped"):
        if f'format("kafka"){suffix}' in results:
            results[f"timeIndex{suffix.replace(' ', '_')}_speed_vs_format_kafka"] = (
                results[f'format("kafka"){suffix}']["seconds"] / results[f"kafkasync timeIndex{suffix}"]["seconds"])
    return results


def _range_worker(connection: Any, bootstrap: str, topic: str) -> None:
    """One Python worker of :func:`range_reader_bytes`: reads the ranges it is sent, as a
    streaming task does (one consumer scope for the run), and answers rows and CPU seconds."""
    from kafkasync_source.config.options import parse_options
    from kafkasync_source.executor.range_reader import RangeReader
    from kafkasync_source.spark.input_partitions import KafkaRange, KafkaRanges
    from kafkasync_source.spark.schema import kafka_schema

    options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=True)
    reader = RangeReader.from_options(options, kafka_schema(options.include_headers))
    while (ranges := connection.recv()) is not None:
        cpu_started = time.process_time()
        task = KafkaRanges(tuple(KafkaRange(topic, partition, start, end) for partition, start, end in ranges),
                           "range-reader-bytes")
        rows = sum(batch.num_rows for batch in reader.read(task))
        connection.send((rows, time.process_time() - cpu_started))


def range_reader_bytes(bootstrap: str, topic: str, records_per_partition: int, value_bytes: int,
                       cap: int = 0, workers: int = 2) -> dict[str, Any]:
    """What the executors' reads alone cost, without Spark: ``RangeReader`` reading every
    partition of a :func:`produce_backlog` topic in ranges of ``cap / PARTITIONS`` records (all at
    once when ``cap`` is 0), trigger after trigger, as ``local[2]`` reads them: two tasks a
    trigger of half the partitions each, in ``workers`` processes whose consumer pools carry
    over as Python workers' do, each task handed to either (seeded), as Spark hands a task to
    whichever worker came back first. Bytes the broker sent per payload byte, seconds, and the
    workers' CPU seconds per million records (``time.process_time`` in each: their threads,
    librdkafka's among them; not the machine's, which other work on a shared machine would swell)."""
    import multiprocessing
    import random

    per_range = cap // PARTITIONS if cap else records_per_partition
    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for _ in range(workers):
        ours, theirs = context.Pipe()
        process = context.Process(target=_range_worker, args=(theirs, bootstrap, topic), daemon=True)
        process.start()
        pipes.append(ours)
        processes.append(process)
    choose = random.Random(53)
    rows = 0
    cpu = 0.0
    try:
        with BrokerBytesSampler(int(bootstrap.split(",")[0].rsplit(":", 1)[1])) as sampler:
            started = time.perf_counter()
            for start in range(0, records_per_partition, per_range):
                end = min(records_per_partition, start + per_range)
                tasks = [[(p, start, end) for p in range(PARTITIONS) if p % 2 == half] for half in (0, 1)]
                order = [choose.randrange(workers) for _ in tasks]
                # Both tasks at once in two workers; one after the other where one worker has both.
                batches = [list(zip(tasks, order))] if order[0] != order[1] else [[one] for one in zip(tasks, order)]
                for at_once in batches:
                    for task, worker in at_once:
                        pipes[worker].send(task)
                    for _, worker in at_once:
                        task_rows, task_cpu = pipes[worker].recv()
                        rows, cpu = rows + task_rows, cpu + task_cpu
            seconds = time.perf_counter() - started
    finally:
        for pipe, process in zip(pipes, processes):
            pipe.send(None)
            process.join(30)
    if rows != PARTITIONS * records_per_partition:
        raise RuntimeError(f"RangeReader read {rows} of {PARTITIONS * records_per_partition} records")
    return {"bytes_per_payload_byte": sampler.bytes_sent / (rows * (value_bytes + KEY_BYTES)),
            "seconds": seconds, "cpu_s_per_million_records": cpu / rows * 1e6, "workers": workers}


def main(argv: Optional[list[str]] = None) -> None:
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="8 x 500 records a topic: a smoke run")
    parser.add_argument("--no-spark", action="store_true",
                        help="the executors' reads alone (range_reader_bytes), capped and uncapped, 1,000 B and 200 B")
    args = parser.parse_args(argv)
    plain_records, transactional_records = (500, 500) if args.tiny else (RECORDS_PER_PARTITION, 10_000)
    if args.no_spark:
        from kafkasync_dev.testing.local_broker import real_broker

        with real_broker() as (bootstrap, why_not):
            if bootstrap is None:
                print(json.dumps({"skipped": why_not}))
                return
            results = {}
            for value_bytes in (VALUE_BYTES, 200):
                topic = f"kafkasync-bytes-reader-{value_bytes}-{int(time.time())}"
                produce_backlog(bootstrap, topic, plain_records, value_bytes)
                for cap in (plain_records, 0):
                    for workers in (1, 2):
                        results[f"{value_bytes} B, {'capped' if cap else 'uncapped'}, {workers} worker(s)"] = (
                            range_reader_bytes(bootstrap, topic, plain_records, value_bytes, cap, workers))
            print(json.dumps(results, indent=2))
        return

    from kafkasync_dev.testing.spark import local_spark_session
    from kafkasync_source.spark.source import register

    conf = {}
    if os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS"):
        conf["spark.jars"] = os.environ["KAFKASYNC_SPARK_KAFKA_JARS"]
    from kafkasync_dev.testing.local_broker import real_broker

    with real_broker() as (bootstrap, why_not):
        if bootstrap is None:
            print(json.dumps({"skipped": why_not}))
            return
        spark = local_spark_session("kafkasync-broker-bytes", tempfile.mkdtemp(prefix="kafkasync-bench-"), conf)
        register(spark)
        try:
            print(json.dumps({"plain": compare(spark, plain_records),
                              "plain 200 B": compare(spark, plain_records, value_bytes=200),
                              "transactional": compare_transactional(spark, transactional_records)}, indent=2))
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
