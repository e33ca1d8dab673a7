"""The test suites' query start (kafkasync_dev/testing/query_start.py) starts a query again only
where Spark's fixed 10 s for its source's worker ran out before anything was planned: any other
failure stays the test's."""

from __future__ import annotations

import pytest

from kafkasync_dev.testing.query_start import SLOW_WORKER_START, SlowWorkerStartWarning, started


class _Query:
    """What ``started`` reads of a StreamingQuery: one that ended, with ``failure`` or without."""

    def __init__(self, failure: str | None, planned: bool = False) -> None:
        self._failure, self.lastProgress = failure, ({"batchId": 0} if planned else None)
        self.isActive = failure is None
        self.status = {"message": "Waiting for data to arrive"}

    def exception(self) -> str | None:
        return self._failure


def _starts(*queries: _Query) -> tuple[list[_Query], object]:
    begun: list[_Query] = []
    remaining = list(queries)

    def start() -> _Query:
        begun.append(remaining.pop(0))
        return begun[-1]

    return begun, start


def test_a_query_whose_source_missed_sparks_ten_seconds_is_started_again_saying_so():
    slow, running = _Query(f"{SLOW_WORKER_START}.\n=== Streaming Query ==="), _Query(None)
    begun, start = _starts(slow, slow, running)
    with pytest.warns(SlowWorkerStartWarning, match=r"attempt [12] of 5.*started again") as warned:
        assert started(start) is running
    assert begun == [slow, slow, running] and len(warned) == 2


@pytest.mark.parametrize("query", [_Query("KafkaSyncDataLossError: orders-0 offsets [3, 9) are gone"),
                                   _Query(SLOW_WORKER_START, planned=True), _Query(None)],
                         ids=["another failure", "after a batch was planned", "running"])
def test_any_other_query_is_the_tests_own(query):
    begun, start = _starts(query, _Query(None))
    assert started(start) is query and begun == [query]


def test_a_source_that_never_connects_back_fails_after_the_last_attempt():
    slow = _Query(SLOW_WORKER_START)
    begun, start = _starts(*[slow] * 5, _Query(None))
    with pytest.warns(SlowWorkerStartWarning):
        assert started(start) is slow
    assert len(begun) == 5


def test_a_sink_that_cannot_recover_starts_over_where_the_failed_attempt_left_only_an_empty_offsets_log(tmp_path):
    """A memory sink refuses a checkpoint whose offsets directory exists; the failed attempt
    made it, empty. One that holds a batch is never removed."""
    offsets = tmp_path / "cp" / "offsets"
    offsets.mkdir(parents=True)
    running = _Query(None)
    calls = []

    def start():
        calls.append(offsets.exists())
        if len(calls) == 1:
            return _Query(SLOW_WORKER_START)
        if offsets.exists():
            raise RuntimeError(f"This query does not support recovering from checkpoint location. "
                               f"Delete {offsets} to start over.")
        return running

    with pytest.warns(SlowWorkerStartWarning):
        assert started(start) is running
    assert calls == [True, True, False]

    offsets.mkdir()
    (offsets / "0").write_text("v1")
    del calls[:]
    with pytest.warns(SlowWorkerStartWarning), pytest.raises(RuntimeError, match="does not support recovering"):
        started(start)
    assert (offsets / "0").exists()


def test_a_process_patched_twice_keeps_one_wrapper_and_its_undo_restores_sparks_start(monkeypatch):
    """The benchmarks patch every session's process (a second session must not nest the attempts)."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from kafkasync_dev.testing.query_start import start_queries_surviving_slow_worker_starts

    def original(writer, *args, **kwargs):  # Spark's start, as this suite's session has not patched it
        raise AssertionError("not called")

    monkeypatch.setattr(DataStreamWriter, "start", original)
    undo_first = start_queries_surviving_slow_worker_starts()
    try:
        wrapped = DataStreamWriter.__dict__["start"]
        undo_second = start_queries_surviving_slow_worker_starts()
        assert DataStreamWriter.__dict__["start"] is wrapped and wrapped.__wrapped__ is original
        undo_second()
        assert DataStreamWriter.__dict__["start"] is wrapped
    finally:
        undo_first()
    assert DataStreamWriter.__dict__["start"] is original
