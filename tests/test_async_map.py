"""End to end: async_map in Spark, calling a real HTTP service on 127.0.0.1.

The service (``kafkasync_dev.testing.http_service``) injects latency, transient errors,
permanent errors and slow first answers per request, and itself checks that calls for one key
never overlap.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from pyspark.sql import functions as F

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.http_service import LookupService, fetch, lookup_path
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source import AsyncMetrics, Retry, async_map
from kafkasync_source.spark.source import register

FAST_RETRY = Retry(attempts=3, initial_backoff=0.01, max_backoff=0.05)
RETURNS = "customer string, attempt int"


@pytest.fixture(scope="module")
def service():
    with LookupService() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh_stats(service):
    service.reset()


def lookup_fn(port, *, latency_ms=5, transient=lambda i: 0, permanent=lambda i: False, slow_ms=lambda i: 0,
              key_column=None):
    """An async fn calling the service for ``row["id"]``; the lambdas pick each row's faults."""

    async def lookup(row):
        i = row["id"]
        key = row[key_column] if key_column else i
        body = await fetch(port, lookup_path(id=i, key=key, latency_ms=latency_ms, transient=transient(i),
                                             permanent=int(permanent(i)), slow_ms=slow_ms(i)))
        return {"customer": body["value"], "attempt": body["attempt"]}

    return lookup


@pytest.mark.parametrize("ordering", ["input", "none"])
def test_every_row_once_with_retries_and_dead_letters(spark, service, ordering):
    n = 300
    transient = lambda i: 2 if i % 10 == 3 else 0  # noqa: E731  30 rows: ok at attempt 3
    permanent = lambda i: i % 50 == 7  # noqa: E731              6 rows: dead letters
    metrics = AsyncMetrics(spark)
    out = async_map(spark.range(0, n, 1, 2), lookup_fn(service.port, transient=transient, permanent=permanent),
                    returns=RETURNS, max_in_flight=16, retry=FAST_RETRY, ordering=ordering, metrics=metrics)
    rows = out.collect()

    ids = [r.id for r in rows]
    assert sorted(ids) == list(range(n))
    if ordering == "input":
        assert ids == list(range(n)), "each task's rows in input order (partitions are id ranges)"
    by_id = {r.id: r for r in rows}
    for i in range(n):
        r = by_id[i]
        if permanent(i):
            assert (r.async_status, r.customer, r.attempt, r.async_attempts) == ("failed", None, None, 3)
            assert r.async_error == (f'attempt 3: HttpError: 500 Internal Server Error: '
                                     f'{{"error": "id {i} cannot be looked up"}}')
        else:
            assert (r.async_status, r.async_error, r.customer) == ("ok", None, f"v-{i}")
            assert r.attempt == r.async_attempts == transient(i) + 1
    stats = service.stats()
    assert stats.requests == n + 30 * 2 + 6 * 2
    assert metrics.snapshot() == {
        "rows": n, "ok": n - 6, "failures": 6, "calls": stats.requests, "retries": 30 * 2 + 6 * 2, "timeouts": 0,
        "latency_p50": metrics.latency_p50, "latency_p99": metrics.latency_p99}
    assert 0.005 <= metrics.latency_p50 <= metrics.latency_p99
    assert stats.max_concurrent <= 2 * 16


def test_per_key_calls_never_overlap_and_start_in_input_order(spark, service):
    n = 240  # partition p holds ids [120p, 120p+120) and keys "p-0".."p-5"
    frame = spark.range(0, n, 1, 2).withColumn(
        "customer_id", F.format_string("%d-%d", (F.col("id") / 120).cast("int"), F.col("id") % 6))
    transient = lambda i: 1 if i % 17 == 0 else 0  # noqa: E731  retries must not let a key's next call start
    # 50 ms a call: the calls of different keys overlap at the service however the machine
    # schedules the task's sends (at 10 ms a busy machine could space them out past each other).
    out = async_map(frame, lookup_fn(service.port, latency_ms=50, transient=transient, key_column="customer_id"),
                    returns=RETURNS, max_in_flight=8, retry=FAST_RETRY, ordering="key", key="customer_id")
    rows = out.collect()

    assert [r.id for r in rows] == list(range(n))
    assert all(r.async_status == "ok" for r in rows)
    stats = service.stats()
    assert stats.overlaps == 0
    assert len(stats.starts_by_key) == 12
    for key, starts in stats.starts_by_key.items():
        p, k = map(int, key.split("-"))
        expected = [str(i) for i in range(120 * p, 120 * p + 120) if i % 6 == k]
        first_starts = [s for j, s in enumerate(starts) if s not in starts[:j]]
        assert first_starts == expected, f"key {key}: calls started out of input order"
    assert stats.max_concurrent > 2, "different keys are called concurrently"


def test_a_timed_out_attempt_is_retried(spark, service):
    """The first attempt of every fourth row never answers in time; the retry answers at once,
    well inside a timeout that no busy machine's delay reaches (0.3 s was one: a retry's
    round trip to the service took longer on a loaded machine, and it timed out too)."""
    timeout = 3.0
    slow = lambda i: 30_000 if i % 4 == 0 else 0  # noqa: E731  first attempt never answers in time
    metrics = AsyncMetrics(spark)
    out = async_map(spark.range(0, 20, 1, 2), lookup_fn(service.port, slow_ms=slow), returns=RETURNS,
                    timeout=timeout, retry=FAST_RETRY, metrics=metrics)
    rows = out.collect()
    assert [(r.id, r.async_status, r.async_attempts) for r in rows] == [
        (i, "ok", 2 if i % 4 == 0 else 1) for i in range(20)]
    assert all(r.attempt == 2 for r in rows if r.id % 4 == 0), "the service answered the retry"
    assert (metrics.timeouts, metrics.retries, metrics.calls) == (5, 5, 25)
    assert metrics.latency_p99 >= 0.8 * timeout, "timed-out attempts count with their duration"


def test_timeouts_exhausting_the_attempts_make_a_dead_letter(spark, service):
    out = async_map(spark.range(0, 2, 1, 1), lookup_fn(service.port, latency_ms=3000), returns=RETURNS,
                    timeout=0.2, retry=Retry(attempts=2, initial_backoff=0.0))
    rows = out.collect()
    assert [(r.async_status, r.async_error, r.async_attempts) for r in rows] == [
        ("failed", "attempt 2 timed out after 0.2 s", 2)] * 2


def test_on_failure_fail_fails_the_query_naming_row_and_error(spark, service):
    out = async_map(spark.range(0, 40, 1, 2), lookup_fn(service.port, permanent=lambda i: i == 25),
                    returns=RETURNS, retry=Retry(attempts=2, initial_backoff=0.01), on_failure="fail")
    with pytest.raises(Exception) as failure:
        out.collect()
    message = str(failure.value)
    assert "async_map: row 5 of partition 1's input failed after 2 attempt(s)" in message
    assert "id 25 cannot be looked up" in message


def test_a_result_not_matching_returns_is_a_clear_dead_letter(spark, service):
    async def wrong(row):
        return {"customer": 42} if row["id"] == 1 else {"customer": "x", "attempt": 1, "extra": True}

    rows = async_map(spark.range(0, 2, 1, 1), wrong, returns=RETURNS, retry=FAST_RETRY).collect()
    assert [r.async_attempts for r in rows] == [1, 1], "a wrong result is not retried"
    assert rows[0].async_error == ("attempt 1: fn's result has unexpected 'extra' "
                                   "(returns: customer string, attempt int)")
    assert rows[1].async_error == ("attempt 1: fn's result has missing 'attempt' "
                                   "(returns: customer string, attempt int)")


def test_result_types_are_checked(spark):
    async def typed(row):
        return {"customer": "c", "attempt": "three" if row["id"] else 3}

    rows = async_map(spark.range(0, 2, 1, 1), typed, returns=RETURNS).collect()
    assert [(r.async_status, r.attempt) for r in rows] == [("ok", 3), ("failed", None)]
    assert rows[1].async_error == "attempt 1: fn returned str 'three' for 'attempt', declared int in returns"


def test_returns_of_timestamp_decimal_and_nested_types(spark):
    import datetime
    import decimal

    seen = datetime.datetime(2026, 11, 23, 4, 0, tzinfo=datetime.timezone.utc)

    async def rich(row):
        return {"seen": seen, "price": decimal.Decimal("12.50"), "tags": ["a", str(row["id"])],
                "meta": {"ok": row["id"] % 2 == 0}}

    rows = async_map(spark.range(0, 3, 1, 1), rich,
                     returns="seen timestamp, price decimal(10,2), tags array<string>, meta struct<ok: boolean>",
                     ).collect()
    assert [r.async_status for r in rows] == ["ok"] * 3
    assert rows[1].seen.replace(tzinfo=datetime.timezone.utc) == seen
    assert [(r.price, r.tags, r.meta.ok) for r in rows] == [
        (decimal.Decimal("12.50"), ["a", str(i)], i % 2 == 0) for i in range(3)]


async def _noop(row):
    return {"customer": "c", "attempt": 1}


def _sync_fn(row):
    return {}


@pytest.mark.parametrize("kwargs, error, match", [
    ({"max_in_flight": 0}, ValueError, r"max_in_flight=0 must be an integer >= 1"),
    ({"ordering": "partition"}, ValueError, r"ordering='partition' is not one of 'input', 'key', 'none'"),
    ({"ordering": "key"}, ValueError, r"ordering='key' needs key=<column name>"),
    ({"ordering": "key", "key": "nope"}, ValueError, r"key='nope' is not a column of the DataFrame \(columns: id\)"),
    ({"key": "id"}, ValueError, r"key='id' is only used with ordering='key'"),
    ({"fn": _sync_fn}, TypeError, r"fn must be a coroutine function \(async def\)"),
    ({"returns": "customer strin"}, ValueError, r"returns='customer strin' is not a DDL schema"),
    ({"returns": "string"}, ValueError, r"returns='string' must name at least one column"),
    ({"returns": 5}, TypeError, r"returns must be a DDL string or a StructType, not int"),
    ({"returns": "ID long"}, ValueError, r"returns column 'ID' clashes with an input column"),
    ({"returns": "async_error string"}, ValueError, r"clashes with an async_map status column"),
    ({"timeout": 0}, ValueError, r"timeout=0 must be a number of seconds > 0, or None"),
    ({"on_failure": "drop"}, ValueError, r"on_failure='drop' is not one of 'keep', 'fail'"),
    ({"retry": 3}, TypeError, r"retry must be a Retry"),
])
def test_bad_arguments_fail_at_once(spark, kwargs, error, match):
    arguments = {"fn": _noop, "returns": RETURNS, **kwargs}
    with pytest.raises(error, match=match):
        async_map(spark.range(3), arguments.pop("fn"), **arguments)


def test_batch_metrics_count_the_first_action_and_hide_their_rows(spark):
    async def answer(row):  # defined here: cloudpickle sends it by value (test modules are not importable)
        return {"customer": "c", "attempt": 1}

    metrics = AsyncMetrics(spark, name="lookups")
    out = async_map(spark.range(0, 50, 1, 2), answer, returns=RETURNS, metrics=metrics)
    assert metrics.snapshot()["rows"] == 0 and metrics.latency_p50 is None, "nothing before an action"
    assert out.count() == 50, "the tasks' metrics rows are dropped"
    assert (metrics.rows, metrics.ok, metrics.calls, metrics.failures) == (50, 50, 50, 0)
    assert metrics.batches == 0


def test_an_async_metrics_serves_one_async_map_call(spark):
    metrics = AsyncMetrics(spark)
    async_map(spark.range(3), _noop, returns=RETURNS, metrics=metrics)
    with pytest.raises(ValueError, match=r"is already used by another async_map call"):
        async_map(spark.range(3), _noop, returns=RETURNS, metrics=metrics)
    with pytest.raises(ValueError, match=r"AsyncMetrics: name='' must be a non-empty string"):
        AsyncMetrics(spark, name="")


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


# --- streaming over kafkasync -------------------------------------------------------------------

BASE_TS = 1_700_000_000_000


def test_streaming_enrichment_restarts_without_losing_or_duplicating_rows(
    spark, service, kafka_cluster, topic_factory, tmp_path
):
    register(spark)
    topic = topic_factory(2)
    # Kafka puts one key in one partition, and so in one Spark task: per-key order is per task.
    first_half = [Record(p, BASE_TS + i, f"p{p}-c{i % 5}".encode(), b"v") for i in range(150) for p in (0, 1)]
    kafka_cluster.produce(topic, first_half)
    output, checkpoint = tmp_path / "out", tmp_path / "cp"
    transient = lambda i: 1 if i % 7 == 0 else 0  # noqa: E731
    port = service.port  # the closure is pickled: capture the port, not the service

    async def enrich(row):
        ident = row["partition"] * 1_000_000 + row["offset"]
        body = await fetch(port, lookup_path(id=ident, key=row["key"].decode(), latency_ms=5,
                                             transient=transient(ident)))
        return {"customer": body["value"], "attempt": body["attempt"]}

    def start():
        stream = (spark.readStream.format("kafkasync")
                  .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("max.task.idle.ms", -1).option("buffered.records.per.partition", 100).load()
                  .select("key", "partition", "offset"))
        enriched = async_map(stream, enrich, returns=RETURNS, max_in_flight=8, retry=FAST_RETRY,
                             ordering="key", key="key")
        return (enriched.writeStream.format("parquet").option("path", str(output))
                .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds").start())

    def wait_until(query, done) -> None:
        """Poll ``query``'s progress (not the sink: reading it would be a Spark job of its own
        competing for the 2 cores) until ``done(progress list)``."""
        deadline = time.monotonic() + PATIENCE_S
        while not done(query.recentProgress):
            if query.exception() is not None:
                raise query.exception()
            assert time.monotonic() < deadline, f"timed out; progress: {query.recentProgress[-1:]}"
            time.sleep(0.2)

    def reached(end: int):
        def done(progress) -> bool:
            ends = [_json(p["sources"][0]["endOffset"]) for p in progress if p["numInputRows"]]
            return any(e["topics"][topic] == {str(p): {"offset": end, "partitionTime": BASE_TS + 1099}
                                              for p in (0, 1)} for e in ends)
        return done

    first = start()
    try:
        wait_until(first, lambda progress: any(p["numInputRows"] for p in progress))
    finally:
        first.stop()
    stopped_at = sum(p["numInputRows"] for p in first.recentProgress)
    kafka_cluster.produce(topic, [Record(p, BASE_TS + 1000 + i, f"p{p}-c{i % 5}".encode(), b"v")
                                  for i in range(100) for p in (0, 1)])
    second = start()
    try:
        wait_until(second, reached(250))
    finally:
        second.stop()

    result = spark.read.parquet(str(output))
    counts = Counter((r.partition, r.offset) for r in result.select("partition", "offset").collect())
    assert 0 < stopped_at < 500, "the first run stopped part-way"
    assert set(counts) == {(p, o) for p in (0, 1) for o in range(250)}
    assert max(counts.values()) == 1, "no row twice"
    assert result.filter("async_status != 'ok' OR customer IS NULL").count() == 0
    assert service.stats().overlaps == 0


def test_streaming_metrics_add_up_every_batchs_observed_metrics(spark, kafka_cluster, topic_factory, tmp_path):
    register(spark)
    topic = topic_factory(2)
    kafka_cluster.produce(topic, [Record(p, BASE_TS + i, b"k", b"v") for i in range(40) for p in (0, 1)])
    metrics = AsyncMetrics(spark)
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("max.task.idle.ms", -1)
              .option("maxOffsetsPerTrigger", 30).load().select("offset"))

    async def double(row):
        return {"n": row["offset"] * 2}

    sink = f"async_metrics_{uuid.uuid4().hex[:8]}"
    query = (async_map(stream, double, returns="n long", metrics=metrics).writeStream.format("memory")
             .queryName(sink).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(PATIENCE_S)
    deadline = time.monotonic() + PATIENCE_S  # the listener gets each batch's progress a moment after it
    while metrics.batches < 3 and time.monotonic() < deadline:
        time.sleep(0.1)

    batches = [p for p in query.recentProgress if p.numInputRows]
    assert [p.numInputRows for p in batches] == [30, 30, 20], "80 records, 30 per batch"
    assert [sum(p.observedMetrics[metrics.name].latency_histogram) for p in batches] == [30, 30, 20]
    assert [metrics.of_batch(p)["calls"] for p in batches] == [30, 30, 20]
    assert (metrics.rows, metrics.ok, metrics.calls, metrics.batches) == (80, 80, 80, 3)
    assert spark.table(sink).count() == 80, "the tasks' metrics rows are dropped"
    assert metrics.catch_up(query).rows == 80, "catch_up never counts a batch twice"
