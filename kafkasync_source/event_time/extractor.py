"""A user's function as the event time: ``eventTime.extractor=package.module:function``."""

from __future__ import annotations

import importlib
import inspect
from datetime import datetime
from typing import Any, Callable

from kafkasync_source.event_time.formats import InvalidTime, checked, datetime_ms, whole_ms
from kafkasync_source.event_time.options import KafkaSyncEventTimeError, record_name
from kafkasync_source.event_time.watch import watched


def function_reader(spec: str) -> Callable[[Any], int]:
    """``package.module:function(key, value, headers, timestamp_ms) -> int | datetime | None``:
    epoch milliseconds or a datetime (naive: UTC); None or negative: invalid. Each call is
    watched (watch.py): one that does not return is named in the logs and the live report."""
    function = _import_function(spec)

    def call(record: Any) -> Any:
        kind, timestamp = record.timestamp()
        return function(record.key(), record.value(), record.headers(), timestamp if kind else None)

    call_watched = watched(call, f"eventTime.extractor {spec!r}")

    def read(record: Any) -> int:
        try:
            result = call_watched(record)
        except Exception as err:
            raise KafkaSyncEventTimeError(
                f"kafkasync: eventTime.extractor {spec!r} raised {type(err).__name__} on "
                f"{record_name(record)}: {err}"
            ) from err
        if result is None:
            raise InvalidTime(f"eventTime.extractor {spec!r} returned None")
        if isinstance(result, datetime):
            return datetime_ms(result)
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise KafkaSyncEventTimeError(
                f"kafkasync: eventTime.extractor {spec!r} returned a {type(result).__name__} for "
                f"{record_name(record)}; it must return epoch milliseconds (int), a datetime or None."
            )
        return checked(whole_ms(result))

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
