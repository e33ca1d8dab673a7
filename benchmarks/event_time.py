"""What taking the event time from the record costs: ``eventTime.jsonPath`` on a real broker.

A fresh topic of 8 x 200,000 JSON records of about 200 B (``harness.backlogs.produce_orders``:
8-byte keys; the event time in ``$.ts``, the Kafka timestamp the write time), on a real broker.
Against: the same reads on Kafka timestamps, and (``--beside-format-kafka``) ``format("kafka")``
with ``get_json_object``; the targets are below and in ``make bench``'s table. Measured in one run:

* **extraction on one core**: the seam (``event_time.record_time``) over records a consumer
  handed over, timed alone — records/s, beside the Kafka timestamp's;
* **the driver's fetch**: ``DriverFetcher`` buffering every record's time, with the JSONPath
  and with the Kafka timestamp — records/s;
* **end to end**: the backlog read into Spark's ``noop`` sink with
  ``trigger(availableNow=True)`` by kafkasync with ``eventTime.jsonPath=$.ts``, without it
  (``planningMode=auto``: the brokers' time index, the default) and without it on the fetch
  path (``planningMode=fetch``), after an unmeasured warm-up read, each read three times in
  turns (:data:`REPEATS`; ratios of best times): seconds and broker bytes
  per payload byte (``harness.samplers.BrokerBytesSampler``). Targets: the JSONPath read at least
  0.8 x the speed of the same read without it; bytes per payload byte at most the fetch path's.
  The path's read again with ``eventTime.order=nonDecreasing`` (the backlog is in time order per
  partition): the driver plans from records read at chosen offsets — the records it read (the
  live report's ``driverRecordsRead``), the broker bytes, the source runner's peak RSS; targets:
  at least 0.95 x the Kafka timestamp's read, at most 1.15 bytes per payload byte, under 1 % of
  the records read by the driver. Then the reads again with ``maxOffsetsPerTrigger`` an eighth
  of the backlog (8 batches). Last, the source runner's peak RSS with the promise on a backlog
  ten times the size (16 M records), in one batch and capped at 1.6 M a batch
  (:func:`runner_rss_at_scale`; target: at most 1.1 x the same read's at 1.6 M).
* **what latestOffset waits for under a Python extractor** (``eventTime.extractor`` doing
  ``json.loads`` per record): the fetcher's ``snapshot()`` — the planner's input at every
  trigger — timed every 5 ms while the fetcher buffers the topic, beside how long one consume
  batch's extraction takes (what ``snapshot()`` waited for while extraction ran under the
  fetcher's lock).

**A field of a Schema Registry value** (``python -m benchmarks.event_time --avro-extraction``,
:func:`avro_extraction`, in ``make bench``): the seam on one core with ``eventTime.field=
source.ts_ms`` over Debezium change events framed as confluent-kafka's ``AvroSerializer`` frames
them (``harness.debezium``'s updates, about 200 B, a real registry:
``KAFKASYNC_SCHEMA_REGISTRY_URL`` or one started here), beside ``eventTime.jsonPath`` over the
same events as JSON and over this file's orders (``$.ts``), record by record and a consume()
batch at a time; and ``value.decode``'s column of the same batches (by numpy, and through
fastavro as its fallback does); in turns, best of :data:`REPEATS`. Records are
``confluent_kafka.Message`` objects built in memory: what a consumer hands over, without a broker.
``benchmarks/formats_bench.py`` reads the same events in Spark beside ``from_avro``.

``python -m benchmarks.event_time [--tiny]`` runs it alone (it starts its own Spark session).
``--beside-format-kafka``, in ``make parity``'s virtualenv (Spark's own connector at the same
Spark), reads the backlog into a 5-minute window count on ``$.ts`` with a 10-minute watermark,
capped at a quarter of it a trigger, three ways: kafkasync with ``eventTime.order=
nonDecreasing``, kafkasync on Kafka timestamps and ``format("kafka")``, the last two taking the
time with ``get_json_object``; best of two after a warm-up (target: the promised read at least
1.2 x ``format("kafka")``'s speed).
"""

from __future__ import annotations

import time
from typing import Any, Optional

from benchmarks.harness.backlogs import KEY_BYTES, PARTITIONS, order, produce_orders
from benchmarks.harness.brokers import broker_port
from benchmarks.harness.queries import driver_records_read
from benchmarks.harness.samplers import BrokerBytesSampler, SourceRunnerPeak
from benchmarks.harness.spark import kafka_reader, read_available_now, rows_read, session, windowed_count_seconds

RECORDS_PER_PARTITION = 200_000
EXTRACTION_SAMPLE = 200_000
TARGETS = {"speed_vs_without": 0.8}
EVENT_TIME = {"eventTime.jsonPath": "$.ts"}
PROMISED = {**EVENT_TIME, "eventTime.order": "nonDecreasing"}
VARIANTS: tuple[tuple[str, dict[str, str]], ...] = (
    # (label, options): with the path, promised in order or not; without it on the default path; on the fetch path
    ("json_path", EVENT_TIME),
    ("json_path_promised", PROMISED),
    ("kafka_timestamp_auto", {}),
    ("kafka_timestamp_fetch", {"planningMode": "fetch"}),
)
# The same reads under a cap of an eighth of the backlog a batch (8 batches), as backfills are read
# and where synchronization matters: the driver fetches ahead while the executors read a batch.
CAPPED_VARIANTS: tuple[tuple[str, dict[str, str]], ...] = (
    ("json_path_capped", EVENT_TIME), ("json_path_promised_capped", PROMISED), ("kafka_timestamp_auto_capped", {}))
CAPPED_BATCHES = 8
REPEATS = 3
SCALE_FACTOR = 10
"""The memory measurement's backlog, in backlogs (16 M records at make bench's size)."""
"""Reads of each variant, in turns (see :func:`_timed_reads`); a smoke reads each once."""
SEAMS = (("json_path", ("jsonPath", "$.ts")), ("kafka_timestamp", None))


def _consumed(bootstrap: str, topic: str, sample: int) -> list:
    """The topic's first ``sample`` records, as a consumer hands them over."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkasync-bench-event-time",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    messages: list = []
    deadline = time.monotonic() + 120
    while len(messages) < sample and time.monotonic() < deadline:
        messages.extend(m for m in consumer.consume(10_000, 1.0) if m.error() is None)
    consumer.close()
    return messages[:sample]


def extraction_rate(bootstrap: str, topic: str, sample: int) -> dict[str, Any]:
    """Records/s of the seam on one core, over ``sample`` records consumed beforehand: record
    by record (``time_of``) and a consume() batch at a time (``times_of``, as the executors)."""
    from kafkasync_source.event_time import EventTimeOptions, record_time
    from kafkasync_source.executor.range_reader import ARROW_BATCH_ROWS

    messages = _consumed(bootstrap, topic, sample)
    # As an executor's consume() hands them over (at most ARROW_BATCH_ROWS a call).
    batches = [messages[start:start + ARROW_BATCH_ROWS] for start in range(0, len(messages), ARROW_BATCH_ROWS)]
    rates, batch_rates = {}, {}
    for label, where in SEAMS:
        seam = record_time(where and EventTimeOptions(*where))
        started = time.perf_counter()
        for message in messages:
            seam.time_of(message)
        rates[label] = len(messages) / (time.perf_counter() - started)
        started = time.perf_counter()
        for batch in batches:
            seam.times_of(batch)
        batch_rates[label] = len(messages) / (time.perf_counter() - started)
    return {"records": len(messages), "records_per_s": rates, "batch_records_per_s": batch_rates}


def driver_fetch_rate(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """Records/s the driver's fetcher buffers the whole topic at, with each seam."""
    from kafkasync_source.driver.fetcher import DriverFetcher
    from kafkasync_source.event_time import EventTimeOptions, record_time
    from kafkasync_source.planning.planner import TopicPartition

    rates = {}
    for label, where in SEAMS:
        fetcher = DriverFetcher({"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"},
                                buffer_capacity=lambda partitions: records, fail_on_data_loss=True,
                                record_time=record_time(where and EventTimeOptions(*where)))
        try:
            started = time.perf_counter()
            fetcher.position_at({TopicPartition(topic, p): 0 for p in range(PARTITIONS)})
            deadline = time.monotonic() + 300
            while sum(fetcher.buffered().values()) < records:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the driver's fetcher buffered {fetcher.buffered()} of {records}")
                time.sleep(0.01)
            rates[label] = records / (time.perf_counter() - started)
        finally:
            fetcher.close()
    return rates


PYTHON_EXTRACTOR = ("extractor", "kafkasync_dev.testing.extractors:json_ts")


def latest_offset_wait(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """``snapshot()``'s time (ms: median, p99, max) while the driver's fetcher takes every
    record's time with a Python extractor, and the extraction time of one consume batch."""
    from kafkasync_source.driver.fetcher import _CONSUME_BATCH, DriverFetcher
    from kafkasync_source.event_time import EventTimeOptions, record_time
    from kafkasync_source.planning.planner import TopicPartition

    seam = record_time(EventTimeOptions(*PYTHON_EXTRACTOR))
    fetcher = DriverFetcher({"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"},
                            buffer_capacity=lambda partitions: records, fail_on_data_loss=True, record_time=seam)
    waits: list[float] = []
    try:
        fetcher.position_at({TopicPartition(topic, p): 0 for p in range(PARTITIONS)})
        deadline = time.monotonic() + 300
        while sum(fetcher.buffered().values()) < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the driver's fetcher buffered {fetcher.buffered()} of {records}")
            started = time.perf_counter()
            fetcher.snapshot({})
            waits.append((time.perf_counter() - started) * 1000)
            time.sleep(0.005)
    finally:
        fetcher.close()
    sample = _consumed(bootstrap, topic, min(_CONSUME_BATCH, records))
    started = time.perf_counter()
    for message in sample:
        seam.time_of(message)
    ordered = sorted(waits) or [0.0]
    return {"snapshots": len(waits), "snapshot_ms_median": ordered[len(ordered) // 2],
            "snapshot_ms_p99": ordered[int(len(ordered) * 0.99)], "snapshot_ms_max": ordered[-1],
            "consume_batch_extraction_ms": (time.perf_counter() - started) * 1000 * _CONSUME_BATCH / len(sample)}


def measure(spark: Any, bootstrap: str, records_per_partition: int = RECORDS_PER_PARTITION,
            repeats: int = REPEATS) -> dict[str, Any]:
    topic = f"kafkasync-bench-event-time-{int(time.time())}"
    payload = produce_orders(bootstrap, topic, records_per_partition)
    records = PARTITIONS * records_per_partition
    results: dict[str, Any] = {"records": records, "payload_bytes": payload,
                               "mean_value_bytes": round(payload / records - KEY_BYTES, 1)}
    results["extraction_one_core"] = extraction_rate(bootstrap, topic, min(EXTRACTION_SAMPLE, records))
    results["driver_fetch_records_per_s"] = driver_fetch_rate(bootstrap, topic, records)
    results["latest_offset_wait_python_extractor"] = latest_offset_wait(bootstrap, topic, records)
    _read_once(spark, bootstrap, topic, dict(EVENT_TIME), [])  # warm-up, not measured
    port = broker_port(bootstrap)
    cap = {"maxOffsetsPerTrigger": str(records // CAPPED_BATCHES)}
    reads = {**_timed_reads(spark, bootstrap, topic, records, payload, port, VARIANTS, {}, repeats),
             **_timed_reads(spark, bootstrap, topic, records, payload, port, CAPPED_VARIANTS, cap, repeats)}
    results["reads"] = reads
    results["at_scale"] = runner_rss_at_scale(spark, bootstrap, records_per_partition)
    promised = reads["json_path_promised"]
    results["promised"] = {
        "speed_vs_kafka_timestamp": reads["kafka_timestamp_auto"]["seconds"] / promised["seconds"],
        "capped_speed_vs_kafka_timestamp": (reads["kafka_timestamp_auto_capped"]["seconds"]
                                            / reads["json_path_promised_capped"]["seconds"]),
        "speed_vs_reading_every_record": reads["json_path"]["seconds"] / promised["seconds"],
        "driver_read_share": max(promised["driver_records_read"],
                                 reads["json_path_promised_capped"]["driver_records_read"]) / records,
        "targets": {"speed_vs_kafka_timestamp": 0.95, "bytes_per_payload_byte": 1.15, "driver_read_share": 0.01},
    }
    with_path = reads["json_path"]
    results["speed_vs_without"] = reads["kafka_timestamp_auto"]["seconds"] / with_path["seconds"]
    results["speed_vs_fetch_path"] = reads["kafka_timestamp_fetch"]["seconds"] / with_path["seconds"]
    results["capped_speed_vs_without"] = (reads["kafka_timestamp_auto_capped"]["seconds"]
                                          / reads["json_path_capped"]["seconds"])
    results["bytes_vs_fetch_path"] = (with_path["bytes_per_payload_byte"]
                                      / reads["kafka_timestamp_fetch"]["bytes_per_payload_byte"])
    results["targets"] = {"speed_vs_without": TARGETS["speed_vs_without"], "bytes_vs_fetch_path": 1.0}
    return results


def _timed_reads(spark: Any, bootstrap: str, topic: str, records: int, payload: int, port: int,
                 variants: tuple[tuple[str, dict[str, str]], ...], extra: dict[str, str],
                 repeats: int) -> dict[str, Any]:
    """Each variant's read, ``repeats`` times in turns (the order reversed every turn, so no
    variant always follows the same one): its best time, every sample, and from each read the
    broker bytes per payload byte, the records the driver read and the source runner's peak
    RSS (the largest). One read of each on a 2-core machine moved by up to 20 % with what ran
    before it: the ratios are of best times."""
    samples: dict[str, list[dict[str, float]]] = {label: [] for label, _ in variants}
    for turn in range(repeats):
        for label, options in variants if turn % 2 == 0 else variants[::-1]:
            progress: list = []
            with BrokerBytesSampler(port) as sampler, SourceRunnerPeak() as runner:
                started = time.perf_counter()
                rows = _read_once(spark, bootstrap, topic, {**options, **extra}, progress)
                seconds = time.perf_counter() - started
            if rows != records:
                raise RuntimeError(f"{label} read {rows} of {records} records")
            samples[label].append({"seconds": seconds, "bytes_per_payload_byte": sampler.bytes_sent / payload,
                                   "driver_records_read": driver_records_read(progress),
                                   "source_runner_peak_rss_mib": runner.peak / 2**20})
    reads = {}
    for label, runs in samples.items():
        best = min(run["seconds"] for run in runs)
        reads[label] = {"seconds": best, "records_per_s": records / best,
                        "samples_s": [round(run["seconds"], 2) for run in runs],
                        **{key: max(run[key] for run in runs) for key in
                           ("bytes_per_payload_byte", "driver_records_read", "source_runner_peak_rss_mib")}}
    return reads


def runner_rss_at_scale(spark: Any, bootstrap: str, records_per_partition: int, factor: int = SCALE_FACTOR
                        ) -> dict[str, Any]:
    """The source runner's peak RSS on a backlog ``factor`` times the size (16 M records at
    ``make bench``'s size) with the promise, read in one batch and capped at the main
    backlog's size a batch (``factor`` batches): what the driver keeps must not grow with the
    backlog (the probes remember records per partition, and the offsets hold one position a
    partition). Compare with ``reads.json_path_promised.source_runner_peak_rss_mib``."""
    topic = f"kafkasync-bench-event-time-x{factor}-{int(time.time())}"
    produce_orders(bootstrap, topic, records_per_partition * factor)
    records = PARTITIONS * records_per_partition * factor
    figures: dict[str, Any] = {"records": records}
    for label, extra in (("uncapped", {}), ("capped", {"maxOffsetsPerTrigger": str(records // factor)})):
        progress: list = []
        with SourceRunnerPeak() as runner:
            started = time.perf_counter()
            rows = _read_once(spark, bootstrap, topic, {**PROMISED, **extra}, progress)
            seconds = time.perf_counter() - started
        if rows != records:
            raise RuntimeError(f"{label} read {rows} of {records} records")
        figures[label] = {"seconds": seconds, "batches": sum(1 for p in progress if p.numInputRows),
                          "driver_records_read": driver_records_read(progress),
                          "source_runner_peak_rss_mib": runner.peak / 2**20}
    return figures


def _read_once(spark: Any, bootstrap: str, topic: str, options: dict[str, str], progress: list) -> int:
    """Rows of one kafkasync ``availableNow`` read into ``noop``; its progress reports into ``progress``."""
    progress.extend(read_available_now(kafka_reader(spark, "kafkasync", bootstrap, topic, options),
                                       f"kafkasync {options}"))
    return rows_read(progress)


def run(bootstrap: str, records_per_partition: int = RECORDS_PER_PARTITION, repeats: int = REPEATS) -> dict[str, Any]:
    """:func:`measure` in a Spark session of its own (``make bench`` runs it on its broker)."""
    spark = session("kafkasync-event-time")
    try:
        return measure(spark, bootstrap, records_per_partition, repeats)
    finally:
        spark.stop()


WINDOWED_READS: tuple[tuple[str, str, dict[str, str], Optional[str]], ...] = (  # (label, source, options, time column)
    ("kafkasync_promised", "kafkasync", PROMISED, "eventTime"),
    ("kafkasync_kafka_timestamp", "kafkasync", {}, None),
    ("format_kafka_get_json_object", "kafka", {}, None),
)
"""The same windowed count over the backlog's ``$.ts`` as users write it: kafkasync with the
promise on its ``eventTime`` column; kafkasync on Kafka timestamps and ``format("kafka")``, each
with ``get_json_object`` for the time (what ``format("kafka")``'s users do today)."""


def beside_format_kafka(bootstrap: str, records_per_partition: int = RECORDS_PER_PARTITION,
                        runs: int = 2) -> dict[str, Any]:
    """The windowed reads of :data:`WINDOWED_READS` in one Spark that has Spark's own Kafka
    connector (``make parity``'s virtualenv: Maven Central serves none for some releases),
    capped at a quarter of the backlog a trigger, best of ``runs`` after a warm-up of each."""
    import pyspark

    from kafkasync_dev.testing.spark import format_kafka_jars

    jars, why_not = format_kafka_jars()
    if jars is None:
        return {"skipped": why_not}
    topic = f"kafkasync-bench-event-time-windowed-{int(time.time())}"
    produce_orders(bootstrap, topic, records_per_partition)
    cap = PARTITIONS * records_per_partition // 4
    spark = session("kafkasync-event-time-beside", jars=jars)
    try:
        seconds: dict[str, list[float]] = {label: [] for label, *_ in WINDOWED_READS}
        for attempt in range(runs + 1):  # the first round warms each source up, unmeasured
            for label, source, options, column in WINDOWED_READS:
                elapsed = windowed_count_seconds(spark, bootstrap, topic, source, dict(options), column, cap)
                if attempt:
                    seconds[label].append(elapsed)
    finally:
        spark.stop()
    best = {label: min(times) for label, times in seconds.items()}
    return {"pyspark": pyspark.__version__, "records": PARTITIONS * records_per_partition,
            "max_offsets_per_trigger": cap, "seconds": seconds, "best_s": best,
            "promised_speed_vs_format_kafka": best["format_kafka_get_json_object"] / best["kafkasync_promised"],
            "promised_speed_vs_kafka_timestamp": best["kafkasync_kafka_timestamp"] / best["kafkasync_promised"],
            "target_vs_format_kafka": 1.2}


def avro_extraction(registry_url: str, sample: int = EXTRACTION_SAMPLE, repeats: int = REPEATS) -> dict[str, Any]:
    """Microseconds a record on one core to take the event time: ``eventTime.field`` on Avro
    beside ``eventTime.jsonPath`` on JSON (see the module doc), and to decode the value into its
    column (``value.decode``: by numpy, and through fastavro as the fallback does), best of
    ``repeats`` turns."""
    from confluent_kafka import Message

    from benchmarks.harness.debezium import changes_in_memory
    from kafkasync_source.config.options import parse_options
    from kafkasync_source.event_time import EventTimeOptions, record_time
    from kafkasync_source.executor.range_reader import ARROW_BATCH_ROWS

    avro, debezium_json = changes_in_memory(sample, registry_url)
    orders = [order(0, i, 1_700_000_000_000 + i) for i in range(sample)]
    options = parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "bench-debezium",
                             "value.format": "avro-confluent", "schema.registry.url": registry_url,
                             "eventTime.field": "source.ts_ms", "value.decode": "true"}, streaming=True)
    seams = {"avro_field_source.ts_ms": (record_time(options.event_time), avro),
             "json_path_$.source.ts_ms": (record_time(EventTimeOptions("jsonPath", "$.source.ts_ms")), debezium_json),
             "json_path_$.ts_orders": (record_time(EventTimeOptions("jsonPath", "$.ts")), orders)}
    records = {label: [Message(topic="bench", partition=0, offset=i, value=value, timestamp=(1, 0))
                       for i, value in enumerate(values)] for label, (_, values) in seams.items()}
    batches = [records["avro_field_source.ts_ms"][start:start + ARROW_BATCH_ROWS]
               for start in range(0, sample, ARROW_BATCH_ROWS)]
    decoders = _value_decoders(options.decoded_formats[0])
    best: dict[str, dict[str, float]] = {label: {"per_record_us": float("inf"), "batch_us": float("inf")}
                                         for label in seams}
    decode_best = {label: float("inf") for label in decoders}
    for label, (seam, _values) in seams.items():  # unmeasured: compile each writer schema's readers
        seam.times_of(records[label][:ARROW_BATCH_ROWS])
    for decode in decoders.values():
        decode(batches[0])
    for _ in range(repeats):
        for label, (seam, _values) in seams.items():
            messages = records[label]
            started = time.perf_counter()
            for message in messages:
                seam.time_of(message)
            per_record = (time.perf_counter() - started) * 1e6 / len(messages)
            started = time.perf_counter()
            for start in range(0, len(messages), ARROW_BATCH_ROWS):
                seam.times_of(messages[start:start + ARROW_BATCH_ROWS])
            batch = (time.perf_counter() - started) * 1e6 / len(messages)
            best[label] = {"per_record_us": min(best[label]["per_record_us"], per_record),
                           "batch_us": min(best[label]["batch_us"], batch)}
        for label, decode in decoders.items():
            started = time.perf_counter()
            for batch_records in batches:
                decode(batch_records)
            decode_best[label] = min(decode_best[label], (time.perf_counter() - started) * 1e6 / sample)
    sizes = {label: sum(map(len, values)) / len(values) for label, (_, values) in seams.items()}
    return {"records": sample, "value_bytes": sizes, "us_per_record": best,
            "avro_vs_json_path": best["avro_field_source.ts_ms"]["batch_us"]
            / best["json_path_$.source.ts_ms"]["batch_us"],
            "avro_per_record_vs_json_path": best["avro_field_source.ts_ms"]["per_record_us"]
            / best["json_path_$.source.ts_ms"]["per_record_us"],
            "value_decode_us_per_record": decode_best}


def _value_decoders(value_format: Any) -> dict[str, Any]:
    """``records -> Arrow column`` of ``value.decode``, as the executors run it (numpy, with its
    fallback) and as its fallback alone does it (formats/avro/values.py record by record, then
    ``pa.array`` over the values: what a schema numpy does not cover costs)."""
    import pyarrow as pa
    from pyspark.sql import types

    from kafkasync_source.formats.avro import _codec
    from kafkasync_source.formats.framing import schema_id
    from kafkasync_source.spark.schema import arrow_schema

    arrow_type = arrow_schema(types.StructType([types.StructField("v", value_format.spark_type())])).field("v").type
    by_numpy = value_format.column_decoder(arrow_type)
    codec = _codec(value_format)

    def by_record(records: list) -> Any:
        values = [record.value() for record in records]
        writer = codec.writer(schema_id(values[0]))
        return pa.array([writer.decode_one(value) for value in values], type=arrow_type)
    return {"numpy": by_numpy, "per_record": by_record}


def main(argv: Optional[list[str]] = None) -> None:
    import argparse

    from benchmarks.harness.brokers import on_real_broker, with_registry
    from benchmarks.harness.results import print_json

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="8 x 1,000 records: a smoke run")
    parser.add_argument("--beside-format-kafka", action="store_true",
                        help="only the windowed reads beside format(\"kafka\") (run in make parity's virtualenv)")
    parser.add_argument("--avro-extraction", action="store_true",
                        help="only eventTime.field on Avro beside eventTime.jsonPath, on one core (a registry)")
    args = parser.parse_args(argv)
    records = 1_000 if args.tiny else RECORDS_PER_PARTITION
    if args.avro_extraction:
        print_json(with_registry(lambda url: avro_extraction(
            url, 10_000 if args.tiny else EXTRACTION_SAMPLE, 1 if args.tiny else REPEATS)))
    elif args.beside_format_kafka:
        runs = 1 if args.tiny else 2
        print_json(on_real_broker(lambda bootstrap: beside_format_kafka(bootstrap, records, runs=runs)))
    else:
        print_json(on_real_broker(lambda bootstrap: run(bootstrap, records, repeats=1 if args.tiny else REPEATS)))


if __name__ == "__main__":
    main()
