"""The application integration/test_delta.py runs twice, each time as a process of its own, the way
a job is stopped and started again: kafkasync streams into Delta Lake tables.

* ``append``: the records of one topic appended to a Delta table, a few hundred a batch.
* ``cdc``: Debezium change events (JSON, the event time in ``source.ts_ms``) merged by id into a
  Delta table in ``foreachBatch``: the newest change of each id in the batch, applied only where
  its log position (``source.lsn``) is past the row's, so that a batch run twice, and the old
  events Debezium delivers again after a connector restart, change nothing. A delete leaves a
  tombstone (``deleted``, with its position): an older event of that id delivered again later
  must not bring the row back.

``first``: the ``cdc`` query runs until it fails on purpose right after the MERGE of batch
``fail_batch`` committed, before Spark could commit the batch to its checkpoint; then ``append``
runs, and once it has committed a few batches the app says ``ready-to-kill`` and the test kills
it (SIGKILL) while ``append`` still runs. ``restart``: both continue from their checkpoints with
``trigger(availableNow=True)`` (Spark runs ``cdc``'s failed batch again), then the app reports
the tables. One query runs at a time: Spark gives a starting Python source runner 10 s to
connect back, and one starting beside another query's batches on a busy 2-core machine missed
it (``register(spark)`` is there all the same: the classic registration).

One ``delta-app <stage> <json>`` line on stdout per step.
Usage: ``python delta_app.py first|restart CONFIG_JSON`` (bootstrap, topics, work dir, jars).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

import kafkasync_source
from kafkasync_dev.testing.delta import DELTA_SESSION_CONF
from kafkasync_dev.testing.query_start import start_queries_surviving_slow_worker_starts
from kafkasync_dev.testing.spark import SUITE_JVM_OPTIONS

ROW = "id INT, name STRING, amount DOUBLE"
CHANGE = f"before STRUCT<{ROW}>, after STRUCT<{ROW}>, source STRUCT<ts_ms: BIGINT, lsn: BIGINT>, op STRING, ts_ms BIGINT"

MERGE = """
MERGE INTO delta.`{table}` AS t
USING kafkasync_changes AS s
ON t.id = s.id
WHEN MATCHED AND s.lsn > t.lsn THEN UPDATE SET
  t.name = s.name, t.amount = s.amount, t.lsn = s.lsn, t.deleted = (s.op = 'd')
WHEN NOT MATCHED THEN INSERT (id, name, amount, lsn, deleted)
  VALUES (s.id, s.name, s.amount, s.lsn, s.op = 'd')
"""
"""The guard is ``s.lsn > t.lsn``: a change is applied only past the row's last applied position."""


def report(stage: str, payload: object) -> None:
    print(f"delta-app {stage} {json.dumps(payload)}", flush=True)


def session(config: dict) -> SparkSession:
    builder = (SparkSession.builder.master("local[2]").appName("kafkasync-delta")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.jars", ",".join(config["jars"]))
               .config("spark.driver.extraJavaOptions", SUITE_JVM_OPTIONS))
    for key, value in DELTA_SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafkasync_source.register(spark)
    return spark


def kafka(spark: SparkSession, config: dict, topic: str, per_batch: int, **options: str) -> DataFrame:
    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", config["bootstrap"])
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(per_batch)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def start_append(spark: SparkSession, config: dict, available_now: bool):
    rows = kafka(spark, config, config["append_topic"], 300).select(
        "partition", "offset", F.col("value").cast("string").alias("value"))
    writer = (rows.writeStream.format("delta").queryName("append")
              .option("checkpointLocation", os.path.join(config["work"], "append-checkpoint")))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start(os.path.join(config["work"], "append-table"))


def latest_changes(batch: DataFrame) -> DataFrame:
    """Each id's newest change in the batch (by log position), as the MERGE's source."""
    change = F.from_json(F.col("value").cast("string"), CHANGE).alias("change")
    changes = batch.select(change).select(
        F.coalesce("change.after.id", "change.before.id").alias("id"),
        F.col("change.after.name").alias("name"), F.col("change.after.amount").alias("amount"),
        F.col("change.source.lsn").alias("lsn"), F.col("change.op").alias("op"))
    newest = Window.partitionBy("id").orderBy(F.col("lsn").desc())
    return changes.withColumn("rank", F.row_number().over(newest)).where("rank = 1").drop("rank")


def start_cdc(spark: SparkSession, config: dict, run: str, available_now: bool):
    table = os.path.join(config["work"], "cdc-table")
    (spark.createDataFrame([], f"{ROW}, lsn BIGINT, deleted BOOLEAN").write.format("delta")
     .mode("ignore").save(table))
    log = os.path.join(config["work"], "cdc-batches.jsonl")

    def merge(batch: DataFrame, batch_id: int) -> None:
        session = batch.sparkSession
        before = _version(session, table)
        latest_changes(batch).createOrReplaceTempView("kafkasync_changes")
        session.sql(MERGE.format(table=table))
        after = _version(session, table)
        metrics = (session.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first().operationMetrics
                   if after != before else None)
        with open(log, "a") as out:
            out.write(json.dumps({"run": run, "batch": batch_id, "committed": after != before,
                                  "metrics": dict(metrics) if metrics else None}) + "\n")
        if run == "first" and batch_id == config["fail_batch"]:
            raise RuntimeError(f"injected failure after the MERGE of batch {batch_id}")

    changes = kafka(spark, config, config["cdc_topic"], 400, **{"eventTime.jsonPath": "$.source.ts_ms"})
    writer = (changes.writeStream.queryName("cdc").foreachBatch(merge)
              .option("checkpointLocation", os.path.join(config["work"], "cdc-checkpoint")))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _version(spark: SparkSession, table: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first().version


def first(spark: SparkSession, config: dict) -> None:
    # One query at a time: Spark gives a starting Python source runner 10 s to connect back
    # (PythonWorkerFactory), and one starting beside another query's batches on a busy 2-core
    # machine missed it. The CDC query runs until it fails on purpose, then the append runs.
    cdc = start_cdc(spark, config, "first", available_now=False)
    try:
        cdc.awaitTermination(600)
    except Exception as failure:  # awaitTermination raises the query's exception
        injected = re.search(r"injected failure after the MERGE of batch \d+", str(failure))
        if injected is None:
            raise RuntimeError(f"cdc failed otherwise than on purpose: {failure}") from None
    else:
        raise TimeoutError("the cdc query did not fail on purpose within 600 s")
    append = start_append(spark, config, available_now=False)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if append.exception() is not None:
            raise RuntimeError(f"append failed: {append.exception()}")
        committed = {p["batchId"] for p in append.recentProgress if p["numInputRows"]}
        if len(committed) >= 3 and append.isActive:
            report("ready-to-kill", {"append_batches": len(committed), "cdc_failure": injected.group(0)})
            time.sleep(3600)  # the test kills the process here, append still running
        time.sleep(0.2)
    raise TimeoutError("append did not commit 3 batches within 600 s")


def restart(spark: SparkSession, config: dict) -> None:
    start_append(spark, config, available_now=True).awaitTermination()
    start_cdc(spark, config, "restart", available_now=True).awaitTermination()
    appended = spark.read.format("delta").load(os.path.join(config["work"], "append-table"))
    report("append", {"rows": appended.count(), "distinct": appended.select("partition", "offset").distinct().count(),
                      "values": sorted(row.value for row in appended.select("value").collect())})
    merged = spark.read.format("delta").load(os.path.join(config["work"], "cdc-table")).collect()
    report("cdc", {"rows": [[row.id, row.name, row.amount, row.lsn, row.deleted] for row in merged]})


def main() -> None:
    stage, config = sys.argv[1], json.loads(sys.argv[2])
    spark = session(config)
    # A query whose source's worker misses Spark's fixed 10 s to connect back, before anything
    # was planned, starts again with a warning, as in the suites (kafkasync_dev/testing/query_start.py).
    start_queries_surviving_slow_worker_starts()
    {"first": first, "restart": restart}[stage](spark, config)
    spark.stop()


if __name__ == "__main__":
    main()
