"""``eventTime.extractor`` functions the tests and benchmarks name (``module:function``).

They live in the package so that Spark's executors, which import the extractor themselves,
find them wherever kafkasync is installed."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Optional, Sequence


def order_time(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[tuple]],
               timestamp_ms: Optional[int]) -> Optional[datetime]:
    """The ``placed`` field of a JSON order, ISO 8601 text, as a datetime; None without one."""
    placed = json.loads(value or b"{}").get("placed")
    if placed is None:
        return None
    # Python 3.10's fromisoformat does not read a "Z" offset.
    return datetime.fromisoformat(placed.replace("Z", "+00:00")).astimezone(timezone.utc)


def key_millis(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[tuple]],
               timestamp_ms: Optional[int]) -> Optional[int]:
    """The key as decimal epoch milliseconds (a device's reading id, say); None if it is not."""
    text = (key or b"").decode()
    return int(text) if text.isdigit() else None


def refuses_odd_keys(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[tuple]],
                     timestamp_ms: Optional[int]) -> int:
    """Raises on an odd key: a function that fails, to show the error names the record."""
    number = int(key or b"0")
    if number % 2:
        raise ValueError(f"odd key {number}")
    return number


def returns_text(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[tuple]],
                 timestamp_ms: Optional[int]) -> str:
    """Breaks the contract (a string, not epoch ms or a datetime)."""
    return "soon"


def one_argument(value: Optional[bytes]) -> int:
    """Takes one argument where four are passed: refused at load()."""
    return 0


def json_ts(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[tuple]],
            timestamp_ms: Optional[int]) -> Optional[int]:
    """``$.ts`` of a JSON value with the standard library: a Python extractor as users write one
    (benchmarks/event_time.py measures what latestOffset waits for while it runs)."""
    ts = json.loads(value or b"{}").get("ts")
    return ts if isinstance(ts, int) else None


RELEASE = threading.Event()
"""Set to let :func:`waits_for_release` return."""


def waits_for_release(key: Optional[bytes], value: Optional[bytes], headers: Optional[Sequence[tuple]],
                      timestamp_ms: Optional[int]) -> Optional[int]:
    """Blocks until :data:`RELEASE` is set (at most 60 s), then returns the Kafka timestamp: a
    function that hangs, to show the stuck record is named (event_time/watch.py)."""
    RELEASE.wait(60)
    return timestamp_ms
