"""Time codes: what a record's time is, as one integer the planner, the driver and the executors share.

A code ``>= 0`` is a time, epoch milliseconds (UTC). A negative code is no time, and says why
(:class:`TimeCode`). One integer rather than a time and a flag, because codes travel in int64
arrays (the planner's buffers, the executors' columns) and in the offsets' JSON (``-1``: no
partition time yet); the named members say at each use which negative number is meant.

This module imports nothing, so the pure planner (``planning/``) takes its "no timestamp" from
here too: one definition of ``-1`` for the whole package.
"""

from __future__ import annotations

from enum import IntEnum


class TimeCode(IntEnum):
    """The negative time codes. Members are ints (``TimeCode.NO_TIME == -1``), so they compare
    with numpy arrays and plain ints alike and serialise as numbers in JSON; ``str()`` is the
    number on every Python (3.10's IntEnum would print the member's name)."""

    NO_TIME = -1
    """No time: a record without a Kafka timestamp (Kafka's "no timestamp"), or a partition
    without a time yet. A record so coded takes its partition's time so far, so it goes with
    its neighbours and never advances the partition time."""
    PARTITION_TIME = -2
    """The record takes its partition's time so far (``eventTime.onInvalid=partitionTime``): the
    same as :attr:`NO_TIME` for planning; the executors' ``eventTime`` column shows that time."""
    SKIPPED = -3
    """The record takes no part in synchronization: the driver does not buffer it (it neither
    advances nor caps stream time), a probe reads past it, the partition time and the order
    check (``eventTime.order=nonDecreasing``) pass over it. The executors read it in the batch
    whose offset range holds it. Its ``eventTime`` column is null under
    ``eventTime.onInvalid=skip``, and its Kafka timestamp under ``recordTimestamp`` with
    ``eventTime.order=nonDecreasing`` (see :func:`~kafkasync_source.event_time.seam.record_time`)."""

    def __str__(self) -> str:
        return str(int(self))

