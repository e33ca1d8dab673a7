"""Protobuf read as an attacker or an unlucky user writes it (issue 61): descriptors that grow
without bound, and bytes that protobuf-java's ``DynamicMessage`` (what ``from_protobuf`` parses
with) treats otherwise than upb. Each test failed on the decoder before its fix; the expected
values are what Spark's ``ProtobufDeserializer`` gives over ``DynamicMessage`` (protobuf-java
4.29.3, the version Spark 4.x shades, run beside these bytes while the tests were written)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from registry_double import RegistryDouble, framed, record
from test_protobuf_decode import FIELD, built, proto_file
from test_protobuf_decode import decode as decode_column

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats.options import PROTOBUF
from kafkasync_source.formats.registry import KafkaSyncFormatError, registry


def test_a_message_whose_type_would_outgrow_the_budget_is_refused_naming_the_option():
    """Fourteen messages that each hold the next one twice: a 700-byte descriptor whose Spark
    type has 2^15 fields (30 such levels held the query's start for hours)."""
    twice = [("a", 1), ("b", 2)]
    messages = {f"M{i}": [(name, number, FIELD.TYPE_MESSAGE, f".shop.M{i + 1}") for name, number in twice]
                for i in range(14)}
    messages["M14"] = [("x", 1, FIELD.TYPE_INT32)]
    file, _ = built(proto_file("dag", messages))
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    with pytest.raises(ValueError, match=rf"Option 'value.decode': the reader schema \(id {schema_id}, subject "
                                         r"'topic-value'\)'s message shop.M0 gives a Spark type of more than 10,000"):
        double.options(PROTOBUF, schema_id, record_name="shop.M0").spark_type()


def varint(number: int) -> bytes:
    number &= (1 << 64) - 1
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    return bytes([*out, number])


def length_delimited(number: int, body: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(body)) + body


def entry(number: int, key: bytes, value: int) -> bytes:
    """One map entry of field ``number``: ``key`` the key's encoded field, then value field 2 (a varint)."""
    return length_delimited(number, key + varint(2 << 3) + varint(value))


def maps_file(syntax: str = "proto3"):
    proto = proto_file("maps" + syntax, {"Row": [("by_name", 1, FIELD.TYPE_MESSAGE, ".shop.Row.ByNameEntry",
                                                  FIELD.LABEL_REPEATED),
                                                 ("by_id", 2, FIELD.TYPE_MESSAGE, ".shop.Row.ByIdEntry",
                                                  FIELD.LABEL_REPEATED)]}, syntax=syntax)
    for name, key_type in (("ByNameEntry", FIELD.TYPE_STRING), ("ByIdEntry", FIELD.TYPE_SINT64)):
        map_entry = proto.message_type[0].nested_type.add(name=name)
        map_entry.options.map_entry = True
        map_entry.field.add(name="key", number=1, type=key_type, label=FIELD.LABEL_OPTIONAL)
        map_entry.field.add(name="value", number=2, type=FIELD.TYPE_INT32, label=FIELD.LABEL_OPTIONAL)
    file, _ = built(proto)
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    return double.options(PROTOBUF, schema_id), schema_id


def test_a_maps_entries_come_in_the_order_written_and_a_key_as_often_as_written():
    """``from_protobuf`` parses with protobuf-java's ``DynamicMessage``, which keeps a map as
    the list of its entries, and writes each (``ProtobufDeserializer.newMapWriter``). upb's hash
    map gave them in its own order (``by_id`` 5, 3, 9, 1 came out -1, 1, 2, 3, ...) and kept a
    repeated key's last entry only."""
    options, schema_id = maps_file()
    names = "zyxwvutsrqponm"
    ids = [5, 3, 9, 1, 7, 100, 2, -1]
    body = (b"".join(entry(1, length_delimited(1, name.encode()), value) for value, name in enumerate(names))
            + b"".join(entry(2, varint(8) + varint(key << 1 ^ key >> 63), key) for key in ids)
            + entry(1, length_delimited(1, b"z"), 99) + length_delimited(2, b""))  # z again; an empty entry
    column = decode_column(options, [framed(schema_id, body, b"\x00")])
    assert column.undecodable == ()
    row = column.values.to_pylist()[0]
    assert row["by_name"] == [*((name, value) for value, name in enumerate(names)), ("z", 99)]
    assert row["by_id"] == [*((key, key) for key in ids), (0, 0)]


def test_a_maps_string_that_is_not_utf8_is_malformed_as_protobuf_java_refuses_it():
    """protobuf-java checks a map's strings whatever the syntax (proto2 included) and fails the
    record; upb gives a proto2 one as bytes, and the key's raised UnicodeDecodeError out of the
    column decoder (the value's came out with U+FFFD)."""
    options, schema_id = maps_file("proto2")
    good = entry(1, length_delimited(1, b"ok"), 1)
    column = decode_column(options, [framed(schema_id, body, b"\x00") for body in (
        entry(1, length_delimited(1, b"\xff"), 1), good)])
    assert [(u.row, u.kind) for u in column.undecodable] == [(0, "malformed")]
    assert "'Row.by_name.key': a map's string that is not UTF-8" in column.undecodable[0].reason
    assert column.values.to_pylist()[1] == {"by_name": [("ok", 1)], "by_id": []}


JDK_STRINGS = {  # bytes -> what JDK 17.0.15's new String(bytes, UTF_8) gives (run beside these tests)
    b"a\xffb\xed\xa0\x80c\xe2\x82": "a\ufffdb\ufffdc\ufffd",
    b"\xed\xbf": "\ufffd",
    b"A\xed\xa0": "A\ufffd",
    b"\xed\xbf\xbfA": "\ufffdA",
    b"\xe0\x80": "\ufffd\ufffd",
    b"\xf0\x90\x80A": "\ufffdA",
    b"\xc0\xaf": "\ufffd\ufffd",
}
"""Python's ``errors="replace"`` gives three U+FFFD for a surrogate's three bytes, two for ``ED BF``."""


def test_a_proto2_string_that_is_not_utf8_is_replaced_as_the_jdk_replaces_it():
    """protobuf-java does not check a proto2 string (outside maps) and makes it a Java String,
    whose decoder replaces other runs than Python's: ``a\\xffb\\xed\\xa0\\x80c`` was
    ``a?b???c`` here and is ``a?b?c`` in from_protobuf (each ? a U+FFFD)."""
    file, _ = built(proto_file("text2", {"Row": [("s", 1, FIELD.TYPE_STRING),
                                                 ("ss", 2, FIELD.TYPE_STRING, None, FIELD.LABEL_REPEATED)]},
                               syntax="proto2"))
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    bodies = [length_delimited(1, raw) + length_delimited(2, raw) for raw in JDK_STRINGS]
    column = decode_column(double.options(PROTOBUF, schema_id), [framed(schema_id, body, b"\x00") for body in bodies])
    assert column.undecodable == ()
    assert column.values.to_pylist() == [{"s": text, "ss": [text]} for text in JDK_STRINGS.values()]


def test_a_timestamp_or_duration_whose_microseconds_overflow_a_long_is_malformed_never_wrapped():
    """Where ``seconds * 10^6 + nanos / 1000`` is beyond a long, Spark wraps (its ``seconds *
    1000`` and its ``+`` are Java's plain long arithmetic; only ``millisToMicros`` is exact):
    ``from_protobuf`` gives 1970-01-01 for a Timestamp of 2^62 seconds, -1 s for a Duration of
    2^63 - 1 seconds, and the year -290308 for 9,223,372,036,854 seconds and 999,999,999
    nanoseconds, which kafkasync gave too. Each is malformed now, naming the field; the largest
    sum within a long still reads."""
    file, classes = built(proto_file("times", {"Row": [("at", 1, FIELD.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
                                                       ("took", 2, FIELD.TYPE_MESSAGE, ".google.protobuf.Duration")]}))
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    rows = []
    for field, seconds, nanos in (("at", 9_223_372_036_854, 999_999_999), ("took", 2**63 - 1, 0),
                                  ("at", 2**62, 0), ("took", -9_223_372_036_854, -775_809_000),
                                  ("at", 9_223_372_036_854, 775_807_999), ("took", -9_223_372_036_854, -775_808_000)):
        row = classes["Row"]()
        getattr(row, field).seconds, getattr(row, field).nanos = seconds, nanos
        rows.append(framed(schema_id, row.SerializeToString(), b"\x00"))
    column = decode_column(double.options(PROTOBUF, schema_id), rows)
    assert [(u.row, u.kind) for u in column.undecodable] == [(row, "malformed") for row in range(4)]
    assert "field 'Row.at': 9223372036854 seconds and 999999999 nanoseconds overflow" in column.undecodable[0].reason
    plain = column.values.cast(pa.struct([("at", pa.int64()), ("took", pa.int64())])).to_pylist()
    assert plain[4:] == [{"at": 2**63 - 1, "took": None}, {"at": None, "took": -2**63}]


def test_an_enum_on_the_time_path_is_no_time_not_its_number_as_milliseconds():
    """A bool or bytes field on the ``eventTime.field`` path was an invalid time, but an enum's
    number was read as epoch milliseconds: ``kind: RETAIL`` (1) a valid time of 1970-01-01."""
    file, classes = built(proto_file("kinds", {"Row": [("kind", 1, FIELD.TYPE_ENUM, ".shop.Kind")]},
                                     enums={"Kind": [("NONE", 0), ("RETAIL", 1)]}))
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    read = double.options(PROTOBUF, schema_id, decode=False).time_reader("kind", "epochMillis")
    with pytest.raises(InvalidTime, match=r"kind is an enum \(shop.Kind\), not a time"):
        read(record(framed(schema_id, classes["Row"](kind=1).SerializeToString(), b"\x00")))


def importing_files(double: RegistryDouble):
    """``shop/order.proto`` importing ``shop/money.proto``, registered as ``ProtobufSerializer``
    registers them: the imported file under a subject named after it, the importing one with a
    reference to it. The writer id and the Order class."""
    from confluent_kafka.schema_registry import SchemaReference
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop", syntax="proto3")
    money.message_type.add(name="Money").field.add(name="cents", number=1, type=FIELD.TYPE_INT64,
                                                   label=FIELD.LABEL_OPTIONAL)
    order = proto_file("order", {"Order": [("id", 1, FIELD.TYPE_STRING),
                                           ("price", 2, FIELD.TYPE_MESSAGE, ".shop.Money")]})
    order.name = "shop/order.proto"
    order.dependency[:] = ["shop/money.proto"]
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(order)
    double.add_protobuf(pool.FindFileByName("shop/money.proto"), subject="shop/money.proto")
    writer_id = double.add_protobuf(pool.FindFileByName("shop/order.proto"),
                                    [SchemaReference("shop/money.proto", "shop/money.proto", 1)])
    return writer_id, message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_a_file_that_imports_another_subjects_file_is_read_and_a_registry_blip_is_not_kept():
    """confluent-kafka's resolver asks each imported version as ``format=serialized``, which
    Apicurio answers with HTTP 500 for the descriptor its own serializer registered: no file that
    imports another could be read (tests/test_formats_registry.py shows it on Apicurio). And a
    registry that could not be reached while an import was fetched made the schema id unbuildable
    for the process's life. Now each version is asked as stored, and a failure to reach the
    registry fails that read, naming the import, and is asked again next time."""
    double = RegistryDouble()
    writer_id, order_class = importing_files(double)
    message = order_class(id="o1")
    message.price.cents = 995
    payload = framed(writer_id, message.SerializeToString(), b"\x00")
    options = double.options(PROTOBUF, writer_id)
    registry(double.settings).schema(writer_id)  # the writer's schema is known; its import cannot be fetched
    double.unreachable = 1
    with pytest.raises(KafkaSyncFormatError, match=rf"schema id {writer_id} imports 'shop/money.proto', subject "
                                                   r"'shop/money.proto' version 1, which the registry at http://"
                                                   r"registry-double-\d+.invalid cannot give: ConnectionError"):
        options.spark_type()
    assert decode_column(options, [payload]).values.to_pylist() == [{"id": "o1", "price": {"cents": 995}}]


def test_a_users_own_timestamp_message_reads_as_from_protobuf_casts_it():
    """``from_protobuf`` types any message named ``Timestamp`` or ``Duration`` whose fields are
    ``seconds`` and ``nanos`` a timestamp or an interval, then casts the values to Java's
    ``long`` and ``int`` (checked with protobuf-java 4.29.3 beside these bytes): string fields
    fail the record, where kafkasync's ``int("abc")`` raised ValueError out of the column
    decoder; unsigned ones are Java's signed values, so a uint64 of 2^64 - 1 seconds is -1 s,
    which kafkasync called an overflow."""
    proto = proto_file("own", {"Row": [("text", 1, FIELD.TYPE_MESSAGE, ".shop.Own.Timestamp"),
                                       ("unsigned", 2, FIELD.TYPE_MESSAGE, ".shop.Unsigned.Duration")],
                               "Own": [], "Unsigned": []})
    for index, name, types in ((1, "Timestamp", (FIELD.TYPE_STRING, FIELD.TYPE_STRING)),
                               (2, "Duration", (FIELD.TYPE_UINT64, FIELD.TYPE_UINT32))):
        nested = proto.message_type[index].nested_type.add(name=name)
        for number, (field_name, field_type) in enumerate(zip(("seconds", "nanos"), types), start=1):
            nested.field.add(name=field_name, number=number, type=field_type, label=FIELD.LABEL_OPTIONAL)
    file, classes = built(proto)
    double = RegistryDouble()
    schema_id = double.add_protobuf(file)
    options = double.options(PROTOBUF, schema_id, record_name="shop.Row")
    text, unsigned = classes["Row"](), classes["Row"]()
    text.text.seconds = "abc"
    unsigned.unsigned.seconds, unsigned.unsigned.nanos = 2**64 - 1, 2**32 - 1000
    payloads = [framed(schema_id, message.SerializeToString(), b"\x00") for message in (text, unsigned)]
    column = decode_column(options, payloads)
    assert [(u.row, u.kind) for u in column.undecodable] == [(0, "malformed")]
    assert "a shop.Own.Timestamp whose seconds and nanos are not a 64-bit and a 32-bit integer" in (
        column.undecodable[0].reason)
    assert column.values.cast(pa.struct([("text", pa.int64()), ("unsigned", pa.int64())])).to_pylist()[1] == {
        "text": None, "unsigned": -1_000_001}
    with pytest.raises(InvalidTime, match="not a 64-bit and a 32-bit integer"):
        options.time_reader("text", "epochMillis")(record(payloads[0]))
