"""What a format's column decoder gives back: the decoded values, and which rows could not be decoded.

Why a second return value: a record whose value cannot be decoded (not framed, a schema id the
registry does not know, bytes that do not match the writer schema, a writer that does not resolve
to the reader) must never become a plausible value, nor a null nobody counts. The decoders only
say which rows failed and why; one place on the executors (executor/decode_policy.py) applies the
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


MAX_TYPE_FIELDS = 10_000
"""The most fields (struct fields, arrays and maps, at any depth) a decoded column's Spark type
may have: ten times the widest real schemas (a Debezium envelope has a few hundred)."""


class TypeBudget:
    """Counts the fields of a decoded column's Spark type while a format derives it from the
    reader schema, and refuses the schema past :data:`MAX_TYPE_FIELDS`.

    Why: a type grows with every path through the schema, not with the schema's size. A
    ``.proto`` file of 1 KB whose messages each hold the next one twice, 30 deep, is a type of
    2^30 fields (``from_protobuf`` derives it too), and so is a JSON Schema whose definitions
    do the same; deriving it would hold the query's start for hours."""

    def __init__(self, schema: str) -> None:
        """``schema``: the reader schema as the error names it (its id and subject)."""
        self._schema = schema
        self._left = MAX_TYPE_FIELDS

    def spend(self) -> None:
        """One more field; ValueError past the budget."""
        self._left -= 1
        if self._left < 0:
            raise ValueError(
                f"{self._schema} gives a Spark type of more than {MAX_TYPE_FIELDS:,} fields (it nests the same "
                "messages or definitions many times over), too large to decode: read the raw bytes instead")
