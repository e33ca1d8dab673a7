"""One reader schema and the writer schemas met with it: each writer parsed and resolved once per
process (a writer that cannot be parsed or resolved is remembered as such, never recompiled per
record), and the readers built from that one resolution.

:class:`Codec` is pure: it is given the reader schema's text and a function that fetches a
writer schema by id, so the tests run it on schema text and bytes alone; avro/__init__.py gives
it the registry.
"""

from __future__ import annotations

import functools
import struct
import threading
from typing import Any, Callable, Optional

import numpy as np

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats.avro import time_path
from kafkasync_source.formats.avro.batch import NotInBatch, framed
from kafkasync_source.formats.avro.columns import Column, Columns, decode_run
from kafkasync_source.formats.avro.resolution import Action, check_defaults, first_error, names_match, resolve
from kafkasync_source.formats.avro.schema import Node, SchemaError, parse
from kafkasync_source.formats.avro.values import Compiler, Cursor, Reader, RowError
from kafkasync_source.formats.decoded import INCOMPATIBLE, MALFORMED, NOT_FRAMED, UNKNOWN_SCHEMA, Undecodable
from kafkasync_source.formats.framing import HEADER_BYTES, MAGIC_BYTE, NotFramed
from kafkasync_source.formats.framing import schema_id as id_of_payload
from kafkasync_source.formats.registry import KafkaSyncFormatError, UnknownSchema

Fetch = Callable[[int], tuple[str, str]]
"""``schema id -> (schema type, schema text)``; raises UnknownSchema or KafkaSyncFormatError."""
TimeOf = Callable[[bytes], int]


def parse_field_path(path: str) -> list[str]:
    """``source.ts_ms`` -> ``["source", "ts_ms"]``; ValueError naming the option."""
    steps = path.strip().split(".")
    if not all(steps):
        raise ValueError(f"Option 'eventTime.field' {path!r} must be field names joined by '.', e.g. 'source.ts_ms'.")
    return steps


def reader_leaf(root: Node, steps: list[str], path: str) -> Node:
    """The reader's type at the path (through ``[null, T]`` unions); ValueError naming the
    option where the path does not lead through records to a number or a string."""
    node = root
    for depth, step in enumerate(steps + [None]):  # type: ignore[operator]
        prefix = ".".join(steps[:depth]) or "the value"
        if node.kind == "union":
            branches = [b for b in node.branches if b.kind != "null"]
            if len(branches) != 1:
                raise ValueError(f"Option 'eventTime.field' {path!r}: {prefix} is a union of {len(branches)} "
                                 "types; a path goes through [null, T] unions only")
            node = branches[0]
        if step is None:
            break
        if node.kind != "record":
            raise ValueError(f"Option 'eventTime.field' {path!r}: {prefix} is a {node.kind}, not a record")
        found = [f for f in node.fields if f.name == step]
        if not found:
            names = ", ".join(f.name for f in node.fields)
            raise ValueError(f"Option 'eventTime.field' {path!r}: {prefix} has no field {step!r} (its fields: {names})")
        node = found[0].type
    if node.kind not in ("int", "long", "float", "double", "string"):
        raise ValueError(f"Option 'eventTime.field' {path!r} is a {node.kind}; a time is a number or a string")
    return node


class Writer:
    """One writer schema id, parsed and resolved to the reader once; or why it cannot be."""

    def __init__(self, schema_id: int, schema_type: str, text: str, reader: Optional[Node]) -> None:
        self.schema_id = schema_id
        self.failure: Optional[str] = None
        self._lock = threading.Lock()
        self._columns: dict[str, Optional[Column]] = {}
        self._values: Optional[Reader] = None
        self._times: dict[tuple[str, str], tuple[TimeOf, Any]] = {}
        if (schema_type or "AVRO") != "AVRO":
            self.failure = f"schema id {schema_id} is a {schema_type} schema, not Avro"
            return
        try:
            self.node = parse(text)
        except SchemaError as err:
            self.failure = f"writer schema id {schema_id} is not a valid Avro schema: {err}"
            return
        self.action: Action = resolve(self.node, self.node if reader is None else reader)
        own = reader is None or not (self.node.kind == reader.kind == "record" and not names_match(self.node, reader))
        self.time_action = self.action if own else resolve(self.node, self.node)
        """What the time path reads: the resolution, or for a record of another type than the
        reader's (a record-name strategy's topic) the writer's own names and logical types."""
        error = first_error(self.action)
        self.incompatible = None if error is None else (
            f"writer schema id {schema_id} does not resolve to the reader schema: {error.message()}")

    def values(self) -> Reader:
        """values.py's reader of the whole value (compiled at first use)."""
        if self._values is None:
            self._values = Compiler().value(self.action, raw_bytes=self.node.kind == "bytes")
        return self._values

    def decode_one(self, payload: bytes) -> Any:
        """A framed payload's value (RowError where it has none)."""
        return self.values()(Cursor(payload, HEADER_BYTES, len(payload)))

    def column(self, arrow_type: Any) -> Optional[Column]:
        """The numpy decoder of this writer into ``arrow_type``, None where it does not apply."""
        key = str(arrow_type)
        if key not in self._columns:
            with self._lock:
                try:
                    if self.node.kind == "bytes":
                        raise NotInBatch("a raw bytes value")
                    self._columns[key] = Columns().of(self.action, arrow_type)
                except NotInBatch:
                    self._columns[key] = None
        return self._columns[key]

    def time(self, steps: list[str], path: str, time_format: str, leaf: Optional[Node]) -> tuple[TimeOf, Any]:
        """``(time_of(payload), batch(buf, positions, ends) or None)`` for the path."""
        key = (path, time_format)
        found = self._times.get(key)
        if found is None:
            with self._lock:
                found = self._times[key] = self._compile_time(steps, path, time_format, leaf)
        return found

    def _compile_time(self, steps: list[str], path: str, time_format: str, leaf: Optional[Node]) -> tuple[TimeOf, Any]:
        if self.failure is not None:
            return _failing(self.failure), None
        reader = self.time_action.reader
        if leaf is None or self.time_action is not self.action:
            try:
                leaf = reader_leaf(reader, steps, path)
            except ValueError as err:
                return _failing(f"writer schema id {self.schema_id}: {err}"), None
        try:
            path_plan = time_path.plan(self.time_action, steps)
        except time_path.PathIncompatible as err:
            return _failing(f"writer schema id {self.schema_id} does not resolve to the reader schema: {err}"), None
        except Exception as err:  # noqa: BLE001 - the path's shape is one the fast readers leave to values.py
            if not time_path.is_generic(err):
                raise
            values = Compiler().value(self.time_action, raw_bytes=self.node.kind == "bytes")

            def decode(payload: bytes) -> Any:
                try:
                    return values(Cursor(payload, HEADER_BYTES, len(payload)))
                except RowError as row:
                    if row.kind == INCOMPATIBLE:
                        raise KafkaSyncFormatError(f"writer schema id {self.schema_id}: {row}") from None
                    raise InvalidTime(str(row)) from None
            path_plan = time_path.generic_plan(decode, steps)
        return (time_path.record_reader(path_plan, time_format, path, leaf),
                time_path.batch_reader(path_plan, time_format))


def _listed(payloads: list, rows: Any) -> list[bytes]:
    return [payloads[int(row)] for row in rows]


def _itself(payload: Any) -> Any:
    return payload


def _failing(message: str) -> TimeOf:
    def fail(payload: bytes) -> int:
        raise KafkaSyncFormatError(message)
    return fail


class Codec:
    """The reader schema (None: each writer read as it is) and every writer met, per process."""

    def __init__(self, reader_text: Optional[str], fetch: Fetch) -> None:
        self._fetch = fetch
        self.reader: Optional[Node] = None
        if reader_text is not None:
            try:
                self.reader = parse(reader_text)
                check_defaults(self.reader)
            except SchemaError as err:
                raise KafkaSyncFormatError(f"kafkasync: the reader schema cannot be read: {err}") from None
        self._writers: dict[int, Writer] = {}
        self._lock = threading.Lock()

    def writer(self, schema_id: int) -> Writer:
        """The writer schema of this id, compiled once (UnknownSchema, KafkaSyncFormatError from
        the fetch, which is asked again next time: the registry decides what it remembers)."""
        found = self._writers.get(schema_id)
        if found is None:
            with self._lock:
                found = self._writers.get(schema_id)
                if found is None:
                    schema_type, text = self._fetch(schema_id)
                    found = self._writers[schema_id] = Writer(schema_id, schema_type, text, self.reader)
        return found

    # -- value.decode ---------------------------------------------------------------------------

    def decode(self, payloads: list, arrow_type: Any) -> tuple[Any, list[Undecodable]]:
        """The column of ``payloads`` (Confluent-framed values; None: a tombstone, null) and the
        rows that could not be decoded. KafkaSyncFormatError (a registry that cannot be asked)
        escapes, with the index of the payload as ``err.args[1]``."""
        import pyarrow as pa

        undecodable: list[Undecodable] = []
        batch = framed(payloads, HEADER_BYTES)
        rows: Optional[list[int]] = None
        if batch is None:
            rows = []
            for row, payload in enumerate(payloads):
                if payload is None:
                    continue
                if len(payload) < HEADER_BYTES or payload[0] != MAGIC_BYTE:
                    try:
                        id_of_payload(payload)
                    except NotFramed as why:  # framing.py says why: too short, or which first byte
                        undecodable.append(Undecodable(row, NOT_FRAMED, str(why)))
                    continue
                rows.append(row)
            batch = framed([payloads[row] for row in rows], HEADER_BYTES)
            assert batch is not None
        buf, starts, ends, ids = batch
        row_of = np.arange(len(ids)) if rows is None else np.asarray(rows, dtype=np.int64)
        pieces: list[Any] = []
        where = np.full(len(payloads), -1, dtype=np.int64)
        taken = 0
        for schema_id in np.unique(ids).tolist():
            which = np.arange(len(ids)) if taken == 0 and len(ids) and (ids == schema_id).all() \
                else np.flatnonzero(ids == schema_id)
            run_rows = row_of[which]
            try:
                writer = self.writer(schema_id)
            except UnknownSchema as err:
                undecodable.extend(Undecodable(int(r), UNKNOWN_SCHEMA, str(err), schema_id) for r in run_rows)
                continue
            except KafkaSyncFormatError as err:
                raise KafkaSyncFormatError(str(err), int(run_rows[0])) from None
            reason = writer.failure or writer.incompatible
            if reason is not None:
                undecodable.extend(Undecodable(int(r), INCOMPATIBLE, reason, schema_id) for r in run_rows)
                continue
            piece, failed = self._run(writer, arrow_type, buf, starts[which], ends[which],
                                      functools.partial(_listed, payloads, run_rows))
            for local, kind, reason_of_row in failed:
                undecodable.append(Undecodable(int(run_rows[local]), kind, reason_of_row, schema_id))
            where[run_rows] = taken + np.arange(len(which))
            taken += len(which)
            pieces.append(piece)
        undecodable.sort(key=lambda u: u.row)
        if not pieces:
            return pa.nulls(len(payloads), arrow_type), undecodable
        joined = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        if taken == len(payloads) and len(pieces) == 1 and rows is None and not undecodable:
            return joined, undecodable
        return joined.take(pa.array(where, mask=where < 0)), undecodable

    @staticmethod
    def _run(writer: Writer, arrow_type: Any, buf: Any, starts: Any, ends: Any,
             payloads_of: Callable[[], list[bytes]]) -> tuple[Any, list[tuple[int, str, str]]]:
        """One writer's records: by numpy where it decodes them all, else one by one (values.py,
        on the payloads ``payloads_of()`` gives: only then are they listed)."""
        import pyarrow as pa

        column = writer.column(arrow_type)
        if column is not None:
            try:
                return decode_run(column, buf, starts + HEADER_BYTES, ends), []
            except NotInBatch:
                pass
        values: list[Any] = []
        failed: list[tuple[int, str, str]] = []
        for local, payload in enumerate(payloads_of()):
            try:
                values.append(writer.decode_one(payload))
            except RowError as err:
                values.append(None)
                failed.append((local, err.kind, str(err)))
        try:
            return pa.array(values, type=arrow_type), failed
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, ValueError, TypeError):
            pass  # a value the Arrow type does not hold (values.py's checks should leave none): find it
        for local, value in enumerate(values):
            try:
                pa.array([value], type=arrow_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, ValueError,
                    TypeError) as err:
                values[local] = None
                failed.append((local, MALFORMED, f"a value {arrow_type} does not hold: {str(err)[:200]}"))
        failed.sort()
        return pa.array(values, type=arrow_type), failed

    # -- eventTime.field ------------------------------------------------------------------------

    def time_path(self, path: str, time_format: str) -> TimePath:
        return TimePath(self, path, time_format)


class TimePath:
    """The time at one path, per record and per batch, over every writer of a codec."""

    def __init__(self, codec: Codec, path: str, time_format: str) -> None:
        self._codec = codec
        self._steps = parse_field_path(path)
        self._path = path
        self._format = time_format
        self._leaf = None if codec.reader is None else reader_leaf(codec.reader, self._steps, path)
        self.by_header: dict[bytes, TimeOf] = {}
        """Confluent's header (b"\\x00" + 4-byte id) -> that writer's time reader."""

    def compiled(self, schema_id: int) -> tuple[TimeOf, Any]:
        return self._codec.writer(schema_id).time(self._steps, self._path, self._format, self._leaf)

    def reader(self, payload_of: Callable[[Any], Any],
               name_of: Optional[Callable[[Any], str]] = None) -> Callable[[Any], int]:
        """``item -> epoch ms`` of ``payload_of(item)``: one look-up of the payload's 5-byte
        header, then its writer's generated reader. InvalidTime where it has none (NotFramed and
        UnknownSchema among them); KafkaSyncFormatError where its writer cannot be read as the
        reader, naming the item by ``name_of`` (a record's topic, partition and offset)."""
        by_header = self.by_header
        compiled = self.compiled

        def read(item: Any) -> int:
            payload = payload_of(item)
            try:
                try:
                    time_of = by_header[payload[:HEADER_BYTES]]
                except (KeyError, TypeError):  # a new writer schema, or not framed (None, short, no magic byte)
                    time_of = by_header[payload[:HEADER_BYTES]] = compiled(id_of_payload(payload))[0]
                return time_of(payload)
            except (IndexError, struct.error):  # a read past the payload's end (the generated readers' bound)
                raise InvalidTime("the payload ends before the field: it does not match its writer schema") from None
            except KafkaSyncFormatError as err:
                if name_of is None:
                    raise
                raise KafkaSyncFormatError(f"kafkasync: {name_of(item)}: {err}") from None
        return read

    def time_of(self, payload: Any) -> int:
        """The time of one framed payload (see :meth:`reader`)."""
        return self.reader(_itself)(payload)

    def batch(self, values: list) -> Optional[list[int]]:
        """Every record's time, or None unless each has a valid one (each is then read alone)."""
        if not values:
            return []
        batch = framed(values, HEADER_BYTES)
        if batch is None:
            return None
        buf, starts, ends, ids = batch
        schema_ids = np.unique(ids).tolist()
        result = np.empty(len(values), dtype=np.int64)
        for schema_id in schema_ids:
            which = slice(None) if len(schema_ids) == 1 else np.flatnonzero(ids == schema_id)
            try:
                read = self.compiled(schema_id)[1]
                if read is None:
                    return None
                result[which] = read(buf, starts[which] + HEADER_BYTES, ends[which])
            except (NotInBatch, InvalidTime, KafkaSyncFormatError):  # each record says which it is
                return None
        return result.tolist()
