"""The highest live rate each source keeps up with, and what a record costs in CPU, beside
Spark's own ``format("kafka")`` in one run, on the machine as it is and with its CPU made scarce.

Why: a live stream that falls behind never catches up, and on a slow or busy machine the source
that needs more CPU per record falls behind first (issue 42: on a busy 2-core machine, 2,000
records/s kept up with ``format("kafka")`` and fell behind with kafkasync). A latency measured at
one rate on a quiet machine cannot show that; the rate at which each falls behind, on a machine
with spare CPU and on one without, can.

**Conditions.** ``as is``: the machine as it is. ``CPU starved``: one busy-loop process per core
(``while True: pass``, at the default nice level) runs beside the whole measurement, so Spark,
its Python workers, the broker and the producer get about half the cores they would: what a
slower or busier machine does, shown on a fast one.

**Steps.** Each source runs in a Spark of its own (a child process, ``harness.children.Child``),
both kept up for the whole run and taking turns step by step, which one goes first alternating,
so that other work on a shared machine weighs on both alike. A step: a new topic of 8
partitions, a new query on it (default trigger, ``read_committed``, ``max.task.idle.ms=0`` for
kafkasync, into ``foreachBatch``), and a producer process (``harness.backlogs.PacedProducer``)
writing 100-byte records at the step's rate (:data:`RATES`) for :data:`STEP_SECONDS`. A record's
latency runs from its ``CreateTime`` to its batch's ``foreachBatch``. The first
:data:`WARM_UP_SECONDS` of a step are its warm-up and its last :data:`TAIL_SECONDS` its end;
over the rest (the steady window) a rate is **sustained** when the p99 latency stays under
:data:`BOUND_MS` (a record still missing :data:`DRAIN_SECONDS` after the producer stopped counts
as later than that), and the median latency of the window's last third is at most
:data:`GROWTH_MS` above its first third's (a source falling behind shows there first). A
source's steps stop at its first rate not sustained once :data:`COST_RATE` has been measured, to
keep the run short. With the defaults a step takes about 45 s (36 s of production, 10 s of
warm-up, 4 s of tail) and a condition at most 4 steps per source: the whole benchmark about 15
minutes on 2 cores (2 Spark starts, 2 x 30 s of JVM warm-up, 16 steps at most).

**CPU.** Over each step's steady window, the CPU seconds of every process
(``harness.samplers.cpu_seconds_by_process``: the Spark JVM, the Python workers, the Python source runner,
the broker and the PySpark driver; neither the producer nor the busy loops) per 1,000 records
produced in it, and the sum. Records produced per second are measured (a starved producer may
fall short of its rate).

**Targets** (issue 42, :func:`targets`): in each condition kafkasync's sustainable rate at least
``format("kafka")``'s and its CPU per record at most ``format("kafka")``'s at :data:`COST_RATE`;
with the CPU starved, its p99 there at most 100 ms above ``format("kafka")``'s.

``python -m benchmarks.live_rate [--tiny] [--rates 1000,2000] [--conditions starved]
[--write]`` prints JSON; ``--write`` merges it into ``benchmarks/results.json`` under
``side_by_side.live_rate``. ``benchmarks.side_by_side`` runs it after its latency comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from benchmarks.harness.backlogs import PARTITIONS, PacedProducer
from benchmarks.harness.children import Child, serve
from benchmarks.harness.queries import arrival_sink, phases, steady_batches, wait_for_a_row
from benchmarks.harness.samplers import cpu_seconds_between, cpu_seconds_by_process, machine_busy_seconds
from benchmarks.harness.spark import LABELS, SOURCES, compared_options, jvm_pid, kafka_reader, session

VALUE = b"v" * 100
RATES = (1_000, 2_000, 4_000, 8_000)
STEP_SECONDS = 36.0
WARM_UP_SECONDS = 10.0
"""A step's first seconds: the new query's first batches, its consumers' first fetches."""
BOUND_MS = 2_000.0
GROWTH_MS = 500.0
TAIL_SECONDS = 4.0
"""A step's last seconds of production, outside its steady window: when the producer stops, a
consumer's fetch left open for records that no longer come holds up the last batch (measured:
``format("kafka")``'s last batch 1.5-2.3 s after the producer's end, its 8 Java consumers each
waiting out ``fetch.max.wait.ms``, 500 ms, at 1,000 records/s with p50 400 ms). That is the
end of a stream, not its sustainable rate."""
DRAIN_SECONDS = 10.0
"""How long a step waits, after its producer stopped, for records still undelivered."""
COST_RATE = 2_000
"""The rate at which CPU per record is compared (the issue's), measured in every condition even
after a lower rate was not sustained, and the rate of the starved-latency target."""
CONDITIONS = {"as is": 0, "CPU starved": -1}
"""Condition -> busy-loop processes beside the run (-1: one per core)."""
TARGETS = {"starved_p99_extra_ms_at_2000": 100.0}
JVM_WARM_UP_SECONDS = 30.0
"""Each source's first query, unmeasured, before any step."""


# -- the child: one Spark, one source, the rate steps -------------------------------------------

def _create_topic(bootstrap: str, topic: str) -> None:
    """A new topic holding one record a partition, so a new query's first batch has rows."""
    from kafkasync_dev.testing.broker import KafkaBroker
    from kafkasync_dev.testing.mock_cluster import Record

    with KafkaBroker(bootstrap) as broker:
        broker.create_topic(topic, PARTITIONS)
        now_ms = int(time.time() * 1000)
        broker.produce(topic, (Record(p, now_ms, value=VALUE) for p in range(PARTITIONS)))


def step(spark, source: str, bootstrap: str, rate: int, seconds: float, warm_up_s: float) -> dict[str, Any]:
    """One rate step (see the module's docstring): latency quantiles over the steady window,
    whether the rate was sustained, CPU seconds per 1,000 records per process, batch phases."""
    topic = f"kafkasync-live-rate-{source}-{rate}-{time.time_ns()}"
    _create_topic(bootstrap, topic)
    arrivals, sink = arrival_sink()
    query = (kafka_reader(spark, source, bootstrap, topic, compared_options(source)).load()
             .writeStream.foreachBatch(sink).start())
    try:
        wait_for_a_row(query, source, arrivals)
        producer = PacedProducer(bootstrap, topic, rate, seconds, process=True)
        time.sleep(warm_up_s)
        cpu_before, machine_before = cpu_seconds_by_process(jvm_pid(spark)), machine_busy_seconds(stolen=True)
        clock_before = time.monotonic()
        time.sleep(max(0.0, seconds - warm_up_s - TAIL_SECONDS))
        cpu_after, machine_after = cpu_seconds_by_process(jvm_pid(spark)), machine_busy_seconds(stolen=True)
        clock_after = time.monotonic()
        produced = producer.result()
        # A sustained rate delivers its last records within the bound; wait longer, to tell a
        # source that is late from one that lost records or stalled.
        wait_until = time.monotonic() + DRAIN_SECONDS
        expected = int(produced["records"]) + PARTITIONS
        while time.monotonic() < wait_until and sum(len(s) for _, s in list(arrivals)) < expected:
            time.sleep(0.05)
        progress = query.recentProgress
    finally:
        query.stop()
    began_ms = produced["began_ms"]
    steady_from_ms = began_ms + warm_up_s * 1000
    steady_to_ms = began_ms + (seconds - TAIL_SECONDS) * 1000
    arrived = list(arrivals)  # the query is stopped: no batch is added any more
    delivered = sum(len(stamps) for _, stamps in arrived)
    latencies = sorted((stamp, at - stamp) for at, stamps in arrived for stamp in stamps
                       if steady_from_ms <= stamp < steady_to_ms)
    # Records never delivered are the last ones produced: those beyond the producer's last
    # TAIL_SECONDS are outside the window, the rest in it, their latency past any bound.
    missing = max(0, expected - delivered - round(produced["records"] / produced["seconds"] * TAIL_SECONDS))
    values = sorted([latency for _, latency in latencies] + [float("inf")] * missing)
    thirds = [[latency for stamp, latency in latencies
               if steady_from_ms + k * (steady_to_ms - steady_from_ms) / 3 <= stamp
               < steady_from_ms + (k + 1) * (steady_to_ms - steady_from_ms) / 3] for k in (0, 2)]
    growth = (statistics.median(thirds[1]) - statistics.median(thirds[0])
              if all(thirds) else float("inf"))
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))] if values else float("inf")
    window_records = produced["records"] * (clock_after - clock_before) / produced["seconds"]
    cpu = {name: used * 1000 / window_records for name, used in cpu_seconds_between(cpu_before, cpu_after).items()}
    cpu["total"] = sum(cpu.values())
    return {
        "rate": rate, "produced_per_s": produced["records"] / produced["seconds"],
        "p50_ms": _finite(values[len(values) // 2]) if values else None, "p99_ms": _finite(p99),
        "missing_records": missing, "median_growth_ms": _finite(growth),
        "last_batch_after_producer_ms": max((at for at, stamps in arrivals if stamps), default=0)
        - began_ms - produced["seconds"] * 1000,
        "sustained": p99 < BOUND_MS and missing == 0 and growth <= GROWTH_MS,
        "cpu_s_per_1000_records": cpu,
        "cores": {name: seconds_per_1000 * window_records / 1000 / (clock_after - clock_before)
                  for name, seconds_per_1000 in cpu.items()},
        "machine_busy_cores": (machine_after - machine_before) / (clock_after - clock_before),
        "trigger_ms": phases(progress, steady_from_ms),
        "batch_ms_p90_max": _p90_max([p.durationMs.get("triggerExecution", 0)
                                      for p in steady_batches(progress, steady_from_ms)]),
        "batches_per_s": sum(1 for at, stamps in arrivals if stamps and steady_from_ms <= at < steady_to_ms)
        / (steady_to_ms - steady_from_ms) * 1000,
    }


def _p90_max(durations: list[float]) -> list[float]:
    """A step's slow batches: where a p99 latency far above the median batch comes from."""
    ordered = sorted(durations)
    return [ordered[len(ordered) * 9 // 10], ordered[-1]] if ordered else []


def _finite(value: float) -> Optional[float]:
    """JSON has no infinity: a latency past every record delivered is null."""
    return None if value == float("inf") else value


def child_main(argv: list[str]) -> None:
    """One Spark for one source, kept between steps (``harness.children.serve``): each request
    ``rate seconds warm_up`` answered with a step's figures."""
    source, bootstrap, jars = argv
    spark = session("kafkasync-live-rate", jars=jars)
    try:
        serve(lambda request: step(spark, source, bootstrap, *_step_request(request)))
    finally:
        spark.stop()


def _step_request(request: str) -> tuple[int, float, float]:
    rate, seconds, warm_up_s = request.split()
    return int(rate), float(seconds), float(warm_up_s)


# -- the parent: conditions, sources, the summary -----------------------------------------------

@contextmanager
def busy_loops(count: int) -> Iterator[int]:
    """``count`` processes spinning ``while True: pass`` (-1: one per core) for the block: CPU made
    scarce on purpose, at the default nice level, as other work on a busy machine would."""
    count = (os.cpu_count() or 1) if count < 0 else count
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield count
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _step_line(figures: dict[str, Any]) -> str:
    """A step's figures on one line, for the log."""
    def ms(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:,.0f}"

    return (f"p50/p99 {ms(figures['p50_ms'])}/{ms(figures['p99_ms'])} ms, growth {ms(figures['median_growth_ms'])} ms, "
            f"missing {figures['missing_records']}, sustained {figures['sustained']}; batch "
            f"{ms(figures['trigger_ms'].get('triggerExecution'))} ms; CPU "
            f"{figures['cpu_s_per_1000_records']['total']:.3f} s per 1,000 records; machine busy "
            f"{figures['machine_busy_cores']:.2f} cores")


def warm_up_broker(bootstrap: str, records: int = 200_000) -> None:
    """Records written to a topic and read back, unmeasured: a broker just started compiles its
    produce and fetch paths for a minute (its JIT used a quarter of a core), which would weigh on
    whichever source is measured first."""
    from confluent_kafka import Consumer, KafkaError

    topic = f"kafkasync-live-rate-warm-up-{time.time_ns()}"
    _create_topic(bootstrap, topic)
    PacedProducer(bootstrap, topic, 20_000, records / 20_000, process=True).result()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    consumer.subscribe([topic])
    ended: set[int] = set()
    deadline = time.monotonic() + 60
    while len(ended) < PARTITIONS and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=0.5):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition() or 0)
    consumer.close()


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The highest rate sustained (0: none), and the steps by rate. Not "every lower rate too":
    on a shared machine a burst of other work can push one step's p99 past the bound while the
    next, higher step keeps it; the steps say which."""
    sustained = [figures["rate"] for figures in steps if figures["sustained"]]
    return {"sustainable_rate": max(sustained, default=0), "steps": {str(s["rate"]): s for s in steps}}


def measure(bootstrap: str, jars: str, *, rates: tuple[int, ...] = RATES, seconds: float = STEP_SECONDS,
            warm_up_s: float = WARM_UP_SECONDS, jvm_warm_up_s: float = JVM_WARM_UP_SECONDS,
            conditions: Optional[dict[str, int]] = None,
            log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Every condition, both sources, the rate steps (see the module's docstring). Both sources'
    Sparks stay up for the whole run and take turns step by step (which goes first alternates),
    so that other work on a shared machine weighs on both alike."""
    conditions = CONDITIONS if conditions is None else conditions
    result: dict[str, Any] = {"rates": list(rates), "step_seconds": seconds, "warm_up_seconds": warm_up_s,
                              "bound_ms": BOUND_MS, "growth_ms": GROWTH_MS, "partitions": PARTITIONS,
                              "value_bytes": len(VALUE), "cores": os.cpu_count(), "conditions": {}}
    started = time.monotonic()
    log("live rate: warming the broker up")
    warm_up_broker(bootstrap)
    children: list[tuple[str, Child]] = []
    try:
        for source in SOURCES:
            log(f"live rate: starting {LABELS[source]}'s Spark, and its first query, unmeasured")
            children.append((source, Child("benchmarks.live_rate", source, bootstrap, jars)))
            # A new JVM compiles Spark's and the connector's paths for its first minute: a step
            # at the start would measure that, and whichever source went first.
            children[-1][1].ask(f"{COST_RATE} {jvm_warm_up_s} {jvm_warm_up_s / 2}")
        for condition, loops in conditions.items():
            with busy_loops(loops) as spinning:
                figures: dict[str, Any] = {"busy_loops": spinning, "load_average_start": os.getloadavg()}
                steps: dict[str, list[dict[str, Any]]] = {source: [] for source in SOURCES}
                for index, rate in enumerate(rates):
                    for source, child in children if index % 2 == 0 else children[::-1]:
                        done = steps[source]
                        if done and not done[-1]["sustained"] and done[-1]["rate"] >= COST_RATE:
                            continue  # it fell behind at a lower rate: a higher one is not sustained either
                        done.append(child.ask(f"{rate} {seconds} {warm_up_s}"))
                        log(f"live rate: {condition}: {LABELS[source]} at {rate:,}/s: {_step_line(done[-1])}")
                for source in SOURCES:
                    figures[LABELS[source]] = summarize(steps[source])
                figures["load_average_end"] = os.getloadavg()
            result["conditions"][condition] = figures
    finally:
        for _, child in children:
            child.close()
    result["minutes"] = (time.monotonic() - started) / 60
    result["targets"] = targets(result)
    return result


def targets(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 42's targets, per condition: kafkasync's sustainable rate at least format("kafka")'s,
    its CPU per record (broker included) at most format("kafka")'s at :data:`COST_RATE`, and with
    the CPU starved its p99 at :data:`COST_RATE` at most format("kafka")'s + 100 ms."""
    met: dict[str, Any] = {}
    kafka_label, kafkasync_label = LABELS["kafka"], LABELS["kafkasync"]
    for condition, figures in result["conditions"].items():
        kafka, kafkasync = figures[kafka_label], figures[kafkasync_label]
        entry: dict[str, Any] = {
            "sustainable_rate": {"value": kafkasync["sustainable_rate"], "format_kafka": kafka["sustainable_rate"],
                                 "met": kafkasync["sustainable_rate"] >= kafka["sustainable_rate"]}}
        at_kafka, at_kafkasync = kafka["steps"].get(str(COST_RATE)), kafkasync["steps"].get(str(COST_RATE))
        if at_kafka and at_kafkasync:
            ours, theirs = (at["cpu_s_per_1000_records"]["total"] for at in (at_kafkasync, at_kafka))
            entry["cpu_s_per_1000_records"] = {"value": ours, "format_kafka": theirs, "met": ours <= theirs}
            if CONDITIONS.get(condition) != 0:
                p99s = at_kafkasync["p99_ms"], at_kafka["p99_ms"]
                entry["p99_extra_ms"] = {
                    "value": None if None in p99s else p99s[0] - p99s[1],
                    "target": f"<= {TARGETS['starved_p99_extra_ms_at_2000']}",
                    "met": None not in p99s and p99s[0] - p99s[1] <= TARGETS["starved_p99_extra_ms_at_2000"]}
        met[condition] = entry
    return met


def measure_tiny(bootstrap: str, jars: str, *, rates: Optional[tuple[int, ...]] = None,
                 seconds: Optional[float] = None, conditions: Optional[dict[str, int]] = None,
                 log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """A smoke run of :func:`measure` (``make bench-smoke``): one rate, 7 s steps (1 s of warm-up,
    :data:`TAIL_SECONDS` of tail, so a steady window of 2 s), 2 s of JVM warm-up."""
    return measure(bootstrap, jars, rates=rates or (COST_RATE,), seconds=seconds or 7.0, warm_up_s=1.0,
                   jvm_warm_up_s=2.0, conditions=conditions, log=log)


def measure_here(*, tiny: bool = False, rates: Optional[tuple[int, ...]] = None,
                 conditions: Optional[dict[str, int]] = None, seconds: Optional[float] = None,
                 log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """:func:`measure` on ``real_broker``'s broker with Spark's connector, or ``{"skipped": why}``.
    ``tiny``: one rate, short steps (a smoke run: the figures exist, their values mean nothing)."""
    from benchmarks.harness.brokers import broker_and_connector

    with broker_and_connector() as (bootstrap, jars, why_not):
        if bootstrap is None:
            return {"skipped": why_not}
        if tiny:
            return measure_tiny(bootstrap, jars, rates=rates, seconds=seconds, conditions=conditions, log=log)
        return measure(bootstrap, jars, rates=rates or RATES, seconds=seconds or STEP_SECONDS,
                       conditions=conditions, log=log)


def main(argv: Optional[list[str]] = None) -> int:
    from benchmarks.harness import results as results_file

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="one rate, 7 s steps: a smoke run")
    parser.add_argument("--rates", help="comma-separated records/s, instead of the default steps")
    parser.add_argument("--seconds", type=float, help="a step's length, instead of the default")
    parser.add_argument("--conditions", choices=("both", "as-is", "starved"), default="both")
    parser.add_argument("--write", action="store_true", help="into benchmarks/results.json (side_by_side.live_rate)")
    args = parser.parse_args(argv)
    conditions = {"both": CONDITIONS, "as-is": {"as is": 0}, "starved": {"CPU starved": -1}}[args.conditions]
    rates = tuple(int(r) for r in args.rates.split(",")) if args.rates else None
    results = measure_here(tiny=args.tiny, rates=rates, conditions=conditions, seconds=args.seconds,
                           log=results_file.log)
    results_file.print_json(results)
    if args.write and "skipped" not in results:
        results_file.merge(("side_by_side", "live_rate"), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
