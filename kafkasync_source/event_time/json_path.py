"""A JSONPath into the value, as Spark's ``get_json_object`` writes it, decoded lazily.

JSON values are decoded with msgspec into a struct of just the fields on the path: other fields
are skipped by the C decoder without building Python objects (measured on about 230-byte values:
3.5 million records/s on one core, against 1.2 million for orjson, 0.3 million for ``json``).
"""


from __future__ import annotations

import re
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Optional, Union

import msgspec

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime, converter
from kafkasync_source.event_time.options import EPOCH_MILLIS

# Spark's get_json_object grammar (JsonPathParser, jsonExpressions.scala in apache/spark):
# `$`, then `.name` (name: no `.` or `[`), `['name']` (no `'`), `[123]`; wildcards `[*]`, `.*`,
# `['*']` select several values, which cannot be one time, so they are refused.
# JsonPathParser is a scala RegexParsers, which skips whitespace before each string literal
# and regex, not before a single character: so before a name (after `.` or `['`), before
# `['`, `.*` and an index's digits, and at the end (RegexParsers.phrase); a name's own trailing
# whitespace is the name's (its regex takes it). Whitespace anywhere else is refused, as there.
_WS = r"[ \t\n\x0b\f\r]"  # Java's \s, which RegexParsers skips (Python's \s holds more)
_PATH_STEP = re.compile(
    rf"\.{_WS}*([^.\[ \t\n\x0b\f\r][^.\[]*)"   # .name
    rf"|{_WS}*\['{_WS}*([^' \t\n\x0b\f\r][^']*)'\]"  # ['name']
    rf"|\[{_WS}*(\d+)\]"                          # [123]
    r"|(\[\*\])"                                  # [*] (`.*` and `['*']` are the names `*` above)
)
_TRAILING_SPACE = re.compile(f"{_WS}+")
_DOT_NAME = re.compile(r"[^.\[ \t\n\x0b\f\r][^.\[]*")


def parse_json_path(path: str) -> list[tuple[Union[str, int], str]]:
    """The steps of a JSONPath as Spark's ``get_json_object`` writes it: each name or index
    with the path up to it (for messages). Raises ValueError naming the option."""
    where = f"Option 'eventTime.jsonPath' {path!r}"
    if not path.startswith("$"):
        raise ValueError(f"{where} must start with '$' (the value), e.g. '$.ts' or '$.source.ts_ms'.")
    steps: list[tuple[Union[str, int], str]] = []
    position = 1
    while position < len(path):
        if _TRAILING_SPACE.fullmatch(path, position):
            break  # after `$` or a bracket (a name takes its own): RegexParsers.phrase skips it
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


def canonical_json_path(path: str) -> str:
    """The one spelling of a path's steps: ``.name`` where the name can be written so (no
    ``.`` or ``[``), else ``['name']``; ``[index]``; no insignificant whitespace. Two paths
    with the same steps read the same field, and have the same canonical spelling (the time
    source a checkpoint records). Raises ValueError as :func:`parse_json_path`."""
    spelled = ["$"]
    for step, _ in parse_json_path(path):
        if isinstance(step, int):
            spelled.append(f"[{step}]")
        else:
            spelled.append(f".{step}" if _DOT_NAME.fullmatch(step) else f"['{step}']")
    return "".join(spelled)


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


def json_reader(path: str, time_format: str) -> Callable[[Any], int]:
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
    # Per stage, flat and precomputed (this runs for every record on the driver and the
    # executors): the decode function, the path prefix of each name to descend through, and
    # the array index with its prefix (None: the time itself).
    plan = tuple((stage.decoder().decode, tuple(prefix for _, prefix in stage.names), stage.index)
                 for stage in stages)
    convert = converter(time_format)
    unset = msgspec.UNSET

    def read(record: Any) -> int:
        document = record.value()
        if document is None:
            raise InvalidTime("the record has no value (a tombstone)")
        for decode, prefixes, array_index in plan:
            try:
                found = decode(document)
            except msgspec.ValidationError as err:  # a DecodeError too: caught first
                raise InvalidTime(f"the value does not hold {path} ({err})") from None
            except (msgspec.DecodeError, UnicodeDecodeError) as err:  # msgspec: a string that is not UTF-8
                raise InvalidTime(f"the value is not JSON ({err})") from None
            for prefix in prefixes:
                found = found.field
                if found is unset:
                    raise InvalidTime(f"the value has no {prefix}")
            if array_index is None:
                return convert(found)
            index, prefix = array_index
            if index >= len(found):
                raise InvalidTime(f"the value has no {prefix} (the array has {len(found)} elements)")
            document = found[index]
        raise AssertionError("unreachable: the last stage ends at the time itself")

    return read


def json_batch_reader(path: str, time_format: str) -> Optional[Callable[[list], Optional[list[int]]]]:
    """The times of a whole consume() batch, from its values, when every record holds a valid time at the path,
    else None (then :func:`json_reader` takes each record's time or invalid time, the exact
    answer). None for a path through an array.

    Why: the executors take the time of every record they read, and per record the reader's
    loop, its unset checks and the conversion cost about as much again as msgspec's decode.
    Here every struct's field is required (an absent one fails the decode in C) and, for epoch
    milliseconds, the leaf is decoded as an integer (strictly: no float, string or bool), so a
    batch of valid records is a map of C functions and a min/max check. On any record that is
    not so, the batch is read again record by record, which gives the same times for valid
    records (tests/test_event_time.py checks both against each other on arbitrary values)."""
    steps = parse_json_path(path)
    names = [step for step, _ in steps if isinstance(step, str)]
    if not names or len(names) < len(steps):
        return None
    leaf: Any = int if time_format == EPOCH_MILLIS else Any
    for depth, name in reversed(list(enumerate(names))):
        leaf = msgspec.defstruct(f"Required{depth}", [("field", leaf)], rename={"field": name})
    decode = msgspec.json.Decoder(leaf).decode
    time_at = attrgetter(".".join(["field"] * len(names)))
    convert = None if time_format == EPOCH_MILLIS else converter(time_format)

    def read_all(values: list) -> Optional[list[int]]:
        """``values``: the records' values, in order (the caller has them already)."""
        try:
            # map() over C functions, from the values the caller already took: no Python frame
            # and no value() call a record (a comprehension over the records took 0.46-0.58 us
            # a record on one core, this 0.38-0.42 us; msgspec's decode alone 0.36 us).
            found = list(map(time_at, map(decode, values)))
            if convert is not None:
                return [convert(value) for value in found]
        except Exception:  # noqa: BLE001 - not every record is the common case: see above
            return None
        if found and (min(found) < 0 or max(found) > MAX_TIME_MS):
            return None
        return found

    return read_all
