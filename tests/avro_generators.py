"""Hypothesis strategies for Avro: writer schemas, compatible reader schemas evolved from them,
and values the writers write (shared by tests/test_avro_differential.py and test_avro_fuzz.py).

Schemas are raw JSON with each named type defined once, inline, without namespace (names are
drawn from a counter). A union holds at most one branch of each kind (Avro allows several
records of different names; one each keeps fastavro's branch choice for records, enums, fixed,
arrays and maps equal to Java's, so that the two differ only where the test says they do: the
primitive branches). Values are written in fastavro's tuple notation, ``(branch, value)``,
naming the union branch each value takes.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from hypothesis import strategies as st

PRIMITIVE = ("boolean", "int", "long", "float", "double", "string", "bytes")
LOGICAL = (("long", "timestamp-millis"), ("long", "timestamp-micros"), ("long", "timestamp-nanos"),
           ("long", "local-timestamp-millis"), ("long", "local-timestamp-micros"),
           ("long", "local-timestamp-nanos"), ("long", "time-micros"), ("int", "date"), ("int", "time-millis"),
           ("string", "uuid"))
PROMOTIONS = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
              "string": ("bytes",), "bytes": ("string",)}
UNION_KINDS = ("null", *PRIMITIVE, "record", "enum", "fixed", "array", "map")
_COUNTER = itertools.count()


def kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    return schema if isinstance(schema, str) else schema["type"]


def logical(schema: Any) -> Any:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def strip(schema: Any) -> Any:
    """The schema without logical types: the same bytes, read as the plain types."""
    if isinstance(schema, list):
        return [strip(b) for b in schema]
    if isinstance(schema, str):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("logicalType", "precision", "scale")}
    if out["type"] in PRIMITIVE and len(out) == 1:
        return out["type"]
    if "fields" in out:
        out["fields"] = [{**f, "type": strip(f["type"])} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = strip(out[key])
    return out


def _name(prefix: str) -> str:
    return f"{prefix}{next(_COUNTER)}"


def _max_precision(size: int) -> int:
    return int(math.floor(math.log10(2 ** (8 * size - 1) - 1)))


@st.composite
def leaf_types(draw: Any) -> Any:
    choice = draw(st.sampled_from(("primitive", "logical", "decimal", "fixed", "enum")))
    if choice == "primitive":
        return draw(st.sampled_from(PRIMITIVE))
    if choice == "logical":
        base, name = draw(st.sampled_from(LOGICAL))
        return {"type": base, "logicalType": name}
    if choice == "decimal":
        if draw(st.booleans()):
            size = draw(st.integers(1, 16))
            precision = draw(st.integers(1, min(38, _max_precision(size))))
            base: dict = {"type": "fixed", "name": _name("D"), "size": size}
        else:
            precision = draw(st.integers(1, 38))
            base = {"type": "bytes"}
        return {**base, "logicalType": "decimal", "precision": precision, "scale": draw(st.integers(0, precision))}
    if choice == "fixed":
        return {"type": "fixed", "name": _name("F"), "size": draw(st.integers(0, 6))}
    symbols = draw(st.lists(st.sampled_from(["A", "B", "C", "D", "_e", "F1"]), min_size=1, max_size=4, unique=True))
    enum = {"type": "enum", "name": _name("E"), "symbols": symbols}
    if draw(st.booleans()):
        enum["default"] = draw(st.sampled_from(symbols))
    return enum


@st.composite
def types(draw: Any, depth: int = 0) -> Any:
    if depth >= 3 or draw(st.integers(0, 9)) < 5:
        return draw(leaf_types())
    shape = draw(st.sampled_from(("record", "array", "map", "union")))
    if shape == "record":
        return draw(records(depth + 1))
    if shape == "array":
        return {"type": "array", "items": draw(types(depth + 1))}
    if shape == "map":
        return {"type": "map", "values": draw(types(depth + 1))}
    return draw(unions(depth + 1))


@st.composite
def records(draw: Any, depth: int = 0) -> Any:
    count = draw(st.integers(1 if depth else 2, 4))
    return {"type": "record", "name": _name("R"), "fields": [{"name": f"f{i}", "type": draw(types(depth + 1))}
                                                              for i in range(count)]}


@st.composite
def unions(draw: Any, depth: int) -> list:
    kinds = draw(st.lists(st.sampled_from(UNION_KINDS), min_size=2, max_size=4, unique=True))
    branches = []
    for branch_kind in kinds:
        if branch_kind in ("null", *PRIMITIVE):
            branches.append(branch_kind)
        elif branch_kind == "record":
            branches.append(draw(records(depth + 1)))
        elif branch_kind == "enum":
            branches.append({"type": "enum", "name": _name("E"), "symbols": ["X", "Y"]})
        elif branch_kind == "fixed":
            branches.append({"type": "fixed", "name": _name("F"), "size": draw(st.integers(0, 4))})
        else:
            inner = draw(types(depth + 1))
            while kind(inner) == "union":
                inner = draw(leaf_types())
            branches.append({"type": branch_kind, ("items" if branch_kind == "array" else "values"): inner})
    return branches


def _two_complement(unscaled: int, size: int) -> bytes:
    return unscaled.to_bytes(size, "big", signed=True)


def _minimal(unscaled: int) -> bytes:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def values(schema: Any, *, union_names: bool = True) -> st.SearchStrategy:
    """Values a writer of ``schema`` writes, as fastavro takes them for the stripped schema."""
    k, lt = kind(schema), logical(schema)
    if k == "union":
        options = []
        for branch in schema:
            if kind(branch) == "null":
                options.append(st.none())
            else:
                label = branch["name"] if kind(branch) in ("record", "enum", "fixed") else kind(branch)
                options.append(values(branch).map(lambda v, label=label: (label, v)))
        return st.one_of(options)
    if lt == "decimal":
        bound = 10 ** schema["precision"] - 1
        size = schema.get("size")
        return st.integers(-bound, bound).map(
            lambda u: _two_complement(u, size) if size is not None else _minimal(u))
    if lt == "uuid":
        return st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper()) | st.text(max_size=5)
    simple = {
        "null": st.none(), "boolean": st.booleans(),
        "int": st.sampled_from([-(2**31), 2**31 - 1, 0, -1]) | st.integers(-(2**31), 2**31 - 1),
        "long": st.sampled_from([-(2**63), 2**63 - 1, 0, -1, 2**40]) | st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32) | st.sampled_from([math.nan, math.inf, -math.inf, -0.0]),
        "double": st.floats() | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324]),
        "string": st.text(max_size=12) | st.sampled_from(["", "\U0001F600\U00010000", "a\x00b"]),
        "bytes": st.binary(max_size=12),
    }
    if k in simple:
        return simple[k]
    if k == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if k == "enum":
        return st.sampled_from(schema["symbols"])
    if k == "array":
        return st.lists(values(schema["items"]), max_size=3)
    if k == "map":
        return st.dictionaries(st.text(max_size=4), values(schema["values"]), max_size=3)
    assert k == "record"
    return st.fixed_dictionaries({f["name"]: values(f["type"]) for f in schema["fields"]})


# -- compatible evolutions --------------------------------------------------------------------

@st.composite
def evolved(draw: Any, writer: Any, in_union: bool = False, ordered: bool = False) -> Any:
    """A reader schema the writer's values resolve to (Avro's rules), drawn from the evolutions
    the registry's BACKWARD check accepts: fields added with defaults or removed, renames through
    aliases, promotions, logical types added or removed, enum symbols added (with a default) or
    removed (read as the reader's default), unions reordered, widened or made of a plain type."""
    k, lt = kind(writer), logical(writer)
    if isinstance(writer, str) and k not in PRIMITIVE and k != "null":
        return writer  # a reference to a named type by its (full) name: the reader's definition of it
    if k == "union":
        return draw(_evolved_union(writer))
    if not in_union and k != "record" and draw(st.integers(0, 5)) == 0:
        inner = draw(evolved(writer, in_union=True))
        extra = [b for b in ("null", *PROMOTIONS.get(kind(inner), ())) if b != kind(inner)]
        branches = [inner] + draw(st.lists(st.sampled_from(extra), max_size=2, unique=True)) if extra else [inner]
        return draw(st.permutations(branches)) if len(branches) > 1 else inner
    if lt == "decimal" or k in ("fixed", "boolean"):
        return writer if lt != "decimal" or draw(st.booleans()) else strip(writer)
    if k in ("int", "long"):
        targets = [t for t in (k, *PROMOTIONS[k])]
        target = draw(st.sampled_from(targets))
        if target in ("int", "long") and draw(st.booleans()):
            candidates = [name for base, name in LOGICAL if base == target]
            return {"type": target, "logicalType": draw(st.sampled_from(candidates))}
        return target
    if k in ("float", "double"):
        return draw(st.sampled_from((k, *PROMOTIONS.get(k, ())))) if k == "float" else "double"
    if k == "string":
        return draw(st.sampled_from(("string", "bytes", {"type": "string", "logicalType": "uuid"})))
    if k == "bytes":
        return "bytes"
    if k == "enum":
        extra = draw(st.lists(st.sampled_from([s for s in ("N1", "N2", "N3") if s not in writer["symbols"]]),
                              max_size=2, unique=True))
        symbols = draw(st.permutations(writer["symbols"])) + extra
        if draw(st.integers(0, 3)) == 0 and len(symbols) > 1:  # a symbol removed: the reader's default reads it
            symbols = symbols[1:]
            reader = {"type": "enum", "name": writer["name"], "symbols": symbols,
                      "default": draw(st.sampled_from(symbols))}
            return {**_namespace_of(writer), **reader}
        reader = {"type": "enum", "name": writer["name"], "symbols": symbols}
        if draw(st.booleans()):
            reader["default"] = draw(st.sampled_from(symbols))
        return {**_namespace_of(writer), **reader}
    if k in ("array", "map"):
        key = "items" if k == "array" else "values"
        return {"type": k, key: draw(evolved(writer[key]))}
    assert k == "record"
    fields = []
    for f in writer["fields"]:
        fate = draw(st.sampled_from(("keep", "keep", "keep", "rename", "drop")))
        if fate == "drop":
            continue
        field = {"name": f["name"], "type": draw(evolved(f["type"]))}
        if "default" in f:  # kept, and the type with it where it no longer fits: a writer of any
            if not _default_still_fits(f["type"], field["type"], f["default"]):  # earlier version resolves
                field["type"] = f["type"]
            field["default"] = f["default"]
        if fate == "rename":  # the old names stay aliases: a writer of any earlier version still matches
            field = {**field, "name": f"{f['name'].split('_')[0]}_r{next(_COUNTER)}",
                     "aliases": [f["name"], *f.get("aliases", [])]}
        elif "aliases" in f:
            field["aliases"] = f["aliases"]
        fields.append(field)
    for _ in range(draw(st.integers(0, 2))):
        added_type = draw(types(2))
        fields.append({"name": _name("added"), "type": added_type, "default": draw(defaults(added_type))})
    if not ordered:  # ordered: a later field may refer to a type an earlier one defines
        fields = draw(st.permutations(fields))
    if not fields:
        fields = [{"name": _name("added"), "type": "int", "default": 3}]
    return {**_namespace_of(writer), "type": "record", "name": writer["name"], "fields": fields,
            **({"aliases": writer["aliases"]} if "aliases" in writer else {})}


def _default_still_fits(old: Any, new: Any, default: Any) -> bool:
    """A field's default is still one of its evolved type: the type unchanged, or a number whose
    type was promoted or had a logical type added or removed (a millisecond timestamp's default
    in microseconds within a long)."""
    if new == old:
        return True
    old_kind, new_kind = kind(old), kind(new)
    if old_kind not in ("int", "long", "float") or new_kind not in (old_kind, *PROMOTIONS[old_kind]):
        return False
    return logical(new) not in ("timestamp-millis", "local-timestamp-millis") or abs(default) < 2**50


def _namespace_of(named: dict) -> dict:
    """A named type's ``namespace`` key, kept by its evolution (references name it by full name)."""
    return {"namespace": named["namespace"]} if "namespace" in named else {}


@st.composite
def _evolved_union(draw: Any, writer: list) -> list:
    branches = []
    for branch in writer:
        k = kind(branch)
        if k in ("record", "array", "map", "enum"):
            branches.append(draw(evolved(branch, in_union=True)))
        elif k in PROMOTIONS and draw(st.integers(0, 3)) == 0:
            target = draw(st.sampled_from(PROMOTIONS[k]))
            if target not in [kind(b) for b in [*writer, *branches]]:
                branches.append(target)  # a branch promoted: the writer's value reaches it by promotion
                continue
            branches.append(branch)
        else:
            branches.append(branch)
    present = {kind(b) for b in branches}
    added = [k for k in ("null", *PRIMITIVE) if k not in present]
    branches += draw(st.lists(st.sampled_from(added), max_size=2, unique=True)) if added else []
    return draw(st.permutations(branches))


@st.composite
def defaults(draw: Any, schema: Any) -> Any:
    """A JSON default for ``schema`` (Avro specification: bytes as code points 0-255, a union's
    default of its first branch, times and decimals as their numbers or bytes)."""
    k, lt = kind(schema), logical(schema)
    if k == "union":
        return draw(defaults(schema[0]))
    if lt == "decimal":
        raw = draw(values(schema))
        return raw.decode("latin-1")
    if k in ("bytes", "fixed"):
        size = schema.get("size") if isinstance(schema, dict) else None
        chars = st.characters(min_codepoint=0, max_codepoint=255)
        return draw(st.text(chars, min_size=size or 0, max_size=size if size is not None else 4))
    if k in ("float", "double"):
        return draw(st.floats(allow_nan=False, allow_infinity=False, width=32 if k == "float" else 64))
    if k == "int" or k == "long":
        bound = 2**31 if k == "int" else 2**53
        if lt in ("timestamp-millis", "local-timestamp-millis"):
            bound = 2**50
        return draw(st.integers(-bound, bound - 1))
    if k == "array":
        return draw(st.lists(defaults(schema["items"]), max_size=2))
    if k == "map":
        return draw(st.dictionaries(st.text(max_size=3), defaults(schema["values"]), max_size=2))
    if k == "record":
        return {f["name"]: draw(defaults(f["type"])) for f in schema["fields"]}
    if k == "enum":
        return draw(st.sampled_from(schema["symbols"]))
    return draw(values(schema))
