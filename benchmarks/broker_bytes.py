"""What reading a backlog once costs a real broker: bytes sent per payload byte, and seconds.

On a real broker (``harness.brokers``), a fresh topic of 8 x 50,000 records of 1,000 B (400 MB of
values, ``harness.backlogs.produce_backlog``) is read once into the ``noop`` sink with
``trigger(availableNow=True)`` by

* kafkasync, ``planningMode=timeIndex``: the driver reads no record;
* kafkasync, ``planningMode=fetch``: the driver fetches every record's timestamp;
* ``format("kafka")``, when ``KAFKASYNC_SPARK_KAFKA_JARS`` puts its connector on Spark's classpath;
* kafkasync (``timeIndex``) and ``format("kafka")`` again, capped: ``maxOffsetsPerTrigger`` of one
  partition's records, the rate-limited backfill where each range ends mid-log and what a
  consumer prefetched past its end is dropped (issue 53: 3.5 bytes per payload byte before the
  prefetch was sized to the range).

And a transactional backlog (8 x 10,000 x 1,000 B, in transactions of 500 records of one
partition, one in ten aborted), read under read_committed by kafkasync's default
(``planningMode=auto``, which checks what the index answers against the records a consumer
reads, and plans from fetched timestamps where a transaction marker decides the answer) and by
``planningMode=fetch``. Targets (docs/benchmarks.md): at most 1.1 bytes per payload byte on a plain
topic, 1.3 on a transactional one. Bytes the broker sent: ``harness.samplers.BrokerBytesSampler``;
payload bytes: keys and values of the records read. The backlog read beside ``format("kafka")``
in ``make bench`` is ``benchmarks/backlog_read.py``'s.

``python -m benchmarks.broker_bytes`` reads backlogs of 1,000 B and of 200 B values in a Spark of
its own; ``--no-spark``: the executors' reads alone (:func:`range_reader_bytes`).
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

from benchmarks.harness.backlogs import (
    KEY_BYTES,
    PARTITIONS,
    RECORDS_PER_PARTITION,
    VALUE_BYTES,
    produce_backlog,
    produce_transactional_backlog,
)
from benchmarks.harness.brokers import broker_port
from benchmarks.harness.samplers import BrokerBytesSampler, broker_bytes_unavailable
from benchmarks.harness.spark import kafka_reader, read_available_now, rows_read
from kafkasync_dev.testing.spark import has_format_kafka

SHAPES = (("live", True), ("backfill", False))


def _unavailable() -> Optional[str]:
    if not os.environ.get("KAFKASYNC_BOOTSTRAP"):
        return "no real broker (kafkasync_dev.testing.local_broker.real_broker)"
    return broker_bytes_unavailable()


def _read_once(spark: Any, bootstrap: str, topic: str, source: str, options: dict[str, str]) -> int:
    return rows_read(read_available_now(kafka_reader(spark, source, bootstrap, topic, options), f"{source} {options}"))


def _measure_reads(spark: Any, bootstrap: str, topic: str, payload: int, records: int,
                   variants: list[tuple[str, str, dict[str, str]]]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, source, options in variants:
        with BrokerBytesSampler(broker_port(bootstrap)) as sampler:
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
    reason = _unavailable()
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
    reason = _unavailable()
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
        with BrokerBytesSampler(broker_port(bootstrap)) as sampler:
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

    from benchmarks.harness.brokers import on_real_broker
    from benchmarks.harness.results import print_json
    from benchmarks.harness.spark import session

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="8 x 500 records a topic: a smoke run")
    parser.add_argument("--no-spark", action="store_true",
                        help="the executors' reads alone (range_reader_bytes), capped and uncapped, 1,000 B and 200 B")
    args = parser.parse_args(argv)
    plain_records, transactional_records = (500, 500) if args.tiny else (RECORDS_PER_PARTITION, 10_000)

    def without_spark(bootstrap: str) -> dict[str, Any]:
        results = {}
        for value_bytes in (VALUE_BYTES, 200):
            topic = f"kafkasync-bytes-reader-{value_bytes}-{int(time.time())}"
            produce_backlog(bootstrap, topic, plain_records, value_bytes)
            for cap in (plain_records, 0):
                for workers in (1, 2):
                    results[f"{value_bytes} B, {'capped' if cap else 'uncapped'}, {workers} worker(s)"] = (
                        range_reader_bytes(bootstrap, topic, plain_records, value_bytes, cap, workers))
        return results

    def in_spark(bootstrap: str) -> dict[str, Any]:
        jars = os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS")
        spark = session("kafkasync-broker-bytes", jars=jars)
        try:
            return {"plain": compare(spark, plain_records),
                    "plain 200 B": compare(spark, plain_records, value_bytes=200),
                    "transactional": compare_transactional(spark, transactional_records)}
        finally:
            spark.stop()

    print_json(on_real_broker(without_spark if args.no_spark else in_spark))


if __name__ == "__main__":
    main()
