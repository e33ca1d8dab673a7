"""kafkasync's capped batches are consecutive slices of the real Kafka Streams' processing order.

Kafka Streams (org.apache.kafka:kafka-streams at the broker's version, run by
kafkasync_dev/testing/kafka_streams.py — no emulation) processes three topics whose time is a
field of the JSON value, ``ts``, read by a TimestampExtractor; the Kafka timestamps are the
write time of a copy job, in another order. kafkasync reads the same topics in a bounded run
with ``eventTime.jsonPath=$.ts`` and ``maxOffsetsPerTrigger=97``, reading every record and with
``eventTime.order=nonDecreasing`` (planned from probed records): batch k holds exactly Kafka
Streams' records [97k, 97(k+1)). Read on the Kafka timestamp instead, its batches are other
records: the option is what gives Kafka Streams' order.

Kafka Streams merges by time only the partitions of one task, i.e. partition p of every source
topic (one topic of three partitions would be three tasks, each processed on its own). So the
data is three topics of one partition each, subscribed together: one task, whose PartitionGroup
picks the partition whose head record has the smallest time, as kafkasync does across all its
partitions.

Needs ``mvn`` and ``javac`` (Java 17+) beside the broker: the kafka-streams jars are resolved
from Maven Central into ``~/.cache/kafkasync/kafka-streams-<version>/`` and the Java program
compiled there at first use; nothing generated is in the repository. Skipped, saying why,
without ``javac`` (a JDK is more than the README asks for); without ``mvn`` or Maven Central,
skipped or, under ``KAFKASYNC_REQUIRE_BROKER=1``, failed, as the broker itself.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
from conftest import skip_without_broker

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.broker import KafkaBroker, create_topic
from kafkasync_dev.testing.kafka_dist import DEFAULT_KAFKA_VERSION
from kafkasync_dev.testing.kafka_streams import compiled_program, jdk_problem, kafka_streams_problem, processing_order
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.spark.source import register

# First of every test's fixtures: without mvn or javac the tests skip before a broker and Spark start.
pytestmark = pytest.mark.usefixtures("kafka_streams_version")

CAP = 97
"""maxOffsetsPerTrigger: no divisor of any topic's size, so batches end mid-partition."""

MINUTE, HOUR = 60_000, 3_600_000

Row = tuple[str, int, int]
"""(topic, partition, offset)"""


@dataclass(frozen=True)
class OrderedData:
    """Three single-partition topics, all produced, and Kafka Streams' order of their records."""

    topics: list[str]
    event_times: dict[Row, int]
    streams_order: list[Row]


def event_times(rng: random.Random) -> list[list[int]]:
    """Payload times (ms, offsets from a base) of the three topics, each increasing, all
    distinct — topic i's are i modulo 3: Kafka Streams leaves the order of equal head times to
    its priority queue, kafkasync to its own tie-break, and this test is not about ties. Unequal
    rates and spans, so the merge interleaves unevenly: a dense hour of 400; a sparse stretch
    with a burst of 150 records in two minutes; a short half hour of 110. 720 records: 8 batches."""
    dense = sorted(rng.sample(range(HOUR // 3), 400))
    sparse = sorted(rng.sample(range(10 * MINUTE // 3, 20 * MINUTE // 3), 30)
                    + rng.sample(range(25 * MINUTE // 3, 27 * MINUTE // 3), 150)
                    + rng.sample(range(30 * MINUTE // 3, 50 * MINUTE // 3), 30))
    short = sorted(rng.sample(range(20 * MINUTE // 3, 50 * MINUTE // 3), 110))
    return [[3 * k + i for k in ks] for i, ks in enumerate((dense, sparse, short))]


def kafka_streams_release(*, avro: bool = False) -> str:
    """The Kafka Streams release to run, the broker's: its jars (with Apache Avro's, for
    ``avro``) resolved and the program compiled now, before the broker and Spark start for
    nothing. Without ``mvn`` or ``javac``, or when Maven Central cannot be reached, skipped
    saying why (failed under ``KAFKASYNC_REQUIRE_BROKER=1``)."""
    version = os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION
    if jdk_problem() is not None:  # the README asks for a Java runtime, not a JDK: skip, also in CI
        pytest.skip(f"cannot compile the Kafka Streams program: {jdk_problem()}")
    problem = kafka_streams_problem()
    if problem is None:
        try:
            compiled_program(version, avro=avro)
        except RuntimeError as exc:
            problem = str(exc)
    if problem:
        skip_without_broker(f"cannot run Kafka Streams {version}{' with Avro' if avro else ''}: {problem}")
    return version


@pytest.fixture(scope="session")
def kafka_streams_version() -> str:
    return kafka_streams_release()


@pytest.fixture(scope="module")
def data(kafka_streams_version: str, bootstrap_servers: str, admin: Any, spark: Any) -> Iterator[OrderedData]:
    """Produces the topics, every delivery confirmed, then runs Kafka Streams over them.

    Why Kafka Streams' order is then deterministic: every record is on the broker (each
    delivery report checked) before Kafka Streams starts, and with ``max.task.idle.ms=0`` (its
    default; KIP-695's lag-aware idling) PartitionGroup.readyToProcess lets the task process
    only while each partition has buffered records or a fetched lag known to be zero — a
    partition whose lag is unknown or above zero is waited for, as the records the broker
    already has must be fetched first. So at each record, every partition not yet read to its
    end has its head buffered, and PartitionGroup.nextRecord takes the head with the smallest
    time of all (KIP-353; its priority queue orders the partitions by head record time),
    whatever the fetch timing. With distinct times that is one order: here the records sorted
    by payload time. (-1 would process whatever is buffered: an order that depends on fetches.)"""
    register(spark)
    broker = KafkaBroker(bootstrap_servers)
    prefix = f"kafkasync-it-streams-order-{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}-{name}" for name in ("dense", "burst", "short")]
    base = int(time.time() * 1000) - 24 * HOUR
    # A copy job re-published the topics a few minutes ago, one after the other: each record is
    # stamped with its write time (Kafka >= 4.0 refuses stamps over an hour ahead), so on the
    # Kafka timestamp the last topic copied comes last as a whole.
    written = int(time.time() * 1000) - 10 * MINUTE
    times: dict[Row, int] = {}
    try:
        for topic, offsets in zip(topics, event_times(random.Random(695))):
            create_topic(admin, topic, 1)
            broker.produce(topic, [Record(0, written + len(times) + i, None, json.dumps({"ts": base + t}).encode())
                                   for i, t in enumerate(offsets)])
            times.update({(topic, 0, offset): base + t for offset, t in enumerate(offsets)})
        started = time.monotonic()
        order = processing_order(bootstrap_servers, topics, len(times), version=kafka_streams_version)
        print(f"\nKafka Streams processed {len(order)} records of {len(topics)} topics in "
              f"{time.monotonic() - started:.1f} s")
        yield OrderedData(topics, times, order)
    finally:
        broker.close()
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                future.result(30)
            except Exception:
                pass


def batches(spark: Any, bootstrap: str, topics: list[str], checkpoint: str, progress: list[dict] | None = None,
            **options: str) -> list[list[Row]]:
    """A bounded run (``availableNow``) capped at ``CAP`` records a batch: each batch's records,
    in the order the batches ran. ``progress`` receives the run's progress reports."""
    seen: list[tuple[int, list[Row]]] = []

    def sink(frame: Any, batch_id: int) -> None:
        seen.append((batch_id, [(r.topic, r.partition, r.offset) for r in frame.collect()]))

    reader = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(CAP)))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().select("topic", "partition", "offset").writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(PATIENCE_S)
    finally:
        query.stop()
        if progress is not None:
            progress.extend(json.loads(p.json) for p in query.recentProgress)
    assert query.exception() is None
    assert [batch_id for batch_id, _ in seen] == list(range(len(seen))), "each batch once, in order"
    return [rows for _, rows in seen]


def as_json(offset: Any) -> dict:
    """A source offset in a progress report: JSON text or already parsed, by PySpark version."""
    return json.loads(offset) if isinstance(offset, str) else offset


def slices(order: list[Row]) -> list[Counter[Row]]:
    """``order`` cut into consecutive slices of ``CAP`` records, each as a multiset."""
    return [Counter(order[start:start + CAP]) for start in range(0, len(order), CAP)]


def test_kafka_streams_processed_every_record_once_in_offset_order_per_partition(data: OrderedData) -> None:
    """What the comparisons below stand on: Kafka Streams' order holds every record once, and
    each partition's records in offset order."""
    assert sorted(data.streams_order) == sorted(data.event_times)
    for topic in data.topics:
        offsets = [offset for t, _, offset in data.streams_order if t == topic]
        assert offsets == list(range(len(offsets))), topic
    in_time_order = data.streams_order == sorted(data.event_times, key=data.event_times.__getitem__)
    print(f"\nKafka Streams' order is the records sorted by payload time: {in_time_order}")


@pytest.mark.parametrize("options", [{}, {"eventTime.order": "nonDecreasing"}],
                         ids=["every-record", "promised-non-decreasing"])
def test_capped_batches_are_consecutive_slices_of_kafka_streams_order(
        spark: Any, bootstrap_servers: str, data: OrderedData, tmp_path: Any, options: dict[str, str]) -> None:
    """Batch k holds Kafka Streams' records [k*CAP, (k+1)*CAP) — as a multiset: within a batch
    kafkasync's rows come partition by partition, and a partition's offsets are consecutive
    anyway. With eventTime.order=nonDecreasing (each topic's payload times increase) the driver
    plans from probed records, not every record, and must cut the same batches."""
    progress: list[dict] = []
    got = batches(spark, bootstrap_servers, data.topics, str(tmp_path / "checkpoint"), progress,
                  **{"eventTime.jsonPath": "$.ts"}, **options)
    expected = slices(data.streams_order)
    latest = as_json(progress[-1]["sources"][0]["latestOffset"])
    print(f"\n{len(data.streams_order)} records in {len(got)} batches of <= {CAP} ({options or 'every record'}); "
          f"batch sizes {[len(rows) for rows in got]}; planning {latest.get('planning')}, the driver read "
          f"{latest.get('driverRecordsRead')} records")
    # The promise is taken: else both parametrizations would test the same planning.
    assert latest.get("planning") == ("recordProbes" if options else "fetch")
    assert [len(rows) for rows in got] == [sum(part.values()) for part in expected]
    for k, (rows, part) in enumerate(zip(got, expected)):
        assert Counter(rows) == part, f"batch {k}: {sorted(Counter(rows) - part)[:5]} instead of " \
                                      f"{sorted(part - Counter(rows))[:5]}"


def test_on_the_kafka_timestamp_the_batches_are_not_kafka_streams_slices(
        spark: Any, bootstrap_servers: str, data: OrderedData, tmp_path: Any) -> None:
    """The same bounded run without eventTime.jsonPath synchronizes on the Kafka timestamp (the
    copy job's write time): its batches are not slices of Kafka Streams' payload-time order, so
    the comparison above tells the two apart."""
    got = batches(spark, bootstrap_servers, data.topics, str(tmp_path / "checkpoint"))
    expected = slices(data.streams_order)
    assert sorted(row for rows in got for row in rows) == sorted(data.event_times), "every record once"
    differing = sum(1 for rows, part in zip(got, expected) if Counter(rows) != part)
    print(f"\non the Kafka timestamp, {differing} of {len(got)} batches differ from Kafka Streams' slices")
    # Only the first slice or so can agree (the dense topic alone before the others' times
    # begin); on the Kafka timestamp the dense topic is read whole first, so most batches differ.
    assert differing >= len(got) // 2
