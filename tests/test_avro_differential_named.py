"""The differential of tests/test_avro_differential.py (its rules written down there) on Avro's
named types as registries hold them (tests/avro_named.py): namespaces and references by full
name, unions of two or three record types (each value in the branch of its own name, Java's and
fastavro's rule alike), a root record renamed with an alias and fields renamed through aliases,
enums whose reader drops a symbol for its default, reader fields whose defaults hold records and
unions; and a recursive record (a linked list through ``["null", "Node"]``), which Spark refuses
as a column type (``from_avro``: "Found recursive reference"), compared through the per-record
reader, the reference the columns follow, and the time at a path through it.

Every logical type is drawn inside the union's records (avro_generators.leaf_types: decimal on
bytes and fixed, uuid, date, time-millis/-micros, timestamp- and local-timestamp-*), with NaN,
+-inf, -0.0, integer extremes, empty and 4-byte UTF-8 strings among the values. Each example
takes well under a second; the counts are property_budget's.
"""

from __future__ import annotations

import io
import json

import fastavro
from avro_named import LINKED, evolved_named, linked_lists, named_records, normalized
from avro_support import codec, framed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_budget import examples
from test_avro_differential import differential

from kafkasync_source.event_time.formats import MAX_TIME_MS, InvalidTime


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(st.data())
def test_named_types_namespaces_aliases_and_record_defaults_decode_as_fastavro_resolves_them(data):
    writer = data.draw(named_records(), "writer")
    reader = data.draw(evolved_named(writer), "reader")
    differential(data, writer, reader, normalized(writer), normalized(reader))


@settings(max_examples=examples(30), deadline=None)
@given(linked_lists(), st.sampled_from(["value", "next.value"]))
def test_a_recursive_linked_list_reads_as_fastavro_reads_it_value_and_time(head, path):
    payload = framed(LINKED, head)
    reader = dict(LINKED, fields=[*LINKED["fields"], {"name": "tag", "type": "string", "default": "t"}])
    expected = fastavro.schemaless_reader(io.BytesIO(payload[5:]), fastavro.parse_schema(LINKED),
                                          fastavro.parse_schema(json.loads(json.dumps(reader))))
    compiled = codec(LINKED, reader)
    assert compiled.writer(7).decode_one(payload) == expected
    node = expected
    for step in path.split("."):
        node = None if node is None else node[step]
    try:
        time = compiled.time_path(path, "epochMillis").time_of(payload)
    except InvalidTime:
        time = "invalid"
    assert time == (node if node is not None and 0 <= node <= MAX_TIME_MS else "invalid")
