"""``value.decode`` for a run of Avro records of one writer schema, with numpy: each field of the
reader schema decoded for all records at once, straight into an Arrow array of its Spark type.

Why: decoding record by record into Python dicts (fastavro) and then building Arrow arrays from
them cost about 35 us a Debezium change event of 200 B on the benchmark machine (fastavro's
reader 27 us with the reader schema resolved, 16 us without; ``pa.array`` over the dicts
5 us): the decoded column made a read several times slower than ``from_avro`` in the JVM.
Here a field costs a few numpy operations over the positions of every record of the run (as
avro_batch.py skips to a field's time), and strings become Arrow's offsets and data buffers by
one gather of their bytes.

What is decoded here: records (reader fields matched to the writer's by name or the reader's
aliases; fields only the reader has take its default when it is null, a number, a string or a
boolean), ``[null, T]`` unions, null, boolean, int, long, float, double, string, bytes, enum,
fixed, and the logical types ``timestamp-millis``/``-micros``, ``local-timestamp-millis``/
``-micros`` and ``date`` (the same on both sides). The promotions int/long -> long/double,
float -> double and string <-> bytes. Anything else (arrays, maps, unions of several types,
other logical types, int -> float, defaults of records) raises :class:`NotInBatch` when the
writer schema is compiled, and every run of it goes through fastavro as before. At run time a
run answers all or nothing, as avro_batch.py: a record that does not decode exactly (a union
index or a boolean byte no writer writes, a negative or overlong length, invalid UTF-8, a
timestamp beyond Python's datetime range, where fastavro fails, or bytes left over or missing
at the record's end) makes the whole run go through fastavro, which gives each record its
value or null. tests/test_formats.py checks both against each other over arbitrary records
and an evolving schema.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

from kafkasync_source.formats.avro.batch import NotInBatch, Op, Program, varints

Column = Callable[[np.ndarray, np.ndarray, np.ndarray], pa.Array]
"""``column(buf, positions, which)``: the values of ``which`` records, moving ``positions[which]``
past them."""
Resolve = Callable[[Any], Any]

_TIMESTAMPS = {"timestamp-millis": 1000, "timestamp-micros": 1, "local-timestamp-millis": 1000,
               "local-timestamp-micros": 1}
"""Logical types of a long that Spark reads as timestamps: microseconds per unit."""
_INTEGER_READS = {("int", "int"), ("int", "long"), ("long", "long"), ("int", "double"), ("long", "double")}
"""(writer, reader) integers decoded here; int/long -> float go through fastavro (a float32
from an int is rounded once by numpy, twice through a Python float)."""
_MIN_DATETIME_US, _MAX_DATETIME_US = -62_135_596_800_000_000, 253_402_300_799_999_999
"""Python's datetime range (years 1-9999) in microseconds from 1970: fastavro fails beyond it."""
_MIN_DATE_DAYS, _MAX_DATE_DAYS = -719_162, 2_932_896
"""Python's date range in days from 1970."""


class Columns:
    """Compiles (writer schema, reader schema, Arrow type) into a :data:`Column`."""

    def __init__(self, writer: Resolve, reader: Resolve, kind: Callable[[Any], str],
                 field_index: Callable[[dict, dict], Optional[int]]) -> None:
        self._writer = writer
        self._reader = reader
        self._kind = kind
        self._field_index = field_index
        self._skips = Program(writer, kind)

    def of(self, w: Any, r: Any, arrow_type: pa.DataType) -> Column:
        w, r = self._writer(w), self._reader(r)
        wk, rk = self._kind(w), self._kind(r)
        nullable = rk == "union"
        if nullable:
            non_null = [b for b in r if self._reader(b) != "null"]
            if len(non_null) != 1 or len(r) != 2:
                raise NotInBatch("a union of several types")
            r, rk = self._reader(non_null[0]), self._kind(self._reader(non_null[0]))
        if wk == "union":
            if not nullable:
                raise NotInBatch("a writer's union read as a reader's type that holds no null")
            return self._nullable(w, r, arrow_type)
        logical_w = w.get("logicalType") if isinstance(w, dict) else None
        logical_r = r.get("logicalType") if isinstance(r, dict) else None
        if logical_w != logical_r:
            raise NotInBatch("a logical type on one side only")
        if wk == "record" and rk == "record":
            return self._record(w, r, arrow_type)
        if logical_w is not None:
            return self._logical(wk, logical_w, arrow_type)
        if (wk, rk) in _INTEGER_READS:
            return _varints(arrow_type, int32=rk == "int")
        if (wk, rk) in (("float", "float"), ("float", "double"), ("double", "double")):
            return _floats(4 if wk == "float" else 8, arrow_type)
        if wk == rk and wk in ("string", "bytes"):
            return _length_prefixed(arrow_type, utf8=rk == "string")
        if wk == rk == "boolean":
            return _booleans
        if wk == rk == "null":
            return lambda buf, positions, which: pa.nulls(len(which), arrow_type)
        if wk == rk == "enum":
            default = r.get("default")
            return _enum([s if s in r["symbols"] else default for s in w["symbols"]])
        if wk == rk == "fixed" and w["size"] == r["size"]:
            return _fixed(w["size"], arrow_type)
        raise NotInBatch(f"a {wk} read as a {rk}")

    def _nullable(self, w: list, r: Any, arrow_type: pa.DataType) -> Column:
        """A writer's ``[null, T]``: T's column for the records that take its branch, null elsewhere."""
        null = [i for i, b in enumerate(w) if self._writer(b) == "null"]
        other = [i for i, b in enumerate(w) if self._writer(b) != "null"]
        if len(null) != 1 or len(other) != 1:
            raise NotInBatch("a union of several types")
        inner = self.of(w[other[0]], r, arrow_type)
        null_index, value_index = null[0], other[0]

        def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
            at = positions[which]
            chosen, sizes = varints(buf, at)
            positions[which] = at + sizes
            present = chosen == value_index
            if not (present | (chosen == null_index)).all():
                raise NotInBatch("a union index beyond the writer schema")
            values = inner(buf, positions, which[present])
            if present.all():
                return values
            return values.take(pa.array(np.cumsum(present) - 1, mask=~present))
        return column

    def _record(self, w: dict, r: dict, arrow_type: pa.DataType) -> Column:
        if not pa.types.is_struct(arrow_type) or arrow_type.num_fields != len(r["fields"]):
            raise NotInBatch("a record whose Arrow type is not its struct")
        reader_of_writer: dict[int, int] = {}
        defaults: list[tuple[int, Any]] = []
        for index, field in enumerate(r["fields"]):
            found = self._field_index(field, w)
            if found is None:
                defaults.append((index, _default(field, arrow_type.field(index).type, self._reader)))
            else:
                reader_of_writer[found] = index
        steps: list[tuple[Optional[int], Any]] = []  # (reader index, column) or (None, skip ops)
        for index, field in enumerate(w["fields"]):
            if index in reader_of_writer:
                at = reader_of_writer[index]
                steps.append((at, self.of(field["type"], r["fields"][at]["type"], arrow_type.field(at).type)))
            else:
                steps.append((None, self._skips.skip(field["type"])))
        fields = list(arrow_type)

        def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
            children: list[Any] = [None] * len(fields)
            for at, step in steps:
                if at is None:
                    _skip(step, buf, positions, which)
                else:
                    children[at] = step(buf, positions, which)
            for at, default in defaults:
                children[at] = default(len(which))
            return pa.StructArray.from_arrays(children, fields=fields)
        return column

    def _logical(self, kind: str, logical: str, arrow_type: pa.DataType) -> Column:
        if kind == "long" and logical in _TIMESTAMPS and pa.types.is_timestamp(arrow_type):
            return _timestamps(_TIMESTAMPS[logical], arrow_type)
        if kind == "int" and logical == "date" and pa.types.is_date32(arrow_type):
            return _dates
        raise NotInBatch(f"the logical type {logical}")


def _skip(ops: list[Op], buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> None:
    for op in ops:
        op(buf, positions, which)


def _default(field: dict, arrow_type: pa.DataType, resolve: Resolve) -> Callable[[int], pa.Array]:
    """A column of the reader's default, for a field the writer lacks."""
    if "default" not in field:
        raise NotInBatch("a field without a default")  # check_resolution refuses such a writer first
    value = field["default"]
    schema = resolve(field["type"])
    first = resolve(schema[0]) if isinstance(schema, list) else schema
    kind = first if isinstance(first, str) else first.get("type")
    if isinstance(first, dict) and first.get("logicalType") or isinstance(value, (dict, list)) \
            or kind in ("bytes", "fixed"):
        raise NotInBatch("a default of a logical type, bytes, a record, an array or a map")
    if value is None:
        return lambda count: pa.nulls(count, arrow_type)
    single = pa.array([value], type=arrow_type)
    return lambda count: single.take(pa.array(np.zeros(count, dtype=np.int64)))


def _varints(arrow_type: pa.DataType, int32: bool) -> Column:
    def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        values, sizes = varints(buf, at)
        positions[which] = at + sizes
        if int32:
            if len(values) and (values.min() < -2**31 or values.max() >= 2**31):
                raise NotInBatch("an int beyond 32 bits")
            return pa.array(values.astype(np.int32), type=arrow_type)
        if pa.types.is_floating(arrow_type):
            return pa.array(values.astype(np.float64), type=arrow_type)
        return pa.array(values, type=arrow_type)
    return column


def _floats(width: int, arrow_type: pa.DataType) -> Column:
    dtype = "<f4" if width == 4 else "<f8"

    def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        if len(at) and at.max() + width > len(buf):
            raise NotInBatch("a payload ends inside a number")
        raw = buf[at[:, None] + np.arange(width)]
        positions[which] = at + width
        values = np.ascontiguousarray(raw).view(dtype)[:, 0]
        return pa.array(values.astype(np.float32 if pa.types.is_float32(arrow_type) else np.float64),
                        type=arrow_type)
    return column


def _gathered(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, large: bool) -> tuple[pa.Buffer, pa.Buffer]:
    """Arrow's offsets and data buffers of the byte ranges ``starts[i]:starts[i] + lengths[i]``."""
    if len(lengths) and lengths.min() == lengths.max():  # one length (a CDC source's names): no repeat
        size = int(lengths[0])
        offsets = np.arange(len(lengths) + 1, dtype=np.int64) * size
        data = buf[(starts[:, None] + np.arange(size)).ravel()]
    else:
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = buf[np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))]
    if not large and offsets[-1] >= 2**31:
        raise NotInBatch("more than 2 GiB of strings in one batch")
    return pa.py_buffer(offsets if large else offsets.astype(np.int32)), pa.py_buffer(data)


def _length_prefixed(arrow_type: pa.DataType, utf8: bool) -> Column:
    large = pa.types.is_large_string(arrow_type) or pa.types.is_large_binary(arrow_type)

    def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        lengths, sizes = varints(buf, at)
        starts = at + sizes
        ends = starts + lengths
        if len(at) and ((lengths < 0).any() or ends.max() > len(buf)):
            raise NotInBatch("a negative length, or one past the payload")
        positions[which] = ends
        offsets, data = _gathered(buf, starts, lengths, large)
        array = pa.Array.from_buffers(arrow_type, len(at), [None, offsets, data])
        if utf8:
            try:
                array.validate(full=True)
            except pa.ArrowInvalid:
                raise NotInBatch("a string that is not UTF-8") from None
        return array
    return column


def _booleans(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
    at = positions[which]
    values = buf[np.minimum(at, len(buf) - 1)]
    if (values > 1).any():
        raise NotInBatch("a boolean byte other than 0 or 1")
    positions[which] = at + 1
    return pa.array(values == 1, type=pa.bool_())


def _enum(symbols: list[Optional[str]]) -> Column:
    dictionary = pa.array(symbols, type=pa.string())

    def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        indexes, sizes = varints(buf, at)
        if len(indexes) and (indexes.min() < 0 or indexes.max() >= len(symbols)):
            raise NotInBatch("an enum index beyond the writer's symbols")
        positions[which] = at + sizes
        return dictionary.take(pa.array(indexes))
    return column


def _fixed(size: int, arrow_type: pa.DataType) -> Column:
    large = pa.types.is_large_binary(arrow_type)

    def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        if len(at) and at.max() + size > len(buf):
            raise NotInBatch("a payload ends inside a fixed")
        positions[which] = at + size
        offsets, data = _gathered(buf, at, np.full(len(at), size, dtype=np.int64), large)
        return pa.Array.from_buffers(arrow_type, len(at), [None, offsets, data])
    return column


def _timestamps(micros_per_unit: int, arrow_type: pa.DataType) -> Column:
    def column(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        values, sizes = varints(buf, at)
        positions[which] = at + sizes
        if len(values) and (values.min() < _MIN_DATETIME_US // micros_per_unit
                            or values.max() > _MAX_DATETIME_US // micros_per_unit):
            raise NotInBatch("a timestamp beyond Python's datetime range")
        return pa.array(values * micros_per_unit, type=pa.int64()).view(arrow_type)
    return column


def _dates(buf: np.ndarray, positions: np.ndarray, which: np.ndarray) -> pa.Array:
    at = positions[which]
    values, sizes = varints(buf, at)
    positions[which] = at + sizes
    if len(values) and (values.min() < _MIN_DATE_DAYS or values.max() > _MAX_DATE_DAYS):
        raise NotInBatch("a date beyond Python's date range")
    return pa.array(values.astype(np.int32), type=pa.int32()).view(pa.date32())


def decode_run(column: Column, buf: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The values of the records at ``positions`` (all of one writer schema, each ending at its
    ``ends``), or NotInBatch: every record is required to end exactly where its payload ends."""
    positions = positions.copy()
    values = column(buf, positions, np.arange(len(positions)))
    if not np.array_equal(positions, ends):
        raise NotInBatch("a record's bytes end before or after its payload")
    return values
