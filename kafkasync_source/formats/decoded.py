"""What a format's column decoder gives back: the decoded values, and which rows could not be decoded.

Why a second return value: a record whose value cannot be decoded (not framed, a schema id the
registry does not know, bytes that do not match the writer schema, a writer that does not resolve
to the reader) must never become a plausible value, nor a null nobody counts. The decoders only
say which rows failed and why; one place on the executors (executor/range_reader.py) applies the
query's ``<part>.decode.mode``: ``FAILFAST`` (the default, as ``from_avro``/``from_protobuf``)
fails the query naming the topic, partition, offset, schema id and field; ``PERMISSIVE`` keeps a
null there, counts it and logs the first of each kind.

A tombstone (no value at all) is not undecodable: its decoded value is null, as Confluent's
deserializers return null for null bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

NOT_FRAMED = "not-framed"
"""The payload is not in Confluent's wire format (formats/framing.py)."""
UNKNOWN_SCHEMA = "unknown-schema"
"""The registry does not know the record's schema id."""
MALFORMED = "malformed"
"""The bytes do not decode with their writer schema (cut short, a bad index or length, bad UTF-8...)."""
INCOMPATIBLE = "incompatible"
"""The writer schema does not resolve to the reader schema (a field, a type, a symbol)."""
KINDS = (NOT_FRAMED, UNKNOWN_SCHEMA, MALFORMED, INCOMPATIBLE)


@dataclass(frozen=True)
class Undecodable:
    """One row of a decoded column that holds null because its record could not be decoded."""

    row: int
    """The row's index among the records the decoder was given."""
    kind: str
    """One of :data:`KINDS`."""
    reason: str
    """Why, naming the field where it can (never a secret: no URL with credentials)."""
    schema_id: Optional[int] = None
    """The writer schema id, where the record is framed."""


class DecodedColumn(NamedTuple):
    """A column decoder's answer for a list of records."""

    values: Any
    """A ``pyarrow.Array`` of the column's Arrow type, one value per record (null at every
    undecodable row)."""
    undecodable: tuple[Undecodable, ...] = ()
    """The rows that are null because they could not be decoded, in row order."""


def invalid_row(row: int, payload: Optional[bytes], why: Exception) -> Undecodable:
    """The undecodable row of a payload a reader refused with ``why`` (an ``InvalidTime``: the
    framing's ``NotFramed``, the registry's ``UnknownSchema``, anything else is malformed)."""
    from kafkasync_source.formats.framing import NotFramed, schema_id
    from kafkasync_source.formats.registry import UnknownSchema

    if isinstance(why, NotFramed):
        return Undecodable(row, NOT_FRAMED, str(why))
    written_with = schema_id(payload) if payload is not None and len(payload) >= 5 and payload[0] == 0 else None
    return Undecodable(row, UNKNOWN_SCHEMA if isinstance(why, UnknownSchema) else MALFORMED, str(why), written_with)
