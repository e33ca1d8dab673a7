"""Protobuf values and times as Spark's ``from_protobuf`` gives them (issue 61, items 9 and 10 and
the Protobuf findings), against a registry double that answers as the real registry does
(tests/registry_double.py). Each test failed on the decoder before it was rewritten: unsigned
values overflowed, a negative message index picked the file's last message, fields were matched
by name, the reader message defaulted to the file's first, an unset proto3 time read as 1970."""

from __future__ import annotations

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2
from pyspark.sql import types as T
from registry_double import RegistryDouble, framed, record

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats import decoded
from kafkasync_source.formats.framing import NotFramed, protobuf_indexes
from kafkasync_source.formats.options import PROTOBUF
from kafkasync_source.spark.schema import arrow_schema

FIELD = descriptor_pb2.FieldDescriptorProto
T0 = 1_700_000_000


def proto_file(name: str, messages: dict[str, list[tuple]], *, syntax: str = "proto3", package: str = "shop",
               enums: dict[str, list[tuple[str, int]]] | None = None) -> descriptor_pb2.FileDescriptorProto:
    """A ``.proto`` file: each message's fields as (name, number, type[, type_name[, label]])."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{name}.proto", package=package, syntax=syntax,
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/duration.proto"])
    for enum_name, values in (enums or {}).items():
        enum = proto.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    for message_name, fields in messages.items():
        message = proto.message_type.add(name=message_name)
        for name_, number, type_, *rest in fields:
            type_name = rest[0] if rest else None
            label = rest[1] if len(rest) > 1 else FIELD.LABEL_OPTIONAL
            message.field.add(name=name_, number=number, type=type_, label=label,
                              **({"type_name": type_name} if type_name else {}))
    return proto


def built(proto: descriptor_pb2.FileDescriptorProto):
    """The file's descriptor and its messages' classes, from a pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(duration_pb2.DESCRIPTOR.serialized_pb)
    file = pool.Add(proto) or pool.FindFileByName(proto.name)
    prefix = f"{proto.package}." if proto.package else ""
    classes = {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(prefix + m.name))
               for m in proto.message_type}
    return file, classes


def decode(options, payloads):
    arrow_type = arrow_schema(T.StructType([T.StructField("v", options.spark_type())])).field("v").type
    column = options.column_decoder(arrow_type)([record(p, i) for i, p in enumerate(payloads)])
    assert isinstance(column, decoded.DecodedColumn)
    return column


ORDER = {"Order": [("id", 1, FIELD.TYPE_STRING), ("count", 2, FIELD.TYPE_UINT32), ("total", 3, FIELD.TYPE_UINT64),
                   ("at", 4, FIELD.TYPE_MESSAGE, ".google.protobuf.Timestamp"), ("ts_ms", 5, FIELD.TYPE_INT64)]}


def test_unsigned_values_beyond_the_signed_range_read_as_from_protobufs_signed_types():
    """Item 9: ``from_protobuf`` types ``uint32`` int and ``uint64`` long (SchemaConverters) and
    writes Java's int and long, so 2^31 reads -2^31 and 2^64-1 reads -1."""
    double = RegistryDouble()
    file, classes = built(proto_file("order", ORDER))
    schema_id = double.add_protobuf(file)
    options = double.options(PROTOBUF, schema_id)
    assert [(f.name, f.dataType) for f in options.spark_type().fields][1:3] == [
        ("count", T.IntegerType()), ("total", T.LongType())]
    messages = [classes["Order"](id="a", count=2**31, total=2**64 - 1), classes["Order"](id="b", count=7, total=2**63)]
    column = decode(options, [framed(schema_id, m.SerializeToString(), b"\x00") for m in messages])
    assert column.undecodable == ()
    assert [(r["count"], r["total"]) for r in column.values.to_pylist()] == [(-2**31, -1), (7, -2**63)]


def test_a_negative_message_index_selects_no_message():
    """Item 10: the deprecated framing writes indexes as plain varints, which read as negative
    zigzag ones here: never Python's ``[-1]``, the file's last message."""
    double = RegistryDouble()
    file, classes = built(proto_file("two", {"First": [("a", 1, FIELD.TYPE_STRING)],
                                             "Second": [("b", 1, FIELD.TYPE_STRING)]}))
    schema_id = double.add_protobuf(file)
    body = classes["Second"](b="x").SerializeToString()
    for indexes in (b"\x02\x01", b"\x01"):  # [-1] as one index; a count of -1
        with pytest.raises(NotFramed, match="negative message index"):
            protobuf_indexes(framed(schema_id, body, indexes))
    options = double.options(PROTOBUF, schema_id, record_name="shop.Second")
    column = decode(options, [framed(schema_id, body, b"\x02\x01")])
    assert column.values.to_pylist() == [None]
    assert [(u.row, u.kind, u.schema_id) for u in column.undecodable] == [(0, decoded.NOT_FRAMED, schema_id)]
    assert "negative message index" in column.undecodable[0].reason


def test_a_count_of_indexes_larger_than_the_bytes_left_is_refused_at_once():
    with pytest.raises(NotFramed, match="90 message indexes in 3 bytes"):
        protobuf_indexes(b"\x00\x00\x00\x00\x01" + bytes([0xB4, 0x01]) + b"\x02\x02\x02")  # zigzag 90


def test_a_renamed_field_keeps_its_value_read_by_number():
    """``from_protobuf`` parses the bytes with the reader's descriptor: a field is its number."""
    double = RegistryDouble()
    v1, classes = built(proto_file("v1", {"Order": [("id", 1, FIELD.TYPE_STRING), ("amount", 2, FIELD.TYPE_DOUBLE)]}))
    v2, _ = built(proto_file("v2", {"Order": [("id", 1, FIELD.TYPE_STRING), ("price", 2, FIELD.TYPE_DOUBLE),
                                              ("note", 3, FIELD.TYPE_STRING)]}))
    writer_id, reader_id = double.add_protobuf(v1), double.add_protobuf(v2)
    options = double.options(PROTOBUF, reader_id)
    column = decode(options, [framed(writer_id, classes["Order"](id="o1", amount=99.5).SerializeToString(), b"\x00")])
    assert column.values.to_pylist() == [{"id": "o1", "price": 99.5, "note": None}]


def test_a_reader_file_of_several_messages_needs_the_record_name_naming_the_option():
    double = RegistryDouble()
    file, _ = built(proto_file("two", {"Audit": [("note", 1, FIELD.TYPE_STRING)], "Order": ORDER["Order"]}))
    schema_id = double.add_protobuf(file)
    with pytest.raises(ValueError, match=r"Option 'value.record.name' is needed: .* 2 top-level messages "
                                         r"\(Audit, Order\)"):
        double.options(PROTOBUF, schema_id).spark_type()
    with pytest.raises(ValueError, match=r"Option 'value.record.name' 'shop.Nope': .*no such message"):
        double.options(PROTOBUF, schema_id, record_name="shop.Nope").spark_type()
    assert double.options(PROTOBUF, schema_id, record_name="shop.Order").spark_type().names == [
        "id", "count", "total", "at", "ts_ms"]


def test_a_record_of_another_message_than_the_readers_is_incompatible_not_decoded_as_it():
    double = RegistryDouble()
    file, classes = built(proto_file("two", {"Audit": [("note", 1, FIELD.TYPE_STRING)], "Order": ORDER["Order"]}))
    schema_id = double.add_protobuf(file)
    options = double.options(PROTOBUF, schema_id, record_name="shop.Order")
    audit = framed(schema_id, classes["Audit"](note="zzz").SerializeToString(), b"\x00")  # indexes [0]: Audit
    order = framed(schema_id, classes["Order"](id="o", ts_ms=5).SerializeToString(), b"\x02\x02")  # [1]: Order
    column = decode(options, [audit, order])
    assert [r and r["id"] for r in column.values.to_pylist()] == [None, "o"]
    assert [(u.row, u.kind) for u in column.undecodable] == [(0, decoded.INCOMPATIBLE)]
    assert "shop.Audit" in column.undecodable[0].reason and "shop.Order" in column.undecodable[0].reason


def test_a_field_written_with_another_type_is_incompatible_as_from_protobuf_fails_it():
    double = RegistryDouble()
    writer, classes = built(proto_file("w", {"Order": [("id", 1, FIELD.TYPE_STRING),
                                                       ("amount", 2, FIELD.TYPE_STRING)]}))
    reader, _ = built(proto_file("r", {"Order": [("id", 1, FIELD.TYPE_STRING), ("amount", 2, FIELD.TYPE_INT64)]}))
    writer_id, reader_id = double.add_protobuf(writer), double.add_protobuf(reader)
    column = decode(double.options(PROTOBUF, reader_id),
                    [framed(writer_id, classes["Order"](id="a", amount="12.5").SerializeToString(), b"\x00")])
    assert column.values.to_pylist() == [None]
    assert [(u.kind, u.schema_id) for u in column.undecodable] == [(decoded.INCOMPATIBLE, writer_id)]
    assert "'amount' (number 2)" in column.undecodable[0].reason


def test_undecodable_rows_are_named_and_a_tombstone_is_only_null():
    double = RegistryDouble()
    file, classes = built(proto_file("order", ORDER))
    schema_id = double.add_protobuf(file)
    good = framed(schema_id, classes["Order"](id="a").SerializeToString(), b"\x00")
    column = decode(double.options(PROTOBUF, schema_id),
                    [good, None, b"{}", framed(999, b"", b"\x00"), framed(schema_id, b"\x0a\x05ab", b"\x00"),
                     framed(schema_id, b"", b"\x02\x08")])
    assert [r and r["id"] for r in column.values.to_pylist()] == ["a", None, None, None, None, None]
    assert [(u.row, u.kind, u.schema_id) for u in column.undecodable] == [
        (2, decoded.NOT_FRAMED, None), (3, decoded.UNKNOWN_SCHEMA, 999), (4, decoded.MALFORMED, schema_id),
        (5, decoded.MALFORMED, schema_id)]
    assert "no message at indexes [4]" in column.undecodable[3].reason


def test_from_protobufs_values_presence_enums_repeated_maps_and_well_known_types():
    """Each rule of ``from_protobuf`` (formats/protobuf_columns.py cites Spark's source): an unset
    proto3 scalar and a zero one are null, ``-0.0`` is not; an empty repeated field is an empty
    array; an enum number the enum lacks is protobuf-java's ``UNKNOWN_ENUM_VALUE_<Enum>_<n>``;
    a Timestamp beyond Python's datetime years is its microseconds; a Duration an interval; a
    wrapper a struct; a oneof's members fields of their own."""
    double = RegistryDouble()
    proto = proto_file("all", {"Row": [
        ("n", 1, FIELD.TYPE_INT32), ("d", 2, FIELD.TYPE_DOUBLE), ("tags", 3, FIELD.TYPE_STRING, None,
                                                                        FIELD.LABEL_REPEATED),
        ("color", 4, FIELD.TYPE_ENUM, ".shop.Color"), ("at", 5, FIELD.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
        ("took", 6, FIELD.TYPE_MESSAGE, ".google.protobuf.Duration"),
        ("attrs", 7, FIELD.TYPE_MESSAGE, ".shop.Row.AttrsEntry", FIELD.LABEL_REPEATED),
        ("by_card", 8, FIELD.TYPE_STRING), ("by_iban", 9, FIELD.TYPE_STRING)]},
        enums={"Color": [("RED", 0), ("BLUE", 1)]})
    row = proto.message_type[0]
    entry = row.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=FIELD.TYPE_UINT32, label=FIELD.LABEL_OPTIONAL)
    row.oneof_decl.add(name="payment")
    row.field[7].oneof_index = 0
    row.field[8].oneof_index = 0
    file, classes = built(proto)
    schema_id = double.add_protobuf(file)
    options = double.options(PROTOBUF, schema_id)
    assert options.spark_type() == T.StructType([
        T.StructField("n", T.IntegerType()), T.StructField("d", T.DoubleType()),
        T.StructField("tags", T.ArrayType(T.StringType(), False)), T.StructField("color", T.StringType()),
        T.StructField("at", T.TimestampType()), T.StructField("took", T.DayTimeIntervalType()),
        T.StructField("attrs", T.MapType(T.StringType(), T.IntegerType(), False)),
        T.StructField("by_card", T.StringType()), T.StructField("by_iban", T.StringType())])
    Row = classes["Row"]
    first = Row(n=0, d=-0.0, color=7, by_iban="")
    first.at.seconds = 400_000_000_000  # year 14645: beyond datetime, within a long of microseconds
    first.took.seconds, first.took.nanos = -2, -500_000
    first.attrs["k"] = 2**32 - 1
    second = Row(n=3, tags=["a", ""], color=1)
    column = decode(options, [framed(schema_id, m.SerializeToString(), b"\x00") for m in (first, second)])
    assert column.undecodable == ()
    plain = column.values.cast(pa.struct([
        ("n", pa.int32()), ("d", pa.float64()), ("tags", pa.list_(pa.field("element", pa.string(), False))),
        ("color", pa.string()), ("at", pa.int64()), ("took", pa.int64()),
        ("attrs", column.values.type.field("attrs").type), ("by_card", pa.string()), ("by_iban", pa.string())]))
    assert plain.to_pylist() == [
        {"n": None, "d": -0.0, "tags": [], "color": "UNKNOWN_ENUM_VALUE_Color_7", "at": 400_000_000_000_000_000,
         "took": -2_000_500, "attrs": [("k", -1)], "by_card": None, "by_iban": ""},
        {"n": 3, "d": None, "tags": ["a", ""], "color": "BLUE", "at": None, "took": None, "attrs": [],
         "by_card": None, "by_iban": None}]


def test_a_timestamp_whose_microseconds_overflow_a_long_is_malformed_naming_the_field():
    double = RegistryDouble()
    file, classes = built(proto_file("order", ORDER))
    schema_id = double.add_protobuf(file)
    message = classes["Order"](id="a")
    message.at.seconds = 2**62
    column = decode(double.options(PROTOBUF, schema_id), [framed(schema_id, message.SerializeToString(), b"\x00")])
    assert [(u.kind, u.schema_id) for u in column.undecodable] == [(decoded.MALFORMED, schema_id)]
    assert "'Order.at'" in column.undecodable[0].reason


# --- the time ----------------------------------------------------------------------------------


def test_an_unset_proto3_time_is_no_time_and_a_set_one_is_read_by_number():
    """A proto3 ``int64`` without presence that is 0 was not set (Protobuf does not write it):
    no time, not 1970. A Timestamp not set is no time either; one set is."""
    double = RegistryDouble()
    file, classes = built(proto_file("order", ORDER))
    renamed, _ = built(proto_file("renamed", {"Order": [*ORDER["Order"][:4], ("event_ms", 5, FIELD.TYPE_INT64)]}))
    writer_id, reader_id = double.add_protobuf(file), double.add_protobuf(renamed)
    options = double.options(PROTOBUF, reader_id, decode=False)
    by_field = options.time_reader("event_ms", "epochMillis")
    at = options.time_reader("at", "epochMillis")
    unset = framed(writer_id, classes["Order"](id="a").SerializeToString(), b"\x00")
    for read, why in ((by_field, "event_ms is not set"), (at, "at is not set")):
        with pytest.raises(InvalidTime, match=why):
            read(record(unset))
    message = classes["Order"](id="a", ts_ms=T0 * 1000 + 7)
    message.at.seconds, message.at.nanos = T0, 8_000_000
    payload = framed(writer_id, message.SerializeToString(), b"\x00")
    assert (by_field(record(payload)), at(record(payload))) == (T0 * 1000 + 7, T0 * 1000 + 8)
    with pytest.raises(ValueError, match="Option 'eventTime.field' 'ts_ms': shop.Order has no field 'ts_ms'"):
        options.time_reader("ts_ms", "epochMillis")


def test_proto2_required_defaults_and_closed_enums_as_from_protobuf():
    """proto2: a ``required`` field is not nullable (SchemaConverters); an absent field with an
    explicit default reads the default (``hasDefaultValue``); a closed enum keeps a number it
    does not define among the unknown fields, which ``from_protobuf`` fails at the top level
    (a known field's number there) and leaves null below it."""
    double = RegistryDouble()
    proto = proto_file("p2", {"Inner": [("kind", 1, FIELD.TYPE_ENUM, ".shop.Kind")],
                              "Row": [("id", 1, FIELD.TYPE_STRING, None, FIELD.LABEL_REQUIRED),
                                      ("qty", 2, FIELD.TYPE_INT32), ("kind", 3, FIELD.TYPE_ENUM, ".shop.Kind"),
                                      ("inner", 4, FIELD.TYPE_MESSAGE, ".shop.Inner")]},
                       syntax="proto2", enums={"Kind": [("A", 1), ("B", 2)]})
    proto.message_type[1].field[1].default_value = "7"
    file, classes = built(proto)
    schema_id = double.add_protobuf(file)
    options = double.options(PROTOBUF, schema_id, record_name="shop.Row")
    assert [(f.name, f.nullable) for f in options.spark_type().fields] == [
        ("id", False), ("qty", True), ("kind", True), ("inner", True)]
    unknown_kind = b"\x18\x09"  # field 3 (kind), varint 9: a number Kind lacks
    nested_unknown = b"\x22\x02\x08\x09"  # inner { kind: 9 }
    body = classes["Row"](id="r").SerializeToString()
    column = decode(options, [framed(schema_id, body + suffix, b"\x02\x02")
                              for suffix in (b"", nested_unknown, unknown_kind)])
    assert column.values.to_pylist()[:2] == [{"id": "r", "qty": 7, "kind": None, "inner": None},
                                             {"id": "r", "qty": 7, "kind": None, "inner": {"kind": None}}]
    assert [(u.row, u.kind) for u in column.undecodable] == [(2, decoded.INCOMPATIBLE)]
    missing = decode(options, [framed(schema_id, b"\x10\x01", b"\x02\x02")])  # no id: required
    assert [(u.kind, "Row" in u.reason or "id" in u.reason) for u in missing.undecodable] == [
        (decoded.MALFORMED, True)]
