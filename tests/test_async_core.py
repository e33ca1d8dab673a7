"""Unit tests of async_map's scheduling core (asyncio only: no Spark, no network)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from typing import Callable

import pytest

from kafkasync_source.enrich.core import AsyncMapper, ResultError, Retry, RowFailedError
from kafkasync_source.enrich.metrics import UPPER_BOUNDS, AsyncCounters, bucket_of, quantile

NO_RETRY_WAIT = Retry(attempts=3, initial_backoff=0.0, max_backoff=0.0)


class Probe:
    """An async fn that sleeps per row and records concurrency, per-key overlap and start order."""

    def __init__(self, delay=lambda row: 0.002, fail=lambda row, attempt: None):
        self.delay, self.fail = delay, fail
        self.active = 0
        self.max_active = 0
        self.active_by_key = defaultdict(int)
        self.overlaps = 0
        self.starts = []
        self.attempts = defaultdict(int)
        self.attempt_times = defaultdict(list)

    async def __call__(self, row):
        self.attempts[row["id"]] += 1
        self.attempt_times[row["id"]].append(time.monotonic())
        self.starts.append(row["id"])
        key = row.get("key")
        self.overlaps += self.active_by_key[key] > 0
        self.active_by_key[key] += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(self.delay(row))
            failure = self.fail(row, self.attempts[row["id"]])
            if failure:
                raise failure
            return {"out": row["id"] * 10}
        finally:
            self.active -= 1
            self.active_by_key[key] -= 1


def rows(n, keys=None):
    return [{"id": i, "key": None if keys is None else f"k{i % keys}"} for i in range(n)]


class Source:
    """The input as batches, counting how many the mapper pulled."""

    def __init__(self, all_rows, batch_size):
        self.batches = [all_rows[i:i + batch_size] for i in range(0, len(all_rows), batch_size)]
        self.pulled = 0

    async def __aiter__(self):
        for batch in self.batches:
            self.pulled += 1
            yield batch


def run(fn, source, **options):
    """Run a mapper to the end; the chunks it handed back and its counters."""
    settings = dict(max_in_flight=8, timeout=None, retry=NO_RETRY_WAIT, ordering="input", key=None,
                    on_failure="keep", rng=random.Random(7))
    settings.update(options)

    async def main():
        mapper = AsyncMapper(fn, source.__aiter__(), **settings)
        mapper.start()
        chunks = []
        try:
            while (chunk := await mapper.next_chunk()) is not None:
                chunks.append(chunk)
        finally:
            await mapper.aclose()
        return chunks, mapper.counters

    return asyncio.run(main())


def flat(chunks):
    return [c for chunk in chunks for c in chunk]


def test_input_order_with_random_latencies_and_bounded_window():
    rng = random.Random(1)
    delays = {i: rng.uniform(0, 0.01) for i in range(200)}
    probe = Probe(delay=lambda row: delays[row["id"]])
    chunks, counters = run(probe, Source(rows(200), 7), max_in_flight=16)
    done = flat(chunks)
    assert [c.position for c in done] == list(range(200))
    assert [(c.batch, c.row) for c in done] == [(i // 7, i % 7) for i in range(200)]
    assert [c.outcome.output for c in done] == [{"out": i * 10} for i in range(200)]
    assert probe.max_active <= 16
    assert (counters.rows, counters.ok, counters.calls, counters.retries, counters.failures) == (200, 200, 200, 0, 0)


def test_window_is_not_drained_at_batch_boundaries():
    probe = Probe(delay=lambda row: 0.02)
    run(probe, Source(rows(64), 3), max_in_flight=12)
    # Batches of 3 rows: draining at every boundary would never have more than 3 calls out.
    assert probe.max_active == 12


def test_memory_is_bounded_by_the_window_behind_a_slow_head():
    """Row 0 runs until the test lets it finish, not for a time a busy machine could outlast:
    the mapper is looked at once rows 1-13 are finished behind it and it has had a hundred turns
    of the event loop to pull more (an event loop turn, not a duration, is what it needs)."""
    head_released = asyncio.Event()

    async def fn(row):
        if row["id"] == 0:
            await head_released.wait()
        return await probe(row)

    probe = Probe(delay=lambda row: 0.001)
    source = Source(rows(400), 4)

    async def main():
        mapper = AsyncMapper(fn, source.__aiter__(), max_in_flight=10, timeout=None, retry=NO_RETRY_WAIT,
                             ordering="input", key=None, on_failure="keep")
        mapper.start()
        async def rows_finished_behind_the_head(count: int) -> None:
            while sum(probe.attempts.values()) - probe.active < count:
                await asyncio.sleep(0.001)

        await asyncio.wait_for(rows_finished_behind_the_head(13), timeout=30)
        for _ in range(100):
            await asyncio.sleep(0)
        pulled_while_blocked = source.pulled
        head_released.set()
        while await mapper.next_chunk() is not None:
            pass
        return pulled_while_blocked

    pulled_while_blocked = asyncio.run(main())
    assert probe.max_active <= 10
    # At most max_in_flight + one batch (10 + 4) rows held: row 0 and 13 finished behind it,
    # rows 0..13 come from 4 batches of 4 (not all 100 batches).
    assert pulled_while_blocked == 4


def test_a_slow_head_does_not_stop_new_calls_within_a_batch():
    async def main():
        late_row_started = asyncio.Event()

        async def fn(row):
            if row["id"] == 0:  # finishes only once row 60 has started: no head-of-line stall
                await asyncio.wait_for(late_row_started.wait(), timeout=10)
            elif row["id"] == 60:
                late_row_started.set()
            await asyncio.sleep(0.001)
            return {"out": row["id"]}

        mapper = AsyncMapper(fn, Source(rows(100), 100).__aiter__(), max_in_flight=10, timeout=None,
                             retry=Retry(attempts=1), ordering="input", key=None, on_failure="keep")
        mapper.start()
        done = []
        while (chunk := await mapper.next_chunk()) is not None:
            done += chunk
        return done

    done = asyncio.run(main())
    assert [c.position for c in done] == list(range(100))
    assert {c.outcome.status for c in done} == {"ok"}


def test_key_ordering_never_overlaps_a_key_and_starts_in_input_order():
    rng = random.Random(2)
    delays = {i: rng.uniform(0, 0.01) for i in range(120)}
    probe = Probe(delay=lambda row: delays[row["id"]])
    chunks, _ = run(probe, Source(rows(120, keys=5), 10), max_in_flight=16, ordering="key", key="key")
    assert [c.position for c in flat(chunks)] == list(range(120))
    assert probe.overlaps == 0
    for k in range(5):
        assert [i for i in probe.starts if i % 5 == k] == list(range(k, 120, 5))
    assert probe.max_active == 5, "other keys proceed meanwhile: one call per key at a time"


def test_key_ordering_holds_retries_of_a_row_before_the_next_row_of_its_key():
    probe = Probe(fail=lambda row, attempt: RuntimeError("flaky") if row["id"] == 0 and attempt < 3 else None)
    chunks, counters = run(probe, Source(rows(6, keys=2), 6), ordering="key", key="key",
                           retry=Retry(attempts=3, initial_backoff=0.01, max_backoff=0.01))
    assert [i for i in probe.starts if i % 2 == 0] == [0, 0, 0, 2, 4]
    assert probe.overlaps == 0 and counters.retries == 2


def test_none_ordering_hands_rows_back_as_they_finish():
    """Row 0 finishes once every other row has: an order that does not hang on how long a
    busy machine took to start the others."""
    others_finished = asyncio.Event()
    finished = []

    async def fn(row):
        if row["id"] == 0:
            await asyncio.wait_for(others_finished.wait(), timeout=30)
        result = await probe(row)
        finished.append(row["id"])
        if len(finished) == 19:
            others_finished.set()
        return result

    probe = Probe(delay=lambda row: 0.001)
    chunks, _ = run(fn, Source(rows(20), 5), max_in_flight=30, ordering="none")
    positions = [c.position for c in flat(chunks)]
    assert sorted(positions) == list(range(20))
    assert positions[-1] == 0


def test_transient_failures_are_retried_with_exponential_backoff():
    probe = Probe(fail=lambda row, attempt: ConnectionError("reset") if attempt <= 2 else None)
    retry = Retry(attempts=4, initial_backoff=0.05, max_backoff=1.0, multiplier=2.0, jitter=0.0)
    chunks, counters = run(probe, Source(rows(3), 3), retry=retry)
    assert [c.outcome.attempts for c in flat(chunks)] == [3, 3, 3]
    assert {c.outcome.status for c in flat(chunks)} == {"ok"}
    assert (counters.calls, counters.retries, counters.failures) == (9, 6, 0)
    for times in probe.attempt_times.values():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert gaps[0] >= 0.05 and gaps[1] >= 0.1  # 0.05 s, then 0.1 s


def test_a_timeout_is_a_failed_attempt_and_is_retried():
    """The first attempt never returns; the second returns at once, well inside a timeout no
    busy machine's scheduling delay reaches (0.1 s did: the second attempt timed out too)."""
    probe = Probe(delay=lambda row: 3600.0 if probe.attempts[row["id"]] == 1 else 0.001)
    chunks, counters = run(probe, Source(rows(2), 2), timeout=2.0)
    assert [(c.outcome.status, c.outcome.attempts) for c in flat(chunks)] == [("ok", 2), ("ok", 2)]
    assert (counters.timeouts, counters.retries, counters.calls) == (2, 2, 4)
    assert probe.active == 0, "the timed-out call was cancelled"


def test_keep_returns_a_dead_letter_with_the_last_error():
    probe = Probe(fail=lambda row, attempt: ValueError(f"no customer {row['id']}") if row["id"] == 1 else None)
    chunks, counters = run(probe, Source(rows(3), 3))
    outcomes = [c.outcome for c in flat(chunks)]
    assert [o.status for o in outcomes] == ["ok", "failed", "ok"]
    assert outcomes[1].output is None and outcomes[1].attempts == 3
    assert outcomes[1].error == "attempt 3: ValueError: no customer 1"
    assert counters.failures == 1


def test_fail_raises_naming_the_row_position_and_the_last_error():
    probe = Probe(fail=lambda row, attempt: ValueError("boom") if row["id"] == 5 else None)
    with pytest.raises(RowFailedError, match=r"row 5 of partition 3's input failed after 3 attempt\(s\).*"
                                             r"attempt 3: ValueError: boom"):
        run(probe, Source(rows(10), 4), on_failure="fail", where="partition 3's input")


def test_a_wrong_result_fails_the_row_without_retry():
    def validate(result):
        raise ResultError("fn's result has missing 'score'")

    probe = Probe()
    chunks, counters = run(probe, Source(rows(2), 2), validate=validate)
    assert [(c.outcome.status, c.outcome.attempts) for c in flat(chunks)] == [("failed", 1), ("failed", 1)]
    assert "missing 'score'" in flat(chunks)[0].outcome.error
    assert counters.calls == 2 and counters.retries == 0


def test_source_errors_fail_the_run():
    async def broken():
        yield [{"id": 0}]
        raise OSError("input stream closed")

    async def main():
        mapper = AsyncMapper(Probe(), broken(), max_in_flight=4, timeout=None, retry=NO_RETRY_WAIT,
                             ordering="input", key=None, on_failure="keep")
        mapper.start()
        while await mapper.next_chunk() is not None:
            pass

    with pytest.raises(OSError, match="input stream closed"):
        asyncio.run(main())


def test_retry_backoff_is_exponential_capped_and_jittered():
    rng = random.Random(3)
    retry = Retry(attempts=10, initial_backoff=0.1, max_backoff=1.0, multiplier=3.0, jitter=0.5)
    for attempt, base in ((1, 0.1), (2, 0.3), (3, 0.9)):
        samples = [retry.backoff(attempt, rng) for _ in range(200)]
        assert base * 0.5 <= min(samples) and max(samples) <= min(1.0, base * 1.5)
        assert max(samples) - min(samples) > base * 0.5, "jitter spreads the delays"
    assert all(retry.backoff(9, rng) <= 1.0 for _ in range(100))
    assert Retry(jitter=0.0, initial_backoff=0.2).backoff(2, rng) == pytest.approx(0.4)


@pytest.mark.parametrize("kwargs, match", [
    ({"attempts": 0}, "attempts must be an integer >= 1"),
    ({"attempts": 1.5}, "attempts must be an integer >= 1"),
    ({"initial_backoff": -1}, "initial_backoff=-1"),
    ({"max_backoff": -0.1}, "max_backoff=-0.1"),
    ({"multiplier": 0.5}, "multiplier=0.5"),
    ({"jitter": 2}, "jitter=2"),
])
def test_retry_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Retry(**kwargs)


def test_latency_histogram_quantiles_are_within_a_bucket():
    counters = AsyncCounters()
    for ms in range(1, 1001):  # 1 ms .. 1 s, uniform
        counters.record_latency(ms / 1000)
    p50, p99 = quantile(counters.latency, 0.5), quantile(counters.latency, 0.99)
    assert p50 == pytest.approx(0.5, rel=0.1)
    assert p99 == pytest.approx(0.99, rel=0.1)
    assert quantile([0] * len(UPPER_BOUNDS), 0.5) is None
    assert bucket_of(0.0) == 0 and bucket_of(1e9) == len(UPPER_BOUNDS) - 1


def test_linger_gathers_rows_finishing_together_into_one_chunk():
    """Five waves of rows (``id % 5``), wave k > 0 held until ``gates[k - 1]`` opens. Without
    linger, each gate opens once the chunk before was handed back: each wave is a chunk of its
    own only if ``next_chunk`` hands back what is ready without waiting for the calls still
    running. With linger, the gates open a few event loop turns after wave 0 finished, once the
    mapper lingers on it (no timer a busy machine could stretch: timed waves 10 ms apart merged
    into fewer chunks whenever the machine paused the test that long), and the linger gathers
    all five waves."""
    linger = 0.5

    async def mapped(gates: list[asyncio.Event], handed_back: Callable[[int], None], linger: float) -> list:
        async def fn(row):
            wave = row["id"] % 5
            if wave:
                await asyncio.wait_for(gates[wave - 1].wait(), timeout=30)
            return {"out": row["id"]}

        mapper = AsyncMapper(fn, Source(rows(50), 50).__aiter__(), max_in_flight=50, timeout=None,
                             retry=NO_RETRY_WAIT, ordering="none", key=None, on_failure="keep")
        mapper.start()
        chunks = []
        while (chunk := await mapper.next_chunk(linger=linger)) is not None:
            chunks.append(chunk)
            handed_back(len(chunks))
        return chunks

    async def eager_run() -> list:
        gates = [asyncio.Event() for _ in range(4)]
        return await mapped(gates, lambda count: count <= 4 and gates[count - 1].set(), linger=0.0)

    async def lingering_run() -> list:
        gates = [asyncio.Event() for _ in range(4)]

        async def open_gates_once_lingering() -> None:
            for _ in range(20):  # wave 0 finishes in the first turns; the mapper then lingers
                await asyncio.sleep(0)
            for gate in gates:
                gate.set()

        opener = asyncio.create_task(open_gates_once_lingering())
        chunks = await mapped(gates, lambda count: None, linger=linger)
        await opener
        return chunks

    eager = asyncio.run(eager_run())
    assert [sorted(c.position % 5 for c in chunk) for chunk in eager] == [[wave] * 10 for wave in range(5)], \
        "without linger every finishing row wave is its own chunk"
    began = time.monotonic()
    lingering = asyncio.run(lingering_run())
    assert time.monotonic() - began >= linger, "the first chunk lingered (waves 1-4 were running)"
    assert sorted(c.position for c in flat(lingering)) == list(range(50))
    assert len(lingering) == 1
