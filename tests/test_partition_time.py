"""includePartitionTime: KIP-472's partition time on every record, computed by the executors.

partitionTime is the largest record timestamp of the partition up to and including the record,
continuing from the partition time in the batch's start offset, so a replay or a restart from
the checkpoint gives every record the same value. A record without a timestamp gets the
partition time before it (what Kafka Streams' UsePartitionTimeOnInvalidTimestamp uses)."""

from __future__ import annotations

import time

from test_range_reader import _Message

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.executor.record_columns import RecordColumns
from kafkasync_source.spark.schema import arrow_schema, kafka_schema

BASE_TS = 1_700_000_000_000
SCHEMA = arrow_schema(kafka_schema(False, include_partition_time=True))


def partition_times(columns: RecordColumns, timestamps: list[int]) -> list:
    # confluent-kafka's timestamp kinds: 0 not available, 1 CreateTime
    columns.extend([_Message(i, 0 if ts < 0 else 1, ts) for i, ts in enumerate(timestamps)])
    return [None if r["partitionTime"] is None else int(r["partitionTime"].timestamp() * 1000)
            for r in columns.to_batch(SCHEMA).to_pylist()]


def test_out_of_order_records_and_a_record_without_a_timestamp():
    columns = RecordColumns("t", False, partition_time=-1, partition_time_column=True)
    assert partition_times(columns, [-1, 50, 30, -1, 80, 60]) == [None, 50, 50, 50, 80, 80]


def test_the_running_maximum_continues_from_the_start_and_across_arrow_batches():
    columns = RecordColumns("t", False, partition_time=70, partition_time_column=True)
    assert partition_times(columns, [50, 75]) == [70, 75]
    assert partition_times(columns, [60, -1]) == [75, 75], "the next RecordBatch of the range"


def read_stream(spark, bootstrap, topic, checkpoint, done):
    """Runs the query until ``done(rows)``: rows by batch id, as its foreachBatch saw them."""
    rows: dict = {}

    def sink(frame, batch_id):
        rows[batch_id] = [(r.partition, r.offset, int(r.partitionTime.timestamp() * 1000))
                          for r in frame.select("partition", "offset", "partitionTime").collect()]

    query = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("includePartitionTime", "true").option("maxOffsetsPerTrigger", "10").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="100 milliseconds").start())
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not done(rows):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"read {sum(len(r) for r in rows.values())}"
            time.sleep(0.1)
    finally:
        query.stop()
    return rows


def test_a_restart_from_the_checkpoint_continues_each_partitions_time(spark, kafka_cluster, topic_factory, tmp_path):
    topic = topic_factory(1)
    # Out of order: a high timestamp early, lower ones after it.
    stamps = [BASE_TS + t for t in (5, 100, 20, 30, 40, 50, 60, 70, 80, 90, 110, 95, 96, 97, 98,
                                    120, 99, 130, 101, 102, 140, 103, 104, 105, 106, 107, 150, 108)]
    kafka_cluster.produce(topic, [Record(0, ts, None, b"v") for ts in stamps])
    first = read_stream(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp",
                        lambda rows: sum(map(len, rows.values())) >= 10)

    def merged(rows: dict) -> dict:
        return {**first, **rows}  # a batch replayed after the stop has the same id and rows

    # Until every offset is read: not a count of the second run's rows, since a stop between a
    # batch's sink and its commit makes the second run replay that batch.
    second = read_stream(spark, kafka_cluster.bootstrap_servers, topic, tmp_path / "cp",
                         lambda rows: {o for batch in merged(rows).values() for _, o, _ in batch} >= set(range(len(stamps))))
    got = sorted(row for rows in merged(second).values() for row in rows)
    expected, running = [], -1
    for offset, ts in enumerate(stamps):
        running = max(running, ts)
        expected.append((0, offset, running))
    assert got == expected
    # The second run resumes at the first run's last batch (replayed when its commit was not
    # written) or after it, never before, and goes on past it.
    assert min(second) >= max(first) and max(first) < max(second)


def test_a_batch_read_starts_the_partition_time_at_its_first_record(spark, kafka_cluster, topic_factory):
    topic = topic_factory(1)
    kafka_cluster.produce(topic, [Record(0, BASE_TS + t, None, b"v") for t in (50, 10, 60, 20)])
    rows = (spark.read.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
            .option("subscribe", topic).option("startingOffsets", '{"%s": {"0": 1}}' % topic)
            .option("includePartitionTime", "true").load()
            .select("offset", "partitionTime").orderBy("offset").collect())
    # Records before startingOffsets are not read: offset 1 (10) starts the running maximum.
    assert [(r.offset, int(r.partitionTime.timestamp() * 1000) - BASE_TS) for r in rows] == [
        (1, 10), (2, 60), (3, 60)]
