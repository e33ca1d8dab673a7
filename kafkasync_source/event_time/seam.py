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
planner stays pure: it sees ``(offset, time)`` pairs whatever their origin. A code is

* ``>= 0``: the record's event time, epoch milliseconds (UTC);
* :data:`NO_TIME` (-1): a record without a Kafka timestamp (Kafka's "no timestamp"): the
  planner gives it its partition's time so far, so it goes with its neighbours;
* :data:`PARTITION_TIME` (-2): the partition's time so far (KIP-472), the same for the planner,
  and the ``eventTime`` column shows that time;
* :data:`SKIPPED` (-3): an invalid time under ``eventTime.onInvalid=skip``: the record is read
  (``eventTime`` null) and takes no part in synchronization at all — the driver does not buffer
  it, so it neither advances nor caps stream time, and a partition holding only such records
  counts as empty (idle once caught up), as a record Kafka Streams'
  ``LogAndSkipOnInvalidTimestamp`` drops.

The seam is total: taking a time ends in a time or in an invalid time handled by
``eventTime.onInvalid``. Whatever a path, header, format or conversion raises on a record's
bytes is an invalid time with that reason, never an exception of its own that could end the
driver's fetch thread or fail a task without naming the record.

Invalid times
-------------
A time is invalid when it cannot be had (no such field or header, not JSON, null, not a time in
the given format) or is negative — Kafka Streams' extractors treat a negative result as invalid —
or is beyond Spark's timestamp range. ``eventTime.onInvalid`` says what then, after Kafka
Streams' built-in policies (``org.apache.kafka.streams.processor`` javadoc):

* ``fail`` (default, as ``FailOnInvalidTimestamp``): the query fails naming topic, partition,
  offset and why, once every record before it was processed;
* ``skip``: read with a null ``eventTime``, no part in synchronization (:data:`SKIPPED`):
  as Kafka Streams' ``LogAndSkipOnInvalidTimestamp``, which drops the record, a partition of
  such records counts as empty; unlike it, nothing is lost: the row is there, the user filters;
* ``partitionTime`` (``UsePartitionTimeOnInvalidTimestamp``): the partition's time so far; while
  the partition has none, the query fails, as that extractor does;
* ``recordTimestamp``: the Kafka timestamp (Flink's ``recordTimestamp`` argument).

A function given with ``eventTime.extractor`` that *raises* fails the query naming the record,
whatever ``onInvalid`` says (Kafka Streams: throwing stops the application); returning None or a
negative number is an invalid time.

What the seam costs
-------------------
JSON values are decoded with msgspec into a struct of just the fields on the path: other fields
are skipped by the C decoder without building Python objects (measured on about 230-byte values:
3.5 million records/s on one core, against 1.2 million for orjson, 0.3 million for ``json``).
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable, Optional, Union

import msgspec

__all__ = [
    "EVENT_TIME_OPTIONS",
    "FORMATS",
    "INVALID_POLICIES",
    "KAFKA_TIMESTAMP",
    "NO_TIME",
    "PARTITION_TIME",
    "SKIPPED",
    "KAFKA_TIMESTAMP_SOURCE",
    "EventTimeOptions",
    "KafkaSyncEventTimeError",
    "RecordTime",
    "record_time",
]

NO_TIME = -1
"""The record has no time: it takes no part in synchronization (Kafka's "no timestamp")."""
PARTITION_TIME = -2
"""The record takes its partition's time so far (``eventTime.onInvalid=partitionTime``)."""
SKIPPED = -3
"""The record takes no part in synchronization (``eventTime.onInvalid=skip``)."""
KAFKA_TIMESTAMP_SOURCE = "kafkaTimestamp"
"""The time source of a query without ``eventTime.*`` (see :func:`time_source`)."""

MAX_TIME_MS = (2**63 - 1) // 1000
"""Spark timestamps are int64 microseconds: later times (ms) cannot be converted."""

JSON_PATH, HEADER, EXTRACTOR = "jsonPath", "header", "extractor"
EVENT_TIME_OPTIONS = {source: f"eventTime.{source}" for source in (JSON_PATH, HEADER, EXTRACTOR)}
"""Where the time is, by option name: a JSONPath into the value, a header, a function."""

EPOCH_MILLIS, EPOCH_SECONDS, EPOCH_MICROS, ISO8601 = "epochMillis", "epochSeconds", "epochMicros", "iso8601"
FORMATS = (EPOCH_MILLIS, EPOCH_SECONDS, EPOCH_MICROS, ISO8601)
FAIL, SKIP, USE_PARTITION_TIME, RECORD_TIMESTAMP = "fail", "skip", "partitionTime", "recordTimestamp"
INVALID_POLICIES = (FAIL, SKIP, USE_PARTITION_TIME, RECORD_TIMESTAMP)


class KafkaSyncEventTimeError(ValueError):
    """A record's event time cannot be had and ``eventTime.onInvalid=fail``, or the
    ``eventTime.extractor`` function raised. The message names topic, partition and offset."""


class InvalidTime(Exception):
    """Raised inside extraction: why this record has no valid time."""


@dataclass(frozen=True)
class EventTimeOptions:
    """The validated ``eventTime.*`` options (``options.py`` parses them)."""

    source: str
    """:data:`JSON_PATH`, :data:`HEADER` or :data:`EXTRACTOR`."""
    expression: str
    """The JSONPath, the header's name, or ``package.module:function``."""
    format: str = EPOCH_MILLIS
    on_invalid: str = FAIL

    @property
    def option(self) -> str:
        return EVENT_TIME_OPTIONS[self.source]

    def describe(self) -> str:
        """``eventTime.jsonPath='$.ts'``: for logs, errors and the live report."""
        return f"{self.option}={self.expression!r}"

    @property
    def time_source(self) -> str:
        """What the query synchronizes on, as its offsets record it: the option and the
        format, which together decide every time (``onInvalid`` decides only invalid ones)."""
        return f"{self.describe()} as {self.format}"

    def check(self) -> None:
        """Compile the path or import the function now, so that a bad one fails at ``load()``
        (raises ValueError naming the option)."""
        record_time(self)


class RecordTime(ABC):
    """``time_of(record)``: the record's time code (see the module docstring). Stateless."""

    @abstractmethod
    def time_of(self, record: Any) -> int: ...


class _KafkaTimestamp(RecordTime):
    """The Kafka timestamp (CreateTime or LogAppendTime), NO_TIME where a record has none."""

    def time_of(self, record: Any) -> int:
        kind, timestamp = record.timestamp()
        return timestamp if kind else NO_TIME


KAFKA_TIMESTAMP: RecordTime = _KafkaTimestamp()


class _ExtractedTime(RecordTime):
    """A time read from the record by ``read`` (raising InvalidTime), then the invalid policy."""

    def __init__(self, options: EventTimeOptions, read: Callable[[Any], int]) -> None:
        self._options = options
        self._read = read

    def time_of(self, record: Any) -> int:
        try:
            return self._read(record)
        except KafkaSyncEventTimeError:
            raise  # the extractor raised or returned no kind of time: always fails (module doc)
        except InvalidTime as invalid:
            reason = str(invalid)
        except Exception as err:  # noqa: BLE001 - the seam is total: see the module docstring
            reason = f"{type(err).__name__} taking it from {_describe_bytes(record)}: {err}"[:300]
        policy = self._options.on_invalid
        if policy == SKIP:
            return SKIPPED
        if policy == USE_PARTITION_TIME:
            return PARTITION_TIME
        if policy == RECORD_TIMESTAMP:
            return KAFKA_TIMESTAMP.time_of(record)
        raise KafkaSyncEventTimeError(
            f"kafkasync: no event time for {record_name(record)} ({self._options.describe()}): "
            f"{reason}. Set eventTime.onInvalid to skip, partitionTime or recordTimestamp to "
            "read such records."
        )


def _describe_bytes(record: Any) -> str:
    """"a value of N bytes": what an unexpected error was raised on, without the payload."""
    try:
        value = record.value()
        return "no value" if value is None else f"a value of {len(value)} bytes"
    except Exception:  # noqa: BLE001 - only a description
        return "the record"


def time_source(options: Optional[EventTimeOptions]) -> str:
    """What a query with these options synchronizes on (recorded in its offsets)."""
    return KAFKA_TIMESTAMP_SOURCE if options is None else options.time_source


def record_name(record: Any) -> str:
    return f"{record.topic()}-{record.partition()} offset {record.offset()}"


@lru_cache(maxsize=32)
def record_time(options: Optional[EventTimeOptions]) -> RecordTime:
    """The seam for a query's options: the Kafka timestamp without ``eventTime.*``. Built once
    per process and options (a path compiled, a function imported)."""
    if options is None:
        return KAFKA_TIMESTAMP
    if options.source == JSON_PATH:
        read = _json_reader(options.expression, options.format)
    elif options.source == HEADER:
        read = _header_reader(options.expression, options.format)
    else:
        read = _function_reader(options.expression)
    return _ExtractedTime(options, read)


# --- JSONPath into the value ------------------------------------------------------------------

# Spark's get_json_object grammar (JsonPathParser, jsonExpressions.scala in apache/spark):
# `$`, then `.name` (name: no `.` or `[`), `['name']` (no `'`), `[123]`; wildcards `[*]`, `.*`,
# `['*']` select several values, which cannot be one time, so they are refused.
_PATH_STEP = re.compile(r"\.([^.\[]+)|\['([^']+)'\]|\[(\d+)\]|(\[\*\]|\.\*)")


def parse_json_path(path: str) -> list[tuple[Union[str, int], str]]:
    """The steps of a JSONPath as Spark's ``get_json_object`` writes it: each name or index
    with the path up to it (for messages). Raises ValueError naming the option."""
    where = f"Option 'eventTime.jsonPath' {path!r}"
    if not path.startswith("$"):
        raise ValueError(f"{where} must start with '$' (the value), e.g. '$.ts' or '$.source.ts_ms'.")
    steps: list[tuple[Union[str, int], str]] = []
    position = 1
    while position < len(path):
        match = _PATH_STEP.match(path, position)
        if match is None:
            raise ValueError(
                f"{where} is not a path get_json_object understands at {path[position:]!r}: use "
                "'.name', \"['name']\" or '[index]' steps, e.g. '$.source.ts_ms' or '$.events[0].ts'."
            )
        name, quoted, index, wildcard = match.groups()
        if wildcard is not None or name == "*" or quoted == "*":
            raise ValueError(f"{where}: a wildcard selects several values; an event time is one value.")
        position = match.end()
        steps.append((int(index) if index is not None else name if name is not None else quoted,
                      path[:position]))
    return steps


@dataclass(frozen=True)
class _Stage:
    """Names to descend through in one decode, then an array index (None: the time itself)."""

    names: tuple[tuple[str, str], ...]  # (name, the path up to it)
    index: Optional[tuple[int, str]] = None

    def decoder(self) -> msgspec.json.Decoder:
        leaf: Any = list[msgspec.Raw] if self.index is not None else Any
        for depth, (name, _) in reversed(list(enumerate(self.names))):
            # A struct of that one field, which may be absent; other fields are skipped in C.
            leaf = msgspec.defstruct(f"Step{depth}", [("field", Union[leaf, msgspec.UnsetType], msgspec.UNSET)],
                                     rename={"field": name})
        return msgspec.json.Decoder(leaf)


def _json_reader(path: str, time_format: str) -> Callable[[Any], int]:
    """Decode only what lies on the path: nested msgspec structs of one field each; an array
    index decodes that array's elements as raw JSON, and the next stage continues in the
    chosen one."""
    stages = [_Stage(())]
    for step, prefix in parse_json_path(path):
        if isinstance(step, int):
            stages[-1] = _Stage(stages[-1].names, (step, prefix))
            stages.append(_Stage(()))
        else:
            stages[-1] = _Stage(stages[-1].names + ((step, prefix),))
    decoders = [(stage, stage.decoder()) for stage in stages]
    convert = _converter(time_format)

    def read(record: Any) -> int:
        document = record.value()
        if document is None:
            raise InvalidTime("the record has no value (a tombstone)")
        for stage, decoder in decoders:
            try:
                found = decoder.decode(document)
            except msgspec.ValidationError as err:  # a DecodeError too: caught first
                raise InvalidTime(f"the value does not hold {path} ({err})") from None
            except msgspec.DecodeError as err:
                raise InvalidTime(f"the value is not JSON ({err})") from None
            for _, prefix in stage.names:
                found = found.field
                if found is msgspec.UNSET:
                    raise InvalidTime(f"the value has no {prefix}")
            if stage.index is None:
                return convert(found)
            index, prefix = stage.index
            if index >= len(found):
                raise InvalidTime(f"the value has no {prefix} (the array has {len(found)} elements)")
            document = found[index]
        raise AssertionError("unreachable: the last stage ends at the time itself")

    return read


# --- A header --------------------------------------------------------------------------------

_DECIMAL_TEXT = re.compile(rb"\s*-?\d+(\.\d+)?\s*")


def _header_reader(name: str, time_format: str) -> Callable[[Any], int]:
    """The last header of that name (as Kafka's ``Headers.lastHeader``). Text in the format, or,
    for the epoch formats, 8 bytes that are not decimal text: a big-endian long, KIP-472's
    encoding of partition time in a header (an 8-digit text would be a time in 1970)."""
    convert = _converter(time_format)
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


# --- A function ------------------------------------------------------------------------------


def _function_reader(spec: str) -> Callable[[Any], int]:
    """``package.module:function(key, value, headers, timestamp_ms) -> int | datetime | None``:
    epoch milliseconds or a datetime (naive: UTC); None or negative: invalid."""
    function = _import_function(spec)

    def read(record: Any) -> int:
        kind, timestamp = record.timestamp()
        try:
            result = function(record.key(), record.value(), record.headers(), timestamp if kind else None)
        except Exception as err:
            raise KafkaSyncEventTimeError(
                f"kafkasync: eventTime.extractor {spec!r} raised {type(err).__name__} on "
                f"{record_name(record)}: {err}"
            ) from err
        if result is None:
            raise InvalidTime(f"eventTime.extractor {spec!r} returned None")
        if isinstance(result, datetime):
            return _datetime_ms(result)
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise KafkaSyncEventTimeError(
                f"kafkasync: eventTime.extractor {spec!r} returned a {type(result).__name__} for "
                f"{record_name(record)}; it must return epoch milliseconds (int), a datetime or None."
            )
        return _checked(_whole_ms(result))

    return read


def _import_function(spec: str) -> Callable[..., Any]:
    module_name, _, attribute = spec.partition(":")
    where = f"Option 'eventTime.extractor' {spec!r}"
    if not module_name or not attribute:
        raise ValueError(f"{where} must be 'package.module:function'.")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise ValueError(
            f"{where}: cannot import {module_name!r} ({type(err).__name__}: {err}). The module must "
            "be importable on the driver and on every executor (pip install it there, or ship it "
            "with spark.submit.pyFiles / --py-files)."
        ) from None
    function: Any = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ValueError(f"{where}: {module_name!r} has no {attribute!r}.")
    if not callable(function):
        raise ValueError(f"{where}: {attribute!r} is a {type(function).__name__}, not a function.")
    try:
        inspect.signature(function).bind(None, None, None, None)
    except TypeError:
        raise ValueError(
            f"{where} must take four arguments (key, value, headers, timestamp_ms); its "
            f"signature is {inspect.signature(function)}."
        ) from None
    except ValueError:  # no signature to inspect (some builtins): called and checked per record
        pass
    return function


# --- Formats ---------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)
_ISO8601 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?",
    re.IGNORECASE,
)
_UNIT_MS = {EPOCH_MILLIS: 1, EPOCH_SECONDS: 1000}
_MOST_DIGITS = 30
"""A number with more integer digits than this is no time in any format (MAX_TIME_MS has 16)."""


def _converter(time_format: str) -> Callable[[Any], int]:
    """A JSON scalar or header text -> epoch ms (raises InvalidTime)."""
    if time_format == ISO8601:
        return _iso8601_ms
    if time_format == EPOCH_MICROS:
        return lambda value: _checked(_whole_ms(_number(value, time_format), per_ms=1000))
    unit = _UNIT_MS[time_format]
    if unit == 1:
        def millis(value: Any) -> int:
            if type(value) is int and 0 <= value <= MAX_TIME_MS:  # the common case, first
                return value
            return _checked(_whole_ms(_number(value, time_format)))
        return millis
    return lambda value: _checked(_whole_ms(_number(value, time_format), unit=unit))


def _number(value: Any, time_format: str) -> Union[int, float, Decimal]:
    """A JSON number, or a string holding one ("1700000000000", "1700000000.25")."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
        raise InvalidTime(f"{_describe(value)} is not a number ({time_format})")
    if isinstance(value, str):
        text = value.strip()
        try:
            # isascii: str.isdigit() is true for digits int() refuses ("²", "①").
            return int(text) if text.isascii() and text.lstrip("-").isdigit() else Decimal(text)
        except (ValueError, ArithmeticError):  # decimal's InvalidOperation is both
            raise InvalidTime(f"{value[:40]!r} is not a number ({time_format})") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidTime(f"{value} is not a time ({time_format})")
    return value


def _whole_ms(number: Union[int, float, Decimal], *, unit: int = 1, per_ms: int = 1) -> int:
    """``number * unit / per_ms`` milliseconds, rounded down (as a Kafka timestamp truncates);
    a float is first rounded to a millionth of a ms, so 1700000000.001 s is ...001 ms, not
    ...000 ms for a float's last bit."""
    if isinstance(number, int):
        return number * unit // per_ms
    try:
        if isinstance(number, Decimal):
            if not number.is_finite():
                raise InvalidTime(f"{number} is not a time")
            if number.adjusted() > _MOST_DIGITS:  # before floor(), which would build the integer
                raise InvalidTime(f"{str(number)[:40]} is beyond any time")
            return math.floor(number * unit / per_ms)
        return math.floor(round(number * unit / per_ms, 6))
    except (ArithmeticError, ValueError):  # decimal.Overflow, a float's inf: far beyond any time
        raise InvalidTime(f"{str(number)[:40]} is beyond any time") from None


def _checked(millis: int) -> int:
    if millis < 0:
        raise InvalidTime(f"the time {millis} ms is negative (before 1970)")
    if millis > MAX_TIME_MS:
        raise InvalidTime(f"the time {millis} ms is beyond what Spark's timestamp type holds")
    return millis


def _iso8601_ms(value: Any) -> int:
    """ISO 8601 date-time text: ``2024-05-01T12:00:00.250Z``, ``+02:00`` or ``+0200`` offsets,
    a space for the ``T``, a date alone (midnight); without an offset, UTC."""
    if not isinstance(value, str):
        raise InvalidTime(f"{_describe(value)} is not ISO 8601 text")
    match = _ISO8601.fullmatch(value.strip())
    if match is None:
        raise InvalidTime(f"{value[:40]!r} is not an ISO 8601 date-time")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    try:
        zone = timezone.utc
        if offset and offset.upper() != "Z":
            digits = offset[1:].replace(":", "")
            delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
            zone = timezone(delta if offset[0] == "+" else -delta)
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                          int(second or 0), int((fraction or "0")[:6].ljust(6, "0")), tzinfo=zone)
    except ValueError as err:
        raise InvalidTime(f"{value[:40]!r} is not a valid date-time ({err})") from None
    return _datetime_ms(moment)


def _datetime_ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return _checked((moment - _EPOCH) // _ONE_MS)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return f"{type(value).__name__} {str(value)[:40]!r}"
