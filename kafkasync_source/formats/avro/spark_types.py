"""Spark's types for an Avro reader schema, as spark-avro's ``SchemaConverters.toSqlType`` gives
them (apache/spark, Spark 4.x; ``from_avro``'s result type), and the shape of a union's value.

* records are structs, arrays arrays (``containsNull`` when the items' type is nullable), maps
  maps of strings, enums strings, fixed binary;
* a union holding null is its other branches' type, nullable; one branch left: that branch's
  type; ``[int, long]`` long and ``[float, double]`` double (in either order); any other set
  of branches a struct of ``member0``, ``member1``... in the order of the non-null branches,
  each member nullable (one is set per value);
* ``date`` a date, ``timestamp-millis``/``-micros`` timestamps, ``local-timestamp-millis``/
  ``-micros`` timestamps without time zone, ``decimal`` a decimal of its precision and scale;
* a recursive record is refused, as Spark refuses it (``IncompatibleSchemaException``: "Found
  recursive reference in Avro schema").

Where kafkasync differs on purpose (docs/formats.md lists it): ``time-micros`` is the long it
holds (Spark 4.2+ gives ``TIME(6)``, which PySpark 4.0 has not), ``timestamp-nanos`` and
``local-timestamp-nanos`` the long (Spark 4.3 gives nanosecond timestamp types PySpark cannot
express). ``uuid`` is a string (the text as written) in both.
"""

from __future__ import annotations

from typing import Any, Optional

from kafkasync_source.formats.avro.schema import Node, SchemaError

NULLABLE, MERGED_LONG, MERGED_DOUBLE, MEMBERS = "nullable", "long", "double", "members"
"""How a union's value is shown: its one non-null branch's value (or null), a long, a double,
or a struct of ``member<i>`` (see the module doc)."""
MAX_DECIMAL_PRECISION = 38
"""Spark's ``DecimalType.MAX_PRECISION``."""
TIMESTAMP_MICROS_PER_UNIT = {"timestamp-millis": 1000, "timestamp-micros": 1,
                             "local-timestamp-millis": 1000, "local-timestamp-micros": 1}
"""Logical types Spark reads as timestamps, and microseconds per unit."""


def union_shape(node: Node) -> str:
    """How values of this union are shown (see :data:`MEMBERS`)."""
    kinds = sorted(b.kind for b in node.branches if b.kind != "null")
    if len(kinds) == 1:
        return NULLABLE
    if kinds == ["int", "long"]:
        return MERGED_LONG
    if kinds == ["double", "float"]:
        return MERGED_DOUBLE
    return MEMBERS


def member_names(node: Node) -> list[Optional[str]]:
    """Per branch of a :data:`MEMBERS` union, its struct field (None for the null branch)."""
    names: list[Optional[str]] = []
    for branch in node.branches:
        names.append(None if branch.kind == "null" else f"member{sum(n is not None for n in names)}")
    return names


def spark_type(root: Node) -> Any:
    """``from_avro``'s type for a reader schema (SchemaError for a recursive one, naming it)."""
    return _convert(root, (), "the value")[0]


def _convert(node: Node, enclosing: tuple[str, ...], where: str) -> tuple[Any, bool]:
    """(Spark type, nullable)."""
    import pyspark.sql.types as T

    kind, logical = node.kind, node.logical
    if kind == "union":
        branches = [b for b in node.branches if b.kind != "null"]
        nullable = len(branches) < len(node.branches)
        shape = union_shape(node)
        if shape == NULLABLE:
            data_type, inner_nullable = _convert(branches[0], enclosing, where)
            return data_type, nullable or inner_nullable
        if shape == MERGED_LONG:
            return T.LongType(), nullable
        if shape == MERGED_DOUBLE:
            return T.DoubleType(), nullable
        return T.StructType([T.StructField(f"member{i}", _convert(b, enclosing, where)[0], True)
                             for i, b in enumerate(branches)]), nullable
    if kind == "record":
        assert node.name is not None
        if node.name in enclosing:
            raise SchemaError(f"{where} is the recursive record {node.name}: Spark refuses recursive Avro types "
                              "(from_avro: \"Found recursive reference in Avro schema\")")
        inside = (*enclosing, node.name)
        fields = []
        for f in node.fields:
            data_type, nullable = _convert(f.type, inside, f.name if where == "the value" else f"{where}.{f.name}")
            fields.append(T.StructField(f.name, data_type, nullable))
        return T.StructType(fields), False
    if kind in ("array", "map"):
        assert node.element is not None
        inner, nullable = _convert(node.element, enclosing, f"{where}{'[]' if kind == 'array' else '{}'}")
        if kind == "array":
            return T.ArrayType(inner, nullable), False
        return T.MapType(T.StringType(), inner, nullable), False
    if logical == "decimal":
        if node.precision > MAX_DECIMAL_PRECISION:
            raise SchemaError(f"{where} is a decimal of precision {node.precision}; Spark's decimals hold "
                              f"{MAX_DECIMAL_PRECISION} digits at most")
        return T.DecimalType(node.precision, node.scale), False
    if logical == "date":
        return T.DateType(), False
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType(), False
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType(), False
    simple = {"null": T.NullType(), "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(),
              "float": T.FloatType(), "double": T.DoubleType(), "bytes": T.BinaryType(), "fixed": T.BinaryType(),
              "string": T.StringType(), "enum": T.StringType()}
    return simple[kind], kind == "null"
