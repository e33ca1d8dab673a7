"""A record's event time: the one function ``record -> time`` that every reader of time shares.

The Kafka timestamp is the event time only when producers make it so. Copy jobs, change-data
capture (Debezium's ``source.ts_ms``), devices uploading buffered readings and any
re-publication stamp records with the *write* time, and synchronizing on that protects nothing.
Kafka Streams takes the time from a ``TimestampExtractor`` (``default.timestamp.extractor``:
``long extract(ConsumerRecord, long partitionTime)``), Flink from a ``TimestampAssigner``
(``WatermarkStrategy.withTimestampAssigner``); both then synchronize on it. kafkasync does the
same with the ``eventTime.*`` options.

One seam
--------
:class:`RecordTime` maps a consumed record (confluent-kafka ``Message``: key, value, headers,
Kafka timestamp) to a time code. The driver's fetcher (what the planner cuts by), the
executors' range reader (the ``eventTime`` and ``partitionTime`` columns) and the time index's
record probe all call it, so the driver's cut and the executors' rows cannot disagree. The
planner stays pure: it sees ``(offset, time)`` pairs whatever their origin. A code is (the
negative ones named by :class:`~kafkasync_source.event_time.codes.TimeCode`)

* ``>= 0``: the record's event time, epoch milliseconds (UTC);
* :data:`NO_TIME` (-1): a record without a Kafka timestamp (Kafka's "no timestamp"): the
  planner gives it its partition's time so far, so it goes with its neighbours;
* :data:`PARTITION_TIME` (-2): the partition's time so far (KIP-472), the same for the planner,
  and the ``eventTime`` column shows that time;
* :data:`SKIPPED` (-3): an invalid time under ``eventTime.onInvalid=skip`` (and under
  ``recordTimestamp`` with the promise, below): the record is read (``eventTime`` null, or its
  Kafka timestamp under ``recordTimestamp``) and takes no part in synchronization at all — the driver does not buffer
  it, so it neither advances nor caps stream time, and a partition holding only such records
  counts as empty (idle once caught up), as a record Kafka Streams'
  ``LogAndSkipOnInvalidTimestamp`` drops.

The seam is total: taking a time ends in a time or in an invalid time handled by
``eventTime.onInvalid``. Whatever a path, header, format or conversion raises on a record's
bytes is an invalid time with that reason, never an exception of its own that could end the
driver's fetch thread or fail a task without naming the record (the process running out of
memory or stack is no answer about the record: below).

Invalid times
-------------
A time is invalid when it cannot be had (no such field or header, not JSON, null, not a time in
the given format) or is negative — Kafka Streams' extractors treat a negative result as invalid —
or is beyond Spark's timestamp range. ``eventTime.onInvalid`` says what then, after Kafka
Streams' built-in policies (``org.apache.kafka.streams.processor`` javadoc):

* ``fail`` (default, as ``FailOnInvalidTimestamp``): the query fails naming topic, partition,
  offset and why. Where the driver read the record (the fetch path, or a probe that met it),
  once every record before it was processed: the driver plans batches up to it, then fails.
  Under ``eventTime.order=nonDecreasing`` a record no probe read lies inside a planned batch;
  an executor meets it and the batch fails as a whole, the records before it in that batch not
  processed. That cannot be had otherwise in Spark: a batch's offsets are logged before it runs
  and replayed unchanged after a failure, a task failure fails the whole batch (Spark retries the
  task, ``spark.task.maxFailures``, and aborts at once only for a ``NotSerializableException``
  or a ``TaskOutputFileAlreadyExistException``: ``TaskSetManager.handleFailedTask``, Spark 4.3),
  and an executor has no channel back to the driver; so ending the batch before the record needs
  the driver to read every record, which is the fetch path (``planningMode=fetch`` or no
  promise). Decided so: keep the probe path, fail at the first such record with the error
  saying what was and was not processed (:data:`_UNREAD_UNDER_THE_PROMISE`);
* ``skip``: read with a null ``eventTime``, no part in synchronization (:data:`SKIPPED`):
  as Kafka Streams' ``LogAndSkipOnInvalidTimestamp``, which drops the record, a partition of
  such records counts as empty; unlike it, nothing is lost: the row is there, the user filters;
* ``partitionTime`` (``UsePartitionTimeOnInvalidTimestamp``): the partition's time so far; while
  the partition has none, the query fails, as that extractor does;
* ``recordTimestamp``: the Kafka timestamp (Flink's ``recordTimestamp`` argument). Under
  ``eventTime.order=nonDecreasing`` the record is :data:`SKIPPED` for planning and the promise,
  and only its ``eventTime`` column shows the Kafka timestamp
  (:attr:`RecordTime.skipped_shows_kafka_timestamp`). Why: the write time is not the time the
  user promised in order. A CDC backfill of 2020 with one malformed record stamped now would
  otherwise break the promise at the next valid record (its 2020 time is below "now"), and a
  probe that read the stand-in would take "now" for the partition's time at that offset and cut
  as if every later record were newer. So it takes no part in synchronization, as under
  ``skip``; without the promise it takes part as its time, as in Kafka Streams.

A function given with ``eventTime.extractor`` that *raises* fails the query naming the record,
whatever ``onInvalid`` says (Kafka Streams: throwing stops the application); returning None or a
negative number is an invalid time. ``MemoryError`` and ``RecursionError``, wherever raised while
taking a time, fail the query naming the record too (:class:`KafkaSyncExtractionError`): they
are the process's failure, not an answer about the record.

A function that never returns cannot be interrupted (Python cannot stop a thread in a C call),
so it is watched instead (:mod:`~kafkasync_source.event_time.watch`): a call running longer
than ``STALL_S`` is logged, naming the record, on the driver and on the executors, and the
driver's live report lists it (``eventTimeStalled``).

Adding a way to reach a time
----------------------------
A new source of the time (a field of a Schema Registry-decoded record, say) is one more
``read(record) -> epoch ms`` function, raising :class:`~kafkasync_source.event_time.formats.
InvalidTime` (or any exception of the record's bytes) where the record has no valid time;
:func:`record_time` wraps it in :class:`_ExtractedTime`, which applies ``eventTime.onInvalid``,
the codes above and the ``MemoryError`` rule, so every policy, the promise and the executors'
columns apply unchanged. What to add: the option's name in ``options.EVENT_TIME_OPTIONS``, a
branch in :func:`record_time` building the reader (optionally a ``read_all`` over a batch's
values, as ``json_batch_reader``), and, if the option's text has several spellings of one
meaning (a path), its canonical form in :func:`time_source`, so that re-spelling it does not
re-base a checkpoint. A reader that may block (a network look-up) wraps its call in
:func:`~kafkasync_source.event_time.watch.watched`. The public names stay: :class:`RecordTime`,
:func:`record_time`, :func:`time_source`.
"""

from __future__ import annotations

import ast
import re
import struct
import warnings
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import Any, Callable, Optional

from kafkasync_source.event_time.codes import TimeCode
from kafkasync_source.event_time.extractor import function_reader
from kafkasync_source.event_time.formats import InvalidTime, converter
from kafkasync_source.event_time.options import (
    EVENT_TIME_OPTIONS,
    FIELD,
    HEADER,
    ISO8601,
    JSON_PATH,
    RECORD_TIMESTAMP,
    SKIP,
    USE_PARTITION_TIME,
    EventTimeOptions,
    KafkaSyncEventTimeError,
    KafkaSyncExtractionError,
    record_name,
)

NO_TIME = TimeCode.NO_TIME
"""The record has no Kafka timestamp (Kafka's "no timestamp"): it takes its partition's time so far."""
PARTITION_TIME = TimeCode.PARTITION_TIME
"""The record takes its partition's time so far (``eventTime.onInvalid=partitionTime``)."""
SKIPPED = TimeCode.SKIPPED
"""The record takes no part in synchronization (``eventTime.onInvalid=skip``, and
``recordTimestamp`` under ``eventTime.order=nonDecreasing``)."""
KAFKA_TIMESTAMP_SOURCE = "kafkaTimestamp"
"""The time source of a query without ``eventTime.*`` (see :func:`time_source`)."""


class RecordTime(ABC):
    """``time_of(record)``: the record's time code (see the module docstring). Stateless."""

    @abstractmethod
    def time_of(self, record: Any) -> int: ...

    @property
    def skipped_shows_kafka_timestamp(self) -> bool:
        """Whether the executors' ``eventTime`` column shows a :data:`SKIPPED` record's Kafka
        timestamp (``eventTime.onInvalid=recordTimestamp`` under ``eventTime.order=
        nonDecreasing``, see the module doc) rather than null (``skip``)."""
        return False

    def times_of(self, records: list, values: Optional[list] = None) -> list[int]:
        """``time_of`` of each record, in one call: the executors take a whole consume()
        batch's times at once, and a call a record is a good part of a fast extraction.
        ``values``: the records' values where the caller has taken them already (the executors'
        columns), so that a time read from the value need not ask each record again."""
        time_of = self.time_of
        return [time_of(record) for record in records]


class _KafkaTimestamp(RecordTime):
    """The Kafka timestamp (CreateTime or LogAppendTime), NO_TIME where a record has none."""

    def time_of(self, record: Any) -> int:
        kind, timestamp = record.timestamp()
        return timestamp if kind else NO_TIME


KAFKA_TIMESTAMP: RecordTime = _KafkaTimestamp()


class _ExtractedTime(RecordTime):
    """A time read from the record by ``read`` (raising InvalidTime), then the invalid policy."""

    def __init__(self, options: EventTimeOptions, read: Callable[[Any], int],
                 read_all: Optional[Callable[[list], Optional[list[int]]]] = None) -> None:
        """``read_all``: a faster ``times_of`` from the records' values, for batches whose
        records all have valid times, returning None otherwise (then each record is read). Whatever
        else it raises is no answer either: each record is then read alone, so a batch reader can
        never give the executors (which read by batch) another answer than the driver's record
        by record reads, nor end a task with an error that names no record."""
        self._options = options
        self._read = read
        self._read_all = read_all

    @property
    def skipped_shows_kafka_timestamp(self) -> bool:
        return self._options.on_invalid == RECORD_TIMESTAMP and self._options.non_decreasing

    def time_of(self, record: Any) -> int:
        try:
            return self._read(record)
        except KafkaSyncEventTimeError:
            raise  # the extractor raised or returned no kind of time: always fails (module doc)
        except _NOT_THE_RECORDS_FAULT as err:
            raise extraction_failed(record, err) from err
        except Exception as err:  # noqa: BLE001 - the seam is total: see the module docstring
            return self._invalid(record, err)

    def times_of(self, records: list, values: Optional[list] = None) -> list[int]:
        if self._read_all is not None:
            try:
                valid_times = self._read_all([record.value() for record in records] if values is None else values)
            except KafkaSyncEventTimeError:
                raise
            except _NOT_THE_RECORDS_FAULT as err:
                raise extraction_failed(records[0], err) from err
            except Exception:  # noqa: BLE001 - a batch reader's failure is no answer: each record gives its own
                valid_times = None
            if valid_times is not None:
                return valid_times
        read = self._read
        times: list[int] = []
        append = times.append
        for record in records:
            try:
                append(read(record))
            except KafkaSyncEventTimeError:
                raise
            except _NOT_THE_RECORDS_FAULT as err:
                raise extraction_failed(record, err) from err
            except Exception as err:  # noqa: BLE001 - as in time_of
                append(self._invalid(record, err))
        return times

    def _invalid(self, record: Any, err: Exception) -> int:
        """What ``eventTime.onInvalid`` makes of a record whose time could not be had."""
        if isinstance(err, InvalidTime):
            reason = str(err)
        else:
            reason = f"{type(err).__name__} taking it from {_describe_bytes(record)}: {err}"[:300]
        policy = self._options.on_invalid
        if policy == SKIP:
            return SKIPPED
        if policy == USE_PARTITION_TIME:
            return PARTITION_TIME
        if policy == RECORD_TIMESTAMP:
            # Under the promise the write time stands in for the column only: see the module doc.
            return SKIPPED if self._options.non_decreasing else KAFKA_TIMESTAMP.time_of(record)
        raise KafkaSyncEventTimeError(
            f"kafkasync: no event time for {record_name(record)} ({self._options.describe()}): "
            f"{reason}. Set eventTime.onInvalid to skip, partitionTime or recordTimestamp to "
            "read such records." + (_UNREAD_UNDER_THE_PROMISE if self._options.non_decreasing else "")
        )


_UNREAD_UNDER_THE_PROMISE = (
    " Under eventTime.order=nonDecreasing the driver plans from a few records: one it did not read "
    "lies inside a planned batch, which fails as a whole (earlier batches were processed, no record "
    "of this one was); a restart replays that batch with its logged offsets, under the "
    "eventTime.onInvalid then set."
)
"""Why, on the probe path, the records before an invalid one in its batch were not processed
(see "Invalid times" in the module doc)."""

_NOT_THE_RECORDS_FAULT = (MemoryError, RecursionError)
"""Failures of the process, not answers about a record's time: whether they happen depends on
the memory and the stack depth of the thread taking the time (msgspec's nesting limit counts the
caller's frames), so the driver and an executor could disagree on them, and ``skip`` would drop
records for a reason that is not theirs. They fail the query, naming the record."""


def extraction_failed(record: Any, err: BaseException) -> KafkaSyncExtractionError:
    """The error for a :data:`_NOT_THE_RECORDS_FAULT` raised while taking ``record``'s time."""
    return KafkaSyncExtractionError(
        f"kafkasync: taking the event time of {record_name(record)} ({_describe_bytes(record)}) raised "
        f"{type(err).__name__}: {str(err)[:200]}. That says nothing about the record's time (it "
        "depends on the memory and stack of the process taking it), so no eventTime.onInvalid "
        "policy applies: the query stops rather than read the record without a time."
    )


def _describe_bytes(record: Any) -> str:
    """"a value of N bytes": what an unexpected error was raised on, without the payload."""
    try:
        value = record.value()
        return "no value" if value is None else f"a value of {len(value)} bytes"
    except Exception:  # noqa: BLE001 - only a description
        return "the record"


def time_source(options: Optional[EventTimeOptions]) -> str:
    """What a query with these options synchronizes on, as its offsets record it
    (``timeSource``): the option, its expression and the format, which together decide every
    time (``onInvalid`` and ``order`` decide only which records take part). A JSONPath is
    recorded in its canonical spelling (:func:`~kafkasync_source.event_time.json_path.
    canonical_json_path`): ``$['ts']``, ``$. ts`` and ``$.ts`` read the same field, and
    re-spelling the option must not re-base the checkpoint's stream time."""
    if options is None:
        return KAFKA_TIMESTAMP_SOURCE
    if options.source == FIELD:  # the same path read in another format is another time
        of_format = options.value_format.describe()
        return f"{options.option}={options.expression.strip()!r} of {of_format} as {options.format}"
    expression = options.expression
    if options.source == JSON_PATH:
        from kafkasync_source.event_time.json_path import canonical_json_path  # see record_time()

        expression = canonical_json_path(expression)
    return f"{options.option}={expression!r} as {options.format}"


_RECORDED_JSON_PATH = re.compile(r"eventTime\.jsonPath=(?P<path>.+) as (?P<format>\w+)", re.DOTALL)


def canonical_time_source(recorded: str) -> str:
    """A time source read from a checkpoint, in today's spelling: a JSONPath recorded raw (by
    kafkasync before the canonical form) becomes canonical, so an old checkpoint of the same
    path continues without re-basing. Anything this cannot read back is returned unchanged (it
    is then compared as it is: at worst the query re-bases, as for another time source)."""
    match = _RECORDED_JSON_PATH.fullmatch(recorded)
    if match is None:
        return recorded
    from kafkasync_source.event_time.json_path import canonical_json_path  # see record_time()

    try:
        with warnings.catch_warnings():  # a recorded "\(" is read as the text it is, not warned about
            warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
            path = ast.literal_eval(match["path"])
        if not isinstance(path, str):
            return recorded
        return f"{EVENT_TIME_OPTIONS[JSON_PATH]}={canonical_json_path(path)!r} as {match['format']}"
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # literal_eval's ({[]: 1}: TypeError)
        return recorded


@lru_cache(maxsize=32)
def record_time(options: Optional[EventTimeOptions]) -> RecordTime:
    """The seam for a query's options: the Kafka timestamp without ``eventTime.*``. Built once
    per process and options (a path compiled, a function imported)."""
    if options is None:
        return KAFKA_TIMESTAMP
    if options.source == JSON_PATH:
        # Imported here, where a query reads a JSONPath: Spark's Python source runner, a new
        # process for every streaming query, would otherwise pay the module and msgspec (about
        # 8 ms of CPU where modules are compiled at import) in queries that read none.
        from kafkasync_source.event_time.json_path import json_batch_reader, json_reader

        return _ExtractedTime(options, json_reader(options.expression, options.format),
                              json_batch_reader(options.expression, options.format))
    if options.source == HEADER:
        return _ExtractedTime(options, _header_reader(options.expression, options.format))
    if options.source == FIELD:
        value_format = options.value_format
        return _ExtractedTime(options, value_format.time_reader(options.expression, options.format),
                              value_format.batch_time_reader(options.expression, options.format))
    return _ExtractedTime(options, function_reader(options.expression))


_DECIMAL_TEXT = re.compile(rb"\s*-?\d+(\.\d+)?\s*")


def _header_reader(name: str, time_format: str) -> Callable[[Any], int]:
    """The last header of that name (as Kafka's ``Headers.lastHeader``). Text in the format, or,
    for the epoch formats, 8 bytes that are not decimal text: a big-endian long, KIP-472's
    encoding of partition time in a header (an 8-digit text would be a time in 1970)."""
    convert = converter(time_format)
    binary = time_format != ISO8601

    def read(record: Any) -> int:
        value = _missing = object()
        for key, header_value in record.headers() or ():
            if key == name:
                value = header_value
        if value is _missing:
            raise InvalidTime(f"the record has no header {name!r}")
        if value is None:
            raise InvalidTime(f"header {name!r} has no value")
        assert isinstance(value, bytes)
        if binary and len(value) == 8 and not _DECIMAL_TEXT.fullmatch(value):
            return convert(struct.unpack(">q", value)[0])
        try:
            return convert(value.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidTime(f"header {name!r} is neither text nor an 8-byte long") from None

    return read
