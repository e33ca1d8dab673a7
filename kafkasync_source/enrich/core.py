"""The scheduling core of ``async_map``: pure asyncio, no Spark, no Arrow.

KIP-311 asks for out-of-order execution with in-order commit. In Spark the commit is already in
order (a micro-batch commits only after every task finished), so this core does the execution
side for one Spark task: it admits input rows into a bounded *window*, calls an async function
for each with per-attempt timeouts and retries with backoff, and hands results back in input
order (``"input"``, ``"key"``) or as they complete (``"none"``).

Two bounds hold at all times. At most ``max_in_flight`` calls are outstanding (running, or waiting
for a retry's backoff). And the rows admitted but not yet taken by the consumer (``next_chunk``) —
calls outstanding, rows waiting for their key, finished rows waiting behind an earlier unfinished
one — are at most ``max_in_flight`` plus the size of the input batch being admitted. So memory is
bounded by ``max_in_flight`` rows plus one batch, and a slow row at the head of an ordered window
stalls new calls only once a whole batch has finished behind it. (Flink Async I/O's ordered mode
buffers a result until all preceding ones are emitted — ``docs/content/docs/dev/datastream/
operators/asyncio.md`` — in the one ``StreamElementQueue`` of ``capacity`` entries that also holds
the requests in flight — ``AsyncWaitOperator.java``; here a batch's worth of reorder room comes
on top, because the input batch is held in memory anyway.) ``"none"`` never holds a finished
row back.

Input arrives as a sequence of batches; the core admits rows of the next batch while rows of the
previous one are still in flight, so the window never drains at a batch boundary.
"""

from __future__ import annotations

import asyncio
import collections
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Deque, Dict, Hashable, List, NamedTuple, Optional, Sequence

from kafkasync_source.enrich.metrics import AsyncCounters

ORDERINGS = ("input", "key", "none")
FAILURE_MODES = ("keep", "fail")
OK = "ok"
FAILED = "failed"


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a failed call is tried again.

    ``attempts`` counts the first call (``attempts=1``: no retry). After failed attempt ``n`` the
    row waits ``min(max_backoff, initial_backoff * multiplier ** (n - 1))``, multiplied by a random
    factor in ``[1 - jitter, 1 + jitter]`` and capped at ``max_backoff`` again: exponential backoff
    with jitter, so that rows that failed together do not retry together.
    """

    attempts: int = 3
    initial_backoff: float = 0.1
    max_backoff: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"Retry(attempts={self.attempts!r}): attempts must be an integer >= 1 "
                             "(1 means no retry)")
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise ValueError(f"Retry({name}={value!r}): must be a number of seconds >= 0")
        if not _is_number(self.multiplier) or self.multiplier < 1:
            raise ValueError(f"Retry(multiplier={self.multiplier!r}): must be a number >= 1")
        if not _is_number(self.jitter) or not 0 <= self.jitter <= 1:
            raise ValueError(f"Retry(jitter={self.jitter!r}): must be a number between 0 and 1")

    def backoff(self, failed_attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt ``failed_attempt`` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (failed_attempt - 1))
        return min(self.max_backoff, base * rng.uniform(1 - self.jitter, 1 + self.jitter))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Outcome(NamedTuple):  # NamedTuples: built once per row, cheaper than frozen dataclasses
    """What became of one row: fn's validated output (``None`` when failed), status, last error."""

    output: Optional[Dict[str, Any]]
    status: str
    error: Optional[str]
    attempts: int


class Completed(NamedTuple):
    """A finished row, with where it came from: its batch, its index there, its task position."""

    batch: int
    row: int
    position: int
    outcome: Outcome


class ResultError(Exception):
    """fn returned something that does not match ``returns``. Not retried: the same call would
    most likely return the same wrong shape, and it is a bug to fix, not a fault to wait out."""


class RowFailedError(RuntimeError):
    """A row failed its last attempt and ``on_failure="fail"``."""

    def __init__(self, position: int, where: str, outcome: Outcome):
        self.position = position
        self.outcome = outcome
        super().__init__(
            f"async_map: row {position} of {where} failed after {outcome.attempts} attempt(s) "
            f"(on_failure='fail'); last error: {outcome.error}")


class _Item:
    __slots__ = ("batch", "row", "position", "values", "key")

    def __init__(self, batch: int, row: int, position: int, values: Dict[str, Any]):
        self.batch, self.row, self.position, self.values = batch, row, position, values
        self.key: Hashable = None


@dataclass
class _Config:
    max_in_flight: int
    timeout: Optional[float]
    retry: Retry
    ordering: str
    key: Optional[str]
    on_failure: str


class AsyncMapper:
    """Runs ``fn`` over the rows of ``source`` for one task; ``next_chunk`` hands results back.

    Usage (inside a running event loop)::

        mapper = AsyncMapper(fn, source, max_in_flight=64, timeout=2.0, retry=Retry(),
                             ordering="input", key=None, on_failure="keep")
        mapper.start()
        while (chunk := await mapper.next_chunk()) is not None:
            ...  # a list of Completed; their window slots are free again
    """

    def __init__(
        self,
        fn: Callable[[Dict[str, Any]], Awaitable[Any]],
        source: AsyncIterator[Sequence[Dict[str, Any]]],
        *,
        max_in_flight: int,
        timeout: Optional[float],
        retry: Retry,
        ordering: str,
        key: Optional[str],
        on_failure: str,
        validate: Callable[[Any], Dict[str, Any]] = lambda result: result,
        where: str = "the input",
        rng: Optional[random.Random] = None,
    ):
        self._fn = fn
        self._source = source
        self._config = _Config(max_in_flight, timeout, retry, ordering, key, on_failure)
        self._validate = validate
        self._where = where
        self._rng = rng or random.Random()
        self.counters = AsyncCounters()
        self._window = 0  # rows admitted and not yet taken by next_chunk
        self._running = 0  # calls outstanding: started (or backing off) and not finished
        self._changed = asyncio.Event()  # window, output, completion or failure changed
        self._pending: Dict[int, Completed] = {}  # ordered modes: finished, waiting for the head
        self._head = 0  # ordered modes: next position to hand back
        self._ready: List[Completed] = []  # finished, handed back by the next next_chunk
        self._key_queues: Dict[Hashable, Deque[_Item]] = {}  # "key": busy keys and their waiters
        self._calls: set[asyncio.Task] = set()
        self._admitted = 0
        self._input_done = False
        self._error: Optional[BaseException] = None
        self._feeder: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._feeder = asyncio.get_running_loop().create_task(self._feed())

    async def next_chunk(self, linger: float = 0.0) -> Optional[List[Completed]]:
        """Every finished row not yet handed back (waits for at least one); ``None`` at the end.

        With ``linger``, once a row is ready and calls are still running, wait that many seconds
        more so that the chunk gathers the rows finishing meanwhile: fewer, larger chunks cost
        the consumer less (one Arrow batch each) and do not slow the calls, which run on.

        Raises the error that stopped the run: ``RowFailedError`` with ``on_failure="fail"``, or
        whatever reading the source raised.
        """
        lingered = False
        while True:
            if self._error is not None:
                raise self._error
            if self._ready and linger and not lingered and self._running and \
                    len(self._ready) < self._config.max_in_flight:
                lingered = True
                await asyncio.sleep(linger)
                continue
            if self._ready:
                chunk, self._ready = self._ready, []
                self._window -= len(chunk)
                self._changed.set()
                return chunk
            if self._input_done and self._window == 0:
                return None
            self._changed.clear()
            await self._changed.wait()

    async def aclose(self) -> None:
        """Cancel the feeder and every call in flight and wait for them (no call outlives this)."""
        tasks = [t for t in [self._feeder, *self._calls] if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _feed(self) -> None:
        try:
            batch_no = 0
            async for rows in self._source:
                capacity = self._config.max_in_flight + len(rows)
                for row_no, values in enumerate(rows):
                    item = _Item(batch_no, row_no, self._admitted, values)
                    if self._config.ordering == "key" and self._config.key is not None:
                        item.key = _hashable(values.get(self._config.key))
                    while self._window >= capacity or (
                            self._running >= self._config.max_in_flight and not self._waits_for_key(item)):
                        self._changed.clear()
                        await self._changed.wait()
                    self._admit(item)
                batch_no += 1
            self._input_done = True
        except Exception as error:  # reading the input failed: the task fails with it
            self._error = error
        self._changed.set()

    def _waits_for_key(self, item: _Item) -> bool:
        """Whether ``item`` would queue behind a busy key (and so start no call when admitted)."""
        return self._config.ordering == "key" and item.key in self._key_queues

    def _admit(self, item: _Item) -> None:
        self._admitted += 1
        self._window += 1
        self.counters.rows += 1
        if self._waits_for_key(item):  # key busy: start after the calls before it, in input order
            self._key_queues[item.key].append(item)
            return
        if self._config.ordering == "key":  # key idle: mark it busy
            self._key_queues[item.key] = collections.deque()
        self._launch(item)

    def _launch(self, item: _Item) -> None:
        self._running += 1
        task = asyncio.get_running_loop().create_task(self._run_row(item))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _run_row(self, item: _Item) -> None:
        try:
            outcome = await self._attempts(item.values)
        except Exception as error:  # a bug in the core itself: fail the task, do not hang
            self._error = error
            self._changed.set()
            return
        self._finish(item, outcome)

    async def _attempts(self, values: Dict[str, Any]) -> Outcome:
        config, counters = self._config, self.counters
        error = "no attempt made"
        attempt = 0
        while attempt < config.retry.attempts:
            attempt += 1
            counters.calls += 1
            started = time.monotonic()
            try:
                result = await _within(self._fn(dict(values)), config.timeout)
            except _TimedOut:
                counters.timeouts += 1
                error = f"attempt {attempt} timed out after {config.timeout:g} s"
            except Exception as failure:  # noqa: BLE001 - any failure of fn is a failed attempt
                error = f"attempt {attempt}: {type(failure).__name__}: {failure}"
            else:
                try:
                    return Outcome(self._validate(result), OK, None, attempt)
                except ResultError as wrong:
                    return self._failed(f"attempt {attempt}: {wrong}", attempt)
            finally:
                counters.record_latency(time.monotonic() - started)
            if attempt < config.retry.attempts:
                counters.retries += 1
                await asyncio.sleep(config.retry.backoff(attempt, self._rng))
        return self._failed(error, attempt)

    def _failed(self, error: str, attempts: int) -> Outcome:
        self.counters.failures += 1
        return Outcome(None, FAILED, error, attempts)

    def _finish(self, item: _Item, outcome: Outcome) -> None:
        self._running -= 1
        if outcome.status == FAILED and self._config.on_failure == "fail" and self._error is None:
            self._error = RowFailedError(item.position, self._where, outcome)
        if outcome.status == OK:
            self.counters.ok += 1
        done = Completed(item.batch, item.row, item.position, outcome)
        if self._config.ordering == "none":
            self._ready.append(done)
        else:
            self._pending[done.position] = done
            while self._head in self._pending:
                self._ready.append(self._pending.pop(self._head))
                self._head += 1
        if self._config.ordering == "key":
            waiting = self._key_queues[item.key]
            if waiting:
                self._launch(waiting.popleft())
            else:
                del self._key_queues[item.key]
        self._changed.set()


class _TimedOut(Exception):
    """An attempt ran out of its timeout (not: fn raised a TimeoutError of its own)."""


async def _within(call: Awaitable[Any], timeout: Optional[float]) -> Any:
    """Await ``call`` (fn's coroutine, run inline: no extra task per attempt) for at most
    ``timeout`` seconds. On timeout the coroutine is cancelled and has unwound before this raises
    ``_TimedOut``, so a retry never overlaps the attempt it replaces."""
    if timeout is None:
        return await call
    if sys.version_info >= (3, 11):
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                return await call
        except TimeoutError:
            if scope.expired():
                raise _TimedOut() from None
            raise
    try:  # Python 3.10: asyncio.TimeoutError is not the builtin TimeoutError a client may raise
        return await asyncio.wait_for(call, timeout)
    except asyncio.TimeoutError:
        raise _TimedOut() from None


def _hashable(value: Any) -> Hashable:
    """Key values as dict keys: bytes, str, numbers as they are; lists (arrays) as tuples."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value
