"""Executor side: a range's read runs with Python's cyclic garbage collector held off.

Its own module because it is about the Python worker, not about Kafka: what it measured and why
it is safe for the worker's other code is in :func:`collection_held` and docs/benchmarks.md.
"""

from __future__ import annotations

import gc
from typing import Generator

import pyarrow as pa


def collection_held(steps: Generator[pa.RecordBatch, None, bool]) -> Generator[pa.RecordBatch, None, bool]:
    """``steps`` run with Python's cyclic garbage collector held off, and their consumer (Spark's
    worker, and the user's code in it) between two batches with it as it found it.

    Every record ``consume()`` returns is a new ``Message`` the collector tracks, and the read
    keeps thousands alive until they become a batch: at CPython's thresholds that set off a
    young-generation collection every 700 allocations, each traversing objects it knows are
    acyclic (freed by reference counting as soon as the batch is built). Collection is
    re-enabled before each batch is handed on, and when ``steps`` raises or is closed; a
    collector the consumer disabled stays disabled (``gc.isenabled`` is asked at every step)."""
    while True:
        held = gc.isenabled()
        if held:
            gc.disable()
        try:
            batch = next(steps)
        except StopIteration as done:
            return done.value
        finally:
            if held:
                gc.enable()
        try:
            yield batch
        except GeneratorExit:
            steps.close()
            raise
