"""Every Avro reader on hostile bytes: mutated valid records and random bytes through the time at a
path (per record and per batch), and ``value.decode`` (numpy and per record). Each call ends in a
value, a named invalid time, or a named undecodable row, and nothing else escapes (no
IndexError, ValueError, ArrowInvalid, RecursionError, OverflowError); the batch readers agree
with the per-record ones; a record's value does not depend on its neighbours; and the work done
is bounded by the input (counted in Python calls, not timed: a count does not depend on the
machine's load)."""

from __future__ import annotations

import sys
from typing import Any, Callable

import pyarrow as pa
import pytest
from avro_generators import evolved, records, strip, values
from avro_support import arrow_type_of, codec, framed, plain_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_budget import examples

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.formats.avro.values import RowError
from kafkasync_source.formats.decoded import KINDS, MALFORMED


@st.composite
def mutated(draw: Any, payload: bytes) -> bytes:
    """A payload cut, with bytes flipped, or a hostile varint spliced in (after the header)."""
    body = bytearray(payload[5:])
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(("flip", "cut", "varint", "insert")))
        at = draw(st.integers(0, len(body)))
        if how == "flip" and body:
            body[min(at, len(body) - 1)] = draw(st.integers(0, 255))
        elif how == "cut":
            del body[at:]
        elif how == "varint":
            huge = draw(st.sampled_from([b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\xff" * 11, b"\x01",
                                         b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\xfe\xff\xff\xff\x0f"]))
            body[at:at] = huge
        else:
            body[at:at] = draw(st.binary(min_size=1, max_size=4))
    return payload[:5] + bytes(body)


def _time(path: Any, payload: bytes) -> Any:
    try:
        return path.time_of(payload)
    except InvalidTime as why:
        assert str(why), "an invalid time says why"
        return "invalid"


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(st.data())
def test_mutated_and_random_bytes_end_in_a_value_or_a_named_error(data):
    writer = data.draw(records(), "writer")
    reader = data.draw(evolved(writer), "reader")
    valid = [framed(strip(writer), v) for v in data.draw(st.lists(values(writer), min_size=1, max_size=3))]
    payloads = [data.draw(mutated(p)) for p in valid] + [b"\x00\x00\x00\x00\x07" + data.draw(st.binary(max_size=40))]
    payloads += valid
    compiled = codec(writer, reader)
    arrow_type = arrow_type_of(reader)
    column, undecodable = compiled.decode(payloads, arrow_type)
    failed = {u.row: u for u in undecodable}
    assert all(u.kind in KINDS and u.reason for u in undecodable)
    one = compiled.writer(7)
    for row, payload in enumerate(payloads):
        try:
            alone = one.decode_one(payload)
        except RowError as err:
            assert row in failed and failed[row].kind == err.kind and column[row].as_py() is None
            continue
        assert row not in failed, failed.get(row)
        in_batch = plain_values(column.slice(row, 1))
        assert in_batch == plain_values(pa.array([alone], type=arrow_type)), "numpy and values.py differ"
        single, _ = compiled.decode([payload], arrow_type)
        assert plain_values(single) == in_batch, "a record's value depends on its neighbours"
    paths = [f["name"] for f in reader["fields"] if f["type"] in ("int", "long", "double", "string")]
    for name in paths:
        path = compiled.time_path(name, "epochMillis")
        times = [_time(path, p) for p in payloads]
        batch = path.batch(payloads)
        assert batch is None or ("invalid" not in times and batch == times)


def _counted(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()``'s result (or the exception it raised) and how many Python functions it called
    the second time (the first imports what it needs: modules, not the input, decide that)."""
    try:
        call()
    except Exception:  # noqa: BLE001 - judged on the counted call
        pass
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1
    sys.setprofile(profile)
    try:
        result: Any = call()
    except Exception as err:  # noqa: BLE001 - the result judged below
        result = err
    finally:
        sys.setprofile(None)
    return result, count


NULLS = {"type": "record", "name": "N", "fields": [{"name": "xs", "type": {"type": "array", "items": "null"}},
                                                     {"name": "ts", "type": "long"}]}
LONGS = {"type": "record", "name": "L", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}},
                                                     {"name": "ts", "type": "long"}]}
EMPTY = {"type": "record", "name": "M", "fields": [
    {"name": "xs", "type": {"type": "map", "values": {"type": "record", "name": "Nothing", "fields": []}}},
    {"name": "ts", "type": "long"}]}
TEXT = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}, {"name": "ts", "type": "long"}]}
UNION = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["null", "long", "string"]},
                                                     {"name": "e", "type": {"type": "enum", "name": "K",
                                                                            "symbols": ["A", "B"]}},
                                                     {"name": "ts", "type": "long"}]}
TREE = {"type": "record", "name": "Tree", "fields": [{"name": "ts", "type": "long"},
                                                       {"name": "child", "type": ["null", "Tree"]}]}
HUGE = b"\xfe\xff\xff\xff\xff\xff\xff\x7f"  # zigzag 2^55 - 1: a count or length no payload holds


@pytest.mark.parametrize("schema, body, why", [
    (NULLS, HUGE + b"\x00\x02", "a block of 2^55 nulls"),
    (NULLS, b"\xff\xff\xff\xff\xff\xff\xff\x7f" + b"\x00\x00\x02", "a block of -2^55 nulls given with its size"),
    (LONGS, HUGE + b"\x00\x02", "a block of 2^55 longs in 10 bytes"),
    (LONGS, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + b"\x00\x02", "a count near -2^63"),
    (EMPTY, HUGE + b"\x00\x02", "a map of 2^55 empty records"),
    (TEXT, b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01" + b"ab\x02", "a length near 2^63"),
    (TEXT, b"\xff" * 11 + b"\x02", "a varint of 11 bytes"),
    (UNION, b"\x7e\x02\x02", "a union index of 63"),
    (UNION, b"\x00\x7e\x02", "an enum index of 63"),
    (UNION, b"\x01\x02", "a negative union index"),
    (TREE, b"\x02\x02" * 20_000 + b"\x02\x00", "a recursive record nested 20,000 deep"),
])
def test_hostile_counts_lengths_and_indexes_end_named_in_work_linear_in_the_input(schema, body, why):
    payload = b"\x00\x00\x00\x00\x07" + body
    compiled = codec(schema, schema)
    arrow_type = arrow_type_of(schema) if schema is not TREE else None
    budget = 200 * len(payload) + 20_000
    if arrow_type is not None:
        (column, undecodable), calls = _counted(lambda: compiled.decode([payload], arrow_type))
        assert calls <= budget, (why, calls)
        assert [u.kind for u in undecodable] == [MALFORMED] and undecodable[0].reason, why
        assert column.to_pylist() == [None]
    path = compiled.time_path("ts", "epochMillis")
    result, calls = _counted(lambda: path.time_of(payload))
    assert calls <= budget, (why, calls)
    assert isinstance(result, (int, InvalidTime)), (why, result)
    assert path.batch([payload, payload]) in (None, [result, result])


def test_the_value_of_a_recursive_schema_nested_too_deep_is_malformed_not_a_recursion_error():
    reader = {"type": "record", "name": "Tree", "fields": [{"name": "ts", "type": "long"}]}
    payload = b"\x00\x00\x00\x00\x07" + b"\x02\x02" * 20_000 + b"\x02\x00"
    compiled = codec(TREE, reader)  # the writer's recursive child is skipped, depth-bounded
    (column, undecodable), calls = _counted(lambda: compiled.decode([payload], arrow_type_of(reader)))
    assert [u.kind for u in undecodable] == [MALFORMED] and "nests deeper than" in undecodable[0].reason
    assert calls <= 200 * len(payload)
