"""The planning of a batch's input partitions: pure logic, no Kafka."""

import random

import pytest

from kafkasync_source.config.options import parse_options
from kafkasync_source.planning.planner import TopicPartition
from kafkasync_source.spark.input_partitions import KafkaRange, KafkaRanges, plan_input_partitions

P0, P1, P2, P3 = (TopicPartition("t", p) for p in range(4))


def covered(plan):
    """Every offset of every input partition, per Kafka partition (sorted: tasks run in any order)."""
    offsets = {}
    for group in plan:
        for r in group.ranges:
            offsets.setdefault((r.topic, r.partition), []).extend(range(r.start, r.end))
    return {key: sorted(values) for key, values in offsets.items()}


def test_large_ranges_are_capped_in_equal_parts_and_empty_ranges_dropped():
    plan = plan_input_partitions([(P0, 10, 35), (P1, 5, 5)], max_records=10, target_tasks=8)
    assert sorted(r for g in plan for r in g.ranges) == sorted(
        [KafkaRange("t", 0, 10, 18), KafkaRange("t", 0, 18, 26), KafkaRange("t", 0, 26, 35)]
    )
    assert all(sum(r.size for r in g.ranges) <= 10 for g in plan)


def test_small_ranges_are_coalesced_to_about_the_target_number_of_tasks():
    ranges = [(TopicPartition("t", p), 0, 100 + p) for p in range(8)]
    plan = plan_input_partitions(ranges, max_records=200_000, target_tasks=2)
    assert len(plan) == 2
    loads = sorted(sum(r.size for r in g.ranges) for g in plan)
    assert loads[1] - loads[0] <= 7  # balanced
    assert covered(plan) == {("t", p): list(range(100 + p)) for p in range(8)}


def test_coalescing_never_exceeds_max_records_per_partition():
    ranges = [(TopicPartition("t", p), 0, 60) for p in range(8)]
    plan = plan_input_partitions(ranges, max_records=100, target_tasks=2)
    assert all(sum(r.size for r in g.ranges) <= 100 for g in plan)
    assert len(plan) == 8  # no two 60-record ranges fit together


def test_pieces_of_one_kafka_partition_stay_in_offset_order_within_a_task():
    plan = plan_input_partitions([(P0, 0, 1000), (P1, 0, 10)], max_records=300, target_tasks=1)
    for group in plan:
        for a, b in zip(group.ranges, group.ranges[1:]):
            if a.topic_partition == b.topic_partition:
                assert a.end <= b.start
    assert covered(plan)[("t", 0)] == list(range(1000))


def test_min_partitions_splits_large_ranges_in_proportion_like_format_kafka():
    # The two small ranges round to one part each (500 / 11000 * 4 < 0.5) and stay whole; the
    # large one gets the remaining 4 - 2 parts (KafkaOffsetRangeCalculator.getRanges).
    ranges = [(P0, 0, 10_000), (P1, 0, 500), (P2, 0, 500)]
    plan = plan_input_partitions(ranges, max_records=200_000, min_partitions=4)
    assert sorted(g.ranges for g in plan) == [
        (KafkaRange("t", 0, 0, 5000),), (KafkaRange("t", 0, 5000, 10_000),),
        (KafkaRange("t", 1, 0, 500),), (KafkaRange("t", 2, 0, 500),),
    ]


def test_min_partitions_is_also_the_number_of_tasks_to_coalesce_to():
    ranges = [(TopicPartition("t", p), 0, 100) for p in range(12)]
    assert len(plan_input_partitions(ranges, max_records=200_000, min_partitions=3)) == 3
    one_big = plan_input_partitions([(P0, 0, 1_000)], max_records=200_000, min_partitions=4)
    assert [g.ranges for g in one_big] == [
        (KafkaRange("t", 0, 0, 250),), (KafkaRange("t", 0, 250, 500),),
        (KafkaRange("t", 0, 500, 750),), (KafkaRange("t", 0, 750, 1000),),
    ]


def test_the_plan_is_deterministic_whatever_the_input_order():
    ranges = [(TopicPartition("t", p), p * 7, p * 7 + 50 + p * 13) for p in range(20)]
    expected = plan_input_partitions(ranges, max_records=120, min_partitions=5)
    shuffled = list(ranges)
    random.Random(3).shuffle(shuffled)
    assert plan_input_partitions(shuffled, max_records=120, min_partitions=5) == expected
    assert all(isinstance(g, KafkaRanges) for g in expected)


@pytest.mark.parametrize("seed", range(20))
def test_every_offset_is_planned_exactly_once(seed):
    rng = random.Random(seed)
    ranges = [
        (TopicPartition(rng.choice("ab"), p), start, start + rng.randrange(0, 5_000))
        for p, start in enumerate(rng.randrange(0, 10**6) for _ in range(rng.randrange(1, 30)))
    ]
    plan = plan_input_partitions(
        ranges, max_records=rng.randrange(1, 3_000), min_partitions=rng.choice([None, 1, 7, 64]),
        target_tasks=rng.randrange(1, 9),
    )
    assert covered(plan) == {
        (tp.topic, tp.partition): list(range(start, end)) for tp, start, end in ranges if end > start
    }


def test_min_partitions_option_is_validated():
    base = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}
    assert parse_options({**base, "minpartitions": "6"}, streaming=True).min_partitions == 6
    assert parse_options(base, streaming=True).min_partitions is None
    with pytest.raises(ValueError, match="minPartitions"):
        parse_options({**base, "minpartitions": "0"}, streaming=True)


# --- eventTime.order=nonDecreasing: ranges split as without partition times -------------------

def test_under_the_promise_a_partitions_range_splits_and_every_piece_keeps_the_batchs_partition_time():
    """The promise no longer puts a partition's range in one task: the pieces are those of a read
    without partition times, and each later piece names the batch's start offset and partition
    time, from which its executor reads the time before it (executor/time_before.py)."""
    ranges = [(P0, 100, 1100), (P1, 0, 40)]
    times = {P0: 7_000, P1: -1}
    promised = plan_input_partitions(ranges, max_records=300, min_partitions=4,
                                     partition_times=times, in_time_order=True)
    plain = plan_input_partitions(ranges, max_records=300, min_partitions=4)
    assert [[(r.topic_partition, r.start, r.end) for r in g.ranges] for g in promised] == \
        [[(r.topic_partition, r.start, r.end) for r in g.ranges] for g in plain]
    pieces = sorted(r for g in promised for r in g.ranges)
    assert len([r for r in pieces if r.partition == 0]) == 6  # 3 parts (minPartitions), each halved (300)
    assert all((r.time_from, r.partition_time) == ((100, 7_000) if r.partition == 0 else (0, -1)) for r in pieces)
    assert covered(promised) == covered(plain)


def test_without_the_promise_a_followed_partition_time_keeps_each_range_in_one_piece():
    """includePartitionTime or onInvalid=partitionTime without the promise: a later piece would
    need every record before it, so the range is not split, whatever maxRecordsPerPartition says."""
    plan = plan_input_partitions([(P0, 100, 1100)], max_records=300, min_partitions=4, partition_times={P0: 5})
    assert [g.ranges for g in plan] == [(KafkaRange("t", 0, 100, 1100, 5),)]


def test_a_three_partition_backfill_under_the_promise_fills_eight_slots():
    """issue 53: with minPartitions=8 (a local[8] session's slots) a 3-partition backfill under
    the promise is planned as 8 tasks, where it was 3."""
    ranges = [(TopicPartition("t", p), 0, 50_000) for p in range(3)]
    times = {TopicPartition("t", p): -1 for p in range(3)}
    plan = plan_input_partitions(ranges, max_records=200_000, min_partitions=8,
                                 partition_times=times, in_time_order=True)
    assert len(plan) == 8
    assert covered(plan) == {("t", p): list(range(50_000)) for p in range(3)}
    assert len(plan_input_partitions(ranges, max_records=200_000, min_partitions=8, partition_times=times)) == 3
