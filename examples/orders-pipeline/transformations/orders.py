"""Orders from Kafka into a streaming table, and a materialized view counting them per minute of
event time.

kafkasync is found by Spark's data source discovery (``pip install kafkasync`` into the Python
``spark-pipelines`` runs, PYSPARK_PYTHON): no ``register()`` here. ``SparkSession.active()`` is
the pipeline's session (PySpark 4.3's CLI also puts it into the module as ``spark``; 4.1's does
not). The brokers and the topic come from the environment, so the same files run against any
cluster.
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

BOOTSTRAP_SERVERS = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
TOPIC = os.environ.get("ORDERS_TOPIC", "orders")
spark = SparkSession.active()


@dp.table(comment="Every order record once, with its event time (the value's ts, epoch ms).")
def orders_raw() -> DataFrame:
    # Each run reads what arrived since the last one (SDP runs streaming tables with an
    # AvailableNow trigger): batches synchronized on the value's event time, not Kafka's.
    return (
        spark.readStream.format("kafkasync")
        .option("kafka.bootstrap.servers", BOOTSTRAP_SERVERS)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("eventTime.jsonPath", "$.ts")
        .load()
        .select("partition", "offset", "eventTime", F.col("value").cast("string").alias("order"))
    )


@dp.materialized_view(comment="Orders per minute of event time, recomputed from orders_raw on each run.")
def orders_per_minute() -> DataFrame:
    return (
        spark.read.table("orders_raw")
        .groupBy(F.window("eventTime", "1 minute"))
        .count()
        .select(F.col("window.start").alias("minute"), "count")
    )
