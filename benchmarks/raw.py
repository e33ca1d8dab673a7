"""The limit for a Python reader: one confluent-kafka consumer reading a whole topic.

Measures records/s of one consumer that touches key, value, offset and timestamp of every record
(what any reader that hands the records on must do), on ``make bench``'s embedded cluster; it
asks ``consume`` for at most the records still expected, so the last call never waits out its
timeout for records that do not exist. Against it: kafkasync into ``noop`` (``benchmarks/run.py``,
target: kafkasync at least 0.5 x this rate). ``python -m benchmarks.raw``: :func:`cpu_per_record`,
the CPU a record costs each layer of kafkasync's reader, on a real broker (not in ``make bench``).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Optional

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from benchmarks.harness.backlogs import Topic

CONSUME_BATCH = 10_000


def consume_all(bootstrap: str, topic: Topic, **overrides) -> float:
    """Seconds one consumer takes to read every record of ``topic`` from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kafkasync-bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            # librdkafka backs off fetching for 1 s (the default) whenever its prefetch
            # queue is over queued.min.messages (100,000): this reader drains the queue far
            # faster than that, and with the default it stalls once per run (~250k rec/s
            # instead of ~1.4M). The limit for a Python reader is with the stall tuned away.
            "fetch.queue.backoff.ms": 10,
            **overrides,
        }
    )
    try:
        started = time.perf_counter()
        consumer.assign(
            [KafkaTopicPartition(topic.name, p, 0) for p in range(topic.partitions)]
        )
        remaining = topic.records
        while remaining:
            for message in consumer.consume(min(CONSUME_BATCH, remaining), timeout=1.0):
                if message.error() is not None:
                    raise RuntimeError(f"raw consume: {message.error()}")
                message.key()
                message.value()
                message.offset()
                message.timestamp()
                remaining -= 1
        return time.perf_counter() - started
    finally:
        consumer.close()


def raw_consume_rps(bootstrap: str, topic: Topic, runs: int = 5) -> dict:
    """Median records/s over ``runs`` full reads (after one discarded warm-up read)."""
    consume_all(bootstrap, topic)
    seconds = [consume_all(bootstrap, topic) for _ in range(runs)]
    rates = [topic.records / s for s in seconds]
    # For context: the same reader with librdkafka's default 1 s fetch-queue backoff.
    default = statistics.median(
        topic.records / consume_all(bootstrap, topic, **{"fetch.queue.backoff.ms": 1000})
        for _ in range(3)
    )
    return {"rps": statistics.median(rates), "runs_rps": [round(r) for r in rates],
            "default_backoff_rps": default}


def cpu_per_record(bootstrap: str, topic: str, partitions: int, records_per_partition: int) -> dict:
    """CPU seconds per million records of this process (``time.process_time``: every thread,
    librdkafka's among them), for reading each partition of ``topic`` from offset 0:

    * ``consume``: ``consume()`` alone, the records dropped: the floor any Python reader pays;
    * ``arrow``: what kafkasync does with records already consumed, alone: its column builder
      turning each ``consume()`` batch into one Arrow batch (the collector held off, as the reader
      does; ``arrow_collecting``: with it on);
    * ``range_reader``: ``RangeReader.read`` of each partition as one range, as a Spark task does
      (no Spark: its own costs are the ``noop`` runs of ``run.py``).

    Per process, not the machine's busy time: a shared machine's other work does not count."""
    import gc

    from kafkasync_source.config.options import parse_options
    from kafkasync_source.executor.consumer_pool import POOL
    from kafkasync_source.executor.range_reader import KafkaRange, RangeReader
    from kafkasync_source.executor.record_columns import RecordColumns
    from kafkasync_source.spark.schema import arrow_schema, kafka_schema

    total = partitions * records_per_partition

    def consume_each(keep: Optional[list]) -> float:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kafkasync-bench-cpu-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
        started = time.process_time()
        for partition in range(partitions):
            consumer.assign([KafkaTopicPartition(topic, partition, 0)])
            read = 0
            while read < records_per_partition:
                messages = consumer.consume(min(CONSUME_BATCH, records_per_partition - read), timeout=1.0)
                read += len(messages)
                if keep is not None:
                    keep.append(messages)
        seconds = time.process_time() - started
        consumer.close()
        return seconds

    def build(batches: list, collecting: bool) -> float:
        schema = arrow_schema(kafka_schema(False))
        if not collecting:
            gc.disable()
        try:
            started = time.process_time()
            for messages in batches:
                columns = RecordColumns(topic, False)
                columns.extend(messages)
                columns.to_batch(schema)
            return time.process_time() - started
        finally:
            gc.enable()

    def read_ranges() -> float:
        options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=True)
        reader = RangeReader.from_options(options, kafka_schema(False))
        POOL.close_all()
        started = time.process_time()
        for partition in range(partitions):
            for _ in reader.read(KafkaRange(topic, partition, 0, records_per_partition)):
                pass
        seconds = time.process_time() - started
        POOL.close_all()
        return seconds

    consumed: list = []
    result = {"consume": consume_each(None), "range_reader": read_ranges()}
    consume_each(consumed)
    result["arrow"] = build(consumed, collecting=False)
    result["arrow_collecting"] = build(consumed, collecting=True)
    return {name: round(seconds / total * 1e6, 2) for name, seconds in result.items()}


def main() -> None:
    """``python -m benchmarks.raw``: :func:`cpu_per_record` on backlogs of 1 KB and 200 B records
    (``harness.backlogs.produce_backlog``), best of three, on a real broker."""
    from benchmarks.harness.backlogs import PARTITIONS, RECORDS_PER_PARTITION, produce_backlog
    from benchmarks.harness.brokers import on_real_broker
    from benchmarks.harness.results import print_json

    def measure(bootstrap: str) -> dict:
        results = {}
        for value_bytes in (1_000, 200):
            topic = f"kafkasync-cpu-{value_bytes}-{uuid.uuid4().hex[:6]}"
            produce_backlog(bootstrap, topic, RECORDS_PER_PARTITION, value_bytes)
            runs = [cpu_per_record(bootstrap, topic, PARTITIONS, RECORDS_PER_PARTITION) for _ in range(3)]
            results[f"{value_bytes} B"] = {name: min(run[name] for run in runs) for name in runs[0]}
        return {"cpu_s_per_million_records": results}

    print_json(on_real_broker(measure))


if __name__ == "__main__":
    main()
