"""Hypothesis strategies for Avro's named types as registries hold them: namespaces (inherited,
set, and the null namespace ``""``), references to a type by its full name, unions of two or
more record types, a root record renamed with the old name as its alias, fields renamed
through aliases, enums whose reader drops a symbol for its default, and reader fields whose
defaults hold records and unions (a record default that omits a field with its own default).

:func:`normalized` gives the same schema with every named type inline under its full name, as
the differential's oracle reads schemas (tests/test_avro_differential.py); kafkasync and fastavro
get the schema text as written.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

from avro_generators import PRIMITIVE, defaults, evolved, kind, leaf_types, types
from hypothesis import assume
from hypothesis import strategies as st

_COUNTER = itertools.count()


def full_name(name: str, namespace: str) -> str:
    return name if "." in name else f"{namespace}.{name}" if namespace else name


def normalized(schema: Any, namespace: str = "", named: Optional[dict] = None) -> Any:
    """The schema with references replaced by their definitions and names made full (the
    ``namespace`` keys dropped, aliases made full). Not for recursive schemas."""
    named = {} if named is None else named
    if isinstance(schema, list):
        return [normalized(b, namespace, named) for b in schema]
    if isinstance(schema, str):
        if schema in PRIMITIVE or schema == "null":
            return schema
        return named.get(full_name(schema, namespace)) or named[schema]
    k = schema["type"]
    if isinstance(k, (dict, list)):
        return normalized(k, namespace, named)
    if k not in ("record", "enum", "fixed"):
        out = dict(schema)
        for key in ("items", "values"):
            if key in out:
                out[key] = normalized(out[key], namespace, named)
        return out
    own = schema.get("namespace", namespace) or ""
    full = full_name(schema["name"], own)
    inner = full.rpartition(".")[0]
    out = {key: value for key, value in schema.items() if key != "namespace"}
    out["name"] = full
    if "aliases" in schema:
        out["aliases"] = [full_name(a, inner) for a in schema["aliases"]]
    named[full] = out
    if k == "record":
        out["fields"] = [{**f, "type": normalized(f["type"], inner, named)} for f in schema["fields"]]
    return out


def _namespace(draw: Any, inherit: bool) -> dict:
    choice = draw(st.sampled_from(("inherit", "set", "null") if inherit else ("set", "null")))
    if choice == "inherit":
        return {}
    return {"namespace": "" if choice == "null" else draw(st.sampled_from(("com.acme", "x.y.z", "a")))}


@st.composite
def named_records(draw: Any) -> dict:
    """A root record in a namespace, holding a union of null and two or three record types (each
    in its own, the inherited or the null namespace), a later reference to one of them by its
    full name, an enum, and a few fields of any type."""
    root_ns = _namespace(draw, inherit=False)
    root_namespace = root_ns.get("namespace", "")
    members = []
    for number in range(draw(st.integers(2, 3))):
        member_ns = _namespace(draw, inherit=True)
        if number == 0 and member_ns.get("namespace") == "" and root_namespace:
            # Java's parser (and kafkasync's) would find "V1" of the null namespace from inside
            # a namespace; fastavro's does not: the referenced member is in a named one.
            member_ns = {"namespace": "x.y.z"}
        members.append({"type": "record", "name": f"V{next(_COUNTER)}", **member_ns,
                        "fields": [{"name": f"p{i}", "type": draw(leaf_types())}
                                   for i in range(draw(st.integers(1, 3)))]})
    union = draw(st.permutations(["null", *members]))
    referenced = members[0]
    referenced_full = full_name(referenced["name"], referenced.get("namespace", root_namespace) or "")
    fields = [{"name": "ts", "type": draw(st.sampled_from(("long", {"type": "long", "logicalType": "timestamp-millis"})))},
              {"name": "u", "type": union},
              {"name": "ref", "type": ["null", referenced_full]},
              {"name": "e", "type": {"type": "enum", "name": f"K{next(_COUNTER)}", "symbols": ["A", "B", "C"]}}]
    fields += [{"name": f"g{i}", "type": draw(types(1))} for i in range(draw(st.integers(0, 2)))]
    return {"type": "record", "name": f"Root{next(_COUNTER)}", **root_ns, "fields": fields}


@st.composite
def record_defaults(draw: Any) -> list[dict]:
    """Reader fields whose defaults hold a record (omitting a field that has its own default), a
    union of several types, and a union whose first branch is a record."""
    inner = {"type": "record", "name": f"DefIn{next(_COUNTER)}", "fields": [{"name": "z", "type": "double"}]}
    holder = {"type": "record", "name": f"Def{next(_COUNTER)}", "fields": [
        {"name": "c", "type": ["string", "long", "null"]},
        {"name": "k", "type": "int", "default": 5},
        {"name": "rec", "type": inner}]}
    first_record = {"type": "record", "name": f"DefU{next(_COUNTER)}", "fields": [
        {"name": "q", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}}]}
    chosen = draw(st.lists(st.sampled_from(("holder", "multi", "first record")), min_size=1, max_size=3, unique=True))
    added = []
    if "holder" in chosen:
        added.append({"name": f"d_holder{next(_COUNTER)}", "type": holder,
                      "default": {"c": draw(st.text(max_size=3)), "rec": {"z": draw(st.floats(allow_nan=False,
                                                                                          allow_infinity=False))}}})
    if "multi" in chosen:
        union = draw(st.permutations(["string", "long", "null", "double"]))
        added.append({"name": f"d_multi{next(_COUNTER)}", "type": union, "default": draw(defaults(union))})
    if "first record" in chosen:
        added.append({"name": f"d_first{next(_COUNTER)}", "type": [first_record, "null"], "default": {"q": "\u0001\u00ff"}})
    return added


@st.composite
def evolved_named(draw: Any, writer: dict) -> dict:
    """A reader of ``writer`` (its field order kept: a reference must follow its definition),
    the root perhaps renamed with the writer's full name as its alias, perhaps with
    :func:`record_defaults`' fields added."""
    reader = draw(evolved(writer, ordered=True))
    assume(any(f["name"] == "u" or "u" in f.get("aliases", ()) for f in reader["fields"]))  # "ref" refers into it
    if draw(st.booleans()):
        namespace = writer.get("namespace", "")
        reader = {**reader, "name": f"{writer['name'].split('N')[0]}N{next(_COUNTER)}",
                  "aliases": [full_name(writer["name"], namespace), *writer.get("aliases", ())]}
    if draw(st.booleans()):
        reader = {**reader, "fields": reader["fields"] + draw(record_defaults())}
    return reader


LINKED = {"type": "record", "name": "Node", "namespace": "list", "fields": [
    {"name": "value", "type": "long"}, {"name": "next", "type": ["null", "list.Node"]}]}
"""A linked list: a recursive record through ``["null", "Node"]`` (Spark refuses its type)."""


@st.composite
def linked_lists(draw: Any) -> dict:
    node = None
    for value in draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=30)):
        node = {"value": value, "next": node}
    assert node is not None
    return node


def unlabelled(value: Any) -> Any:
    """A value in fastavro's tuple notation, as its reader gives it back (no branch labels)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return unlabelled(value[1])
    if isinstance(value, dict):
        return {k: unlabelled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unlabelled(v) for v in value]
    return value


__all__ = ["LINKED", "evolved_named", "kind", "linked_lists", "named_records", "normalized", "unlabelled"]
