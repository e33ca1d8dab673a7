"""``async_map``: call an async function per row with many calls in flight (KIP-311's execution side).

Spark glue around the pure scheduler in ``enrich.core``: arguments are checked on the driver when
``async_map`` is called; each Spark task then runs ``_TaskRunner`` inside ``mapInArrow``, which
works for batch and streaming DataFrames alike.

Per task, one event loop runs in a helper thread for the task's whole life, so calls keep
progressing while the task thread hands an output batch to Spark, and a second helper thread
reads the next input batch (a blocking read from the JVM) without stopping the loop. The task
thread only waits for finished rows and turns them into Arrow batches: the input rows (sliced from
the input batch, untouched) plus fn's columns and the status columns.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine, Dict, Iterator, List, Optional, Union

from pyspark.sql.types import ArrayType, LongType, StructField, StructType

from kafkasync_source.enrich.core import (
    FAILURE_MODES,
    ORDERINGS,
    AsyncMapper,
    Completed,
    Retry,
)
from kafkasync_source.enrich.metrics import METRICS_COLUMN, AsyncCounters, AsyncMetrics
from kafkasync_source.enrich.schema import ResultChecker, output_schema, parse_returns, result_columns

__all__ = ["Retry", "async_map"]

# Seconds the task thread lets finished rows gather before building an output batch: a few ms
# against calls of tens of ms, and far fewer (one per ~chunk, not per row) Arrow batches.
HAND_BACK_LINGER = 0.005


def async_map(
    df: Any,
    fn: Callable[[Dict[str, Any]], Awaitable[Dict[str, Any]]],
    *,
    returns: Union[str, Any],
    max_in_flight: int = 64,
    timeout: Optional[float] = 30.0,
    retry: Optional[Retry] = None,
    ordering: str = "input",
    key: Optional[str] = None,
    on_failure: str = "keep",
    metrics: Optional[AsyncMetrics] = None,
) -> Any:
    """Call ``await fn(row)`` for every row of ``df`` (batch or streaming), ``max_in_flight`` calls
    at a time per Spark task, and return ``df``'s columns, then ``returns``' columns, then
    ``async_status`` (``ok``/``failed``), ``async_error`` and ``async_attempts``: exactly one output
    row per input row.

    ``row`` is a dict of the input columns (Python values as ``Row.asDict()`` gives them); fn returns
    a dict with exactly ``returns``' keys. Each attempt gets ``timeout`` seconds (``None``: no limit);
    an exception or a timeout is retried as ``retry`` says (default ``Retry()``: 3 attempts). A result
    that does not match ``returns`` fails the row at once (not retried). After the last attempt,
    ``on_failure="keep"`` returns the row with ``async_status='failed'``, the error and null outputs;
    ``"fail"`` fails the task with an error naming the row's position and the last error.

    ``ordering``: ``"input"`` keeps each task's input order; ``"key"`` also never overlaps calls for
    the same value of column ``key`` and starts them in input order; ``"none"`` hands rows back as
    they finish. ``metrics``: an ``AsyncMetrics`` that receives the tasks' counts (Spark's observed metrics).
    """
    retry = Retry() if retry is None else retry
    _check_arguments(df, fn, max_in_flight, timeout, retry, ordering, key, on_failure, metrics)
    returns_schema = parse_returns(returns)
    schema = output_schema(df.schema, returns_schema)
    runner = _TaskRunner(fn, returns_schema, dict(max_in_flight=max_in_flight, timeout=timeout, retry=retry,
                                                  ordering=ordering, key=key, on_failure=on_failure),
                         report_metrics=metrics is not None)
    if metrics is None:
        return df.mapInArrow(runner, schema)
    with_metrics = StructType(schema.fields + [StructField(METRICS_COLUMN, ArrayType(LongType()), True)])
    return metrics.observe(df.mapInArrow(runner, with_metrics))


def _check_arguments(df, fn, max_in_flight, timeout, retry, ordering, key, on_failure, metrics) -> None:
    if not _is_coroutine_function(fn):
        raise TypeError(f"async_map: fn must be a coroutine function (async def), got {fn!r}")
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ValueError(f"async_map: max_in_flight={max_in_flight!r} must be an integer >= 1")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise ValueError(f"async_map: timeout={timeout!r} must be a number of seconds > 0, or None")
    if not isinstance(retry, Retry):
        raise TypeError(f"async_map: retry must be a Retry(...), got {retry!r}")
    if ordering not in ORDERINGS:
        raise ValueError(f"async_map: ordering={ordering!r} is not one of {', '.join(map(repr, ORDERINGS))}")
    if ordering == "key":
        if key is None:
            raise ValueError("async_map: ordering='key' needs key=<column name>")
        if key not in df.columns:
            raise ValueError(f"async_map: key={key!r} is not a column of the DataFrame "
                             f"(columns: {', '.join(df.columns)})")
    elif key is not None:
        raise ValueError(f"async_map: key={key!r} is only used with ordering='key' (ordering={ordering!r})")
    if on_failure not in FAILURE_MODES:
        raise ValueError(f"async_map: on_failure={on_failure!r} is not one of "
                         f"{', '.join(map(repr, FAILURE_MODES))}")
    if metrics is not None and not isinstance(metrics, AsyncMetrics):
        raise TypeError(f"async_map: metrics must be an AsyncMetrics(spark), got {metrics!r}")


def _is_coroutine_function(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))


class _TaskRunner:
    """The ``mapInArrow`` function: pickled on the driver, called once per Spark task.

    With ``report_metrics``, every output batch has the extra ``METRICS_COLUMN`` (null), and a
    task that had rows ends with one more row carrying its counters in it (``AsyncMetrics``
    sums and drops those rows).
    """

    def __init__(self, fn, returns, options: Dict[str, Any], report_metrics: bool):
        self._fn = fn
        self._returns = returns
        self._options = options
        self._report_metrics = report_metrics

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        where = f"partition {context.partitionId()}'s input" if context else "the input"
        kept: Dict[int, Any] = {}  # batch number -> input batch with rows not yet handed back
        loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(target=loop.run_forever, name="async_map-loop", daemon=True)
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="async_map-reader")
        mapper = AsyncMapper(self._fn, _read(batches, kept, reader), validate=ResultChecker(self._returns),
                             where=where, **self._options)
        loop_thread.start()
        try:
            _on_loop(loop, _started(mapper))
            handed_back: Dict[int, int] = {}
            last_output = None
            while True:
                chunk = _on_loop(loop, mapper.next_chunk(linger=HAND_BACK_LINGER))
                if chunk is None:
                    break
                for last_output in self._output(chunk, kept, handed_back):
                    yield last_output
            if self._report_metrics and last_output is not None:  # no rows: every counter is 0
                yield _metrics_row(last_output, mapper.counters)
        finally:
            _on_loop(loop, mapper.aclose())
            loop.call_soon_threadsafe(loop.stop)
            loop_thread.join()
            loop.close()
            reader.shutdown(wait=False)

    def _output(self, chunk: List[Completed], kept: Dict[int, Any], handed_back: Dict[int, int]) -> Iterator[Any]:
        """One Arrow batch per run of consecutive rows from the same input batch."""
        import pyarrow as pa

        start = 0
        while start < len(chunk):
            batch_no = chunk[start].batch
            end = start
            while end < len(chunk) and chunk[end].batch == batch_no:
                end += 1
            group, source = chunk[start:end], kept[batch_no]
            rows = [c.row for c in group]
            if rows == list(range(rows[0], rows[0] + len(rows))):
                inputs = source.slice(rows[0], len(rows))
            else:
                inputs = source.take(pa.array(rows, type=pa.int64()))
            outcomes = [c.outcome for c in group]
            columns = list(inputs.columns) + result_columns(self._returns, [o.output for o in outcomes]) + [
                pa.array([o.status for o in outcomes], type=pa.string()),
                pa.array([o.error for o in outcomes], type=pa.string()),
                pa.array([o.attempts for o in outcomes], type=pa.int32()),
            ]
            names = inputs.schema.names + self._returns.fieldNames() + ["async_status", "async_error",
                                                                          "async_attempts"]
            if self._report_metrics:
                columns.append(pa.nulls(len(group), type=_metrics_arrow_type()))
                names.append(METRICS_COLUMN)
            yield pa.RecordBatch.from_arrays(columns, names=names)
            handed_back[batch_no] = handed_back.get(batch_no, 0) + len(group)
            if handed_back[batch_no] == source.num_rows:
                del kept[batch_no], handed_back[batch_no]
            start = end


def _metrics_arrow_type() -> Any:
    import pyarrow as pa

    return pa.list_(pa.int64())


def _metrics_row(last_output: Any, counters: AsyncCounters) -> Any:
    """The task's counters as one more row: a copy of its last output row (so every column keeps
    a valid value, NOT NULL ones included) with ``METRICS_COLUMN`` set."""
    import pyarrow as pa

    row = last_output.slice(last_output.num_rows - 1, 1)
    vector = pa.array([counters.as_vector()], type=_metrics_arrow_type())
    return pa.RecordBatch.from_arrays(row.columns[:-1] + [vector], names=row.schema.names)


async def _started(mapper: AsyncMapper) -> None:
    mapper.start()


def _on_loop(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coroutine`` on the helper thread's loop and wait for its result here."""
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


async def _read(batches: Iterator[Any], kept: Dict[int, Any], reader: ThreadPoolExecutor) -> AsyncIterator[List[Dict]]:
    """The task's input batches as lists of row dicts, read on ``reader`` so the loop keeps going.

    Each batch is registered in ``kept`` (for the output's input columns) before its rows are
    admitted; empty batches are skipped (no row to hand back, so nothing would release them).
    """
    loop = asyncio.get_running_loop()
    batch_no = 0
    while True:
        batch = await loop.run_in_executor(reader, next, batches, None)
        if batch is None:
            return
        if batch.num_rows == 0:
            continue
        rows = await loop.run_in_executor(reader, batch.to_pylist)
        kept[batch_no] = batch
        batch_no += 1
        yield rows
