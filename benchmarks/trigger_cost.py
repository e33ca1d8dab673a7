"""What one trigger costs the driver at thousands of partitions, on a real broker (issue 27).

On one Apache Kafka broker (:class:`~kafkasync_dev.testing.local_broker.LocalKafkaBroker`,
the release jars of :func:`~kafkasync_dev.testing.kafka_dist.maven_kafka`, loopback) this
creates a topic per size whose partitions hold ``RECORDS_PER_PARTITION`` records each at two
event-time rates (even partitions one record a second, odd ones one every three seconds, so
a batch's cut falls inside half of the partitions), every delivery report checked. It then
calls the stream reader's ``latestOffset(start, limit)`` as Spark does, for both planning
paths, without a limit and with ``maxOffsetsPerTrigger = 5 × partitions``:

* ``first_trigger``: a query's first trigger, which has learnt nothing yet (median of 3
  fresh readers);
* ``same_start`` (time-index path): median of ``reps`` calls from the query's first start,
  after a first call (the issue's measurement; Spark asks again from the same start while a
  batch waits);
* ``walk``: median over the triggers of a walk through the whole backlog, each trigger from
  the previous one's end, as a backfill runs;
* with each, ListOffsets rounds and partitions asked per trigger (the time-index path):
  unlike the milliseconds, these do not move with the load of a shared machine.

The *model* measures the pure planner (``plan_from_index``) with an in-memory index that
answers as a broker does (``UnifiedLog.fetchOffsetByTimestamp``: the first offset whose
timestamp is >= t), at sizes no single test broker holds comfortably (16,384 partitions).

Given a Spark session with the Kafka connector (``--spark-kafka-jars``, or ``measure(spark=)``),
format("kafka")'s trigger on the same topics is measured beside: the ``latestOffset`` time
Spark reports for its batches. Targets (issue 27, :data:`TARGETS_MS`): the time-index path's
trigger at most 40 ms (80 ms capped) at 512 partitions, 150 ms (300 ms) at 4,096.

*Large batches* (``--large-batches N``, not part of ``make bench``: it writes about 1 MB a
partition) measures what the driver's record probe costs where producers write batches of about
1 MB (:mod:`kafkasync_dev.testing.large_batches`, one batch a partition): one probe round over
all N partitions alone, then the first triggers of a capped backfill on each planning path,
each with the broker's bytes sent (its sockets, ``ss``), the planning path that cut the batch,
and the probe's rounds (:func:`large_batch_measurements`).

``python -m benchmarks.trigger_cost`` prints the results as JSON; ``--tiny`` runs small sizes
in seconds (a CI smoke); ``--modes`` and ``--sizes`` choose planning paths and topic sizes
(``--modes timeIndex,recordProbes``: the promised event time beside the time index, their
batches compared); ``--profile N`` prints a pyinstrument profile of the first ``--modes``
path's trigger at N partitions. ``make bench`` calls :func:`measure`.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from typing import Any, Callable, Optional

from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from benchmarks.harness.brokers import broker_port
from benchmarks.harness.index_model import IndexModel
from benchmarks.harness.samplers import BrokerBytesSampler
from benchmarks.harness.spark import kafka_reader, session
from kafkasync_dev.testing import Record
from kafkasync_source.config.options import parse_options
from kafkasync_source.planning.offsets import SyncOffset
from kafkasync_source.planning.planner import BatchLimits, TopicPartition
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

BROKER_SIZES = (512, 4_096)
MODEL_SIZES = (512, 4_096, 16_384)
TINY_BROKER_SIZES = (16,)
TINY_MODEL_SIZES = (64,)
RECORDS_PER_PARTITION = 20
RATES_MS = (1_000, 3_000)
"""Milliseconds between records: even partitions at the first rate, odd at the second."""
LIMIT_PER_PARTITION = 5
"""``maxOffsetsPerTrigger = 5 × partitions``: a quarter of the backlog per trigger."""
REPS = 5
MODES = ("timeIndex", "fetch", "recordProbes")
"""The planning paths: the brokers' time index and the fetch path on the Kafka timestamps, and
records read at chosen offsets for the same time in the value (``eventTime.jsonPath=$.ts`` with
``eventTime.order=nonDecreasing``): each record's value holds its Kafka timestamp, so all three
must cut the same batches."""
_MODE_OPTIONS = {"timeIndex": {"planningMode": "timeIndex"}, "fetch": {"planningMode": "fetch"},
                 "recordProbes": {"eventTime.jsonPath": "$.ts", "eventTime.order": "nonDecreasing"}}
TARGETS_MS = {512: {"no_limit": 40, "max_offsets_per_trigger": 80},
              4_096: {"no_limit": 150, "max_offsets_per_trigger": 300}}
"""Issue 27's targets for the time-index path, per trigger."""


def _base_ts() -> int:
    """Six hours ago: Kafka >= 4 rejects records stamped more than an hour ahead, and the
    benchmark's topics keep old records (retention.ms=-1)."""
    return int(time.time() * 1000) - 6 * 3_600_000


def timestamp(base: int, partition: int, index: int) -> int:
    return base + index * RATES_MS[partition % 2]


def fill_topic(bootstrap: str, name: str, partitions: int, base: int) -> None:
    """Create ``name`` and produce its records, every delivery report checked. The producer
    is idempotent: a retried request must not reorder a partition's records (the broker
    would then hold a different shape than the benchmark describes); and the broker's
    largest timestamp of every partition is checked to be its last record's."""
    from confluent_kafka import Producer

    from kafkasync_dev.testing import produce_confirmed
    from kafkasync_dev.testing.broker import create_topic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(admin, name, partitions, timeout=300)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    produce_confirmed(producer, name, (Record(p, timestamp(base, p, i), None, b'{"ts":%d}' % timestamp(base, p, i))
                                       for i in range(RECORDS_PER_PARTITION) for p in range(partitions)),
                      timeout=300)
    last = RECORDS_PER_PARTITION - 1
    futures = admin.list_offsets({KafkaTopicPartition(name, p): OffsetSpec.max_timestamp()
                                  for p in range(partitions)}, request_timeout=60)
    wrong = {tp.partition: (answer.offset, answer.timestamp)
             for tp, answer in ((tp, future.result()) for tp, future in futures.items())
             if (answer.offset, answer.timestamp) != (last, timestamp(base, tp.partition, last))}
    if wrong:
        raise RuntimeError(f"topic {name}: partitions whose largest timestamp is not their last "
                           f"record's (partition: (offset, timestamp)): {dict(list(wrong.items())[:5])}")


def _reader(bootstrap: str, topic: str, mode: str, max_offsets: Optional[int]) -> KafkaSyncStreamReader:
    settings = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                "startingOffsets": "earliest", **{**_MODE_OPTIONS, **_LARGE_BATCH_MODE_OPTIONS}[mode]}
    if max_offsets is not None:
        settings["maxOffsetsPerTrigger"] = str(max_offsets)
    return KafkaSyncStreamReader(parse_options(settings, streaming=True), kafka_schema(False))


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def _lookups(reader: KafkaSyncStreamReader) -> tuple[int, int, int]:
    """(ListOffsets rounds, partitions they asked, rounds of record reads) so far; zeros on
    the fetch path."""
    index = reader._sync_driver()._time_index
    return (0, 0, 0) if index is None else (index.reader.rounds, index.reader.partitions_asked,
                                            index.records.rounds)


def _next_batch(reader: KafkaSyncStreamReader, start: dict, limit: Any) -> tuple[float, dict]:
    """The first ``latestOffset`` answer from ``start`` that is a batch, and its milliseconds:
    the fetch path answers ``start`` until its fetcher has buffered the records (Spark then
    triggers again); the time-index path answers at once."""
    deadline = time.monotonic() + 120
    while True:
        elapsed, end = _timed(lambda: reader.latestOffset(start, limit))
        if end != start:
            return elapsed, end
        if time.monotonic() > deadline:
            raise TimeoutError(f"no batch from {start} within 120 s")
        time.sleep(0.01)


def _per_trigger(before: tuple[int, int, int], after: tuple[int, int, int], triggers: int) -> dict[str, float]:
    return {"rounds": (after[0] - before[0]) / max(triggers, 1),
            "partitions_asked": (after[1] - before[1]) / max(triggers, 1),
            "record_rounds": (after[2] - before[2]) / max(triggers, 1)}


def cold_trigger_ms(bootstrap: str, topic: str, mode: str, max_offsets: Optional[int],
                    reps: int = 3) -> dict[str, Any]:
    """The first trigger of a query (nothing learnt yet), median over ``reps`` fresh readers;
    on the fetch path, the call that cuts the first batch once the backlog is fetched."""
    times, lookups = [], []
    for _ in range(reps):
        reader = _reader(bootstrap, topic, mode, max_offsets)
        try:
            start = reader.initialOffset()
            before = _lookups(reader)
            times.append(_next_batch(reader, start, reader.getDefaultReadLimit())[0])
            lookups.append(_per_trigger(before, _lookups(reader), 1))
        finally:
            reader.stop()
    return {"ms": statistics.median(times), **lookups[0]}


def trigger_cost(bootstrap: str, topic: str, partitions: int, mode: str,
                 max_offsets: Optional[int], reps: int = REPS) -> dict[str, Any]:
    """``latestOffset(start, limit)``: the first trigger of fresh readers, then on one reader
    the same start ``reps`` times after a first batch, then a walk through the backlog; each
    batch's end offsets are returned too (``ends``), so that runs can be compared."""
    cold = cold_trigger_ms(bootstrap, topic, mode, max_offsets)
    reader = _reader(bootstrap, topic, mode, max_offsets)
    try:
        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        _, first_end = _next_batch(reader, start, limit)
        same: list[float] = []
        before = _lookups(reader)
        # The fetch path moves its fetcher past a batch it cut (Spark never asks again from
        # the start of a batch it got), so asking again refetches: only the walk applies.
        for _ in range(reps if mode != "fetch" else 0):
            elapsed, end = _timed(lambda: reader.latestOffset(start, limit))
            assert end == first_end, "the same start gave a different batch"
            same.append(elapsed)
        same_lookups = _per_trigger(before, _lookups(reader), len(same))
        walk, ends = [], []
        position, total = start, partitions * RECORDS_PER_PARTITION
        before = _lookups(reader)
        while sum(SyncOffset.from_json(position).next_offsets().values()) < total:
            elapsed, end = _next_batch(reader, position, limit)
            reader.partitions(position, end)  # as Spark does before the next trigger
            walk.append(elapsed)
            ends.append({f"{tp.topic}-{tp.partition}": p.next_offset
                         for tp, p in SyncOffset.from_json(end).partitions.items()})
            position = end
        return {
            "first_trigger": cold,
            "same_start": {"ms": statistics.median(same), **same_lookups} if same else None,
            "walk": {"ms": statistics.median(walk), "batches": len(walk),
                     **_per_trigger(before, _lookups(reader), len(walk))},
            "planning": reader._sync_driver().planning,
            "ends": ends,
        }
    finally:
        reader.stop()


def broker_measurements(bootstrap: str, sizes: tuple[int, ...], reps: int = REPS,
                        spark: Any = None, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """Per size, mode and limit: :func:`trigger_cost` (the batches' ends compared across
    modes: the paths must cut the same batches here, no transactions or gaps)."""
    results: dict[str, Any] = {}
    base = _base_ts()
    for partitions in sizes:
        topic = f"trigger-cost-{partitions}-{int(time.time())}"
        fill_topic(bootstrap, topic, partitions, base)
        per_size: dict[str, Any] = {}
        for limit_name, max_offsets in (("no_limit", None),
                                        ("max_offsets_per_trigger", LIMIT_PER_PARTITION * partitions)):
            runs = {mode: trigger_cost(bootstrap, topic, partitions, mode, max_offsets, reps)
                    for mode in modes}
            ends = [run.pop("ends") for run in runs.values()]
            assert all(e == ends[0] for e in ends), f"{limit_name}: the paths cut different batches"
            if spark is not None:
                runs["format_kafka"] = format_kafka_trigger_ms(spark, bootstrap, topic, max_offsets)
            per_size[limit_name] = runs
        results[str(partitions)] = per_size
    return results


def model_trigger_ms(partitions: int, max_offsets: Optional[int], reps: int = REPS) -> dict[str, Any]:
    """``plan_from_index`` with an in-memory index of the benchmark's topic: median ms of the
    first trigger's plan, and the rounds and partitions it asks (besides latest and
    max_timestamp, which every trigger asks for every partition)."""
    model = IndexModel("model", partitions, RECORDS_PER_PARTITION, _base_ts(), lambda p: RATES_MS[p % 2])
    limits = BatchLimits(max_records=max_offsets)
    asked: list[int] = []
    now = int(time.time() * 1000)
    cut = model.plan(limits, now, asked)
    assert cut.has_batch and 0 < cut.records < partitions * RECORDS_PER_PARTITION
    milliseconds = statistics.median(_timed(lambda: model.plan(limits, now))[0] for _ in range(reps))
    return {"plan_ms": milliseconds, "rounds_per_trigger": len(asked) + 2,
            "partitions_asked_per_trigger": sum(asked) + 2 * partitions, "records": cut.records}


def model_measurements(sizes: tuple[int, ...], reps: int = REPS) -> dict[str, Any]:
    return {str(partitions): {
        "no_limit": model_trigger_ms(partitions, None, reps),
        "max_offsets_per_trigger": model_trigger_ms(partitions, LIMIT_PER_PARTITION * partitions, reps),
    } for partitions in sizes}


FORMAT_KAFKA = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
FORMAT_KAFKA_TRIGGERS = 20


def format_kafka_trigger_ms(spark: Any, bootstrap: str, topic: str, max_offsets: Optional[int]) -> dict[str, Any]:
    """format("kafka")'s trigger on the same topic, as Spark reports it (``durationMs
    ["latestOffset"]`` of its progress), median over ``FORMAT_KAFKA_TRIGGERS`` triggers with
    nothing new to read (``startingOffsets=latest``): its ``latestOffset`` is one look-up of
    the latest offsets of every partition (``KafkaMicroBatchStream.latestOffset``), with or
    without data, plus ``rateLimit``'s arithmetic. Measured without data because its batches
    run a task per partition (4,096 of them a batch on 2 cores take minutes), which is not
    the trigger's cost. ``{"skipped": why}`` when the session has no Kafka connector."""
    reader = kafka_reader(spark, "kafka", bootstrap, topic, {} if max_offsets is None else
                          {"maxOffsetsPerTrigger": str(max_offsets)}, starting="latest")
    try:
        frame = reader.load()
    except Exception as err:  # pyspark's AnalysisException names the missing data source
        if "kafka" not in str(err).lower():
            raise
        return {"skipped": f"the Spark session has no Kafka connector ({FORMAT_KAFKA}): {str(err)[:200]}"}
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # progress every trigger
    query = frame.writeStream.format("noop").trigger(processingTime="50 milliseconds").start()
    try:
        deadline = time.monotonic() + 120
        while len(query.recentProgress) < FORMAT_KAFKA_TRIGGERS + 2 and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f'format("kafka"): {query.exception()}')
            time.sleep(0.2)
        progress = query.recentProgress[2:]  # after the query's start
    finally:
        query.stop()
    times = [p.durationMs["latestOffset"] for p in progress if "latestOffset" in p.durationMs]
    return {"ms": statistics.median(times), "triggers": len(times)}


LARGE_BATCH_MODES = ("auto", "recordProbes", "fetch")
"""As :data:`MODES`, but the default ``planningMode=auto`` rather than ``timeIndex``: where the
record reads give up, the default plans the batch from fetched records (``timeIndex`` would
fail the query)."""
_LARGE_BATCH_MODE_OPTIONS: dict[str, dict[str, str]] = {"auto": {}}
LARGE_BATCH_TRIGGERS = 8
"""Triggers measured per planning path on the large-batch topic: enough for the probe's
back-off to show (asked before the 1st, 2nd, 4th and 8th batch when every round times out)."""


def probe_round_cost(bootstrap: str, topic: str, partitions: int, offset: int) -> dict[str, Any]:
    """One :class:`~kafkasync_source.driver.record_probe.RecordProbe` round asking every
    partition for the record at ``offset``: milliseconds, the broker's bytes, and whether
    it answered or gave up (its timeout)."""
    from kafkasync_source.driver.record_probe import RecordProbe
    from kafkasync_source.planning.index_planner import IndexCannotAnswer

    probe = RecordProbe({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, p): offset for p in range(partitions)}
    try:
        with BrokerBytesSampler(broker_port(bootstrap), interval_s=0.05) as sampled:
            started = time.perf_counter()
            try:
                answered = len(probe.first_records(asked))
            except IndexCannotAnswer as cannot:
                answered = partitions - len(cannot.reasons)
            elapsed = time.perf_counter() - started
            time.sleep(0.5)  # what was still in flight
    finally:
        probe.close()
    return {"ms": round(elapsed * 1000), "answered": answered, "partitions": partitions,
            "broker_bytes": sampled.bytes_sent, "records_read": probe.records_read}


def large_batch_triggers(bootstrap: str, topic: str, partitions: int, mode: str,
                         triggers: int = LARGE_BATCH_TRIGGERS) -> list[dict[str, Any]]:
    """The first ``triggers`` triggers of a backfill with ``maxOffsetsPerTrigger`` = 5 ×
    partitions on planning path ``mode``: per trigger the wall time until it gave a batch
    (the fetch path answers once its fetcher has the records), the broker's bytes sent
    meanwhile, the path that cut the batch and the probe's rounds and records read."""
    reader = _reader(bootstrap, topic, mode, LIMIT_PER_PARTITION * partitions)
    results = []
    try:
        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        index = reader._sync_driver()._time_index
        for _ in range(triggers):
            rounds, read = (index.records.rounds, index.records_read) if index is not None else (0, 0)
            with BrokerBytesSampler(broker_port(bootstrap), interval_s=0.05) as sampled:
                started = time.perf_counter()
                _, end = _next_batch(reader, start, limit)
                elapsed = time.perf_counter() - started
            reader.partitions(start, end)
            results.append({"ms": round(elapsed * 1000), "broker_bytes": sampled.bytes_sent,
                            "planning": reader._sync_driver().planning,
                            "probe_rounds": (index.records.rounds - rounds) if index is not None else 0,
                            "probe_records_read": (index.records_read - read) if index is not None else 0})
            start = end
    finally:
        reader.stop()
    return results


def large_batch_measurements(bootstrap: str, partitions: int, modes: tuple[str, ...] = LARGE_BATCH_MODES,
                             triggers: int = LARGE_BATCH_TRIGGERS,
                             log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """A topic of ``partitions`` partitions, one producer batch of about 1 MB each, then
    :func:`probe_round_cost` at offset 5 (where the capped backfill's first cut falls) and
    :func:`large_batch_triggers` per mode."""
    from confluent_kafka import Producer

    from kafkasync_dev.testing.broker import create_topic
    from kafkasync_dev.testing.large_batches import BATCH_PAYLOAD_BYTES, BATCH_RECORDS, produce_large_batches

    topic = f"large-batches-{partitions}-{int(time.time())}"
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, partitions, timeout=300)
    log(f"large batches: writing {partitions} x {BATCH_PAYLOAD_BYTES:,} payload bytes")
    started = time.monotonic()
    produce_large_batches(lambda settings: Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                                     **settings}), topic, partitions, 1, _base_ts(), timeout=600)
    results: dict[str, Any] = {"partitions": partitions, "batch_payload_bytes": BATCH_PAYLOAD_BYTES,
                               "records_per_partition": BATCH_RECORDS,
                               "max_offsets_per_trigger": LIMIT_PER_PARTITION * partitions,
                               "produce_s": round(time.monotonic() - started)}
    log("large batches: one probe round")
    results["probe_round"] = probe_round_cost(bootstrap, topic, partitions, LIMIT_PER_PARTITION)
    for mode in modes:
        log(f"large batches: {triggers} triggers, {mode}")
        results[mode] = large_batch_triggers(bootstrap, topic, partitions, mode, triggers)
    return results


def measure(*, tiny: bool = False, kafka_version: str = "4.3.1", bootstrap: Optional[str] = None,
            reps: int = REPS, spark: Any = None, modes: tuple[str, ...] = MODES,
            sizes: Optional[tuple[int, ...]] = None,
            log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """The whole measurement: a broker of its own (unless ``bootstrap`` names one), the
    broker sizes (``sizes``, else the default or tiny ones) for the planning paths
    ``modes``, the model sizes. ``tiny``: one small size each, for a smoke run. With a
    ``spark`` session that has the Kafka connector, format("kafka")'s trigger beside."""
    broker_sizes = sizes or (TINY_BROKER_SIZES if tiny else BROKER_SIZES)
    model_sizes = TINY_MODEL_SIZES if tiny else MODEL_SIZES
    results: dict[str, Any] = {"records_per_partition": RECORDS_PER_PARTITION,
                               "max_offsets_per_trigger": f"{LIMIT_PER_PARTITION} x partitions",
                               "reps": reps, "targets_ms": TARGETS_MS}
    log(f"trigger cost: model at {model_sizes} partitions")
    results["model"] = model_measurements(model_sizes, reps)
    if bootstrap is not None:
        results["broker"] = {"bootstrap": bootstrap,
                             **broker_measurements(bootstrap, broker_sizes, reps, spark, modes)}
        return results
    from kafkasync_dev.testing.kafka_dist import maven_kafka
    from kafkasync_dev.testing.local_broker import LocalKafkaBroker

    with LocalKafkaBroker(maven_kafka(kafka_version)) as broker:
        log(f"trigger cost: Apache Kafka {broker.version()} at {broker.bootstrap_servers}, "
            f"{broker_sizes} partitions")
        results["broker"] = {"kafka_version": broker.version(),
                             **broker_measurements(broker.bootstrap_servers, broker_sizes, reps, spark, modes)}
    return results


def profile(partitions: int, *, kafka_version: str = "4.3.1", limited: bool = True,
            mode: str = "timeIndex") -> str:
    """A pyinstrument profile of the first trigger of ``REPS`` fresh readers of the planning
    path ``mode`` (the trigger that has learnt nothing yet, and so asks the most)."""
    from pyinstrument import Profiler

    from kafkasync_dev.testing.kafka_dist import maven_kafka
    from kafkasync_dev.testing.local_broker import LocalKafkaBroker

    with LocalKafkaBroker(maven_kafka(kafka_version)) as broker:
        topic = f"trigger-profile-{partitions}"
        fill_topic(broker.bootstrap_servers, topic, partitions, _base_ts())
        profiler = Profiler(interval=0.0005)
        for _ in range(REPS):
            reader = _reader(broker.bootstrap_servers, topic, mode,
                             LIMIT_PER_PARTITION * partitions if limited else None)
            try:
                start = reader.initialOffset()
                limit = reader.getDefaultReadLimit()
                with profiler:
                    reader.latestOffset(start, limit)
            finally:
                reader.stop()
        return profiler.output_text(unicode=False, color=False)


def _large_batches(partitions: int, bootstrap: Optional[str], kafka_version: str,
                   modes: tuple[str, ...]) -> dict[str, Any]:
    """:func:`large_batch_measurements` on ``bootstrap``, or on a broker of its own."""
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if bootstrap is not None:
        return large_batch_measurements(bootstrap, partitions, modes, log=log)
    from kafkasync_dev.testing.kafka_dist import maven_kafka
    from kafkasync_dev.testing.local_broker import LocalKafkaBroker

    with LocalKafkaBroker(maven_kafka(kafka_version)) as broker:
        log(f"large batches: Apache Kafka {broker.version()} at {broker.bootstrap_servers}")
        return {"kafka_version": broker.version(),
                **large_batch_measurements(broker.bootstrap_servers, partitions, modes, log=log)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes, seconds: a smoke run")
    parser.add_argument("--bootstrap", help="a running broker instead of one of its own")
    parser.add_argument("--kafka-version", default="4.3.1")
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--profile", type=int, metavar="PARTITIONS",
                        help="print a profile of the first trigger (of the first --modes path) at this many partitions")
    parser.add_argument("--no-limit", action="store_true", help="profile without maxOffsetsPerTrigger")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated planning paths to measure (of {', '.join(MODES)}); "
                             "with --profile, the first one is profiled")
    parser.add_argument("--sizes", help="comma-separated partition counts of the broker topics "
                                        f"(default {','.join(map(str, BROKER_SIZES))})")
    parser.add_argument("--large-batches", type=int, metavar="PARTITIONS",
                        help="only the record probe's cost on a topic of this many partitions written in "
                             "producer batches of about 1 MB (one a partition)")
    parser.add_argument("--spark-kafka-jars", metavar="JARS",
                        help='comma-separated jars of Spark\'s Kafka connector: measure format("kafka") too')
    args = parser.parse_args(argv)
    # A terminated run still stops its broker (the with-blocks close on SystemExit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    modes = tuple(args.modes.split(","))
    unknown = set(modes) - set(MODES) - set(LARGE_BATCH_MODES)
    if unknown:
        parser.error(f"--modes: unknown planning paths {sorted(unknown)} (known: {', '.join(MODES)}; "
                     f"with --large-batches also auto)")
    if args.profile:
        print(profile(args.profile, kafka_version=args.kafka_version, limited=not args.no_limit, mode=modes[0]))
        return 0
    if args.large_batches:
        print(json.dumps(_large_batches(args.large_batches, args.bootstrap, args.kafka_version,
                                        LARGE_BATCH_MODES if args.modes == ",".join(MODES) else modes), indent=1))
        return 0
    spark = session("kafkasync-trigger-cost", jars=args.spark_kafka_jars) if args.spark_kafka_jars else None
    results = measure(tiny=args.tiny, kafka_version=args.kafka_version, bootstrap=args.bootstrap,
                      reps=args.reps, spark=spark, modes=modes,
                      sizes=tuple(int(size) for size in args.sizes.split(",")) if args.sizes else None,
                      log=lambda message: print(message, file=sys.stderr, flush=True))
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
