"""How one option's text becomes a value: a keyword, a boolean, a bounded integer, a duration,
an integer written in JSON. Each fails with a :class:`KafkaSyncOptionError` naming the option
and what it allows, so that options.py reads as what each option means, not how it is spelt."""

from __future__ import annotations

import json
import re
from typing import Mapping, Optional, overload

from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.planning.planner import NEVER_WAIT, WAIT_FOREVER


def one_of(lowered: Mapping[str, str], display: str, allowed: tuple[str, ...]) -> str:
    """A keyword option, matched case-insensitively; ``allowed[0]`` is the default."""
    value = lowered.get(display.lower(), allowed[0]).strip()
    for keyword in allowed:
        if value.lower() == keyword.lower():
            return keyword
    raise KafkaSyncOptionError(
        f"Option '{display}' must be one of {', '.join(allowed)}; got {value!r}."
    )


def json_integer(value: object, display: str, what: str) -> int:
    """An integer written as a JSON number. ``int()`` would turn ``true`` into 1 and ``0.9``
    into 0 — a read of the wrong partition or offset instead of an error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KafkaSyncOptionError(
            f"Option '{display}': the {what} must be an integer JSON number; got {json.dumps(value)}."
        )
    return value


def boolean(lowered: Mapping[str, str], key: str, display: str, default: bool) -> bool:
    value = lowered.get(key)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise KafkaSyncOptionError(f"Option '{display}' must be 'true' or 'false'; got {value!r}.")


def positive_int(
    lowered: Mapping[str, str], key: str, default: int, *, display: Optional[str] = None
) -> int:
    return bounded_int(lowered, key, default, (1, WAIT_FOREVER), display=display)


def json_int(value: object, *, allow_str: bool = False) -> int:
    """A JSON integer (or, for partition keys, its string form); bools and floats rejected."""
    if isinstance(value, bool):
        raise ValueError("boolean")
    if isinstance(value, int):
        return value
    if allow_str and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"not an integer: {value!r}")


_DURATION = re.compile(r"(\d+)\s*([a-z]*)")
_DURATION_UNITS_MS = {
    "": 1, "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}


@overload
def duration_ms(lowered: Mapping[str, str], key: str, display: str, default: int) -> int: ...
@overload
def duration_ms(lowered: Mapping[str, str], key: str, display: str, default: None) -> Optional[int]: ...
def duration_ms(
    lowered: Mapping[str, str], key: str, display: str, default: Optional[int]
) -> Optional[int]:
    value = lowered.get(key)
    if value is None:
        return default
    match = _DURATION.fullmatch(value.strip().lower())
    unit_ms = _DURATION_UNITS_MS.get(match.group(2)) if match else None
    milliseconds = int(match.group(1)) * unit_ms if match and unit_ms else 0
    if milliseconds <= 0 or milliseconds > WAIT_FOREVER:
        raise KafkaSyncOptionError(
            f"Option '{display}' must be a positive duration such as '500ms', '30s', '15m', "
            f"'2h', '1d' or '30 minutes'; got {value!r}."
        )
    return milliseconds


@overload
def bounded_int(lowered: Mapping[str, str], key: str, default: int, bounds: tuple[int, int],
                 *, display: Optional[str] = None) -> int: ...
@overload
def bounded_int(lowered: Mapping[str, str], key: str, default: None, bounds: tuple[int, int],
                 *, display: Optional[str] = None) -> Optional[int]: ...
def bounded_int(
    lowered: Mapping[str, str], key: str, default: Optional[int], bounds: tuple[int, int],
    *, display: Optional[str] = None,
) -> Optional[int]:
    value = lowered.get(key)
    if value is None:
        return default
    low, high = bounds
    try:
        number = int(value.strip())
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        allowed = "a positive integer" if bounds == (1, WAIT_FOREVER) else f"an integer from {low} to {high}"
        raise KafkaSyncOptionError(f"Option '{display or key}' must be {allowed}; got {value!r}.")
    return number


def task_idle_ms(value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = NEVER_WAIT - 1
    if number < NEVER_WAIT or number > WAIT_FOREVER:
        raise KafkaSyncOptionError(
            "Option 'max.task.idle.ms' must be an integer: -1 (never wait, like format(\"kafka\")),"
            " 0 (default: wait for fetches, not for producers), N > 0 (wait up to N ms for "
            f"producers) or {WAIT_FOREVER} (wait forever); got {value!r}."
        )
    return number
