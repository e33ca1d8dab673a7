"""A Protobuf message as Spark's ``from_protobuf`` gives it: its Spark type and its values.

The rules are spark-protobuf's (Spark 4.x, default options), read in its source:

* ``utils/SchemaConverters.scala`` ``structFieldFor`` (the type): 32-bit integers (``int32``,
  ``sint32``, ``sfixed32``, ``uint32``, ``fixed32``: Java's ``int``) ``IntegerType``; 64-bit ones
  ``LongType``; ``float``, ``double``, ``bool``, ``string``, ``bytes`` as named; an enum a
  ``StringType`` (its value's name); a message named ``Duration`` whose two fields are
  ``seconds`` and ``nanos`` a ``DayTimeIntervalType`` (checked first), one named ``Timestamp``
  with those fields a ``TimestampType`` (by simple name: a user's own ``Timestamp`` counts too);
  other messages (``Any`` and the wrappers among them: ``upcast.unsigned.ints``,
  ``unwrap.well.known.types``, ``convert.any.fields.to.json`` are off by default) a struct of
  their fields, a message whose fields are all dropped is dropped itself
  (``retain.empty.message.type`` off), and a recursive one refused
  (``recursive.fields.max.depth`` unset); a map field ``MapType(key, value,
  valueContainsNull=false)``; a repeated field ``ArrayType(element, containsNull=false)``; every
  other field nullable unless proto2 ``required``.
* ``ProtobufDeserializer.scala`` (the values): a field is read when it is repeated, or present
  (``DynamicMessage.hasField``), or proto2 with an explicit default; else it is null
  (``emit.default.values`` off). Java's ``DynamicMessage`` clears a proto3 field without
  presence that is set to its default (``DynamicMessage.Builder.setField``, compared with
  ``equals``: ``-0.0`` and ``NaN`` stay, ``+0.0`` does not), so such a field that is 0, ``""``
  or empty is null. Java's ``int`` and ``long`` are signed: a ``uint32`` of 2^31 or more and a
  ``uint64`` of 2^63 or more come out negative (two's complement), as ``from_protobuf`` gives
  them. An enum number the enum does not define reads as protobuf-java names it,
  ``UNKNOWN_ENUM_VALUE_<Enum>_<number>`` (``Descriptors.EnumValueDescriptor``; proto3's open
  enums; a proto2 closed enum keeps it among the unknown fields, so the field is null). A
  Timestamp or Duration is ``seconds * 1,000,000`` plus ``nanos / 1000`` truncated toward zero
  (the two as Java's ``long`` and ``int``: a message so named whose fields are other types fails
  the record, an unsigned one is signed),
  and a record whose sum is beyond a long is malformed. Spark computes it as
  ``DateTimeUtils.millisToMicros(seconds * 1000) + nanos / 1000``: only the second product is
  ``Math.multiplyExact`` (its overflow fails the record), the first and the sum wrap as Java's
  ``long`` does, so ``from_protobuf`` gives a Timestamp of 2^62 seconds as 1970-01-01 and a
  Duration of 2^63 - 1 seconds as -1 second; kafkasync gives no such value (docs/formats.md's
  table of differences). Map entries and array elements are
  read whole, without the presence rule (``getField`` of the entry's key and value).

The values are built as the Python objects pyarrow takes for the Spark type's Arrow type:
timestamps and durations as integer microseconds. Records are parsed with a copy of the
reader's message whose maps are lists of entries (:func:`as_dynamic_message`), as
``DynamicMessage`` keeps them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from kafkasync_source.formats.decoded import TypeBudget

_INT32_SPAN, _INT64_SPAN = 1 << 32, 1 << 64
_MICROS = 1_000_000
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class ConversionError(ValueError):
    """A value ``from_protobuf`` cannot convert either (a Timestamp whose microseconds overflow a
    long); the message names the field's path."""


def _two_fields(descriptor: Any, first: str, second: str) -> bool:
    fields = descriptor.fields
    return len(fields) == 2 and fields[0].name == first and fields[1].name == second


def time_kind(descriptor: Any) -> Optional[str]:
    """``"duration"`` or ``"timestamp"`` where ``from_protobuf`` reads a message as an interval or a
    timestamp (by its simple name and its two fields, Duration first), else None."""
    if descriptor.name == "Duration" and _two_fields(descriptor, "seconds", "nanos"):
        return "duration"
    if descriptor.name == "Timestamp" and _two_fields(descriptor, "seconds", "nanos"):
        return "timestamp"
    return None


def seconds_and_nanos(message: Any, path: str) -> tuple[int, int]:
    """A Timestamp's or Duration's ``seconds`` and ``nanos`` as Java's ``long`` and ``int`` hold
    them (an unsigned value of 2^63 or 2^31 and more negative). ConversionError where they are
    not one 64-bit and one 32-bit integer: ``from_protobuf`` types any message so named with
    fields so named a timestamp or an interval, then casts their values
    (``asInstanceOf[Long]``, ``asInstanceOf[Int]``), which fails the record."""
    from google.protobuf.descriptor import FieldDescriptor as F

    seconds_field, nanos_field = message.DESCRIPTOR.fields
    if (seconds_field.cpp_type not in (F.CPPTYPE_INT64, F.CPPTYPE_UINT64) or seconds_field.is_repeated
            or nanos_field.cpp_type not in (F.CPPTYPE_INT32, F.CPPTYPE_UINT32) or nanos_field.is_repeated):
        raise ConversionError(f"field {path!r}: a {message.DESCRIPTOR.full_name} whose seconds and nanos are not a "
                              "64-bit and a 32-bit integer, which from_protobuf fails (a ClassCastException)")
    seconds, nanos = int(message.seconds), int(message.nanos)
    return (seconds - _INT64_SPAN if seconds >= 1 << 63 else seconds,
            nanos - _INT32_SPAN if nanos >= 1 << 31 else nanos)


def micros(message: Any, path: str) -> int:
    """A Timestamp's or Duration's microseconds, as ``from_protobuf`` computes them where no
    long overflows on the way (see the module); ConversionError where one would."""
    seconds, nanos = seconds_and_nanos(message, path)
    total = seconds * _MICROS + int(nanos / 1000)  # Java's long division truncates toward zero
    if not _LONG_MIN <= total <= _LONG_MAX:
        raise ConversionError(f"field {path!r}: {seconds} seconds and {nanos} nanoseconds overflow a long of "
                              "microseconds")
    return total


def as_dynamic_message(descriptor: Any) -> Any:
    """The same message in a pool of its own where every map entry is a plain message, to parse
    records with. protobuf-java's ``DynamicMessage``, which ``from_protobuf`` parses with, keeps
    a map field as the list of its entries: in the order they were written, a key as often as
    it was written (``ProtobufDeserializer.newMapWriter`` writes each). upb keeps a hash map
    instead: its own order, a key's last entry only. Parsed with this copy, a map field reads as
    its entries, as ``from_protobuf`` gives them; its names and numbers are the message's own."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.descriptor_pool import DescriptorPool

    pool = DescriptorPool()
    added: set[str] = set()

    def add(file: Any) -> None:
        if file.name in added:
            return
        added.add(file.name)
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        _entries_as_messages(proto.message_type)
        pool.Add(proto)

    add(descriptor.file)
    return pool.FindMessageTypeByName(descriptor.full_name)


def _entries_as_messages(messages: Any) -> None:
    for message in messages:
        message.options.ClearField("map_entry")
        _entries_as_messages(message.nested_type)


def is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _is_message(field: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    return field.type in (F.TYPE_MESSAGE, F.TYPE_GROUP)


Convert = Callable[[Any], Any]
"""A present value (as the protobuf runtime gives it) -> what pyarrow takes for its Spark type."""


class _Field:
    """One field of a struct: its name, how to read it from the message, how to convert it."""

    __slots__ = ("name", "read")

    def __init__(self, name: str, read: Callable[[Any], Any]) -> None:
        self.name = name
        self.read = read


class Columns:
    """A reader message's Spark type and its row builder, both made once from the descriptor."""

    def __init__(self, descriptor: Any, budget: TypeBudget) -> None:
        """ValueError where ``from_protobuf`` refuses the message (recursive) or its type outgrows ``budget``."""
        built = _struct(descriptor, (descriptor.full_name,), descriptor.name, budget)
        assert built is not None
        self.spark_type, self._fields = built

    def row(self, message: Any) -> dict:
        """The message's row: a dict of the struct's fields (ConversionError naming a field)."""
        return {field.name: field.read(message) for field in self._fields}


def _struct(descriptor: Any, busy: tuple[str, ...], path: str,
            budget: TypeBudget) -> Optional[tuple[Any, list[_Field]]]:
    """The struct type and its fields' readers, or None where every field is dropped (a message
    without fields: ``from_protobuf`` drops it, the top level excepted)."""
    import pyspark.sql.types as T

    types, fields = [], []
    for field in descriptor.fields:
        budget.spend()
        built = _field(field, busy, f"{path}.{field.name}", budget)
        if built is None:
            continue
        spark_type, nullable, read = built
        types.append(T.StructField(field.name, spark_type, nullable))
        fields.append(_Field(field.name, read))
    if not types and len(busy) > 1:
        return None
    return T.StructType(types), fields


def _field(field: Any, busy: tuple[str, ...], path: str,
           budget: TypeBudget) -> Optional[tuple[Any, bool, Callable[[Any], Any]]]:
    """A field's Spark type, nullability and reader (None: dropped, as an empty message)."""
    import pyspark.sql.types as T

    name = field.name
    if is_map(field):
        entry = field.message_type
        key = _map_single(entry.fields_by_name["key"], busy, f"{path}.key", budget)
        value = _map_single(entry.fields_by_name["value"], busy, f"{path}.value", budget)
        if key is None or value is None:
            return None
        (key_type, key_of), (value_type, value_of) = key, value

        def read_map(message: Any) -> list[tuple[Any, Any]]:  # a message parsed by as_dynamic_message's copy
            return [(key_of(entry.key), value_of(entry.value)) for entry in getattr(message, name)]
        return T.MapType(key_type, value_type, False), True, read_map
    single = _single(field, busy, path, budget)
    if single is None:
        return None
    spark_type, convert = single
    if field.is_repeated:
        def read_list(message: Any) -> list:
            return [convert(v) for v in getattr(message, name)]
        return T.ArrayType(spark_type, False), True, read_list
    return spark_type, not field.is_required, _present(field, convert)


def _present(field: Any, convert: Convert) -> Callable[[Any], Any]:
    """The reader of a singular field: its converted value where ``from_protobuf`` reads one, else None."""
    name = field.name
    if field.has_presence:
        if field.has_default_value:  # proto2 with an explicit default: the default when absent
            return lambda message: convert(getattr(message, name))
        return lambda message: convert(getattr(message, name)) if message.HasField(name) else None
    default = field.default_value
    if isinstance(default, float):
        def read_float(message: Any) -> Any:
            value = getattr(message, name)
            return None if value == 0.0 and math.copysign(1.0, value) > 0 else convert(value)
        return read_float

    def read(message: Any) -> Any:
        value = getattr(message, name)
        return None if value == default else convert(value)
    return read


def _map_single(field: Any, busy: tuple[str, ...], path: str, budget: TypeBudget) -> Optional[tuple[Any, Convert]]:
    """A map key's or value's type and converter. protobuf-java checks that a map's strings are
    UTF-8 whatever the file's syntax (``FieldDescriptor.needsUtf8Check``), and fails the record
    where one is not; upb checks proto3's only, and gives a proto2 one as its bytes."""
    from google.protobuf.descriptor import FieldDescriptor as F

    single = _single(field, busy, path, budget)
    if single is None or field.type != F.TYPE_STRING:
        return single

    def text(value: Any) -> str:
        if not isinstance(value, str):
            raise ConversionError(f"field {path!r}: a map's string that is not UTF-8, which protobuf-java refuses")
        return value
    return single[0], text


def _single(field: Any, busy: tuple[str, ...], path: str, budget: TypeBudget) -> Optional[tuple[Any, Convert]]:
    """One value's Spark type and converter (of an element, for a repeated field)."""
    import pyspark.sql.types as T
    from google.protobuf.descriptor import FieldDescriptor as F

    if _is_message(field):
        message_type = field.message_type
        kind = time_kind(message_type)
        if kind == "duration":
            return T.DayTimeIntervalType(), lambda message: micros(message, path)
        if kind == "timestamp":
            return T.TimestampType(), lambda message: micros(message, path)
        if message_type.full_name in busy:
            raise ValueError(f"field {path!r} is of the recursive message {message_type.full_name}, which Spark's "
                             "from_protobuf refuses too (recursive.fields.max.depth unset)")
        built = _struct(message_type, (*busy, message_type.full_name), path, budget)
        if built is None:
            return None
        struct, fields = built
        return struct, lambda message: {f.name: f.read(message) for f in fields}
    cpp = field.cpp_type
    if cpp == F.CPPTYPE_ENUM:
        enum = field.enum_type
        names = {value.number: value.name for value in enum.values}
        unknown = f"UNKNOWN_ENUM_VALUE_{enum.name}_"
        return T.StringType(), lambda number: names.get(number) or f"{unknown}{number}"
    if cpp == F.CPPTYPE_UINT32:
        return T.IntegerType(), lambda value: value - _INT32_SPAN if value >= 1 << 31 else value
    if cpp == F.CPPTYPE_UINT64:
        return T.LongType(), lambda value: value - _INT64_SPAN if value >= 1 << 63 else value
    if field.type == F.TYPE_STRING:
        return T.StringType(), _text
    simple = {F.CPPTYPE_INT32: T.IntegerType(), F.CPPTYPE_INT64: T.LongType(), F.CPPTYPE_FLOAT: T.FloatType(),
              F.CPPTYPE_DOUBLE: T.DoubleType(), F.CPPTYPE_BOOL: T.BooleanType(), F.CPPTYPE_STRING: T.BinaryType()}
    return simple[cpp], _same


def _same(value: Any) -> Any:
    return value


def _text(value: Any) -> str:
    """A string field's text. The protobuf runtime gives a proto2 string that is not UTF-8 as its
    bytes; protobuf-java (proto2 does not check) makes it a Java String, which replaces what is
    not UTF-8 with U+FFFD as the JDK does (:func:`java_string`)."""
    return value if isinstance(value, str) else java_string(bytes(value))


_REPLACEMENT = "\ufffd"


def _continues(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def java_string(data: bytes) -> str:
    """``new String(data, UTF_8)`` as the JDK decodes bytes that are not UTF-8 (JDK 17's
    ``java.lang.String.decodeUTF8_UTF16``, ported step for step). It replaces other runs than
    Python's ``errors="replace"``, which follows Unicode's "maximal subpart" advice: the
    three bytes of a surrogate (``ED A0 80``) are one U+FFFD there, three here, and a sequence cut
    short at the end is one U+FFFD whatever follows its lead byte. Compared with JDK 17.0.15 on
    40,000 random short byte strings, where Python's differed on 463."""
    out: list[str] = []
    at, end = 0, len(data)
    while at < end:
        lead = data[at]
        at += 1
        if lead < 0x80:
            out.append(chr(lead))
        elif 0xC2 <= lead <= 0xDF:
            if at == end:
                out.append(_REPLACEMENT)
                break
            if _continues(data[at]):
                out.append(chr((lead & 0x1F) << 6 | data[at] & 0x3F))
                at += 1
            else:
                out.append(_REPLACEMENT)
        elif 0xE0 <= lead <= 0xEF:
            if at + 1 < end:
                second, third = data[at], data[at + 1]
                bad_second = (lead == 0xE0 and second & 0xE0 == 0x80) or not _continues(second)
                if bad_second or not _continues(third):
                    out.append(_REPLACEMENT)
                    at += 0 if bad_second else 1
                else:
                    code = (lead & 0x0F) << 12 | (second & 0x3F) << 6 | third & 0x3F
                    out.append(_REPLACEMENT if 0xD800 <= code <= 0xDFFF else chr(code))
                    at += 2
                continue
            out.append(_REPLACEMENT)
            if at < end and ((lead == 0xE0 and data[at] & 0xE0 == 0x80) or not _continues(data[at])):
                continue
            break
        elif 0xF0 <= lead <= 0xF7:
            bad_second = at < end and ((lead == 0xF0 and not 0x90 <= data[at] <= 0xBF) or lead > 0xF4
                                       or (lead == 0xF4 and data[at] & 0xF0 != 0x80) or not _continues(data[at]))
            if at + 2 < end:
                second, third, fourth = data[at], data[at + 1], data[at + 2]
                code = (lead & 0x07) << 18 | (second & 0x3F) << 12 | (third & 0x3F) << 6 | fourth & 0x3F
                if _continues(second) and _continues(third) and _continues(fourth) and 0x10000 <= code <= 0x10FFFF:
                    out.append(chr(code))
                    at += 3
                else:
                    out.append(_REPLACEMENT)
                    at += 0 if bad_second else 1 if not _continues(third) else 2
                continue
            out.append(_REPLACEMENT)
            if lead > 0xF4 or bad_second:
                continue
            at += 1
            if at < end and not _continues(data[at]):
                continue
            break
        else:
            out.append(_REPLACEMENT)
    return "".join(out)
