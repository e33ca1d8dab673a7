"""Confluent's wire format: what a record written by a Schema Registry serializer looks like.

Confluent's serializers (and Kafka Connect's converters, Debezium's among them) write a value as
a magic byte ``0``, the writer schema's id as a 4-byte big-endian integer, then the encoded
record; Protobuf inserts, between the id and the message, the path of message indexes to the
message type inside its ``.proto`` file (a zigzag varint count, then each index as a zigzag
varint; the single byte ``0`` stands for ``[0]``, the first message). Sources: Confluent's
"Wire format" documentation; confluent-kafka-python ``schema_registry/serde.py``
(``SchemaId.from_bytes``, ``_MAGIC_BYTE = 0``) and ``_sync/protobuf.py``
(``ProtobufSerializer._encode_varints``).
"""

from __future__ import annotations

from typing import Optional

from kafkasync_source.event_time.formats import InvalidTime

MAGIC_BYTE = 0
HEADER_BYTES = 5
"""The magic byte and the 4-byte schema id."""


class NotFramed(InvalidTime):
    """A payload that is not in Confluent's wire format: an invalid time under ``onInvalid``, a null
    decoded value (never a failure of its own: a topic may hold a stray record)."""


def schema_id(payload: object) -> int:
    """The writer schema's id of a framed payload, or :class:`NotFramed` saying why not."""
    if payload is None:
        raise NotFramed("the record has no value (a tombstone)")
    assert isinstance(payload, bytes)
    if len(payload) < HEADER_BYTES:
        raise NotFramed(f"a payload of {len(payload)} bytes is too short for Confluent's framing (5 bytes at least)")
    if payload[0] != MAGIC_BYTE:
        raise NotFramed(f"the payload starts with byte {payload[0]}, not Confluent's magic byte 0")
    return int.from_bytes(payload[1:HEADER_BYTES], "big")



def schema_id_or_none(payload: object) -> Optional[int]:
    """The writer schema's id where the payload is framed, else None: what an undecodable row
    names (formats/decoded.py), whatever else was wrong with it."""
    try:
        return schema_id(payload)
    except NotFramed:
        return None

def read_varint(payload: bytes, position: int) -> tuple[int, int]:
    """A zigzag-encoded varint at ``position`` (Avro's int/long, Confluent's Protobuf indexes):
    ``(value, position after it)``. IndexError past the end."""
    byte = payload[position]
    position += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position
    number = byte & 0x7F
    shift = 7
    while True:
        byte = payload[position]
        position += 1
        number |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (number >> 1) ^ -(number & 1), position
        shift += 7
        if shift > 63:
            raise InvalidTime("a varint longer than 10 bytes")


MAX_MESSAGE_INDEXES = 100
"""More nesting than any ``.proto`` file has: a count beyond it is not Confluent's framing."""


def protobuf_indexes(payload: bytes) -> tuple[tuple[int, ...], int]:
    """The message indexes after the 5-byte header and where the message starts, or
    :class:`NotFramed` saying why not. Each index is one varint of at least one byte, so a count
    larger than the bytes left cannot be read, and is refused before any is: the work is bounded
    by the payload whatever its bytes say. A negative count or index is what the deprecated
    framing (confluent-kafka's ``use.deprecated.format``: plain varints, not zigzag) reads as
    here; it never selects a message (Python would take ``[-1]`` as the file's last)."""
    try:
        count, position = read_varint(payload, HEADER_BYTES)
        if count == 0:
            return (0,), position
        if count < 0:
            raise NotFramed(f"a negative message index count ({count}): not Confluent's Protobuf framing "
                            "(a writer of the deprecated non-zigzag framing, use.deprecated.format?)")
        if count > min(MAX_MESSAGE_INDEXES, len(payload) - position):
            raise NotFramed(f"{count} message indexes in {len(payload) - position} bytes: not Confluent's "
                            "Protobuf framing")
        indexes = []
        for _ in range(count):
            index, position = read_varint(payload, position)
            if index < 0:
                raise NotFramed(f"a negative message index ({index}): not Confluent's Protobuf framing (a writer "
                                "of the deprecated non-zigzag framing, use.deprecated.format?)")
            indexes.append(index)
        return tuple(indexes), position
    except IndexError:
        raise NotFramed("the payload ends inside Confluent's Protobuf message indexes") from None
    except NotFramed:
        raise
    except InvalidTime as why:  # read_varint's "longer than 10 bytes"
        raise NotFramed(f"Confluent's Protobuf message indexes: {why}") from None
