"""The Protobuf column against ``from_protobuf``'s rules, generated (issue 61, deliverable 4).

Hypothesis draws a proto3 message: fields of every scalar type, ``optional`` ones, a oneof,
repeated (packed or not), maps, a nested message, an open enum, Timestamp and Duration; and a
reader of the same message that renames every field, drops one and adds one (fields are their
numbers). It draws values, has the protobuf runtime build and serialize the message, frames it
as Confluent's serializer does, and decodes it with the reader pinned. The expected row is
written here from the values drawn, by ``from_protobuf``'s rules (formats/protobuf_columns.py
cites them in Spark's source), independently of the decoder: presence, Java's signed integers,
enum names, ``UNKNOWN_ENUM_VALUE_``, microseconds and the overflow that fails a record. ``make
parity`` runs ``from_protobuf`` itself where spark-protobuf can be had
(integration/test_format_decoders_parity.py)."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_budget import examples
from pyspark.sql import types as T
from registry_double import RegistryDouble, framed, record
from test_protobuf_decode import FIELD, built

from kafkasync_source.formats import decoded
from kafkasync_source.formats.options import PROTOBUF
from kafkasync_source.spark.schema import arrow_schema

SCALARS = {  # type: (FieldDescriptorProto type, values, from_protobuf's conversion)
    "double": (FIELD.TYPE_DOUBLE, st.floats(), float),
    "float": (FIELD.TYPE_FLOAT, st.floats(width=32), float),
    "int32": (FIELD.TYPE_INT32, st.integers(-2**31, 2**31 - 1), int),
    "sint32": (FIELD.TYPE_SINT32, st.integers(-2**31, 2**31 - 1), int),
    "sfixed32": (FIELD.TYPE_SFIXED32, st.integers(-2**31, 2**31 - 1), int),
    "uint32": (FIELD.TYPE_UINT32, st.integers(0, 2**32 - 1), lambda v: v - 2**32 if v >= 2**31 else v),
    "fixed32": (FIELD.TYPE_FIXED32, st.integers(0, 2**32 - 1), lambda v: v - 2**32 if v >= 2**31 else v),
    "int64": (FIELD.TYPE_INT64, st.integers(-2**63, 2**63 - 1), int),
    "sint64": (FIELD.TYPE_SINT64, st.integers(-2**63, 2**63 - 1), int),
    "sfixed64": (FIELD.TYPE_SFIXED64, st.integers(-2**63, 2**63 - 1), int),
    "uint64": (FIELD.TYPE_UINT64, st.integers(0, 2**64 - 1), lambda v: v - 2**64 if v >= 2**63 else v),
    "fixed64": (FIELD.TYPE_FIXED64, st.integers(0, 2**64 - 1), lambda v: v - 2**64 if v >= 2**63 else v),
    "bool": (FIELD.TYPE_BOOL, st.booleans(), bool),
    "string": (FIELD.TYPE_STRING, st.text(max_size=8), str),
    "bytes": (FIELD.TYPE_BYTES, st.binary(max_size=8), bytes),
}
MAP_KEYS = ["int32", "int64", "uint32", "uint64", "sint64", "fixed32", "bool", "string"]
COLORS = {0: "ZERO", 1: "ONE", 1000: "BIG"}
MESSAGES = {"Inner": ".gen.Inner", "timestamp": ".google.protobuf.Timestamp", "duration": ".google.protobuf.Duration"}
LONG = 2**63
DOUBLE = RegistryDouble()
"""One registry for every example (a client is slow to make): each registers its own two ids."""


def color(number: int) -> str:
    return COLORS.get(number, f"UNKNOWN_ENUM_VALUE_Color_{number}")


def micros(seconds: int, nanos: int) -> int:
    """``seconds * 10^6 + nanos / 1000`` (truncated), as ``from_protobuf`` computes it where no
    Java long overflows; OverflowError where one would (kafkasync then names the record
    malformed, formats/protobuf_columns.py)."""
    total = seconds * 1_000_000 + int(nanos / 1000)
    if not -LONG <= total < LONG:
        raise OverflowError
    return total


def is_default(value: Any) -> bool:
    """Java's ``DynamicMessage`` clears a proto3 field without presence equal to its default."""
    if isinstance(value, float):
        return value == 0.0 and math.copysign(1.0, value) > 0
    return value in (0, "", b"", False) and not isinstance(value, dict)


kinds = st.sampled_from([*SCALARS, "enum", "Inner", "timestamp", "duration", "map"])


@st.composite
def schemas(draw):
    """``[(name, number, kind, label, map key kind, map value kind)]``."""
    fields = []
    for number, kind in enumerate(draw(st.lists(kinds, min_size=1, max_size=9)), start=1):
        label = "map" if kind == "map" else draw(st.sampled_from(["implicit", "optional", "repeated", "oneof"]))
        key = draw(st.sampled_from(MAP_KEYS)) if kind == "map" else None
        value = draw(st.sampled_from([*SCALARS, "enum", "Inner"])) if kind == "map" else None
        fields.append((f"f{number}", number, kind, label, key, value, draw(st.booleans())))
    return fields


def value_of(kind: str) -> st.SearchStrategy:
    if kind in SCALARS:
        return SCALARS[kind][1]
    if kind == "enum":
        return st.sampled_from(list(COLORS)) | st.integers(-3, 2000)
    if kind == "Inner":
        return st.fixed_dictionaries({"a": st.integers(-2**31, 2**31 - 1), "b": st.text(max_size=4),
                                      "c": st.lists(st.integers(0, 2**64 - 1), max_size=3)})
    return st.tuples(st.integers(-LONG, LONG - 1) | st.integers(-10**11, 10**11), st.integers(-2**31, 2**31 - 1))


def file_proto(fields, *, rename: str = "", drop: int = 0, add: bool = False) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"gen{rename}.proto", package="gen", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/duration.proto"])
    enum = proto.enum_type.add(name="Color")
    for number, name in COLORS.items():
        enum.value.add(name=name, number=number)
    inner = proto.message_type.add(name="Inner")
    inner.field.add(name="a", number=1, type=FIELD.TYPE_INT32, label=FIELD.LABEL_OPTIONAL)
    inner.field.add(name="b", number=2, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    inner.field.add(name="c", number=3, type=FIELD.TYPE_UINT64, label=FIELD.LABEL_REPEATED)
    row = proto.message_type.add(name="Row")
    if any(label == "oneof" and number != drop for _, number, _, label, *_ in fields):
        row.oneof_decl.add(name="choice")  # first: proto3 optional's synthetic oneofs come after the real ones
    for name, number, kind, label, key, value, packed in fields:
        if number == drop:
            continue
        repeated = label in ("repeated", "map")
        added = row.field.add(name=name + rename, number=number,
                              label=FIELD.LABEL_REPEATED if repeated else FIELD.LABEL_OPTIONAL)
        if kind == "map":
            entry = row.nested_type.add(name=f"F{number}Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=SCALARS[key][0], label=FIELD.LABEL_OPTIONAL)
            typed(entry.field.add(name="value", number=2, label=FIELD.LABEL_OPTIONAL), value)
            added.type, added.type_name = FIELD.TYPE_MESSAGE, f".gen.Row.F{number}Entry"
        else:
            typed(added, kind)
        if label == "repeated" and kind in SCALARS and kind not in ("string", "bytes"):
            added.options.packed = packed
        if label == "oneof":
            added.oneof_index = 0
        if label == "optional":
            added.proto3_optional = True
            added.oneof_index = len(row.oneof_decl)
            row.oneof_decl.add(name=f"_{added.name}")
    if add:
        row.field.add(name="added", number=99, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    return proto


def typed(field, kind: str) -> None:
    if kind in SCALARS:
        field.type = SCALARS[kind][0]
    elif kind == "enum":
        field.type, field.type_name = FIELD.TYPE_ENUM, ".gen.Color"
    else:
        field.type, field.type_name = FIELD.TYPE_MESSAGE, MESSAGES[kind]


def put(message, name: str, kind: str, value: Any) -> None:
    """Sets a singular value through the runtime."""
    if kind == "Inner":
        target = getattr(message, name)
        target.SetInParent()
        target.a, target.b = value["a"], value["b"]
        target.c.extend(value["c"])
    elif kind in ("timestamp", "duration"):
        target = getattr(message, name)
        target.seconds, target.nanos = value
    else:
        setattr(message, name, value)


def expected_of(kind: str, value: Any) -> Any:
    """``from_protobuf``'s value (timestamps and durations as microseconds)."""
    if kind in SCALARS:
        return SCALARS[kind][2](value)
    if kind == "enum":
        return color(value)
    if kind == "Inner":
        return {"a": value["a"] or None, "b": value["b"] or None,
                "c": [v - 2**64 if v >= LONG else v for v in value["c"]]}
    return micros(*value)


@st.composite
def cases(draw):
    fields = draw(schemas())
    drop = draw(st.sampled_from([0] + [number for _, number, *_ in fields]))
    values = {}
    oneof = [f for f in fields if f[3] == "oneof"]
    chosen = draw(st.sampled_from([None, *oneof])) if oneof else None
    for field in fields:
        name, number, kind, label, key, value_kind, _ = field
        if label == "map":
            values[name] = draw(st.dictionaries(value_of(key), value_of(value_kind), max_size=3))
        elif label == "repeated":
            values[name] = draw(st.lists(value_of(kind), max_size=3))
        elif label == "oneof":
            if field is chosen:
                values[name] = draw(value_of(kind))
        elif draw(st.booleans()):
            values[name] = draw(value_of(kind))
    return fields, drop, values


def build_and_expect(fields, drop, values, message):
    """Sets ``values`` on ``message``; the reader's expected row (a field the reader dropped is
    skipped), or None where from_protobuf fails the record (a time that overflows)."""
    row: dict[str, Any] = {}
    for name, number, kind, label, key, value_kind, _ in fields:
        given_ = values.get(name)
        if label == "map":
            for k, v in given_.items():
                if value_kind == "Inner":
                    entry = getattr(message, name)[k]
                    entry.a, entry.b = v["a"], v["b"]
                    entry.c.extend(v["c"])
                else:
                    getattr(message, name)[k] = v
        elif label == "repeated":
            for item in given_:
                if kind == "Inner":
                    added = getattr(message, name).add()
                    added.a, added.b = item["a"], item["b"]
                    added.c.extend(item["c"])
                elif kind in ("timestamp", "duration"):
                    added = getattr(message, name).add()
                    added.seconds, added.nanos = item
                else:
                    getattr(message, name).append(item)
        elif given_ is not None:
            put(message, name, kind, given_)
        if number == drop:
            continue
        try:
            if label == "map":
                row[name + "_r"] = sorted(((expected_of(key, k), expected_of(value_kind, v))
                                           for k, v in given_.items()), key=repr)
            elif label == "repeated":
                row[name + "_r"] = [expected_of(kind, item) for item in given_]
            elif given_ is None:
                row[name + "_r"] = None
            else:
                implicit = label == "implicit" and kind not in ("Inner", "timestamp", "duration")
                row[name + "_r"] = None if implicit and is_default(given_) else expected_of(kind, given_)
        except OverflowError:
            return None
    row["added"] = None
    return row


def plain(arrow_type: pa.DataType) -> pa.DataType:
    """Timestamps and durations as int64, the rest as it is, for comparing values."""
    if pa.types.is_timestamp(arrow_type) or pa.types.is_duration(arrow_type):
        return pa.int64()
    if pa.types.is_struct(arrow_type):
        return pa.struct([arrow_type.field(i).with_type(plain(arrow_type.field(i).type))
                          for i in range(arrow_type.num_fields)])
    if pa.types.is_map(arrow_type):
        return pa.map_(arrow_type.key_field.with_type(plain(arrow_type.key_type)),
                       arrow_type.item_field.with_type(plain(arrow_type.item_type)))
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(plain(arrow_type.value_type)))
    return arrow_type


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def sorted_maps(value: Any, spark_type: Any) -> Any:
    if value is None:
        return None
    if isinstance(spark_type, T.StructType):
        return {f.name: sorted_maps(value[f.name], f.dataType) for f in spark_type.fields}
    if isinstance(spark_type, T.ArrayType):
        return [sorted_maps(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, T.MapType):
        return sorted(((k, sorted_maps(v, spark_type.valueType)) for k, v in value), key=repr)
    return value


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_generated_messages_decode_as_from_protobufs_rules(case):
    fields, drop, values = case
    double = DOUBLE
    writer_file, writer_classes = built(file_proto(fields))
    reader_file, _ = built(file_proto(fields, rename="_r", drop=drop, add=True))
    writer_id, reader_id = double.add_protobuf(writer_file), double.add_protobuf(reader_file)
    options = double.options(PROTOBUF, reader_id, record_name="gen.Row")
    message = writer_classes["Row"]()
    expected = build_and_expect(fields, drop, values, message)
    spark_type = options.spark_type()
    arrow_type = arrow_schema(T.StructType([T.StructField("v", spark_type)])).field("v").type
    column = options.column_decoder(arrow_type)([record(framed(writer_id, message.SerializeToString(), b"\x02\x02"))])
    if expected is None:
        assert [(u.kind, u.schema_id) for u in column.undecodable] == [(decoded.MALFORMED, writer_id)]
        assert column.values[0].as_py() is None
        return
    assert column.undecodable == ()
    got = column.values.cast(plain(arrow_type)).to_pylist()[0]
    assert same(sorted_maps(got, spark_type), expected), (got, expected)
