"""A live query's rows as it runs, for the tests that watch a stream of event times."""

from __future__ import annotations

import time
from typing import Any, Callable

from kafkasync_dev.testing.patience import PATIENCE_S


def event_time_rows(frame: Any, checkpoint: Any, done: Callable[[list], bool],
                    timeout_s: float = PATIENCE_S) -> tuple[list, Any]:
    """Run ``frame`` (a kafkasync stream with an ``eventTime`` column) as a live query
    (processingTime 200 ms), collecting each batch's (partition, offset, event ms) rows, until
    ``done(rows)``, the query fails, or ``timeout_s`` passes: (rows, the query — still running
    unless it failed; the caller stops it)."""
    rows: list = []
    query = (frame.selectExpr("partition", "offset", "unix_millis(eventTime) AS event").writeStream
             .foreachBatch(lambda batch, _: rows.extend(batch.collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start())
    deadline = time.monotonic() + timeout_s
    while query.isActive and not done(rows) and time.monotonic() < deadline:
        time.sleep(0.1)
    return rows, query
