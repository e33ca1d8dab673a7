"""``eventTime.order=nonDecreasing`` keeps the read parallel (issue 53), on the embedded cluster.

A partition's range splits into pieces as without the promise; each later piece's reader reads
the last records before its start for the partition time it checks from (executor/time_before.py).
A broken promise inside a later piece, and exactly at a split point, still fails naming the
record; an intact log reads fully in as many tasks as ``minPartitions`` asks.
"""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.invalid_times import payload
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import parse_options
from kafkasync_source.executor.range_reader import RangeReader
from kafkasync_source.spark.input_partitions import KafkaRange
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.source import register

T = 1_700_000_000_000
WRITTEN = T + 10**9  # a copy job's clock: the Kafka timestamps say nothing of the event time


def promised_reader(kafka_cluster, topic: str, **extra: str) -> RangeReader:
    options = parse_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "subscribe": topic,
                             "eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing", **extra},
                            streaming=True)
    return RangeReader.from_options(options, kafka_schema(False, include_event_time=True))


def offsets_read(reader: RangeReader, kafka_range: KafkaRange) -> list[int]:
    return [row["offset"] for batch in reader.read(kafka_range) for row in batch.to_pylist()]


def produce_times(kafka_cluster, topic: str, times: list[int], partition: int = 0) -> None:
    kafka_cluster.produce(topic, [Record(partition, WRITTEN, None, payload(T + t)) for t in times])


# --- The later piece's reader, alone -----------------------------------------------------------

def test_a_later_piece_fails_on_a_broken_promise_exactly_at_its_start(kafka_cluster, topic_factory):
    """Offset 3 is below offset 2: the earlier piece [0, 3) holds no break, the later [3, 6)
    finds it by reading offset 2 first. Without the look-back it started from the batch's
    partition time (none) and read the break as in order."""
    topic = topic_factory(1)
    produce_times(kafka_cluster, topic, [1, 2, 5, 3, 6, 7])
    reader = promised_reader(kafka_cluster, topic)
    assert offsets_read(reader, KafkaRange(topic, 0, 0, 3, -1, 0)) == [0, 1, 2]
    with pytest.raises(Exception, match=rf"{topic}-0 offset 3 has event time {T + 3}, below the partition's "
                                        rf"time {T + 5} before it: eventTime.order=nonDecreasing"):
        offsets_read(reader, KafkaRange(topic, 0, 3, 6, -1, 0))


def test_a_later_piece_fails_on_a_broken_promise_inside_it_and_reads_an_intact_one(kafka_cluster, topic_factory):
    topic = topic_factory(1)
    produce_times(kafka_cluster, topic, [1, 2, 3, 4, 6, 5, 7])
    reader = promised_reader(kafka_cluster, topic)
    with pytest.raises(Exception, match=rf"{topic}-0 offset 5 has event time {T + 5}, below the partition's "
                                        rf"time {T + 6} before it"):
        offsets_read(reader, KafkaRange(topic, 0, 3, 7, -1, 0))
    assert offsets_read(reader, KafkaRange(topic, 0, 2, 5, -1, 0)) == [2, 3, 4]
    # The batch's partition time stands for the records before the batch's start (time_from).
    with pytest.raises(Exception, match=rf"{topic}-0 offset 1 has event time {T + 2}, below the partition's "
                                        rf"time {T + 9} before it"):
        offsets_read(reader, KafkaRange(topic, 0, 1, 3, T + 9, 1))


def test_the_record_before_is_the_last_readable_one_with_a_time(kafka_cluster, topic_factory):
    """Between the earlier records and the piece's start lie a commit marker (offset 5) and a
    record without a time (offset 6, onInvalid=skip): the look-back reads past both to the time
    of offset 4 (the windows [6, 7), then [2, 6))."""
    topic = topic_factory(1)
    kafka_cluster.produce_transaction(topic, [Record(0, WRITTEN, None, payload(T + t)) for t in (1, 2, 3, 4, 8)])
    kafka_cluster.produce(topic, [Record(0, WRITTEN, None, b"{}"), Record(0, WRITTEN, None, payload(T + 7)),
                                  Record(0, WRITTEN, None, payload(T + 9))])
    reader = promised_reader(kafka_cluster, topic, **{"eventTime.onInvalid": "skip"})
    with pytest.raises(Exception, match=rf"{topic}-0 offset 7 has event time {T + 7}, below the partition's "
                                        rf"time {T + 8} before it"):
        offsets_read(reader, KafkaRange(topic, 0, 7, 9, -1, 0))
    assert offsets_read(reader, KafkaRange(topic, 0, 8, 9, -1, 0)) == [8]
    # Nothing readable with a time between the batch's start and the piece: its partition time.
    assert offsets_read(reader, KafkaRange(topic, 0, 7, 9, T + 7, 5)) == [7, 8]


# --- Through Spark -----------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def kafkasync_registered(spark):
    register(spark)


def run_promised(spark, kafka_cluster, topic: str, checkpoint: str, min_partitions: int) -> list[tuple[int, int]]:
    """A bounded run under the promise; each batch's (input partitions, rows)."""
    batches: list[tuple[int, int]] = []
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("eventTime.jsonPath", "$.ts").option("eventTime.order", "nonDecreasing")
              .option("minPartitions", str(min_partitions)).load())
    query = (stream.writeStream.foreachBatch(lambda df, _: batches.append((df.rdd.getNumPartitions(), df.count())))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(PATIENCE_S)
    finally:
        query.stop()
    return batches


def test_a_three_partition_backfill_under_the_promise_reads_fully_in_eight_tasks(
    spark, kafka_cluster, topic_factory, tmp_path
):
    """The tests' session is local[2]; the plan asks minPartitions=8 (a local[8] session's slots)
    and gets 8 input partitions where the promise used to give 3, one a partition."""
    topic = topic_factory(3)
    for p in range(3):
        produce_times(kafka_cluster, topic, [10 * i + p for i in range(400)], partition=p)
    batches = run_promised(spark, kafka_cluster, topic, str(tmp_path / "cp"), min_partitions=8)
    assert sum(rows for _, rows in batches) == 1200
    assert [tasks for tasks, rows in batches if rows] == [8]


@pytest.mark.parametrize("broken_at", [4, 6], ids=["at-the-split-point", "inside-the-later-piece"])
def test_a_broken_promise_in_a_later_piece_fails_the_stream_naming_the_record(
    spark, kafka_cluster, topic_factory, tmp_path, broken_at
):
    """minPartitions=2 splits the partition's 8 records at offset 4; the record at
    ``broken_at`` is below the one before it."""
    topic = topic_factory(1)
    times = [1, 2, 3, 4, 5, 6, 7, 8]
    times[broken_at - 1], times[broken_at] = times[broken_at], times[broken_at - 1]
    produce_times(kafka_cluster, topic, times)
    with pytest.raises(StreamingQueryException, match=rf"{topic}-0 offset {broken_at} has event time "
                                                      rf"{T + times[broken_at]}, below the partition's time"):
        run_promised(spark, kafka_cluster, topic, str(tmp_path / "cp"), min_partitions=2)
