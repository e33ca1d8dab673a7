"""Time formats: a JSON scalar or header text to epoch milliseconds, or :class:`InvalidTime`."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, Union

from kafkasync_source.event_time.options import EPOCH_MICROS, EPOCH_MILLIS, EPOCH_SECONDS, ISO8601

MAX_TIME_MS = (2**63 - 1) // 1000
"""Spark timestamps are int64 microseconds: later times (ms) cannot be converted."""

class InvalidTime(Exception):
    """Raised inside extraction: why this record has no valid time."""



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


def converter(time_format: str) -> Callable[[Any], int]:
    """A JSON scalar or header text -> epoch ms (raises InvalidTime)."""
    if time_format == ISO8601:
        return _iso8601_ms
    if time_format == EPOCH_MICROS:
        return lambda value: checked(whole_ms(_number(value, time_format), per_ms=1000))
    unit = _UNIT_MS[time_format]
    if unit == 1:
        def millis(value: Any) -> int:
            if type(value) is int and 0 <= value <= MAX_TIME_MS:  # the common case, first
                return value
            return checked(whole_ms(_number(value, time_format)))
        return millis
    return lambda value: checked(whole_ms(_number(value, time_format), unit=unit))


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


def whole_ms(number: Union[int, float, Decimal], *, unit: int = 1, per_ms: int = 1) -> int:
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


def checked(millis: int) -> int:
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
    return datetime_ms(moment)


def datetime_ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return checked((moment - _EPOCH) // _ONE_MS)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return f"{type(value).__name__} {str(value)[:40]!r}"
