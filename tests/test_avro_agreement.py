"""The readers of one record agree: ``value.decode`` (values.py, per record and by numpy), the
time at ``eventTime.field`` (the generated per-record reader, the numpy batch reader, values.py
where the path needs it), on the driver and on the executors alike (Deliver 3 of issue 61: the
same bytes give the same answer wherever they are read).

* Bytes that values.py refuses because of how a number or a block is written (an int, an
  enum's or a union's index in more than 5 bytes or beyond 32 bits, a long beyond 64 bits, a
  block whose stated size its items do not take) give no time either: a skipper that took them
  would place the next field where the value reader never looks.
* An incompatible branch of a writer's union on the path fails only the records that take it
  (Java's ``ErrorAction``); a record whose branch is null has an invalid time there.
* A record decodes the same whatever its neighbours: a run of mixed writer ids, malformed
  records among them, decoded together or alone; the batch time reader answers as the
  per-record one; and where the value decodes, the time is that value's, converted.
"""

from __future__ import annotations

from typing import Any

import pytest
from avro_generators import evolved, records, strip, values
from avro_named import evolved_named, named_records, normalized
from avro_support import arrow_type_of, codec, framed, plain_values, text
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from property_budget import examples
from test_avro_fuzz import mutated

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime
from kafkasync_source.formats.avro.schema import SchemaError, parse
from kafkasync_source.formats.decoded import INCOMPATIBLE, MALFORMED
from kafkasync_source.formats.registry import KafkaSyncFormatError

HEADER = b"\x00\x00\x00\x00\x07"
SKIPPED = {"type": "record", "name": "R", "fields": [
    {"name": "a", "type": "int"},
    {"name": "xs", "type": {"type": "array", "items": "long"}},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
    {"name": "u", "type": ["null", "long"]},
    {"name": "ts", "type": "long"}]}
"""Every field before ``ts`` is skipped by the time readers and read by the value reader."""
INT_LEAF = {"type": "record", "name": "I", "fields": [{"name": "ts", "type": "int"}]}
VALID = b"\x02" + b"\x00" + b"\x00" + b"\x02\x04" + b"\x06"


@pytest.mark.parametrize("schema, body, why", [
    (SKIPPED, b"\x82\x80\x80\x80\x80\x00" + VALID[1:], "an int in 6 bytes"),
    (SKIPPED, b"\x82\x80\x80\x80\x70" + VALID[1:], "an int of 5 bytes beyond 32 bits"),
    (SKIPPED, VALID[:2] + b"\x80\x80\x80\x80\x80\x00" + VALID[3:], "an enum index in 6 bytes"),
    (SKIPPED, VALID[:3] + b"\x82\x80\x80\x80\x80\x00\x04" + VALID[5:], "a union index in 6 bytes"),
    (SKIPPED, VALID[:1] + b"\x02" + b"\x80" * 9 + b"\x02" + b"\x00" + VALID[2:], "a long item beyond 64 bits"),
    (SKIPPED, VALID[:1] + b"\x03\x02\x02\x02\x00" + VALID[2:], "a block whose size is shorter than its items"),
    (SKIPPED, VALID[:1] + b"\x01\x04\x02\x00" + VALID[2:], "a block whose size is longer than its items"),
    (INT_LEAF, b"\x82\x80\x80\x80\x80\x00", "the int on the path in 6 bytes"),
])
def test_bytes_the_value_reader_refuses_give_no_time_on_any_reader(schema, body, why):
    payload = HEADER + body
    compiled = codec(schema, schema)
    column, undecodable = compiled.decode([payload], arrow_type_of(schema))
    assert column.to_pylist() == [None] and [u.kind for u in undecodable] == [MALFORMED], why
    path = compiled.time_path("ts", "epochMillis")
    with pytest.raises(InvalidTime):
        path.time_of(payload)
    good = HEADER + (VALID if schema is SKIPPED else b"\x06")
    assert path.time_of(good) == 3
    assert path.batch([good, payload]) is None, why  # the seam then reads each alone: 3 and invalid
    assert path.batch([good, good]) == [3, 3]


def test_the_cap_on_items_of_no_size_holds_across_a_records_fields_on_the_time_path():
    """values.py caps a record's items of no size (``null``, empty records) at 65,536; the time
    readers' calls counted them per field: 200 arrays of 65,536 nulls before the time, 806 bytes,
    took 13 million steps (6 s) and gave a time where the value is malformed."""
    from test_avro_fuzz import _counted

    writer = {"type": "record", "name": "R", "fields": [
        *({"name": f"a{i}", "type": {"type": "array", "items": "null"}} for i in range(200)),
        {"name": "ts", "type": "long"}]}
    payload = HEADER + b"\x80\x80\x08\x00" * 200 + b"\x06"  # each: a block of 65,536 nulls, then 0
    compiled = codec(writer, writer)
    column, undecodable = compiled.decode([payload], arrow_type_of(writer))
    assert [u.kind for u in undecodable] == [MALFORMED] and "items of no size" in undecodable[0].reason
    times = compiled.time_path("ts", "epochMillis")
    result, calls = _counted(lambda: times.time_of(payload))
    assert isinstance(result, InvalidTime) and "items of no size" in str(result)
    assert calls < 300_000, calls
    assert times.batch([payload]) is None


def test_a_block_given_with_its_right_size_reads_the_same_everywhere():
    payload = HEADER + VALID[:1] + b"\x03\x04\x02\x04\x00" + VALID[2:]  # 2 items in 2 bytes, then 0
    compiled = codec(SKIPPED, SKIPPED)
    column, undecodable = compiled.decode([payload], arrow_type_of(SKIPPED))
    assert undecodable == [] and column.to_pylist()[0]["xs"] == [1, 2]
    path = compiled.time_path("ts", "epochMillis")
    assert path.time_of(payload) == 3
    assert path.batch([payload]) in (None, [3])


INCOMPATIBLE_BRANCH = [
    ({"type": "record", "name": "R", "fields": [{"name": "ts", "type": ["null", "string"]}]},
     {"type": "record", "name": "R", "fields": [{"name": "ts", "type": ["null", "long"]}]},
     "ts", {"ts": ("string", "x")}, {"ts": None}),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", {
        "type": "record", "name": "A", "fields": [{"name": "ts", "type": "long"}]}]}]},
     {"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", {
         "type": "record", "name": "A", "fields": [{"name": "ts", "type": "long"}, {"name": "req", "type": "int"}]}]}]},
     "a.ts", {"a": ("A", {"ts": 4})}, {"a": None}),
]


@pytest.mark.parametrize("writer, reader, path, failing, null", INCOMPATIBLE_BRANCH)
def test_an_incompatible_union_branch_on_the_path_fails_only_the_records_that_take_it(
        writer, reader, path, failing, null):
    compiled = codec(writer, reader)
    payloads = [framed(writer, null), framed(writer, failing)]
    column, undecodable = compiled.decode(payloads, arrow_type_of(reader))
    assert [(u.row, u.kind) for u in undecodable] == [(1, INCOMPATIBLE)]
    assert column.to_pylist()[1] is None and column.to_pylist()[0] is not None
    times = compiled.time_path(path, "epochMillis")
    with pytest.raises(InvalidTime, match="is null"):
        times.time_of(payloads[0])
    with pytest.raises(KafkaSyncFormatError, match="schema id 7"):
        times.time_of(payloads[1])
    assert times.batch(payloads) is None


def test_a_null_the_readers_type_cannot_hold_fails_the_record_on_the_path_as_in_the_value():
    """A writer's ``["null", "long"]`` read as a plain ``long`` (a registry without compatibility
    checks lets it through): its nulls are incompatible in ``valueDecoded``, and on the time path
    too (they were an invalid time there, which ``onInvalid=skip`` would have passed silently)."""
    writer = {"type": "record", "name": "R", "fields": [{"name": "ts", "type": ["null", "long"]}]}
    reader = {"type": "record", "name": "R", "fields": [{"name": "ts", "type": "long"}]}
    compiled = codec(writer, reader)
    payloads = [framed(writer, {"ts": None}), framed(writer, {"ts": ("long", 5)})]
    column, undecodable = compiled.decode(payloads, arrow_type_of(reader))
    assert [(u.row, u.kind) for u in undecodable] == [(0, INCOMPATIBLE)] and column.to_pylist()[1] == {"ts": 5}
    times = compiled.time_path("ts", "epochMillis")
    with pytest.raises(KafkaSyncFormatError, match="'ts' is a null in the writer schema"):
        times.time_of(payloads[0])
    assert times.time_of(payloads[1]) == 5 and times.batch(payloads) is None


def _time(path: Any, payload: bytes) -> Any:
    try:
        return path.time_of(payload)
    except InvalidTime:
        return "invalid"
    except KafkaSyncFormatError:
        return "incompatible"


def _time_of_value(value: Any, steps: list[str]) -> Any:
    """The time a decoded plain value (timestamps in µs: never drawn here) gives at the path."""
    for step in steps:
        if value is None:
            return "invalid"
        value = value[step]
    if value is None or isinstance(value, float) and value != value:
        return "invalid"
    if isinstance(value, str):
        return None  # text times are parsed by eventTime.format: not compared here
    if isinstance(value, tuple):  # a float, as plain_values gives it
        return None
    return value if 0 <= value <= MAX_TIME_MS else "invalid"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(st.data())
def test_a_record_decodes_the_same_whatever_its_neighbours_and_its_time_is_its_values(data):
    old = data.draw(records(), "old writer")
    new = data.draw(evolved(old), "new writer")
    reader = data.draw(evolved(new), "reader")
    try:
        parse(text(reader))
    except SchemaError:  # an evolution of an evolution may repeat an enum's added symbol
        assume(False)
    writers = {7: strip(old), 8: strip(new)}
    payloads = []
    for _ in range(data.draw(st.integers(2, 6), "records")):
        schema_id = data.draw(st.sampled_from([7, 8]))
        payload = framed(writers[schema_id], data.draw(values(writers[schema_id])), schema_id)
        payloads.append(data.draw(mutated(payload)) if data.draw(st.integers(0, 2)) == 0 else payload)
    arrow_type = arrow_type_of(reader)
    together = codec(writers, reader)
    column, undecodable = together.decode(payloads, arrow_type)
    failed = {u.row: u.kind for u in undecodable}
    plain = plain_values(column)
    for row, payload in enumerate(payloads):
        alone, alone_failed = codec(writers, reader).decode([payload], arrow_type)
        assert plain_values(alone) == [plain[row]], (row, "a value that depends on its neighbours")
        assert [u.kind for u in alone_failed] == ([failed[row]] if row in failed else [])
    names = [f["name"] for f in reader["fields"] if f["type"] in ("int", "long")]
    for name in names:
        path = together.time_path(name, "epochMillis")
        times = [_time(path, p) for p in payloads]
        batch = path.batch(payloads)
        assert batch is None or batch == times
        for row, time in enumerate(times):
            if row not in failed:
                expected = _time_of_value(plain[row], [name])
                assert expected is None or time == expected, (row, name, time, expected)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(st.data())
def test_mutated_records_of_named_families_end_in_a_value_or_a_named_error(data):
    """Namespaces, unions of several records and references (avro_named.py), their bytes cut,
    flipped or given hostile varints: every reader ends in a value, an undecodable row of a named
    kind with a reason, or an invalid time; nothing else escapes (Deliver 3)."""
    writer = data.draw(named_records(), "writer")
    reader = data.draw(evolved_named(writer), "reader")
    payloads = [data.draw(mutated(framed(strip(writer), value)))
                for value in data.draw(st.lists(values(normalized(writer)), min_size=1, max_size=4))]
    compiled = codec(writer, reader)
    column, undecodable = compiled.decode(payloads, arrow_type_of(reader))
    assert len(column) == len(payloads) and all(u.kind in (MALFORMED, INCOMPATIBLE) and u.reason
                                                for u in undecodable)
    for f in reader["fields"]:  # the writer's "ts", however the reader evolved it (dropped: no path)
        if (f["name"] == "ts" or "ts" in f.get("aliases", ())) and isinstance(f["type"], (str, dict)):
            times = compiled.time_path(f["name"], "epochMillis")
            each = [_time(times, p) for p in payloads]
            assert times.batch(payloads) in (None, each)
