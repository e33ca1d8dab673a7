"""``async_map``'s schemas: parsing ``returns``, the output schema, and checking fn's results.

A result is checked against ``returns`` before it counts as a success, so a wrong result becomes a
clear per-row error (a dead letter, or the task's failure) instead of an Arrow conversion error
that would fail the whole task without saying which row or key was wrong.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any, Callable, Dict, List, Mapping, Tuple, Union

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from kafkasync_source.enrich.core import ResultError

STATUS_COLUMNS: Tuple[StructField, ...] = (
    StructField("async_status", StringType(), False),
    StructField("async_error", StringType(), True),
    StructField("async_attempts", IntegerType(), False),
)


def parse_returns(returns: Union[str, StructType]) -> StructType:
    """``returns`` as a StructType: a DDL string (``"customer string, score double"``) or one."""
    if isinstance(returns, StructType):
        parsed: DataType = returns
    elif isinstance(returns, str):
        from pyspark.sql.types import _parse_datatype_string

        try:
            parsed = _parse_datatype_string(returns)
        except Exception as error:
            raise ValueError(f"async_map: returns={returns!r} is not a DDL schema like "
                             f"'customer string, score double': {_first_line(error)}") from None
    else:
        raise TypeError(f"async_map: returns must be a DDL string or a StructType, "
                        f"not {type(returns).__name__}")
    if not isinstance(parsed, StructType) or not parsed.fields:
        raise ValueError(f"async_map: returns={returns!r} must name at least one column, "
                         f"like 'customer string, score double'")
    return parsed


def output_schema(input_schema: StructType, returns: StructType) -> StructType:
    """Input columns, then ``returns``' columns (nullable: a failed row has none), then status."""
    taken = {name.lower(): "an input column" for name in input_schema.fieldNames()}
    taken.update({f.name.lower(): "an async_map status column" for f in STATUS_COLUMNS})
    seen = set()
    for name in returns.fieldNames():
        if name.lower() in taken:
            raise ValueError(f"async_map: returns column {name!r} clashes with {taken[name.lower()]}; "
                             "rename it in returns (and in fn's result)")
        if name.lower() in seen:
            raise ValueError(f"async_map: returns names column {name!r} twice")
        seen.add(name.lower())
    outputs = [StructField(f.name, f.dataType, True, f.metadata) for f in returns.fields]
    return StructType(list(input_schema.fields) + outputs + list(STATUS_COLUMNS))


class ResultChecker:
    """Checks one fn result against ``returns``: a mapping with exactly its keys, each value
    ``None`` (unless the field is not nullable) or of a Python type Spark converts to the field's
    type. Atomic types are checked with ``isinstance`` (cheap, per row); others by letting Arrow
    convert the value."""

    def __init__(self, returns: StructType):
        self._returns = returns
        self._fields = [(f.name, f.nullable, _checker(f.dataType), f.dataType.simpleString())
                        for f in returns.fields]
        self._names = set(returns.fieldNames())
        self._ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in returns.fields)

    def __reduce__(self) -> Tuple[Any, ...]:  # rebuilt from the schema in the worker
        return ResultChecker, (self._returns,)

    def __call__(self, result: Any) -> Dict[str, Any]:
        if not isinstance(result, Mapping):
            raise ResultError(f"fn returned a {type(result).__name__}, expected a dict with "
                              f"keys of returns ({self._ddl})")
        missing = [name for name, *_ in self._fields if name not in result]
        extra = sorted(str(k) for k in result if k not in self._names)
        if missing or extra:
            parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"unexpected {', '.join(map(repr, extra))}"] if extra else [])
            raise ResultError(f"fn's result has {'; '.join(parts)} (returns: {self._ddl})")
        for name, nullable, check, type_name in self._fields:
            value = result[name]
            if value is None:
                if not nullable:
                    raise ResultError(f"fn returned None for {name!r}, declared NOT NULL in returns")
            elif not check(value):
                raise ResultError(f"fn returned {type(value).__name__} {_short(value)} for {name!r}, "
                                  f"declared {type_name} in returns")
        return dict(result)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_range(bits: int) -> Callable[[Any], bool]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return lambda value: _is_int(value) and low <= value <= high


_ATOMIC_CHECKS: Dict[type, Callable[[Any], bool]] = {
    StringType: lambda v: isinstance(v, str),
    BooleanType: lambda v: isinstance(v, bool),
    ByteType: _int_range(8),
    ShortType: _int_range(16),
    IntegerType: _int_range(32),
    LongType: _int_range(64),
    FloatType: lambda v: isinstance(v, (float, int)) and not isinstance(v, bool),
    DoubleType: lambda v: isinstance(v, (float, int)) and not isinstance(v, bool),
    BinaryType: lambda v: isinstance(v, (bytes, bytearray)),
    DecimalType: lambda v: isinstance(v, (decimal.Decimal, int)) and not isinstance(v, bool),
    DateType: lambda v: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime),
    TimestampType: lambda v: isinstance(v, datetime.datetime),
    TimestampNTZType: lambda v: isinstance(v, datetime.datetime),
}


def _checker(data_type: DataType) -> Callable[[Any], bool]:
    atomic = _ATOMIC_CHECKS.get(type(data_type))
    if atomic is not None:
        return atomic
    arrow_type = arrow_type_of(data_type)

    def converts(value: Any) -> bool:
        import pyarrow as pa

        try:
            pa.array([value], type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            return False
        return True

    return converts


def arrow_type_of(data_type: DataType) -> Any:
    """The Arrow type Spark uses for ``data_type`` in Arrow batches (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(data_type, timezone="UTC")


def result_columns(returns: StructType, outputs: List[Any]) -> List[Any]:
    """Arrow arrays of ``returns``' columns for a list of checked outputs (``None``: failed)."""
    import pyarrow as pa

    return [pa.array([None if out is None else out[f.name] for out in outputs], type=arrow_type_of(f.dataType))
            for f in returns.fields]


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
