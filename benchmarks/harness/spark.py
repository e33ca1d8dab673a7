"""The Spark side of every measurement: a session, and the reads measurements time.

One way to start Spark (:func:`session`: ``local[2]`` as ``kafkasync_dev.testing.spark`` builds
it, kafkasync registered, the JVM's chatter in a log file of its own) and one way to read a Kafka
topic from its beginning with either source (:func:`kafka_reader`), so that ``format("kafka")``
and kafkasync get the same options wherever they are compared.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable, Optional, Union

SPARK_CONF_ENV = "KAFKASYNC_BENCH_SPARK_CONF"
"""Extra Spark settings for every benchmark's Spark, ``key=value`` pairs separated by spaces: to
measure what a setting does, on every source alike."""
READ_COMMITTED = {"kafka.isolation.level": "read_committed"}
"""Where the two sources are compared, both read committed records only: Java's consumer defaults
to read_uncommitted, librdkafka to read_committed."""
SOURCES = ("kafka", "kafkasync")
LABELS = {"kafka": 'format("kafka")', "kafkasync": "kafkasync"}
"""The two sources compared, and their names in the results."""


def compared_options(source: str) -> dict[str, str]:
    """What both sources read with where they are compared: :data:`READ_COMMITTED`, and for
    kafkasync ``max.task.idle.ms=0`` (its default, said so)."""
    return {**READ_COMMITTED, **({"max.task.idle.ms": "0"} if source == "kafkasync" else {})}


def session(name: str, *, jars: Optional[str] = None, conf: Optional[dict[str, str]] = None,
            event_log: Optional[str] = None) -> Any:
    """A ``local[2]`` session with kafkasync registered, its scratch (warehouse, ``spark.local.dir``)
    in a new temporary directory and the JVM's stderr in ``spark.log`` there. ``jars``: on ``spark.jars`` (Spark's Kafka
    connector, spark-avro); ``event_log``: Spark's listener events written into that directory,
    uncompressed (for the tasks' and jobs' timing); :data:`SPARK_CONF_ENV` adds its settings."""
    from kafkasync_dev.testing.query_start import start_queries_surviving_slow_worker_starts
    from kafkasync_dev.testing.spark import local_spark_session
    from kafkasync_source.spark.source import register

    workdir = tempfile.mkdtemp(prefix=f"{name}-")
    settings = {"spark.local.dir": os.path.join(workdir, "local"), **(conf or {}),
                **dict(pair.split("=", 1) for pair in os.environ.get(SPARK_CONF_ENV, "").split())}
    if jars:
        settings["spark.jars"] = jars
    if event_log:
        settings.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_log,
                         "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false"})
    spark = local_spark_session(name, os.path.join(workdir, "warehouse"), settings,
                                jvm_log=os.path.join(workdir, "spark.log"))
    register(spark)
    # A query whose source's worker misses Spark's fixed 10 s to connect back, before anything
    # was planned, starts again with a warning (kafkasync_dev/testing/query_start.py): CI runs
    # bench-smoke beside a real-broker suite. Such a start is in a timed read's seconds.
    start_queries_surviving_slow_worker_starts()
    return spark


def jvm_pid(spark: Any) -> int:
    """The driver's JVM: PySpark launches it through spark-submit, which ``exec``s java (same pid)."""
    return spark.sparkContext._gateway.proc.pid


def kafka_reader(spark: Any, source: str, bootstrap: str, topic: str, options: Optional[dict[str, Any]] = None,
                 *, starting: str = "earliest") -> Any:
    """``spark.readStream`` of ``topic`` by ``source`` (``kafka``, ``kafkasync`` or a traced
    kafkasync), from ``starting``, with ``options``."""
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", starting))
    for key, value in (options or {}).items():
        reader = reader.option(key, str(value))
    return reader


def read_available_now(reader: Any, label: str) -> list:
    """``reader`` loaded and read with ``trigger(availableNow=True)`` into the ``noop`` sink, to
    the end: its progress reports (every batch's, ``recentProgress`` keeps the last 100)."""
    query = reader.load().writeStream.format("noop").trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except Exception as err:  # awaitTermination raises the query's exception
        raise RuntimeError(f"{label}: {err}") from err
    return query.recentProgress


def rows_read(progress: list) -> int:
    return sum(p.numInputRows for p in progress)


def timed_read(reader: Any, label: str, records: int) -> tuple[float, list]:
    """Seconds of :func:`read_available_now` and its progress; fails unless it read ``records``."""
    started = time.perf_counter()
    progress = read_available_now(reader, label)
    seconds = time.perf_counter() - started
    if rows_read(progress) != records:
        raise RuntimeError(f"{label} read {rows_read(progress)} of {records} records")
    return seconds, progress


def windowed_count_seconds(spark: Any, bootstrap: str, topic: str, source: str, options: dict[str, str],
                           column: Union[None, str, Callable[[Any], Any]], cap: int,
                           expected: Optional[int] = None) -> float:
    """Seconds of a capped ``availableNow`` run of a 5-minute window count on the event time
    with a 10-minute watermark, into ``noop``. ``column``: the event-time column's name, a
    function ``events -> time column``, or None (``$.ts`` of a JSON value by ``get_json_object``).
    ``expected``: the rows the read must have read (else a whole number a partition of 8)."""
    from pyspark.sql import functions as F

    events = kafka_reader(spark, source, bootstrap, topic, {"maxOffsetsPerTrigger": str(cap), **options}).load()
    time_column = (column(events) if callable(column) else F.col(column) if column else
                   F.timestamp_millis(F.get_json_object(F.col("value").cast("string"), "$.ts").cast("long")))
    counts = (events.withColumn("event_time", time_column).withWatermark("event_time", "10 minutes")
              .groupBy(F.window("event_time", "5 minutes")).count())
    started = time.perf_counter()
    query = counts.writeStream.format("noop").outputMode("update").trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    rows = rows_read(query.recentProgress)
    if rows != 8 * (rows // 8) or rows == 0 or expected not in (None, rows):
        raise RuntimeError(f"{source} {options}: read {rows} rows" + (f" of {expected}" if expected else ""))
    return seconds
