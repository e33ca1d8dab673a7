"""Avro over a whole consume() batch with numpy: one pass over the batch a field of the schema,
not one Python step a field and record.

Why: the executors take the time of every record they read, and the driver's fetch path of every
record it buffers; record by record, skipping to Debezium's ``source.ts_ms`` is some twenty
Python steps; here each step is a few numpy operations over the positions of all records of one
writer schema at once.

The batch's payloads are joined into one byte array; each record has a position, moved forward
by each step of the writer schema's program (a varint's length, a string's length and bytes, a
fixed size), branching by mask at unions, looping at arrays' and maps' blocks, and an end it may
not pass. The answer is all or nothing: a batch in which any record is cut short, takes the null
branch of a union on the path, holds a negative length, an index no writer writes, a varint of
more than 10 bytes (5 for an int, an enum's or a union's index), a block given with its
size or a block of more items than bytes left raises :class:`NotInBatch`, and the
caller reads each record alone (values.py, time_path.py), which gives each its exact value or
named error. Nothing here loops more often than the bytes allow: a block of ``n`` items needs
``n`` times its items' size in bytes left, blocks of more than :data:`BLOCK_IN_BATCH` items
go to the record-by-record readers, and items of a fixed size are jumped over at once.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, Union

import numpy as np

from kafkasync_source.formats.avro.schema import Node

_WIDTH = np.arange(10)
"""A varint is at most 10 bytes."""
_SHIFTS = (7 * _WIDTH).astype(np.uint64)
BLOCK_IN_BATCH = 64
"""An array or map block of more items than this is read record by record (a numpy pass per
item costs more than the record's own reader then)."""
MAX_OPS = 4096
"""Ops (fields, union branches, items' fields) one value may run in a batch: each is a numpy pass
of some 30 us, so a schema of more (65,536 strings in a few hundred bytes of schema text: a
record holding the one before twice, 16 levels deep) is read faster record by record."""
Which = Union[np.ndarray, slice]
"""The records an op moves: their indexes, or ``slice(None)`` for all of them (a view, where an
index array would copy every position in and out at every op: the common case, no union on
the way)."""
Op = Callable[[np.ndarray, np.ndarray, np.ndarray, Which], None]
"""``op(buf, positions, ends, which)``: moves ``positions[which]`` over one value."""
EVERYONE = slice(None)


class NotInBatch(Exception):
    """This batch (or this schema) is read record by record instead."""


def subset(which: Which, mask: np.ndarray) -> Which:
    """The records of ``which`` where ``mask`` holds (``mask`` is over ``positions[which]``)."""
    if mask.all():
        return which
    return np.flatnonzero(mask) if isinstance(which, slice) else which[mask]


def varints(buf: np.ndarray, at: np.ndarray, max_bytes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at positions ``at``: ``(values, lengths in bytes)``; NotInBatch for one
    longer than ``max_bytes`` or beyond 64 bits (values.py's ``varint`` raises there too)."""
    first = buf[np.minimum(at, len(buf) - 1)]
    if not (first & 0x80).any():  # every one a single byte: string lengths, union indexes
        small = first.astype(np.int64)
        return (small >> 1) ^ -(small & 1), np.ones(len(at), dtype=np.int64)
    window = buf[np.minimum(at[:, None] + _WIDTH, len(buf) - 1)]
    more = window >= 128
    if more[:, :max_bytes].all(axis=1).any():
        raise NotInBatch(f"a varint longer than {max_bytes} bytes")
    lengths = np.argmin(more, axis=1) + 1
    if lengths.max() == 10 and ((lengths == 10) & (window[:, 9] > 1)).any():
        raise NotInBatch("a varint beyond 64 bits")
    digits = (window.astype(np.uint64) & np.uint64(0x7F)) << _SHIFTS
    raw = np.where(_WIDTH < lengths[:, None], digits, np.uint64(0)).sum(axis=1, dtype=np.uint64)
    return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64), lengths


def framed(values: list, header_bytes: int = 5) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Confluent-framed payloads joined into one byte array: ``(buf, starts, ends, schema ids)``,
    or None where any value is a tombstone, shorter than the header or without the magic byte 0
    (formats/framing.py; the caller then takes such values one at a time)."""
    count = len(values)
    try:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=count)
    except TypeError:  # a tombstone
        return None
    if count and lengths.min() < header_bytes:
        return None
    buf = np.frombuffer(b"".join(values), dtype=np.uint8)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if buf[starts].any():
        return None  # a payload without the magic byte
    ids = buf[starts + 1].astype(np.int64) << 24 | buf[starts + 2].astype(np.int64) << 16 \
        | buf[starts + 3].astype(np.int64) << 8 | buf[starts + 4].astype(np.int64)
    return buf, starts, ends, ids


def run(program: list[Op], buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
    for op in program:
        op(buf, positions, ends, which)


_FIXED_SIZES: "weakref.WeakKeyDictionary[Node, Optional[int]]" = weakref.WeakKeyDictionary()
"""Each record's :func:`fixed_size`, once: a schema whose records each hold the one before twice
would otherwise cost 2^depth steps (a few hundred bytes of schema text, hours of work)."""


def fixed_size(node: Node, _inside: frozenset[int] = frozenset()) -> Optional[int]:
    """The size of every value of ``node`` where it is one size (None: it varies)."""
    if node.kind in ("null", "boolean", "float", "double", "fixed"):
        return {"null": 0, "boolean": 1, "float": 4, "double": 8}.get(node.kind, node.size)
    if node.kind != "record" or id(node) in _inside:
        return None
    if node in _FIXED_SIZES:
        return _FIXED_SIZES[node]
    sizes = [fixed_size(f.type, _inside | {id(node)}) for f in node.fields]
    size = None if None in sizes else sum(s for s in sizes if s is not None)
    _FIXED_SIZES[node] = size
    return size


class Program:
    """Compiles a writer schema's values into skip ops (recursive records raise NotInBatch). A
    record met again is one op that runs its ops, compiled once: the ops stay as many as the
    schema's types, not as the paths through them (which double with each level of a record
    holding the one before twice)."""

    def __init__(self) -> None:
        self._expanding: set[int] = set()
        self._records: dict[int, list[Op]] = {}
        self._weights: dict[int, int] = {}

    def weight(self, node: Node) -> int:
        """How many ops one value of ``node`` runs (its paths, a record on its own way: 1)."""
        key = id(node)
        if key not in self._weights:
            self._weights[key] = 1  # a recursive record meets itself here (skip refuses it)
            inner = [f.type for f in node.fields] + node.branches + ([node.element] if node.element else [])
            self._weights[key] = (node.kind != "record") + sum(self.weight(n) for n in inner)
        return self._weights[key]

    def skip(self, node: Node) -> list[Op]:
        kind = node.kind
        if kind == "record" and id(node) in self._expanding:
            raise NotInBatch("a recursive record")
        if kind == "record" and id(node) in self._records:
            return [_sub(self._records[id(node)])]
        if self.weight(node) > MAX_OPS:
            raise NotInBatch(f"a value of more than {MAX_OPS} fields: record by record")
        size = fixed_size(node)
        if size is not None:
            return [_jump(size)] if size else []
        if kind in ("int", "enum"):
            return [_int]
        if kind == "long":
            return [_varint]
        if kind in ("string", "bytes"):
            return [_length_prefixed]
        if kind == "union":
            return [_union([self.skip(branch) for branch in node.branches])]
        if kind == "record":
            self._expanding.add(id(node))
            ops = [op for f in node.fields for op in self.skip(f.type)]
            self._expanding.discard(id(node))
            self._records[id(node)] = ops
            return ops
        assert node.element is not None and kind in ("array", "map")
        item = self.skip(node.element)
        if kind == "map":
            item = [_length_prefixed, *item]
        element_size = fixed_size(node.element)
        return [_blocks(item, None if element_size is None or kind == "map" else element_size)]


def _sub(program: list[Op]) -> Op:
    def op(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
        run(program, buf, positions, ends, which)
    return op


def _jump(size: int) -> Op:
    def op(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
        positions[which] += size
    return op


def _varint(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
    positions[which] += varints(buf, positions[which])[1]


def _int(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
    """An int or an enum's index: 5 bytes and 32 bits at most, as values.py (Java's readInt)."""
    positions[which] += int_varints(buf, positions[which])[1]


def int_varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`varints` of ints (an int, an enum's or a union's index); NotInBatch beyond 32 bits."""
    values, sizes = varints(buf, at, 5)
    if len(values) and (values.min() < -(2**31) or values.max() >= 2**31):
        raise NotInBatch("an int beyond 32 bits")
    return values, sizes


def _length_prefixed(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
    """A string or bytes skipped. A length past its record is refused later, where the position
    is checked against the record's end (positions only move forward: :func:`leaf_values`,
    :func:`check_ends`); one past the whole batch at once."""
    at = positions[which]
    lengths, sizes = varints(buf, at)
    if (lengths < 0).any() or (lengths > len(buf) - at - sizes).any():  # compared so: at + length can wrap
        raise NotInBatch("a negative length, or one past the payloads")
    positions[which] = at + sizes + lengths


def _union(branches: list[list[Op]]) -> Op:
    def op(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
        chosen, sizes = int_varints(buf, positions[which])
        if (chosen < 0).any() or (chosen >= len(branches)).any():
            raise NotInBatch("a union index beyond the writer schema")
        positions[which] += sizes
        for index, program in enumerate(branches):
            if program:
                taking = chosen == index
                if taking.any():
                    run(program, buf, positions, ends, subset(which, taking))
    return op


def _blocks(item: list[Op], item_size: Optional[int]) -> Op:
    """Arrays and maps: blocks of a count, until 0 (a negative count, followed by the block's size,
    goes record by record: values.blocks). Items of one size are jumped over at once; others one
    pass each, at most BLOCK_IN_BATCH."""
    def op(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
        open_ = np.arange(len(positions)) if isinstance(which, slice) else which
        while len(open_):  # each turn reads a count of at least one byte inside each open record
            if (positions[open_] >= ends[open_]).any():
                raise NotInBatch("a record ends inside an array or map")
            counts, sizes = varints(buf, positions[open_])
            positions[open_] += sizes
            more = counts != 0
            if (counts < 0).any():  # a block given with its size: values.py checks the size against its items
                raise NotInBatch("a block given with its size: record by record")
            if item_size:  # items of one size: jumped over, if the bytes left hold them
                if (counts > (ends[open_] - positions[open_]) // item_size).any():
                    raise NotInBatch("a block of more items than bytes left")
                positions[open_] += counts * item_size
            elif item_size == 0 and counts.any():  # values.py caps them per record (ZERO_SIZE_ITEMS)
                raise NotInBatch("items of no size: record by record")
            elif counts.max(initial=0) > BLOCK_IN_BATCH:
                raise NotInBatch("a large block: record by record")
            else:
                for k in range(int(counts.max(initial=0))):
                    run(item, buf, positions, ends, open_[counts > k])
            open_ = open_[more]
    return op


def leaf_values(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, kind: str) -> np.ndarray:
    """The numbers at ``positions`` (an int, long, float or double each), checked to lie in
    their records; NotInBatch otherwise."""
    if kind in ("int", "long"):
        values, sizes = varints(buf, positions, 5 if kind == "int" else 10)
        if kind == "int" and ((values < -(2**31)) | (values >= 2**31)).any():
            raise NotInBatch("an int beyond 32 bits")
    else:
        width = 8 if kind == "double" else 4
        raw = buf[np.minimum(positions[:, None] + np.arange(width), len(buf) - 1)]
        values = np.ascontiguousarray(raw).view("<f8" if width == 8 else "<f4")[:, 0]
        sizes = np.full(len(positions), width)
    if (positions + sizes > ends).any():
        raise NotInBatch("a record ends before the field")
    return values


def branch_check(expected: int) -> Op:
    """A writer union on the path: every record must take branch ``expected``."""
    def op(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray, which: Which) -> None:
        chosen, sizes = int_varints(buf, positions[which])
        if (chosen != expected).any():
            raise NotInBatch("another branch (a null) on the path")
        positions[which] += sizes
    return op


def check_ends(positions: np.ndarray, ends: np.ndarray) -> None:
    if (positions > ends).any():
        raise NotInBatch("a record's bytes end before its value does")


def positions_of(starts: Any, header_bytes: int) -> np.ndarray:
    return np.asarray(starts, dtype=np.int64) + header_bytes
