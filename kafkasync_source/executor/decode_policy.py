"""``<part>.decode.mode``, applied in one place on the executors to what every format's column
decoder answers (formats/decoded.py): the values, and the rows it could not decode.

* ``FAILFAST`` (the default, as ``from_avro``/``from_protobuf``'s ``mode``): the first such record
  fails the task, and so the query, naming topic, partition, offset, schema id, what is wrong and
  why. Spark's reference decoders fail there too; a null nobody asked for would be read as data.
* ``PERMISSIVE``: the record's decoded column is null and ``<part>DecodeError`` says why
  (``kind: reason (schema id N)``), so that the rows can be counted (``observe_decode_errors``,
  metrics/decode_errors.py), watched and routed to a dead-letter table; the first record of each
  kind is logged once per worker process.

Why a column and not a metric: a Python data source has no channel from its executors back to
the query. ``read()`` returns rows only; ``progress.sources[i].metrics`` is filled from a JVM
source's ``ReportsSourceMetrics``, which ``PythonMicroBatchStream`` does not implement, and the
Python data source API has no metrics method (PySpark 4.3, pyspark/sql/datasource.py); an
accumulator needs a SparkContext, which an executor's Python worker and a Spark Connect client
do not have. What reaches the query is its rows: counted there, they are counted exactly once per
batch, whatever retries Spark made (DESIGN.md, "Lessons from round 4").
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Optional, Sequence

import pyarrow as pa

from kafkasync_source.formats.decoded import DecodedColumn, Undecodable
from kafkasync_source.formats.options import FAILFAST, FormatOptions
from kafkasync_source.formats.registry import KafkaSyncFormatError

logger = logging.getLogger(__name__)

_LOGGED: set[tuple[str, str]] = set()
"""(part, kind) whose first record this worker process has logged."""
_LOGGED_LOCK = threading.Lock()


class DecodePolicy:
    """``records -> the decoded column`` (and under PERMISSIVE ``<part>DecodeError`` beside it)
    of one decoded ``value.format`` / ``key.format``."""

    def __init__(self, format_options: FormatOptions, arrow_type: pa.DataType) -> None:
        self._options = format_options
        self._decode = format_options.column_decoder(arrow_type)
        self.width = 2 if format_options.error_column else 1
        """How many columns a call gives."""

    def __call__(self, records: list) -> tuple[pa.Array, ...]:
        """This part's columns for ``records`` alone (:func:`decoded_columns` takes every part)."""
        return self.columns(records, self.decode(records))

    def decode(self, records: list) -> DecodedColumn:
        """The format's answer for ``records``: values, and the rows it could not decode."""
        return self._decode(records)

    def first_failure(self, records: list, decoded: DecodedColumn) -> Optional[tuple[int, str]]:
        """Under FAILFAST, the first undecodable row and the message that fails the query; else None."""
        if self._options.decode_mode != FAILFAST or not decoded.undecodable:
            return None
        first = decoded.undecodable[0]
        return first.row, self._failure(records[first.row], first)

    def columns(self, records: list, decoded: DecodedColumn) -> tuple[pa.Array, ...]:
        """The decoded column (and under PERMISSIVE the error column): raises KafkaSyncFormatError
        under FAILFAST where a row could not be decoded."""
        if not decoded.undecodable:
            return (decoded.values,) if self.width == 1 else (decoded.values, pa.nulls(len(records), pa.string()))
        failure = self.first_failure(records, decoded)
        if failure is not None:
            raise KafkaSyncFormatError(failure[1])
        self._log_first_of_each_kind(records, decoded.undecodable)
        errors: list[Any] = [None] * len(records)
        for row in decoded.undecodable:
            errors[row.row] = error_text(row)
        return decoded.values, pa.array(errors, pa.string())

    def _failure(self, record: Any, row: Undecodable) -> str:
        part = self._options.part
        return (
            f"kafkasync: {_where(record)}: the {part} cannot be decoded ({self._options.describe_reader()}): "
            f"{error_text(row)}. Set '{part}.decode.mode=PERMISSIVE' to read such records with a null "
            f"{part}Decoded and the reason in {part}DecodeError."
        )

    def _log_first_of_each_kind(self, records: list, rows: tuple[Undecodable, ...]) -> None:
        part = self._options.part
        for row in rows:
            key = (part, row.kind)
            if key in _LOGGED:
                continue
            with _LOGGED_LOCK:
                if key in _LOGGED:
                    continue
                _LOGGED.add(key)
            logger.warning(
                "kafkasync: %s: the %s cannot be decoded (%s): %s; it is null in %sDecoded (%s.decode.mode="
                "PERMISSIVE), and this worker logs no more records of this kind: count them with "
                "observe_decode_errors (docs/formats.md).", _where(records[row.row]), part,
                self._options.describe_reader(), error_text(row), part, part)


def decoded_columns(policies: Sequence[DecodePolicy], records: list) -> list[pa.Array]:
    """Every decoded part's columns for ``records`` (key first, then value). Under FAILFAST the
    record named is the first in the records' order whose key or value cannot be decoded, as
    ``from_avro`` over both columns fails at the first row: each part is decoded whole before the
    failures are compared."""
    answers = [(policy, policy.decode(records)) for policy in policies]
    failures = [failure for policy, decoded in answers
                if (failure := policy.first_failure(records, decoded)) is not None]
    if failures:
        raise KafkaSyncFormatError(min(failures, key=lambda failure: failure[0])[1])
    return [array for policy, decoded in answers for array in policy.columns(records, decoded)]


def error_text(row: Undecodable) -> str:
    """``kind: reason (schema id N)``, the ``<part>DecodeError`` of an undecodable row."""
    return f"{row.kind}: {row.reason}" + ("" if row.schema_id is None else f" (schema id {row.schema_id})")


def _where(record: Any) -> str:
    return f"{record.topic()}-{record.partition()} offset {record.offset()}"
