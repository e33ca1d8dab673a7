"""Executor side: the records a range reader consumed, turned column by column into Arrow.

Kept apart from the read loop (range_reader.py) because it is the one place that knows Spark's
row layout: the ``kafka_schema`` columns in their order, Kafka's timestamp kinds mapped to
Spark's, the ``eventTime`` / ``partitionTime`` columns that follow each partition's time
(KIP-472), and the decoded columns. It asks nothing of Kafka: it takes the ``Message`` objects a
consumer returned, so it is tested without a cluster (test_partition_time.py, test_decode_mode.py).
"""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from kafkasync_source.event_time import (
    NO_TIME,
    PARTITION_TIME,
    SKIPPED,
    KafkaSyncEventTimeError,
    RecordTime,
    broken_order,
)
from kafkasync_source.executor.decode_policy import DecodePolicy, decoded_columns

_MAX_TIMESTAMP_MS = np.iinfo(np.int64).max // 1000
"""Spark timestamps are int64 microseconds: larger record timestamps (ms) cannot be converted."""


class RecordColumns:
    """Column-wise accumulation of consumed records, turned into one RecordBatch at a time."""

    def __init__(
        self,
        topic: str,
        include_headers: bool,
        *,
        partition_time: Optional[int] = None,
        partition_time_column: bool = False,
        event_time: Optional[RecordTime] = None,
        check_order: bool = False,
        decoders: Sequence[DecodePolicy] = (),
    ) -> None:
        """``partition_time``: the partition's time before the range's first record (-1: none),
        from which its running maximum continues; None where it is not followed.
        ``partition_time_column``: add it as ``partitionTime`` (``includePartitionTime``).
        ``event_time``: the ``eventTime.*`` seam; None: no ``eventTime`` column, and the
        partition time follows the Kafka timestamps. ``check_order``: fail on a record whose
        time is below the partition time before it (``eventTime.order=nonDecreasing``: the
        driver planned from a few records, on the user's word that the rest lie between).
        ``decoders``: ``records -> arrays`` for each decoded format (the decoded column, and
        under PERMISSIVE its error column), the last columns (executor/decode_policy.py)."""
        self._decoders = decoders
        self._topic = topic
        self._check_order = check_order
        self._include_headers = include_headers
        self._partition_time = partition_time
        self._partition_time_column = partition_time_column
        self._event_time = event_time
        self.payload_bytes = 0
        self.records = 0
        """Key and value bytes, and records, of every batch built so far."""
        self._clear()

    def _clear(self) -> None:
        self.keys: list[Optional[bytes]] = []
        self.values: list[Optional[bytes]] = []
        self.partitions: list[tuple[int, int]] = []  # (partition, run length)
        self.offsets: list[int] = []
        self.timestamps: list[tuple[int, int]] = []  # (kind, ms) as confluent-kafka gives them
        self.headers: list[Optional[list[tuple[str, Optional[bytes]]]]] = []
        self.event_times: list[int] = []  # time codes of the eventTime.* seam
        self.decoded: list[list[pa.Array]] = [[] for d in self._decoders for _ in range(d.width)]
        """Per decoded column (and error column), its arrays, one per consume()."""

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, records: list) -> None:
        if not records:
            return
        # Comprehensions: map(methodcaller(...)) measured slower on CPython 3.11 (one process,
        # best of 15), and map(Message.value) refuses any record but confluent-kafka's.
        values = [m.value() for m in records]
        self.keys.extend([m.key() for m in records])
        self.values.extend(values)
        # One consume() call of a consumer assigned to one partition: one partition.
        self.partitions.append((records[0].partition(), len(records)))
        self.offsets.extend([m.offset() for m in records])
        self.timestamps.extend([m.timestamp() for m in records])
        if self._include_headers:
            # A record without headers reads as null, as in format("kafka") (measured beside
            # Spark 4.2.0's connector, integration/test_format_kafka_parity.py).
            self.headers.extend([m.headers() or None for m in records])
        if self._event_time is not None:
            # The driver planned the batch with the same function (event_time/seam.py); a record
            # whose time fails (eventTime.onInvalid=fail) fails the task, naming it.
            self.event_times.extend(self._event_time.times_of(records, values))
        arrays = decoded_columns(self._decoders, records)
        for column, array in zip(self.decoded, arrays):
            column.append(array)

    def to_batch(self, schema: pa.Schema) -> pa.RecordBatch:
        count = len(self.offsets)
        kinds_and_times = np.fromiter(
            itertools.chain.from_iterable(self.timestamps), dtype=np.int64, count=2 * count
        ).reshape(count, 2)
        # confluent-kafka: 0 = not available, 1 = CreateTime, 2 = LogAppendTime; Spark (Java's
        # TimestampType.id): -1, 0, 1. A record without timestamp gets a null timestamp.
        timestamp_type = kinds_and_times[:, 0] - 1
        self._check_timestamps(kinds_and_times[:, 1], timestamp_type >= 0)
        timestamp_us = pa.array(
            kinds_and_times[:, 1] * 1000, mask=timestamp_type < 0
        ).cast(schema.field("timestamp").type)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            # One value repeated, not a list of count references converted (3.3 ms of 10,000 rows).
            pa.repeat(pa.scalar(self._topic, pa.string()), count),
            pa.array(
                np.repeat(
                    np.array([p for p, _ in self.partitions], dtype=np.int32),
                    [n for _, n in self.partitions],
                ),
                pa.int32(),
            ),
            pa.array(self.offsets, pa.int64()),
            timestamp_us,
            pa.array(timestamp_type.astype(np.int32), pa.int32()),
        ]
        if self._include_headers:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        # Each record's time code (event_time/seam.py): the Kafka timestamp unless eventTime.* is set.
        times = (
            np.where(timestamp_type >= 0, kinds_and_times[:, 1], NO_TIME) if self._event_time is None
            else np.fromiter(self.event_times, dtype=np.int64, count=count)
        )
        after: Optional[np.ndarray] = None
        if self._partition_time is not None:
            before, after = self._partition_times(times)
            if self._check_order:
                self._fail_on_disorder(times, before)
            times = np.where(times == PARTITION_TIME, self._partition_time_or_fail(before, times), times)
        if self._event_time is not None:
            if self._event_time.skipped_shows_kafka_timestamp:
                # onInvalid=recordTimestamp under eventTime.order=nonDecreasing: the write time
                # shows in the column only; it took no part in the check above (event_time/seam.py).
                times = np.where(times == SKIPPED, np.where(timestamp_type >= 0, kinds_and_times[:, 1], NO_TIME),
                                 times)
            arrays.append(_timestamps(times, schema.field("eventTime").type))
        if self._partition_time_column:
            assert after is not None, "partitionTime needs the partition time followed"
            arrays.append(_timestamps(after, schema.field("partitionTime").type))
        for column in self.decoded:
            arrays.append(pa.concat_arrays(column) if len(column) != 1 else column[0])
        self.payload_bytes += arrays[0].nbytes + arrays[1].nbytes
        self.records += count
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _partition_times(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """KIP-472's partition time before and after each record: the largest valid time of the
        partition up to it, continuing from the range's start (the batch's start offset, so a
        replay computes the same values). A record without a valid time takes the partition
        time before it, as Kafka Streams' UsePartitionTimeOnInvalidTimestamp would; -1 while the
        partition has none."""
        assert self._partition_time is not None
        running = np.maximum.accumulate(np.concatenate(([self._partition_time], np.maximum(times, NO_TIME))))
        if times.size:
            self._partition_time = int(running[-1])
        return running[:-1], running[1:]

    def _partition_time_or_fail(self, before: np.ndarray, times: np.ndarray) -> np.ndarray:
        """``before``, where records take their partition's time (eventTime.onInvalid=
        partitionTime); as Kafka Streams' UsePartitionTimeOnInvalidTimestamp, fail while the
        partition has none."""
        unknown = np.flatnonzero((times == PARTITION_TIME) & (before < 0))
        if unknown.size:
            first = int(unknown[0])
            raise KafkaSyncEventTimeError(
                f"kafkasync: no event time for {self._topic}-{self._partition_at(first)} offset "
                f"{self.offsets[first]}: its time is invalid and eventTime.onInvalid=partitionTime, but "
                "the partition has no time yet (no valid time before it since the query started); "
                "Kafka Streams' UsePartitionTimeOnInvalidTimestamp fails here too. Use skip or "
                "recordTimestamp to read such records."
            )
        return before

    def _fail_on_disorder(self, times: np.ndarray, before: np.ndarray) -> None:
        """Raise at the first record with a time of its own below its partition's time
        before it (the running maximum, from the batch's start offset)."""
        older = np.flatnonzero((times >= 0) & (times < before))
        if older.size:
            first = int(older[0])
            raise broken_order(self._topic, self._partition_at(first), self.offsets[first], int(times[first]),
                               f"the partition's time {int(before[first])} before it")

    def _partition_at(self, index: int) -> int:
        """The partition of the ``index``-th record accumulated."""
        run_ends = np.cumsum([n for _, n in self.partitions])
        return self.partitions[int(np.searchsorted(run_ends, index, side="right"))][0]

    def _check_timestamps(self, millis: np.ndarray, present: np.ndarray) -> None:
        """Fail on a timestamp whose microseconds overflow int64 (Spark's TimestampType)
        instead of returning a wrapped-around date. format("kafka") fails on it too: its
        record-to-row conversion calls ``DateTimeUtils.fromJavaTimestamp``, whose
        ``instantToMicros`` uses ``Math.multiplyExact`` (apache/spark
        ``KafkaRecordToRowConverter.scala``, ``DateTimeUtils.scala``)."""
        bad = np.flatnonzero(present & (np.abs(millis) > _MAX_TIMESTAMP_MS))
        if not len(bad):
            return
        first = int(bad[0])
        raise ValueError(
            f"kafkasync: record {self._topic}-{self._partition_at(first)} offset {self.offsets[first]} has "
            f"timestamp {int(millis[first])} ms, beyond what Spark's timestamp type holds "
            f"(|ms| <= {_MAX_TIMESTAMP_MS}); format(\"kafka\") fails on it too."
        )


def _timestamps(millis: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """Epoch milliseconds as a Spark timestamp column; null where negative (no time)."""
    return pa.array(millis * 1000, mask=millis < 0).cast(arrow_type)
