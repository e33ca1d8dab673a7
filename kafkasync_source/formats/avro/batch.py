"""A field's time for a whole consume() batch of Avro records, with numpy: one pass over the
batch a field of the schema, not one Python step a field and record.

Why: the executors take the time of every record they read, and the driver's fetch path of every
record it buffers. Record by record, skipping to Debezium's ``source.ts_ms`` is some twenty
Python steps (see :class:`~kafkasync_source.formats.avro._Generated`); here each step is a few
numpy operations over the positions of all records of one writer schema at once, so a batch of
thousands costs about what a handful of records cost one at a time.

The batch's payloads are joined into one byte array; each record has a position, moved forward
by each step of the writer schema's program (a varint's length, a string's length and bytes, a
fixed size), branching by mask at unions, looping at arrays' and maps' blocks. The answer is all
or nothing: a batch in which any record is not framed, is cut short, takes the null branch of a
union on the path, holds a negative length or a recursive type, is answered None, and the caller
reads each record alone, which gives the exact time or invalid time of each (the seam's
``read_all`` contract, event_time/seam.py). tests/test_formats.py checks both readers against
fastavro's decoding over arbitrary records.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import numpy as np

_WIDTH = np.arange(10)
"""A varint is at most 10 bytes."""
_SHIFTS = (7 * _WIDTH).astype(np.uint64)
Which = Union[np.ndarray, slice]
"""The records an op moves: their indexes, or ``slice(None)`` for all of them (a view, where an
index array would copy every position in and out at every op: the common case, no union on
the way)."""
Op = Callable[[np.ndarray, np.ndarray, Which], None]
"""``op(buf, positions, which)``: moves ``positions[which]`` over one value."""
EVERYONE = slice(None)


def _subset(which: Which, mask: np.ndarray) -> Which:
    """The records of ``which`` where ``mask`` holds (``mask`` is over ``positions[which]``)."""
    if mask.all():
        return which
    return np.flatnonzero(mask) if isinstance(which, slice) else which[mask]


class NotInBatch(Exception):
    """This batch (or this schema) is read record by record instead."""


def varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at positions ``at``: ``(values, lengths in bytes)``."""
    first = buf[np.minimum(at, len(buf) - 1)]
    if not (first & 0x80).any():  # every one a single byte: string lengths, union indexes
        small = first.astype(np.int64)
        return (small >> 1) ^ -(small & 1), np.ones(len(at), dtype=np.int64)
    window = buf[np.minimum(at[:, None] + _WIDTH, len(buf) - 1)]
    more = window >= 128
    if more.all(axis=1).any():
        raise NotInBatch("a varint longer than 10 bytes")
    lengths = np.argmin(more, axis=1) + 1
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


def _run(program: list[Op], buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
    for op in program:
        op(buf, positions, which)


class Program:
    """Compiles a writer schema's values into ops (``names.resolve``, ``kind`` as avro.py's)."""

    def __init__(self, resolve: Callable[[Any], Any], kind: Callable[[Any], str]) -> None:
        self._resolve = resolve
        self._kind = kind
        self._expanding: set[str] = set()

    def skip(self, schema: Any) -> list[Op]:
        schema = self._resolve(schema)
        kind = self._kind(schema)
        if kind == "null":
            return []
        if kind in ("boolean", "float", "double", "fixed"):
            size = {"boolean": 1, "float": 4, "double": 8}.get(kind) or schema["size"]
            return [_fixed(size)]
        if kind in ("int", "long", "enum"):
            return [_varint]
        if kind in ("string", "bytes"):
            return [_length_prefixed]
        if kind == "union":
            return [_union([self.skip(branch) for branch in schema])]
        if kind == "record":
            if schema["name"] in self._expanding:
                raise NotInBatch("a recursive record")
            self._expanding.add(schema["name"])
            ops = [op for field in schema["fields"] for op in self.skip(field["type"])]
            self._expanding.discard(schema["name"])
            return ops
        if kind == "array":
            return [_blocks(self.skip(schema["items"]))]
        if kind == "map":
            return [_blocks([_length_prefixed, *self.skip(schema["values"])])]
        raise NotInBatch(f"an Avro type {kind!r}")


def _fixed(size: int) -> Op:
    def op(buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
        positions[which] += size
    return op


def _varint(buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
    positions[which] += varints(buf, positions[which])[1]


def _length_prefixed(buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
    lengths, sizes = varints(buf, positions[which])
    if (lengths < 0).any():
        raise NotInBatch("a negative length")
    positions[which] += sizes + lengths


def _union(branches: list[list[Op]]) -> Op:
    def op(buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
        chosen, sizes = varints(buf, positions[which])
        if (chosen < 0).any() or (chosen >= len(branches)).any():
            raise NotInBatch("a union index beyond the writer schema")
        positions[which] += sizes
        for index, program in enumerate(branches):
            if program:
                taking = chosen == index
                if taking.any():
                    _run(program, buf, positions, _subset(which, taking))
    return op


def _blocks(item: list[Op]) -> Op:
    """Arrays and maps: blocks of a count (negative: then the block's size in bytes), until 0."""
    def op(buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
        open_ = np.arange(len(positions)) if isinstance(which, slice) else which
        while len(open_):
            counts, sizes = varints(buf, positions[open_])
            positions[open_] += sizes
            sized = open_[counts < 0]
            if len(sized):  # a block given with its size: jump over it whole
                block_bytes, size_sizes = varints(buf, positions[sized])
                if (block_bytes < 0).any():
                    raise NotInBatch("a negative block size")
                positions[sized] += size_sizes + block_bytes
            for k in range(int(counts.max(initial=0))):
                _run(item, buf, positions, open_[counts > k])
            open_ = open_[counts != 0]
    return op


def path_program(program: Program, stages: list[tuple[Optional[int], dict, int, str]], leaf_branch: Optional[int],
                 leaf_kind: str) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``read(buf, positions, ends) -> values`` of the leaf for every record (NotInBatch where the
    batch must be read record by record). ``stages`` as avro.py's ``_compile_leaf`` makes them."""
    if leaf_kind not in ("int", "long", "float", "double"):
        raise NotInBatch(f"a {leaf_kind} time is read record by record")
    steps: list[Op] = []
    for branch, record, index, _ in stages:
        if branch is not None:
            steps.append(_branch(branch))
        steps.extend(op for field in record["fields"][:index] for op in program.skip(field["type"]))
    if leaf_branch is not None:
        steps.append(_branch(leaf_branch))

    def read(buf: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> np.ndarray:
        _run(steps, buf, positions, EVERYONE)
        if leaf_kind in ("int", "long"):
            values, sizes = varints(buf, positions)
        else:
            width = 8 if leaf_kind == "double" else 4
            raw = buf[np.minimum(positions[:, None] + np.arange(width), len(buf) - 1)]
            values = np.ascontiguousarray(raw).view("<f8" if width == 8 else "<f4")[:, 0]
            sizes = np.full(len(positions), width)
        if (positions + sizes > ends).any():
            raise NotInBatch("a payload ends before the field")
        return values
    return read


def _branch(expected: int) -> Op:
    def op(buf: np.ndarray, positions: np.ndarray, which: Which) -> None:
        chosen, sizes = varints(buf, positions[which])
        if (chosen != expected).any():
            raise NotInBatch("a null on the path")
        positions[which] += sizes
    return op
