"""Values whose time cannot be had, for the embedded-cluster and the real-broker suites alike:
the same records, and the same checks of what ``eventTime.onInvalid`` makes of them."""

from __future__ import annotations

import json
from typing import Any

LOOKALIKES = {17: b'{"ts": "\xc2\xb2"}', 30: b'{"ts": "1e999999999"}'}
"""Which of :func:`with_numeric_lookalikes`' values only look numeric: "²" passes
``str.isdigit()`` and ``int()`` refuses it; "1e999999999" is a Decimal beyond any context. Both
once escaped the seam and ended the driver's fetch thread. Written round robin to two
partitions, they are partition 1 offset 8 and partition 0 offset 15."""


def payload(event_time: int, **extra: Any) -> bytes:
    """A JSON value with its event time in ``ts``."""
    return json.dumps({"ts": event_time, **extra}).encode()


def with_numeric_lookalikes(first_time: int, count: int = 40) -> list[bytes]:
    """``count`` values a millisecond apart from ``first_time``, two of them :data:`LOOKALIKES`."""
    return [LOOKALIKES.get(i, payload(first_time + i)) for i in range(count)]


def assert_read_as_on_invalid(rows: list, query: Any, topic: str, on_invalid: str, first_time: int) -> None:
    """What a query of :func:`with_numeric_lookalikes` (round robin to two partitions, ``rows``
    with ``partition``, ``offset`` and ``event``) must have read: with ``skip`` every record
    once, the two with a null time; with ``fail`` the failure naming the first of them, after
    every record of its partition before it, and not it."""
    count = len(with_numeric_lookalikes(first_time))
    if on_invalid == "skip":
        assert query.exception() is None
        assert sorted((row.partition, row.offset) for row in rows) == sorted(
            (i % 2, i // 2) for i in range(count)), "every record read once, the bad ones too"
        assert sorted(row.event for row in rows if row.event is not None) == sorted(
            first_time + i for i in range(count) if i not in LOOKALIKES)
        assert {(row.partition, row.offset) for row in rows if row.event is None} == {
            (i % 2, i // 2) for i in LOOKALIKES}
        return
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(60)
        raise AssertionError("the query did not fail on the record without a time")
    except StreamingQueryException as failure:
        assert f"no event time for {topic}-1 offset 8 (eventTime.jsonPath='$.ts'): '²' is not a number" \
            in str(failure), failure
    read = {(row.partition, row.offset) for row in rows}
    assert read >= {(1, offset) for offset in range(8)}, "every record of the partition before the bad one"
    assert (1, 8) not in read
