"""What a Schema Registry format costs: Debezium change events in Confluent-framed Avro, read by
kafkasync beside ``format("kafka")`` + ``substring`` + ``from_avro``, in one Spark.

The backlog: 8 x 200,000 Debezium change events of an orders table (updates: ``before`` and
``after`` rows, ``source``, ``op``, ``ts_ms``; about 200 B framed), the schema registered by
confluent-kafka's ``AvroSerializer`` in a real registry (Apicurio, started here, or the one
``KAFKASYNC_SCHEMA_REGISTRY_URL`` names), encoded as ``harness.debezium`` says. Kafka timestamps
are a copy job's write time; the event time, ``source.ts_ms``, spans 6 hours, in order within each
partition; ``retention.ms=-1``.

Each read is a 5-minute window count on ``source.ts_ms`` with a 10-minute watermark, capped at a
quarter of the backlog a trigger (``maxOffsetsPerTrigger``), ``trigger(availableNow=True)`` into
``noop`` (:func:`benchmarks.harness.spark.windowed_count_seconds`), in one Spark that has Spark's own
Kafka connector and ``org.apache.spark:spark-avro_2.13`` at its version (``make parity``'s
virtualenv), best of ``runs`` after an unmeasured warm-up round of each, with the CPU seconds
each kind of process spent a million records in the best read
(:class:`benchmarks.harness.samplers.CpuByProcess`: the JVM, the PySpark driver, the source runner,
the executors' Python workers, the broker, the machine):

* ``kafkasync_field``: ``value.format=avro-confluent``, ``eventTime.field=source.ts_ms``, the
  window on the ``eventTime`` column (the synchronized count; the driver reads every record);
* ``kafkasync_field_promised``: the same with ``eventTime.order=nonDecreasing`` (the driver
  reads a few records at chosen offsets);
* ``kafkasync_field_decoded``: ``kafkasync_field`` with ``value.decode=true``, the window on
  ``valueDecoded.source.ts_ms``;
* ``format_kafka_from_avro``: ``format("kafka")``, ``from_avro(substring(value, 6), writer
  schema)`` (the one schema pinned), the window on ``source.ts_ms``.

Targets (issue 52): the synchronized count at least 1.0 x ``format("kafka")``'s speed, with the
value decoded at least 0.8 x. ``python -m benchmarks.formats_bench [--tiny]`` in ``make
parity``'s virtualenv; ``benchmarks/side_by_side.py`` runs it in ``make bench``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from benchmarks.harness.backlogs import PARTITIONS
from benchmarks.harness.debezium import envelope_schema, produce_changes
from benchmarks.harness.samplers import CpuByProcess
from benchmarks.harness.spark import jvm_pid, session, windowed_count_seconds

RECORDS_PER_PARTITION = 200_000
TOPIC_PREFIX = "kafkasync-bench-debezium"
TARGETS = {"field_speed_vs_format_kafka": 1.0, "decoded_speed_vs_format_kafka": 0.8}
FORMAT_KAFKA = "format_kafka_from_avro"


def reads(registry_url: str) -> tuple[tuple[str, str, dict[str, str], Callable[[Any], Any]], ...]:
    """``(label, source, options, events -> time column)`` of each read (see the module doc)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    field = {"value.format": "avro-confluent", "schema.registry.url": registry_url,
             "eventTime.field": "source.ts_ms"}
    schema = envelope_schema()
    return (
        ("kafkasync_field", "kafkasync", field, lambda events: F.col("eventTime")),
        ("kafkasync_field_promised", "kafkasync", {**field, "eventTime.order": "nonDecreasing"},
         lambda events: F.col("eventTime")),
        ("kafkasync_field_decoded", "kafkasync", {**field, "value.decode": "true"},
         lambda events: F.timestamp_millis(F.col("valueDecoded.source.ts_ms"))),
        (FORMAT_KAFKA, "kafka", {},
         lambda events: F.timestamp_millis(from_avro(F.expr("substring(value, 6)"), schema)
                                           .getField("source").getField("ts_ms"))),
    )


def beside_format_kafka(bootstrap: str, jars: str, registry_url: str,
                        records_per_partition: int = RECORDS_PER_PARTITION,
                        runs: int = 2, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """The reads of :func:`reads` on one backlog in one Spark (``jars``: Spark's Kafka connector
    and spark-avro), best of ``runs`` after a warm-up round; ratios of best times."""
    import pyspark

    topic = f"{TOPIC_PREFIX}-{int(time.time())}"
    log(f"formats: producing {PARTITIONS} x {records_per_partition:,} Debezium Avro change events")
    produced_at = time.perf_counter()
    backlog = produce_changes(bootstrap, registry_url, topic, records_per_partition)
    backlog["produce_s"] = round(time.perf_counter() - produced_at, 1)
    cap = backlog["records"] // 4
    spark = session("kafkasync-formats-beside", jars=jars)
    variants = reads(registry_url)
    seconds: dict[str, list[float]] = {label: [] for label, *_ in variants}
    cpu: dict[str, dict[str, float]] = {}
    try:
        for attempt in range(runs + 1):  # the first round warms each source up, unmeasured
            for label, source, options, time_column in (variants if attempt % 2 else variants[::-1]):
                log(f"formats: {label} ({'warm-up' if not attempt else f'run {attempt}'})")
                with CpuByProcess(jvm_pid(spark)) as used:
                    elapsed = windowed_count_seconds(spark, bootstrap, topic, source, dict(options), time_column,
                                                    cap, expected=backlog["records"])
                if attempt:
                    seconds[label].append(round(elapsed, 2))
                    if seconds[label][-1] == min(seconds[label]):  # the CPU of the read whose time is reported
                        per_million = used.per_million(backlog["records"])
                        cpu[label] = {name: round(value, 2) for name, value in per_million.items()}
    finally:
        spark.stop()
    best = {label: min(times) for label, times in seconds.items()}
    speed = {label: best[FORMAT_KAFKA] / best[label] for label in best if label != FORMAT_KAFKA}
    return {"pyspark": pyspark.__version__, **backlog, "max_offsets_per_trigger": cap, "seconds": seconds,
            "best_s": best, "speed_vs_format_kafka": speed, "cpu_s_per_million_records": cpu,
            "targets": targets(speed)}


def targets(speed: dict[str, float]) -> dict[str, dict[str, Any]]:
    return {
        "field_speed_vs_format_kafka": {
            "value": round(speed["kafkasync_field"], 3), "target": TARGETS["field_speed_vs_format_kafka"],
            "met": speed["kafkasync_field"] >= TARGETS["field_speed_vs_format_kafka"]},
        "decoded_speed_vs_format_kafka": {
            "value": round(speed["kafkasync_field_decoded"], 3), "target": TARGETS["decoded_speed_vs_format_kafka"],
            "met": speed["kafkasync_field_decoded"] >= TARGETS["decoded_speed_vs_format_kafka"]},
    }


def measure(bootstrap: str, jars: str, *, tiny: bool = False, log: Callable[[str], None] = lambda m: None
            ) -> dict[str, Any]:
    """:func:`beside_format_kafka` with a registry (``{"skipped": why}`` without one or without
    spark-avro): ``make bench`` sizes, or 8 x 1,000 records and one run when ``tiny``."""
    from benchmarks.harness.brokers import with_registry
    from kafkasync_dev.testing.spark import spark_avro_jars

    avro_jars, why_not = spark_avro_jars()
    if avro_jars is None:
        return {"skipped": str(why_not)}
    return with_registry(lambda url: beside_format_kafka(
        bootstrap, f"{jars},{avro_jars}", url, 1_000 if tiny else RECORDS_PER_PARTITION, 1 if tiny else 2, log))


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    from benchmarks.harness.brokers import broker_and_connector
    from benchmarks.harness.results import log, print_json

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="8 x 1,000 records, one run: a smoke run")
    args = parser.parse_args(argv)
    with broker_and_connector() as (bootstrap, jars, why_not):
        print_json({"skipped": why_not} if bootstrap is None else measure(bootstrap, jars, tiny=args.tiny, log=log))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
