"""``value.decode`` for a run of Avro records of one writer schema, with numpy: each field of the
reader schema decoded for all records at once, straight into an Arrow array of its Spark type.

Why: decoding record by record into Python values and then building Arrow arrays from them costs
tens of microseconds a Debezium change event; here a field costs a few numpy operations over
the positions of every record of the run (as batch.py skips to a field's time), and strings
become Arrow's offsets and data buffers by one gather of their bytes.

It follows the one resolution (resolution.py), as the per-record reader (values.py) does, and
covers the common shapes: records, ``[null, T]`` unions (and a writer's ``T`` read as a reader's
``[null, T]``, ``[int, long]`` or ``[float, double]``), null, boolean, int, long, float,
double, string, bytes, enum, fixed, the promotions, and the reader's ``date``, timestamps and
plain ``time-*`` numbers. Anything else (arrays, maps, unions of several types, decimals,
recursive records, fields that cannot resolve) raises :class:`NotInBatch` when the writer schema
is compiled, and every run of it goes record by record. At run time a run answers all or
nothing: a record that does not decode exactly as values.py decodes it (an index or a boolean
byte no writer writes, a length past its end, invalid UTF-8, a number beyond its type, a
timestamp beyond Spark's range, an enum symbol the reader lacks) makes the whole run go record
by record, which gives each record its value or its named error. tests/test_avro_columns.py
checks both against each other.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa

from kafkasync_source.formats.avro.batch import NotInBatch, Program, check_ends, int_varints, run, varints
from kafkasync_source.formats.avro.resolution import (
    Action,
    Container,
    EnumRead,
    Incompatible,
    Read,
    ReaderUnion,
    RecordRead,
    WriterUnion,
)
from kafkasync_source.formats.avro.spark_types import MEMBERS, TIMESTAMP_MICROS_PER_UNIT, union_shape

Column = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], pa.Array]
"""``column(buf, positions, ends, which)``: the values of ``which`` records, moving
``positions[which]`` past them. A column reads within ``buf`` and moves positions forward only;
:func:`decode_run` then refuses the run if a record's position passed its end (it read into
its neighbour's bytes), so a column need not check each record's end at each field."""
_INT64_MAX = 2**63 - 1


class Columns:
    """Compiles (resolution, Arrow type) into a :data:`Column`."""

    def __init__(self) -> None:
        self._skips = Program()

    def of(self, action: Action, arrow_type: pa.DataType) -> Column:
        if isinstance(action, RecordRead):
            return self._record(action, arrow_type)
        if isinstance(action, WriterUnion):
            return self._writer_union(action, arrow_type)
        if isinstance(action, ReaderUnion):
            assert action.action is not None
            if action.reader.branches[action.branch].kind == "null":
                return _nulls(arrow_type)
            if union_shape(action.reader) == MEMBERS:
                raise NotInBatch("a union of several types")
            return self.of(action.action, arrow_type)
        if isinstance(action, EnumRead):
            return _enum(list(action.symbols))
        if isinstance(action, Read):
            return _read(action, arrow_type)
        if isinstance(action, (Container, Incompatible)):
            raise NotInBatch(f"a {type(action).__name__}")
        raise NotInBatch(type(action).__name__)

    def _writer_union(self, action: WriterUnion, arrow_type: pa.DataType) -> Column:
        """A writer's union whose branches are null, or (one of them) a column: that column for
        the records that take its branch, null elsewhere."""
        nulls = [i for i, b in enumerate(action.branches) if _is_null(b)]
        others = [i for i, b in enumerate(action.branches) if not _is_null(b)]
        if len(others) != 1:
            raise NotInBatch("a writer union of several types")
        value_index = others[0]
        inner = self.of(action.branches[value_index], arrow_type)

        def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
            at = positions[which]
            chosen, sizes = int_varints(buf, at)
            positions[which] = at + sizes
            present = chosen == value_index
            if not present.all():
                known = present.copy()
                for null in nulls:
                    known |= chosen == null
                if not known.all():
                    raise NotInBatch("a union index beyond the writer schema, or of a branch not read here")
            values = inner(buf, positions, ends, which[present])
            if present.all():
                return values
            return values.take(pa.array(np.cumsum(present) - 1, mask=~present))
        return column

    def _record(self, action: RecordRead, arrow_type: pa.DataType) -> Column:
        if action.recursive or action.error is not None:
            raise NotInBatch("a recursive record, or one the writer cannot fill")
        if not pa.types.is_struct(arrow_type) or arrow_type.num_fields != len(action.reader.fields):
            raise NotInBatch("a record whose Arrow type is not its struct")
        steps: list[tuple[Any, Any]] = []  # (reader index, column) or (None, skip ops)
        for index, step in action.steps:
            if index is None:
                assert not isinstance(step, Action)
                steps.append((None, self._skips.skip(step)))
            else:
                assert isinstance(step, Action)
                steps.append((index, self.of(step, arrow_type.field(index).type)))
        defaults = [(index, pa.array([value], type=arrow_type.field(index).type)) for index, value in action.defaults]
        fields = list(arrow_type)

        def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
            children: list[Any] = [None] * len(fields)
            for at, step in steps:
                if at is None:
                    run(step, buf, positions, ends, which)
                else:
                    children[at] = step(buf, positions, ends, which)
            for at, single in defaults:
                children[at] = single.take(pa.array(np.zeros(len(which), dtype=np.int64)))
            return pa.StructArray.from_arrays(children, fields=fields)
        return column


def _is_null(action: Action) -> bool:
    """A writer union's branch that gives null: its null, placed in the reader's null branch."""
    if isinstance(action, ReaderUnion):
        return action.reader.branches[action.branch].kind == "null"
    return isinstance(action, Read) and action.writer.kind == "null"


def _nulls(arrow_type: pa.DataType) -> Column:
    return lambda buf, positions, ends, which: pa.nulls(len(which), arrow_type)


def _read(action: Read, arrow_type: pa.DataType) -> Column:
    w, r, logical = action.writer.kind, action.reader.kind, action.reader.logical
    if w == "null":
        return _nulls(arrow_type)
    if logical in TIMESTAMP_MICROS_PER_UNIT and pa.types.is_timestamp(arrow_type):
        return _timestamps(w, TIMESTAMP_MICROS_PER_UNIT[logical], arrow_type)
    if logical == "date" and pa.types.is_date32(arrow_type):
        return _dates
    if logical == "decimal":
        raise NotInBatch("a decimal")
    if w in ("int", "long") and r in ("int", "long", "float", "double"):
        return _integers(w, arrow_type, as_float32=r == "float")
    if w in ("float", "double") and r in ("float", "double"):
        return _floats(4 if w == "float" else 8, arrow_type)
    if w in ("string", "bytes") and r in ("string", "bytes"):
        return _length_prefixed(arrow_type, utf8=r == "string")
    if w == "boolean":
        return _booleans
    if w == "fixed":
        return _fixed(action.writer.size, arrow_type)
    raise NotInBatch(f"a {w} read as a {r}")


def _integers(kind: str, arrow_type: pa.DataType, as_float32: bool) -> Column:
    """An int or a long, as the Arrow type of the reader's int, long, float or double (numpy's
    int64 -> float32 cast rounds once, as Java's ``(float) long``). A reader's ``float`` is rounded
    to float32 even where its column is a double (a union of float and double, shown as
    ``from_avro`` shows it): Avro Java promotes to the branch, then Spark widens the float."""
    def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        values, sizes = varints(buf, at, 5 if kind == "int" else 10)
        positions[which] = at + sizes
        if kind == "int" and len(values) and (values.min() < -(2**31) or values.max() >= 2**31):
            raise NotInBatch("an int beyond 32 bits")
        if pa.types.is_int32(arrow_type):
            return pa.array(values.astype(np.int32), type=arrow_type)
        if as_float32 or pa.types.is_float32(arrow_type):
            return pa.array(values.astype(np.float32).astype(arrow_type.to_pandas_dtype()), type=arrow_type)
        if pa.types.is_float64(arrow_type):
            return pa.array(values.astype(np.float64), type=arrow_type)
        return pa.array(values, type=arrow_type)
    return column


def _floats(width: int, arrow_type: pa.DataType) -> Column:
    dtype = "<f4" if width == 4 else "<f8"

    def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        if len(at) and at.max() + width > len(buf):  # past its record: decode_run's check of the ends
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

    def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        lengths, sizes = varints(buf, at)
        starts = at + sizes
        if len(at) and ((lengths < 0).any() or (lengths > len(buf) - starts).any()):  # a sum could wrap
            raise NotInBatch("a negative length, or one past the payloads")  # past its record: decode_run
        positions[which] = starts + lengths
        offsets, data = _gathered(buf, starts, lengths, large)
        array = pa.Array.from_buffers(arrow_type, len(at), [None, offsets, data])
        if utf8:
            try:
                array.validate(full=True)
            except pa.ArrowInvalid:
                raise NotInBatch("a string that is not UTF-8") from None
        return array
    return column


def _booleans(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
    at = positions[which]
    if len(at) and at.max() >= len(buf):
        raise NotInBatch("a payload ends before a boolean")
    values = buf[at]
    if (values > 1).any():
        raise NotInBatch("a boolean byte other than 0 or 1")
    positions[which] = at + 1
    return pa.array(values == 1, type=pa.bool_())


def _enum(symbols: list) -> Column:
    dictionary = pa.array(symbols, type=pa.string())
    unmapped = np.array([s is None for s in symbols], dtype=bool)
    some_unmapped = bool(unmapped.any())

    def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        indexes, sizes = int_varints(buf, at)
        if len(indexes) and (indexes.min() < 0 or indexes.max() >= len(symbols)
                             or some_unmapped and unmapped[indexes].any()):
            raise NotInBatch("an enum index beyond the writer's symbols, or a symbol the reader lacks")
        positions[which] = at + sizes
        return dictionary.take(pa.array(indexes))
    return column


def _fixed(size: int, arrow_type: pa.DataType) -> Column:
    large = pa.types.is_large_binary(arrow_type)

    def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        if len(at) and at.max() + size > len(buf):
            raise NotInBatch("a payload ends inside a fixed")
        positions[which] = at + size
        offsets, data = _gathered(buf, at, np.full(len(at), size, dtype=np.int64), large)
        return pa.Array.from_buffers(arrow_type, len(at), [None, offsets, data])
    return column


def _timestamps(kind: str, micros_per_unit: int, arrow_type: pa.DataType) -> Column:
    def column(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
        at = positions[which]
        values, sizes = varints(buf, at, 5 if kind == "int" else 10)
        positions[which] = at + sizes
        if len(values) and ((values > _INT64_MAX // micros_per_unit) | (values < -(2**63 // micros_per_unit))).any():
            raise NotInBatch("a timestamp beyond Spark's range")
        return pa.array(values * micros_per_unit, type=pa.int64()).view(arrow_type)
    return column


def _dates(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: np.ndarray) -> pa.Array:
    at = positions[which]
    values, sizes = varints(buf, at, 5)
    positions[which] = at + sizes
    if len(values) and (values.min() < -(2**31) or values.max() >= 2**31):
        raise NotInBatch("an int beyond 32 bits")
    return pa.array(values.astype(np.int32), type=pa.int32()).view(pa.date32())


def decode_run(column: Column, buf: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The values of the records at ``positions`` (all of one writer schema, each ending by its
    ``ends``; bytes after a record are ignored), or NotInBatch."""
    positions = positions.copy()
    values = column(buf, positions, ends, np.arange(len(positions)))
    check_ends(positions, ends)
    return values
