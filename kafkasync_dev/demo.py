"""Why kafkasync exists, in one run: ``python -m kafkasync_dev.demo`` (``make demo``).

A backfill where Spark's own Kafka source loses records: ``orders`` (2 partitions) holds 12 h of
event time, one order a minute; ``payments`` (1 partition) only the last 2 h, one payment every
20 s (:func:`kafkasync_dev.testing.backfills.spans`). The same watermarked windowed count::

    events.withWatermark("timestamp", "10 minutes")
          .groupBy(window("timestamp", "5 minutes"), "topic").count()

reads it from earliest with ``maxOffsetsPerTrigger=200``, as a large backfill is usually read:

1. kafkasync's default: each batch is the first 200 records in Kafka Streams' processing order
   (the oldest head record first), so every partition advances through the same event time and
   nothing arrives behind the watermark.
2. ``max.task.idle.ms=-1``: ``format("kafka")``'s admission. The cap is split as Spark's
   ``KafkaMicroBatchStream.rateLimit`` splits it, in proportion to each partition's remaining
   *offsets*, so every batch also takes payments, whose event time starts ten hours after the
   orders'. The watermark follows the payments, and the orders read in later batches are behind
   it and dropped.
3. ``format("kafka")`` itself, when its connector is on the classpath (``spark.jars.packages``,
   ``PYSPARK_SUBMIT_ARGS``, or jar paths in ``KAFKASYNC_SPARK_KAFKA_JARS``) and a real broker is
   given in ``KAFKASYNC_BOOTSTRAP`` (its Java client cannot talk to the embedded cluster). The
   demo then produces the data into that broker and runs all three there; otherwise it says why
   the third run was skipped and uses the embedded cluster.

Where format("kafka") does *not* lose records: without a rate limit a backlog is one batch, and
a watermark only acts from the next batch on, so nothing of the backlog is dropped.

All data is produced before the queries start, and kafkasync cuts batches from the data and
the options alone, so the outcome does not depend on luck. The dropped-record count is checked
three ways: Spark's ``numRowsDroppedByWatermark`` (which counts *partially aggregated* rows, one
per window and task, not input records), the independent count input records minus records
counted in the aggregate's output, and a prediction from each batch's offset ranges and the
watermark Spark applied to it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

# ----------------------------------------------------------------------------- scenario

WATERMARK_DELAY = "10 minutes"
WINDOW = "5 minutes"
WINDOW_MS = 5 * 60 * 1000
MAX_OFFSETS_PER_TRIGGER = 200
MAX_BATCHES_SHOWN = 8
QUERY_TIMEOUT_S = 180


@dataclass(frozen=True)
class RunSpec:
    label: str
    source: str  # the format() name
    options: Mapping[str, Any]
    title: str


RUNS = (
    RunSpec("kafkasync", "kafkasync", {"maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER},
            "kafkasync's default: the first 200 records in Kafka Streams' order"),
    RunSpec("kafkasync -1", "kafkasync",
            {"maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER, "max.task.idle.ms": -1},
            "max.task.idle.ms=-1: format(\"kafka\")'s admission, 200 split in proportion to offsets"),
    RunSpec('format("kafka")', "kafka", {"maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER},
            "Spark's own Kafka source"),
)

# ------------------------------------------------------------------------ pure helpers


def hhmm(ms: Optional[int]) -> str:
    """``HH:MM`` (UTC) of an epoch-millisecond time; ``-`` when there is none (< 0 / None)."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M")


def parse_watermark(value: Optional[str]) -> int:
    """Spark's progress ``eventTime.watermark`` (ISO-8601, UTC) as epoch ms; 0 when absent."""
    if not value:
        return 0
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


@dataclass(frozen=True)
class SourceOffset:
    """The parts of a kafkasync offset JSON the demo shows."""

    positions: dict  # (topic, partition) -> next offset
    partition_times: dict  # (topic, partition) -> largest event time emitted so far
    stream_time: int
    enforced_total: int
    late_total: int = 0  # records emitted behind the stream time already reached

    @classmethod
    def parse(cls, value: Any) -> "SourceOffset":
        """A kafkasync offset, or format("kafka")'s ``{"topic": {"0": offset}}``."""
        data = json.loads(value) if isinstance(value, str) else value
        if "topics" not in data:
            positions = {(t, int(p)): int(o) for t, ps in data.items() for p, o in ps.items()}
            return cls(positions, {tp: -1 for tp in positions}, -1, 0)
        positions, times = {}, {}
        for topic, entries in data["topics"].items():
            for partition, entry in entries.items():
                tp = (topic, int(partition))
                positions[tp] = int(entry["offset"])
                times[tp] = int(entry.get("partitionTime", -1))
        return cls(
            positions,
            times,
            int(data.get("streamTime", -1)),
            int(data.get("enforcedProcessingTotal", 0)),
            int(data.get("lateRecordsTotal", 0)),
        )


@dataclass(frozen=True)
class Batch:
    """One micro-batch that read data, as its progress report describes it."""

    batch_id: int
    starts: dict  # (topic, partition) -> first offset read
    end: SourceOffset
    input_rows: int
    late_watermark_ms: int  # the watermark Spark filtered this batch's late rows with
    spark_dropped: int  # sum of numRowsDroppedByWatermark over the stateful operators


def batches_from_progress(progress: Sequence[Mapping[str, Any]]) -> list[Batch]:
    """The data batches of a query, from ``query.recentProgress`` (dicts, oldest first).

    Spark filters late rows of batch N with the watermark that batch N-1 ended with (its
    progress' ``eventTime.watermark``; the watermark reported for batch N itself is the one
    used to evict state). Batches without a previous report start from 0 (no watermark).
    """
    watermark_after: dict[int, int] = {}
    for p in progress:
        watermark_after[p["batchId"]] = parse_watermark((p.get("eventTime") or {}).get("watermark"))
    batches = []
    previous_end: Optional[SourceOffset] = None
    for p in progress:
        source = p["sources"][0]
        if not source.get("endOffset"):
            continue
        end = SourceOffset.parse(source["endOffset"])
        if source.get("startOffset"):
            starts = SourceOffset.parse(source["startOffset"]).positions
        elif previous_end is not None:
            starts = previous_end.positions
        else:
            starts = {}
        previous_end = end
        if p["numInputRows"] == 0:
            continue
        batches.append(
            Batch(
                batch_id=p["batchId"],
                starts={tp: starts.get(tp, 0) for tp in end.positions},
                end=end,
                input_rows=p["numInputRows"],
                late_watermark_ms=watermark_after.get(p["batchId"] - 1, 0),
                spark_dropped=sum(
                    op.get("numRowsDroppedByWatermark", 0) for op in p.get("stateOperators", [])
                ),
            )
        )
    return batches


def window_end(ts_ms: int, window_ms: int = WINDOW_MS) -> int:
    """End (exclusive) of the tumbling window holding ``ts_ms`` (windows aligned to the epoch)."""
    return ts_ms - ts_ms % window_ms + window_ms


def predicted_drops(
    batch: Batch,
    timestamps: Callable[[tuple], Sequence[int]],
    window_ms: int = WINDOW_MS,
) -> dict:
    """Records of ``batch`` a windowed aggregation drops, per topic.

    Spark drops a row whose window ends at or before the watermark (``window.end <=
    watermark``): its window may already have been emitted and evicted. Offsets index the
    produced timestamps directly (the demo's topics have no offset gaps).
    """
    dropped: dict[str, int] = {}
    for tp, end in batch.end.positions.items():
        late = sum(
            1
            for ts in timestamps(tp)[batch.starts[tp]:end]
            if window_end(ts, window_ms) <= batch.late_watermark_ms
        )
        dropped[tp[0]] = dropped.get(tp[0], 0) + late
    return dropped


def records_per_topic(batches: Iterable[Batch]) -> dict:
    """Input records per topic, from the batches' offset ranges."""
    total: dict[str, int] = {}
    for batch in batches:
        for tp, end in batch.end.positions.items():
            total[tp[0]] = total.get(tp[0], 0) + end - batch.starts[tp]
    return total


def counted_per_topic(window_counts: Mapping[tuple, int]) -> dict:
    """Records the aggregation counted per topic: ``{(window_start, topic): count}`` summed."""
    total: dict[str, int] = {}
    for (_, topic), count in window_counts.items():
        total[topic] = total.get(topic, 0) + count
    return total


def dropped_per_topic(inputs: Mapping[str, int], counted: Mapping[str, int]) -> dict:
    """The independent count: records read minus records the aggregate output accounts for."""
    return {topic: n - counted.get(topic, 0) for topic, n in inputs.items()}


def differing_windows(a: Mapping[tuple, int], b: Mapping[tuple, int]) -> dict:
    """Per topic, how many ``(window, topic)`` counts differ between two results."""
    diff: dict[str, int] = {}
    for key in set(a) | set(b):
        if a.get(key, 0) != b.get(key, 0):
            diff[key[1]] = diff.get(key[1], 0) + 1
    return diff


def fmt(n: int) -> str:
    return f"{n:,}"


def batch_table(batches: Sequence[Batch], drops: Sequence[Mapping[str, int]], limit: int) -> list[str]:
    """Per batch: event time reached per partition, stream time, watermark, rows, drops."""
    tps = sorted({tp for b in batches for tp in b.end.positions})
    names = [f"{t}-{p}" for t, p in tps]
    width = max([10] + [len(n) for n in names])
    head = "  batch " + "".join(f"{n:>{width + 1}}" for n in names)
    head += "  stream time  watermark   rows  dropped"
    lines = [head]
    shown: list[Optional[tuple[Batch, Mapping[str, int]]]] = list(zip(batches, drops))
    if len(shown) > limit:
        shown = shown[: limit - 1] + [None] + shown[-1:]
    for item in shown:
        if item is None:
            lines.append("  " + "...".rjust(5))
            continue
        b, d = item
        row = f"  {b.batch_id:>5} " + "".join(
            f"{hhmm(b.end.partition_times.get(tp)):>{width + 1}}" for tp in tps
        )
        watermark = hhmm(b.late_watermark_ms) if b.late_watermark_ms > 0 else "-"
        row += f"  {hhmm(b.end.stream_time):>11}  {watermark:>9}  {b.input_rows:>5}  {sum(d.values()):>7}"
        lines.append(row)
    return lines


# ------------------------------------------------------------------------------ running


@dataclass
class RunResult:
    spec: RunSpec
    batches: list
    window_counts: dict  # (window_start, topic) -> count
    drops: list  # per batch: {topic: predicted dropped}
    seconds: float


def _spark_session(log_path: str):
    """One local SparkSession; the JVM's (and its Python workers') stderr goes to log_path.
    ``KAFKASYNC_SPARK_KAFKA_JARS`` (comma-separated jar paths) adds format("kafka")."""
    from kafkasync_dev.testing.spark import local_spark_session

    conf = {
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        # Only batches that read data: no extra batches just to advance the watermark.
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    }
    if os.environ.get("KAFKASYNC_SPARK_KAFKA_JARS"):
        conf["spark.jars"] = os.environ["KAFKASYNC_SPARK_KAFKA_JARS"]
    return local_spark_session(
        "kafkasync-demo", os.path.join(os.path.dirname(log_path), "warehouse"), conf,
        jvm_log=log_path,
    )


def format_kafka_unavailable(spark) -> Optional[str]:
    """Why format("kafka") cannot run here, or None when it can."""
    if not os.environ.get("KAFKASYNC_BOOTSTRAP"):
        return ("no real broker: set KAFKASYNC_BOOTSTRAP=host:port (Spark's Java Kafka client "
                "cannot talk to the embedded cluster)")
    from kafkasync_dev.testing.spark import has_format_kafka

    if not has_format_kafka(spark):
        return ("Spark's Kafka connector is not on the classpath: start with spark.jars.packages "
                "(PYSPARK_SUBMIT_ARGS) or set KAFKASYNC_SPARK_KAFKA_JARS")
    return None


def _ends(cluster, backfill) -> dict:
    """Each partition's end offset after producing."""
    return {
        (topic, partition): high
        for topic in backfill.topics
        for partition, (_, high) in cluster.end_offsets(topic).items()
    }


def _run(spark, bootstrap: str, spec: RunSpec, backfill, ends: Mapping[tuple, int], workdir: str) -> RunResult:
    from pyspark.sql import functions as F

    started = time.monotonic()
    reader = (
        spark.readStream.format(spec.source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", backfill.subscribe)
        .option("startingOffsets", "earliest")
    )
    for key, value in spec.options.items():
        reader = reader.option(key, str(value))
    counts = (
        reader.load().withWatermark("timestamp", WATERMARK_DELAY)
        .groupBy(F.window("timestamp", WINDOW), "topic")
        .count()
    )
    window_counts: dict = {}

    def collect(batch_df, _batch_id):  # update mode: the latest count of every changed window
        for row in batch_df.collect():
            window_counts[(row["window"].start, row["topic"])] = row["count"]

    checkpoint = tempfile.mkdtemp(prefix="checkpoint-", dir=workdir)
    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(QUERY_TIMEOUT_S):
            raise TimeoutError(f"{spec.label}: not finished after {QUERY_TIMEOUT_S} s")
        if query.exception() is not None:
            raise RuntimeError(f"{spec.label}: query failed: {query.exception()}")
    finally:
        query.stop()
    progress = [json.loads(p.json) for p in query.recentProgress]
    batches = batches_from_progress(progress)
    drops = [predicted_drops(b, lambda tp: backfill.timestamps[tp]) for b in batches]
    return RunResult(spec, batches, window_counts, drops, time.monotonic() - started)


# ------------------------------------------------------------------------------ output


def _report_run(result: RunResult) -> None:
    print(f"\n{result.spec.label}  ({result.spec.title})")
    for line in batch_table(result.batches, result.drops, MAX_BATCHES_SHOWN):
        print(line)


@dataclass(frozen=True)
class Accounting:
    """Where the records of one run went, counted three independent ways."""

    read: dict  # topic -> records read (from the batches' offset ranges)
    counted: dict  # topic -> records the aggregate output accounts for
    predicted: dict  # topic -> drops predicted from offset ranges + watermark
    spark_dropped: int  # Spark's numRowsDroppedByWatermark, summed over batches
    batches: int
    enforced: int
    late: int  # kafkasync's lateRecordsTotal

    @classmethod
    def of(cls, result: RunResult) -> "Accounting":
        predicted: dict[str, int] = {}
        for drops in result.drops:
            for topic, n in drops.items():
                predicted[topic] = predicted.get(topic, 0) + n
        return cls(
            read=records_per_topic(result.batches),
            counted=counted_per_topic(result.window_counts),
            predicted=predicted,
            spark_dropped=sum(b.spark_dropped for b in result.batches),
            batches=len(result.batches),
            enforced=result.batches[-1].end.enforced_total if result.batches else 0,
            late=result.batches[-1].end.late_total if result.batches else 0,
        )

    @property
    def dropped(self) -> dict:
        """The independent count: read minus counted, per topic."""
        return dropped_per_topic(self.read, self.counted)

    @property
    def consistent(self) -> bool:
        """Read - counted equals the prediction from offsets and watermarks, topic by topic."""
        topics = set(self.read) | set(self.predicted)
        return all(self.dropped.get(t, 0) == self.predicted.get(t, 0) for t in topics)


@dataclass(frozen=True)
class _PictureRun:
    """One variant as :func:`kafkasync_dev.testing.plots.event_time_figure` draws it."""

    title: str
    batches: list
    dropped: int
    read: int

    def per_batch(self) -> list[dict]:
        return self.batches


def event_time_reached(result: RunResult, backfill: Any) -> list[dict]:
    """Per batch, each partition's largest event time read so far (from its end offset and
    the backfill's timestamps: format("kafka")'s offsets carry no partition time) and the
    watermark Spark applied to the batch."""
    reached = []
    for batch in result.batches:
        times = {}
        for (topic, partition), end in sorted(batch.end.positions.items()):
            stamps = backfill.timestamps[(topic, partition)][:end]
            times[f"{topic}-{partition}"] = max(stamps) if stamps else -1
        reached.append({"partition_times": times, "watermark": batch.late_watermark_ms})
    return reached


def write_picture(results: Sequence[RunResult], backfill: Any, path: str) -> str:
    """The variants side by side: per-partition event time per batch, the watermark, and
    the records dropped. Returns ``path``."""
    from kafkasync_dev.testing.plots import save_event_time_figure

    runs = []
    for result in results:
        books = Accounting.of(result)
        runs.append(_PictureRun(result.spec.label,
                                event_time_reached(result, backfill),
                                sum(books.dropped.values()), sum(books.read.values())))
    save_event_time_figure(runs, path, backfill.first_timestamp_ms)
    return path


def _summary(results: Sequence[RunResult], ends: Mapping[tuple, int]) -> bool:
    topics = sorted({topic for topic, _ in ends})
    produced = {t: sum(n for (topic, _), n in ends.items() if topic == t) for t in topics}
    books = [Accounting.of(r) for r in results]
    label_width, col = 44, 17

    def line(label: str, values: Iterable[Any]) -> None:
        print(f"{label:{label_width}}" + "".join(f"{v:>{col}}" for v in values))

    print()
    line("", (r.spec.label for r in results))
    line("batches (of which enforced)", (f"{b.batches} ({b.enforced})" for b in books))
    line("records read", (fmt(sum(b.read.values())) for b in books))
    for t in topics:
        line(f"  counted in the windows: {t}", (fmt(b.counted.get(t, 0)) for b in books))
    line("dropped = read - counted", (fmt(sum(b.dropped.values())) for b in books))
    for t in topics:
        line(f"  {t}", (fmt(b.dropped.get(t, 0)) for b in books))
    line("dropped, predicted from offsets + watermark", (fmt(sum(b.predicted.values())) for b in books))
    line("Spark's numRowsDroppedByWatermark (*)", (fmt(b.spark_dropped) for b in books))
    print(
        "(*) Spark counts rows after partial aggregation (one per window and task), not\n"
        "    records: it tells that something was dropped, not how much."
    )
    problems = [
        f"{r.spec.label}: read {b.read}, produced {produced}"
        for r, b in zip(results, books) if b.read != produced
    ] + [
        f"{r.spec.label}: read - counted {b.dropped} != predicted {b.predicted}"
        for r, b in zip(results, books) if not b.consistent
    ]
    reference = results[0]
    for other in results[1:]:
        diff = differing_windows(reference.window_counts, other.window_counts)
        keys = reference.window_counts.keys() | other.window_counts.keys()
        detail = ", ".join(
            f"{t} {diff.get(t, 0)} of {sum(1 for _, topic in keys if topic == t)}" for t in topics
        )
        print(f"\n{other.spec.label} vs {reference.spec.label}: windows with a different count: {detail}.")
    if sum(books[0].dropped.values()) or not sum(books[1].dropped.values()):
        problems.append("expected no drops with kafkasync's default and drops with -1")
    if len(books) == 3:
        same = books[1].dropped == books[2].dropped and books[1].batches == books[2].batches
        verdict = "cut the same batches and drop the same records" if same else "differ: see the tables above"
        print(f"kafkasync -1 and format(\"kafka\") {verdict}.")
    for problem in problems:
        print(f"WARNING: {problem}")
    return not problems


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``--real`` (``make demo-real``): on a real broker with format("kafka") itself third."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--real"]:
        return _on_real_kafka()
    if arguments:
        print(f"usage: python -m kafkasync_dev.demo [--real]; not {' '.join(arguments)}", file=sys.stderr)
        return 2
    return _demo()


def _on_real_kafka() -> int:
    """The same runs on Apache Kafka from Maven Central (or ``KAFKASYNC_BOOTSTRAP``), with
    Spark's connector at the running PySpark's version, so the third run is format("kafka")."""
    from kafkasync_dev.testing.local_broker import real_broker
    from kafkasync_dev.testing.spark import format_kafka_jars

    jars, problem = format_kafka_jars()
    with real_broker() as (bootstrap, no_broker):
        if jars is None or bootstrap is None:
            print(f"make demo-real: {problem or no_broker}", file=sys.stderr)
            return 1
        os.environ["KAFKASYNC_SPARK_KAFKA_JARS"] = jars
        return _demo(require_format_kafka=True)


def _demo(require_format_kafka: bool = False) -> int:
    wall = time.monotonic()
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    from kafkasync_dev.testing import MockKafkaCluster
    from kafkasync_dev.testing.backfills import spans
    from kafkasync_dev.testing.broker import KafkaBroker
    from kafkasync_source.spark.source import register

    workdir = tempfile.mkdtemp(prefix="kafkasync-demo-")
    log_path = os.path.join(workdir, "spark.log")
    print("kafkasync demo: one windowed count over a rate-limited backfill, read three ways\n")
    ok = False
    spark = _spark_session(log_path)
    try:
        register(spark)
        skipped = format_kafka_unavailable(spark)
        real = os.environ.get("KAFKASYNC_BOOTSTRAP") if skipped is None else None
        with (KafkaBroker(real) if real else MockKafkaCluster()) as cluster:
            prefix = f"kafkasync-demo-{int(time.time())}" if real else ""
            backfill = spans(cluster, prefix)
            ends = _ends(cluster, backfill)
            for (topic, partition), stamps in sorted(backfill.timestamps.items()):
                print(f"  {topic}-{partition}: {fmt(len(stamps)):>5} records, event time "
                      f"{hhmm(stamps[0])}-{hhmm(stamps[-1])} UTC")
            print(
                f"  on {'the broker ' + real if real else 'the embedded cluster'}; query: "
                f"withWatermark(\"timestamp\", \"{WATERMARK_DELAY}\")"
                f".groupBy(window(\"timestamp\", \"{WINDOW}\"), \"topic\").count(),\n"
                f"  maxOffsetsPerTrigger={MAX_OFFSETS_PER_TRIGGER}, trigger(availableNow=True).\n"
                "Per batch: the event time each partition has reached (partitionTime in kafkasync's\n"
                "end offset), the batch's stream time, the watermark Spark applied to its records, the\n"
                "records it read and the records it dropped because their window had already closed."
            )
            runs = RUNS if skipped is None else RUNS[:2]
            results = []
            for spec in runs:
                result = _run(spark, cluster.bootstrap_servers, spec, backfill, ends, workdir)
                _report_run(result)
                results.append(result)
        if skipped:
            print(f"\nformat(\"kafka\") itself: skipped ({skipped}).")
        ok = _summary(results, ends) and not (require_format_kafka and skipped)
        picture = write_picture(results, backfill, os.path.join(os.getcwd(), "kafkasync-demo.png"))
        print(f"\nPicture of the runs (event time per partition per batch, watermark, drops): {picture}")
        print(
            "\nWith the cap split in proportion to offsets, every batch also reads payments, ten hours\n"
            "ahead of the orders in event time; the watermark follows them and the orders read later\n"
            "arrive behind it.\n"
            "kafkasync fills the same cap in Kafka Streams' order (KIP-353): the same event-time\n"
            "slice of every partition, so no record arrives behind the watermark. Without a rate\n"
            "limit format(\"kafka\") reads a backlog in one batch and drops nothing."
        )
        print(f"\nTotal wall time {time.monotonic() - wall:.0f} s "
              f"(runs: {', '.join(f'{r.seconds:.0f} s' for r in results)}).")
    finally:
        spark.stop()
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"Spark's log: {log_path}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
