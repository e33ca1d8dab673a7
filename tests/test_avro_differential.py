"""A generative differential: kafkasync's ``value.decode`` column and its time at a path, against
fastavro's resolution of the same bytes to the same reader schema.

Hypothesis draws a writer schema (nested records, unions of several types, arrays, maps, enums
with and without defaults, fixed, bytes, every logical type: decimal on bytes and fixed, uuid,
date, time-millis/-micros, timestamp- and local-timestamp-millis/-micros/-nanos), a reader
schema evolved from it as the registry's BACKWARD check allows (fields added with defaults or
removed, renamed through aliases, promotions, logical types added and removed, enum symbols
added with a default, unions reordered or widened, a plain type read as a union), and values
(NaN, +-inf, -0.0, integer extremes, empty and 4-byte UTF-8 strings) that fastavro's writer
writes, in its tuple notation ``(branch, value)`` for every union.

The expected value is fastavro's ``schemaless_reader(bytes, writer, reader)``, both schemas with
their logical types taken off (the bytes are the same), then shown as Spark shows it, under
these rules:

* **logical types are the reader's** (Java's Resolver; fastavro applies the writer's):
  timestamps in microseconds (``-millis`` times 1000; one beyond int64 fails the record, as
  ``from_avro``'s ``millisToMicros`` does), dates in days, ``time-*`` and ``-nanos`` the number,
  a decimal ``Decimal(unscaled) * 10**-scale``, a uuid the text as written;
* **the union branch is Java's** (``Resolver.unionEquiv``, then ``firstMatchingBranch``); where
  fastavro picks another branch (the first match *including promotions*, or any branch when
  writer and reader are equal), the value is the written one promoted to Java's branch, and
  everywhere else the written value promoted must equal fastavro's (checked, so the written
  value stands in for fastavro's only where fastavro differs on purpose);
* a union shows as Spark shows it: ``[null, T]`` T, ``[int, long]`` a long, ``[float, double]``
  a double, others a struct of ``member<i>``;
* **reader defaults are converted by the specification** (fastavro returns the JSON as
  written): bytes and fixed as code points 0-255, a union's default of its first branch;
* floats compare by their bits (-0.0 is not 0.0), every NaN equal to every NaN; a long read as
  a float rounds once (Java's ``(float) long``; fastavro's ``float()`` then Arrow's float32
  round twice): there the written value stands in for fastavro's;
* a record fastavro refuses (an enum symbol the reader lacks without a default) must be a row
  kafkasync names as undecodable, and the reverse; where fastavro fails only because it read
  ``bytes`` as a ``string`` branch listed first (Java takes the ``bytes`` branch), the written
  value is the reference for that record.

The time at a path through records and ``[null, T]`` unions is that value converted (the
reader's timestamp or date, else the number as epoch ms): per record, and by batch where the
batch reader answers.
"""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import fastavro
import numpy as np
from avro_generators import PROMOTIONS, defaults, evolved, kind, logical, records, strip, values
from avro_support import arrow_type_of, codec, framed, norm, plain_type, python_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_budget import examples

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime, converter

FAILS = object()
DEFAULT = object()
"""The value is the reader's default (the writer has no such field)."""


class _Fails(Exception):
    """The record has no value under the rules (a timestamp beyond int64 microseconds...)."""


def _union_shape(union: list) -> str:
    kinds = sorted(kind(b) for b in union if kind(b) != "null")
    if len(kinds) == 1:
        return "nullable"
    return {("int", "long"): "long", ("double", "float"): "double"}.get(tuple(kinds), "members")


def _label(branch: Any) -> str:
    """A union branch's name in fastavro's tuple notation."""
    return branch["name"] if kind(branch) in ("record", "enum", "fixed") else kind(branch)


def _java_branch(w: Any, union: list) -> int:
    """Avro Java's ``Resolver.ReaderUnion.firstMatchingBranch``: the same type (a named type of
    the same full name, schemas normalized by avro_named.normalized), else a promotion."""
    wk = kind(w)
    for index, branch in enumerate(union):
        if kind(branch) == wk and (wk not in ("record", "enum", "fixed") or branch["name"] == w["name"]):
            return index
    return next(i for i, b in enumerate(union) if kind(b) in PROMOTIONS.get(wk, ()))


def _fastavro_branch(w: Any, union: list) -> int:
    """fastavro's ``read_union`` (``match_schemas``): the first branch of the same type (a named
    type of the same unqualified name or alias) or one it promotes to."""
    wk = kind(w)

    def short(name: str) -> str:
        return name.rpartition(".")[2]

    def matches(b: Any) -> bool:
        if kind(b) in PROMOTIONS.get(wk, ()):
            return True
        if kind(b) != wk:
            return False
        return wk not in ("record", "enum", "fixed") or short(b["name"]) == short(w["name"]) or \
            w["name"] in b.get("aliases", ()) or short(w["name"]) in b.get("aliases", ())
    return next(i for i, b in enumerate(union) if matches(b))


def _equivalent(w: Any, r: Any) -> bool:
    """Java's ``Resolver.unionEquiv``."""
    if kind(w) != kind(r):
        return False
    k = kind(w)
    if k in ("record", "enum", "fixed") and w["name"] != r["name"]:
        return False
    if k == "union":
        return len(w) == len(r) and all(map(_equivalent, w, r))
    if k in ("array", "map"):
        key = "items" if k == "array" else "values"
        return _equivalent(w[key], r[key])
    if k == "fixed":
        return w["size"] == r["size"]
    if k == "enum":
        return w["symbols"] == r["symbols"]
    if k == "record":
        return len(w["fields"]) == len(r["fields"]) and all(
            a["name"] == b["name"] and _equivalent(a["type"], b["type"]) for a, b in zip(w["fields"], r["fields"]))
    return True


class Oracle:
    def __init__(self, writer: Any, reader: Any) -> None:
        self.identical = strip(writer) == strip(reader)  # fastavro then skips resolution altogether

    def expect(self, r: Any, w: Any, written: Any, fv: Any, fastavro_agrees: bool = True) -> Any:
        rk = kind(r)
        if rk == "union":
            return self._union(r, w, written, fv, fastavro_agrees)
        if written is DEFAULT:
            return self._default(r, fv)
        if kind(w) == "union":  # a writer's union read as a plain type: never drawn (not BACKWARD)
            raise AssertionError("a writer union read as a plain type")
        if rk == "record":
            out = {}
            for f in r["fields"]:
                names = [f["name"], *f.get("aliases", [])]
                wf = next((x for x in w["fields"] if x["name"] in names), None)
                if wf is None:
                    out[f["name"]] = self._default(f["type"], f["default"])
                else:
                    out[f["name"]] = self.expect(f["type"], wf["type"], written[wf["name"]],
                                                 None if fv is None else fv[f["name"]], fastavro_agrees)
            return out
        if rk == "array":
            return [self.expect(r["items"], w["items"], item, None if fv is None else fv[i], fastavro_agrees)
                    for i, item in enumerate(written)]
        if rk == "map":
            return {key: self.expect(r["values"], w["values"], item, None if fv is None else fv[key], fastavro_agrees)
                    for key, item in written.items()}
        if rk == "enum":
            symbol = written if written in r["symbols"] else r.get("default")
            if symbol is None:
                raise _Fails("a symbol the reader lacks")
            if fastavro_agrees:
                assert fv == symbol
            return symbol
        value = self._primitive(r, kind(w), written)
        if fastavro_agrees and not (rk == "float" and kind(w) == "long"):  # fastavro promoted it already
            from_fastavro = self._primitive(r, rk, _float32(fv) if rk == "float" else fv)
            assert _same(value, from_fastavro), (value, fv)
        return value

    def _union(self, r: list, w: Any, written: Any, fv: Any, fastavro_agrees: bool) -> Any:
        if written is DEFAULT:
            branch, wb, inner, fastavro_index = 0, None, DEFAULT, 0
        else:
            if kind(w) == "union":
                if written is None:
                    wb, inner = next(b for b in w if kind(b) == "null"), None
                else:
                    label, inner = written
                    wb = next(b for b in w if _label(b) == label)
                equivalent = _equivalent(w, r)
                branch = w.index(wb) if equivalent else _java_branch(wb, r)
                fastavro_index = w.index(wb) if self.identical else _fastavro_branch(wb, r)
            else:
                wb, inner = w, written
                branch, fastavro_index = _java_branch(w, r), _fastavro_branch(w, r)
        rb = r[branch]
        if kind(rb) == "null":
            return None
        value = self.expect(rb, wb, inner, fv, fastavro_agrees and fastavro_index == branch)
        if _union_shape(r) != "members":
            return float(value) if _union_shape(r) == "double" else value
        members = [i for i, b in enumerate(r) if kind(b) != "null"]
        return {f"member{m}": (value if i == branch else None) for m, i in enumerate(members)}

    def _primitive(self, r: Any, wk: str, x: Any) -> Any:
        rk, lt = kind(r), logical(r)
        if rk == "float":
            x = _float32(x) if wk in ("int", "long") else x
        elif rk == "double":
            x = float(x)
        elif rk == "bytes" and wk == "string":
            x = x.encode()
        elif rk == "string" and wk == "bytes":
            x = x.decode()
        return self._logical(r, x) if lt else x

    def _default(self, r: Any, raw: Any) -> Any:
        """A reader default by the specification (see the module doc)."""
        rk = kind(r)
        if rk == "union":
            return self._union(r, None, DEFAULT, raw, False) if kind(r[0]) != "null" else None
        if rk == "record":
            return {f["name"]: self._default(f["type"], raw[f["name"]] if f["name"] in raw else f["default"])
                    for f in r["fields"]}
        if rk == "array":
            return [self._default(r["items"], item) for item in raw]
        if rk == "map":
            return {key: self._default(r["values"], item) for key, item in raw.items()}
        if rk in ("bytes", "fixed"):
            raw = raw.encode("latin-1")
        elif rk == "float":
            raw = _float32(raw)
        elif rk == "double":
            raw = float(raw)
        return self._logical(r, raw) if logical(r) else raw

    @staticmethod
    def _logical(r: Any, x: Any) -> Any:
        lt = logical(r)
        if lt in ("timestamp-millis", "local-timestamp-millis"):
            if not -(2**63) <= x * 1000 < 2**63:
                raise _Fails("a timestamp beyond Spark's range")
            return x * 1000
        if lt == "decimal":
            unscaled = int.from_bytes(x, "big", signed=True)
            if abs(unscaled) >= 10 ** r["precision"]:
                raise _Fails("a decimal beyond its precision")
            return Decimal(f"{unscaled}e-{r['scale']}")  # exact (scaleb would round to 28 digits)
        return x


def _float32(x: Any) -> float:
    if isinstance(x, int):
        return float(np.array([x], dtype=np.int64).astype(np.float32)[0])
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def _same(a: Any, b: Any) -> bool:
    return norm(a) == norm(b)


def _paths(reader: dict, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """Paths through records and [null, T] unions to a number or string: (steps, leaf)."""
    found = []
    for f in reader["fields"]:
        t = f["type"]
        if kind(t) == "union":
            others = [b for b in t if kind(b) != "null"]
            if len(others) != 1:
                continue
            t = others[0]
        if kind(t) == "record":
            found += _paths(t, (*prefix, f["name"]))
        elif kind(t) in ("int", "long", "float", "double", "string") and logical(t) != "decimal":
            found.append(((*prefix, f["name"]), t))
    return found


def _expected_time(value: Any, steps: tuple, leaf: Any) -> Any:
    for step in steps:
        if value is None:
            return "invalid"
        value = value[step]
    if value is None:
        return "invalid"
    lt = logical(leaf)
    try:
        if lt in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
            millis = value // 1000
        elif lt in ("timestamp-nanos", "local-timestamp-nanos"):
            millis = value // 1_000_000
        elif lt == "date":
            millis = value * 86_400_000
        else:
            return converter("epochMillis")(value)
    except InvalidTime:
        return "invalid"
    return millis if 0 <= millis <= MAX_TIME_MS else "invalid"


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                              HealthCheck.data_too_large])
@given(st.data())
def test_value_decode_and_the_time_at_a_path_equal_fastavros_resolution(data):
    writer = data.draw(records(), "writer")
    differential(data, writer, data.draw(evolved(writer), "reader"))


def differential(data: Any, writer: Any, reader: Any, oracle_writer: Any = None, oracle_reader: Any = None) -> None:
    """The test above for one writer and reader: ``oracle_*`` are the schemas as the oracle reads
    them (named types inline under their full names: avro_named.normalized), the writer's and
    reader's own text going to kafkasync and fastavro."""
    oracle_writer = writer if oracle_writer is None else oracle_writer
    oracle_reader = reader if oracle_reader is None else oracle_reader
    written = data.draw(st.lists(values(oracle_writer), min_size=1, max_size=4), "values")
    payloads = [framed(strip(writer), value) for value in written]
    arrow_type = arrow_type_of(reader)
    ours, undecodable = codec(writer, reader).decode(payloads, arrow_type)
    ours_plain = [python_value(v, plain_type(arrow_type)) for v in ours.cast(plain_type(arrow_type)).to_pylist()]
    failed = {u.row: u for u in undecodable}
    oracle = Oracle(oracle_writer, oracle_reader)
    expected_rows = []
    for row, (payload, value) in enumerate(zip(payloads, written)):
        try:
            try:
                fv = fastavro.schemaless_reader(io.BytesIO(payload[5:]), fastavro.parse_schema(strip(writer)),
                                                fastavro.parse_schema(strip(reader)))
            except UnicodeDecodeError:  # fastavro read bytes as a string branch Java does not take
                expected = oracle.expect(oracle_reader, oracle_writer, value, None, fastavro_agrees=False)
            else:
                expected = oracle.expect(oracle_reader, oracle_writer, value, fv)
        except (_Fails, fastavro.read.SchemaResolutionError, UnicodeDecodeError):
            expected = FAILS
        expected_rows.append(expected)
        if expected is FAILS:
            assert row in failed and ours_plain[row] is None, (row, ours_plain[row])
        else:
            assert row not in failed, failed.get(row)
            assert norm(ours_plain[row]) == norm(expected)
    candidates = _paths(oracle_reader)
    if not candidates:
        return
    steps, leaf = data.draw(st.sampled_from(candidates), "path")
    path = codec(writer, reader).time_path(".".join(steps), "epochMillis")
    times = []
    for payload, expected in zip(payloads, expected_rows):
        try:
            times.append(path.time_of(payload))
        except InvalidTime:
            times.append("invalid")
        if expected is not FAILS:
            assert times[-1] == _expected_time(expected, steps, leaf)
    batch = path.batch(payloads)
    assert batch is None or ("invalid" not in times and batch == times)


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_reader_defaults_follow_the_specification(data):
    """A field only the reader has: its default, converted by the specification, for every
    record of the writer (the differential's defaults, drawn for every type)."""
    writer = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    added = data.draw(evolved({"type": "record", "name": "R", "fields": [
        {"name": "seed", "type": data.draw(st.sampled_from(["int", "bytes", "string"]))}]}))["fields"][0]["type"]
    default = data.draw(defaults(added))
    reader = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                          {"name": "added", "type": added, "default": default}]}
    payload = framed(writer, {"a": 1})
    ours, undecodable = codec(writer, reader).decode([payload, payload], arrow_type_of(reader))
    expected = {"a": 1, "added": Oracle(writer, reader)._default(added, default)}
    plain = plain_type(arrow_type_of(reader))
    assert undecodable == [] and [norm(python_value(v, plain)) for v in ours.cast(plain).to_pylist()] == \
        [norm(expected)] * 2
