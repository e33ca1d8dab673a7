"""A JSON document as Spark's ``from_json`` gives it for a Spark type, in its default mode, PERMISSIVE.

The rules are Spark's ``JacksonParser`` (``sql/catalyst/.../json/JacksonParser.scala``,
``makeConverter``, ``convertObject``, ``convertArray``, ``convertMap``) with its defaults
(``spark.sql.json.enablePartialResults`` on, ``allowNonNumericNumbers`` on), for the types
formats/json_schema.py derives:

* JSON ``null`` is null for every type.
* ``LongType``: an integer literal (no ``.``, ``e``, ``E``) within a long; ``DoubleType``: any
  number (an integer literal as its integer: ``-0`` is ``0.0``), or the strings ``NaN``,
  ``Infinity``, ``+Infinity``, ``+INF``, ``-Infinity``, ``-INF``; ``BooleanType``:
  ``true``/``false``. Anything else does not fit.
* ``StringType``: a string's text; any other value as Jackson writes it back
  (``JsonGenerator.copyCurrentStructure``, measured with Spark 4.2.0's ``from_json``): no
  whitespace, integers as written, other numbers as Java's ``Double.toString`` prints them
  (``100.0``, ``1.0E-4``), infinities quoted (``"Infinity"``), strings escaped as Jackson's
  ``UTF8JsonGenerator`` does (a quote, a backslash, a newline and the like with a backslash,
  other control characters and characters beyond U+FFFF as ``u`` escapes with capital hex
  digits, ``/`` and other text as it is).
* A struct: an object; fields it does not name are skipped, a field that does not fit is null
  and the others keep their values (a partial result, which PERMISSIVE keeps).
* An array: an array whose every element fits (an element that is a partial struct is kept);
  one element that does not fit fails the whole array. A map: an object whose every value fits,
  the same way.
* A document that is not an object for a struct (not JSON, an array, a number) gives no value:
  PERMISSIVE makes it a row of nulls (``FailureSafeParser``), which kafkasync names undecodable
  (formats/decoded.py) instead. So does one beyond the limits Jackson parses within (a number of
  more than 1,000 digits, a key of more than 50,000 characters, nesting beyond 1,000), and a
  string field longer than 20,000,000 characters is null (formats/json_limits.py).

JSON is parsed by msgspec, one level at a time: each value's text is kept raw
(``msgspec.Raw``) until its type is known, so a value that does not fit costs only its own field.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any, Callable

import msgspec

from kafkasync_source.formats import json_limits

_NON_NUMERIC = {b'"NaN"': math.nan, b'"Infinity"': math.inf, b'"+Infinity"': math.inf, b'"+INF"': math.inf,
                b'"-Infinity"': -math.inf, b'"-INF"': -math.inf}
"""The strings ``from_json`` reads as doubles (``allowNonNumericNumbers``, on by default)."""
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ELEMENTS = msgspec.json.Decoder(list[msgspec.Raw])
_TEXT = msgspec.json.Decoder(str)


class NotAValue(ValueError):
    """The document has no value for the type (``from_json`` gives a row of nulls)."""


class _DoesNotFit(Exception):
    """A value ``from_json`` cannot convert to its type: null in its struct."""


Convert = Callable[[Any], Any]
"""One value's raw JSON text (validated) -> what pyarrow takes for its Spark type."""


def document_converter(spark_type: Any) -> Callable[[Any], Any]:
    """``JSON bytes -> value`` for ``spark_type``; NotAValue where ``from_json`` gives none."""
    convert = _converter(spark_type)

    def document(body: Any) -> Any:
        text = bytes(body)
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise NotAValue(f"the value is not JSON ({str(err)[:200]})") from None
        beyond = json_limits.exceeded(text)
        if beyond is not None:
            raise NotAValue(f"the value is beyond what from_json parses: {beyond}")
        try:
            value = convert(msgspec.json.decode(text, type=msgspec.Raw))
        except msgspec.DecodeError as err:
            raise NotAValue(f"the value is not JSON ({str(err)[:200]})") from None
        except _DoesNotFit as err:
            raise NotAValue(f"the value is not a JSON {_kind(spark_type)} ({err})") from None
        except RecursionError:  # msgspec and json recurse once a level: see formats/json_limits.py
            raise NotAValue(f"the value is beyond what from_json parses: {json_limits.too_deep(text)}") from None
        if value is None:
            raise NotAValue("the value is JSON null")
        return value
    return document


def _kind(spark_type: Any) -> str:
    import pyspark.sql.types as T

    return {T.StructType: "object", T.MapType: "object", T.ArrayType: "array"}.get(type(spark_type), "value")


def _converter(spark_type: Any) -> Convert:
    import pyspark.sql.types as T

    if isinstance(spark_type, T.StructType):
        fields = {field.name: _converter(field.dataType) for field in spark_type.fields}
        names = list(fields)
        return _nullable(lambda raw: _struct(raw, fields, names))
    if isinstance(spark_type, T.ArrayType):
        element = _converter(spark_type.elementType)
        return _nullable(lambda raw: [element(item) for item in _decoded(_ELEMENTS, raw, "an array")])
    if isinstance(spark_type, T.MapType):
        value = _converter(spark_type.valueType)
        return _nullable(lambda raw: [(key, value(item)) for key, item in _decoded(_MEMBERS, raw, "an object")
                                      .items()])
    readers = {T.LongType: _long, T.DoubleType: _double, T.BooleanType: _boolean, T.StringType: _string}
    return _nullable(readers[type(spark_type)])


def _nullable(convert: Convert) -> Convert:
    def value(raw: Any) -> Any:
        return None if memoryview(raw)[:1] == b"n" else convert(raw)
    return value


def _decoded(decoder: Any, raw: Any, what: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError:
        raise _DoesNotFit(f"{bytes(raw)[:40]!r} is not {what}") from None


def _struct(raw: Any, fields: dict[str, Convert], names: list[str]) -> dict:
    row = dict.fromkeys(names)
    for key, item in _decoded(_MEMBERS, raw, "an object").items():
        convert = fields.get(key)
        if convert is not None:
            try:
                row[key] = convert(item)
            except _DoesNotFit:
                row[key] = None  # a partial result: the others keep their values
    return row


def _number_text(raw: Any) -> bytes:
    text = bytes(raw)
    if text[:1] not in b"-0123456789" or not text:
        raise _DoesNotFit(f"{text[:40]!r} is not a number")
    return text


def _long(raw: Any) -> int:
    text = _number_text(raw)
    if any(c in text for c in b".eE"):
        raise _DoesNotFit(f"{text[:40]!r} is not an integer")
    number = int(text)
    if not _LONG_MIN <= number <= _LONG_MAX:
        raise _DoesNotFit(f"{text[:40]!r} is beyond a long")
    return number


def _double(raw: Any) -> float:
    special = _NON_NUMERIC.get(bytes(raw))
    if special is not None:
        return special
    text = _number_text(raw)
    if any(c in text for c in b".eE"):
        return float(text)
    # Jackson reads an integer token as an integer, then converts it (getDoubleValue): -0 is 0.0.
    return float(int(text))


def _boolean(raw: Any) -> bool:
    text = bytes(raw)
    if text == b"true":
        return True
    if text == b"false":
        return False
    raise _DoesNotFit(f"{text[:40]!r} is not a boolean")


def _string(raw: Any) -> str:
    text = bytes(raw)
    if json_limits.string_too_long(text):
        raise _DoesNotFit(f"a string of more than {json_limits.MAX_STRING_LENGTH:,} characters, which from_json "
                          "does not read")
    if text[:1] != b'"':
        return _jackson(json.loads(text, object_pairs_hook=_Members))
    return _TEXT.decode(text)  # never a lone surrogate: msgspec refuses the escape, the document with it


class _Members(list):
    """A JSON object's members in order, a key twice as often as it is written (Jackson's
    ``copyCurrentStructure`` copies each one; a dict would keep the last)."""


def _jackson(value: Any) -> str:
    """A JSON value as Jackson's generator writes it back (see the module)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, str):
        return _jackson_text(value)
    if isinstance(value, _Members):
        return "{" + ",".join(f"{_jackson_text(key)}:{_jackson(item)}" for key, item in value) + "}"
    return "[" + ",".join(map(_jackson, value)) + "]"


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _jackson_text(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20:
            out.append(f"\\u{code:04X}")
        elif code > 0xFFFF:  # written as its UTF-16 surrogates, escaped
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _java_double(number: float) -> str:
    """Java's ``Double.toString`` format from the shortest digits that read back as ``number``
    (Java 19 and later choose those digits too; Java 17 prints more for some doubles, which
    docs/formats.md lists); a value that is not finite quoted, as Jackson writes it
    (``QUOTE_NON_NUMERIC_NUMBERS``)."""
    if math.isnan(number):
        return '"NaN"'
    if math.isinf(number):
        return '"Infinity"' if number > 0 else '"-Infinity"'
    if number == 0:
        return "-0.0" if math.copysign(1.0, number) < 0 else "0.0"
    sign = "-" if number < 0 else ""
    shortest = Decimal(repr(abs(number)))
    if 1e-3 <= abs(number) < 1e7:
        plain = format(shortest, "f")
        return sign + (plain if "." in plain else plain + ".0")
    digits = "".join(map(str, shortest.normalize().as_tuple().digits))
    exponent = shortest.adjusted()
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"
