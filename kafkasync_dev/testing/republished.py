"""Re-published topics: the Kafka timestamp is a copy job's write time, the event time is in the
value. The queries a user runs on them, with what they lose, for tests, the parity suite and the
benchmarks (docs/event-time.md).

* :func:`windowed_count` — a 5-minute count per topic with a 10-minute watermark on the value's
  ``ts`` (``get_json_object``, as a ``format("kafka")`` user writes it), AvailableNow: the records
  read, the records the final window counts account for, and Spark's late-row count.
* :func:`orders_and_payments` / :func:`join_matches` — a payment for every order, joined on the id
  within 5 minutes of event time, 10-minute watermarks on both sides: how many matches are found.

Both run one readStream over all topics (kafkasync synchronizes within a source; a join's two
sides come from it, filtered by topic), with ``source`` ``kafkasync`` or ``kafka``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from kafkasync_dev.testing.backfills import HOUR_MS, MINUTE_MS, _end_ms
from kafkasync_dev.testing.mock_cluster import Record

WATERMARK = "10 minutes"
WINDOW = "5 minutes"
QUERY_TIMEOUT_S = 300


def _stream(spark: Any, source: str, bootstrap: str, topics: str, options: Mapping[str, Any]) -> Any:
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topics).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _payload_time(column: str = "ts") -> Any:
    from pyspark.sql import functions as F

    return F.timestamp_millis(F.get_json_object(F.col("value").cast("string"), f"$.{column}").cast("long"))


def _run_to_end(query: Any, what: str) -> list[dict]:
    try:
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            raise TimeoutError(f"{what}: not finished after {QUERY_TIMEOUT_S} s")
    finally:
        query.stop()
    return [json.loads(p.json) for p in query.recentProgress]


@dataclass(frozen=True)
class WindowedCount:
    """What a watermarked windowed count made of a backfill."""

    read: int
    counted: int
    late_rows: int
    """Spark's numRowsDroppedByWatermark: rows after its partial aggregation (windows, not records)."""
    batches: int

    @property
    def dropped(self) -> int:
        """Records read that no final window count includes."""
        return self.read - self.counted


def windowed_count(spark: Any, source: str, bootstrap: str, topics: str, checkpoint: str, *,
                   event_time: Any = None, **options: Any) -> WindowedCount:
    """``event_time``: the Column the window and watermark use; the JSON value's ``ts`` by
    default (an Avro value's field: ``from_avro`` for format("kafka"), kafkasync's ``eventTime``)."""
    from pyspark.sql import functions as F

    counts = (_stream(spark, source, bootstrap, topics, options)
              .withColumn("event_time", _payload_time() if event_time is None else event_time)
              .withWatermark("event_time", WATERMARK).groupBy(F.window("event_time", WINDOW), "topic").count())
    latest: dict = {}

    def collect(frame: Any, _batch_id: int) -> None:  # update mode: the latest count of each window
        for row in frame.collect():
            latest[(row["window"].start, row["topic"])] = row["count"]

    query = (counts.writeStream.outputMode("update").foreachBatch(collect).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    progress = _run_to_end(query, f"windowed count ({source})")
    return WindowedCount(
        read=sum(p["numInputRows"] for p in progress),
        counted=sum(latest.values()),
        late_rows=sum(op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p.get("stateOperators", [])),
        batches=sum(1 for p in progress if p["numInputRows"]),
    )


@dataclass(frozen=True)
class OrdersAndPayments:
    orders: str
    payments: str
    matches: int
    """Every order has one payment 30 s after it: the matches a join must find."""

    @property
    def subscribe(self) -> str:
        return f"{self.orders},{self.payments}"


def orders_and_payments(cluster: Any, prefix: str) -> OrdersAndPayments:
    """``orders``: partition 0 one order a minute over 12 h, partition 1 one every 20 s over the
    last 2 h (the spans shape); ``payments`` (1 partition): one per order, 30 s after it, in time
    order. Re-published by a copy job, topic after topic (payments first), partition after
    partition, each record stamped with its write time, one a millisecond. (Copied with the
    orders first, a join keeps every match whatever the batches: Spark holds the global watermark
    at 0 until both sides have seen data, MicroBatchExecution's WatermarkTracker.)"""
    end = _end_ms(None)
    spans = [[end - 12 * HOUR_MS + i * MINUTE_MS for i in range(720)],
             [end - 2 * HOUR_MS + i * 20_000 + 10_000 for i in range(360)]]
    orders = [(partition, f"o-{partition}-{i}", ts) for partition, times in enumerate(spans)
              for i, ts in enumerate(times)]
    payments = sorted(((0, order_id, ts + 30_000) for _, order_id, ts in orders), key=lambda p: p[2])
    written = end - len(orders) - len(payments)
    names = {"orders": f"{prefix}-orders", "payments": f"{prefix}-payments"}
    for topic, rows, partitions in (("payments", payments, 1), ("orders", orders, 2)):
        cluster.create_topic(names[topic], partitions)
        records = []
        for partition, order_id, event_time in rows:
            records.append(Record(partition, written, order_id.encode(),
                                  json.dumps({"order": order_id, "ts": event_time}).encode()))
            written += 1
        cluster.produce(names[topic], records)
    return OrdersAndPayments(names["orders"], names["payments"], len(orders))


def join_matches(spark: Any, source: str, bootstrap: str, data: OrdersAndPayments, checkpoint: str,
                 **options: Any) -> int:
    """Orders joined with their payments (same id, paid within 5 minutes), 10-minute watermarks
    on both sides, AvailableNow; the number of joined rows."""
    from pyspark.sql import functions as F

    events = (_stream(spark, source, bootstrap, data.subscribe, options)
              .withColumn("event_time", _payload_time())
              .withColumn("order", F.get_json_object(F.col("value").cast("string"), "$.order")))
    orders = (events.where(F.col("topic") == data.orders).withWatermark("event_time", WATERMARK)
              .select(F.col("order").alias("order_id"), F.col("event_time").alias("ordered")))
    payments = (events.where(F.col("topic") == data.payments).withWatermark("event_time", WATERMARK)
                .select(F.col("order").alias("paid_order"), F.col("event_time").alias("paid")))
    joined = orders.join(payments, F.expr(
        "order_id = paid_order AND paid >= ordered AND paid <= ordered + interval 5 minutes"))
    found = [0]

    def count(frame: Any, _batch_id: int) -> None:
        found[0] += frame.count()

    query = (joined.writeStream.outputMode("append").foreachBatch(count).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    _run_to_end(query, f"join ({source})")
    return found[0]
