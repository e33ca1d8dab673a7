"""The outside differential: random Avro schema families through the real pieces (Apicurio,
confluent-kafka's ``AvroSerializer``, the embedded cluster, Spark's ``format("kafkasync")``),
every row compared with fastavro's resolution of the same bytes to the pinned reader schema.

* **Families.** Hypothesis draws each family's first version (avro_generators.records, or
  avro_named.named_records: namespaces, unions of several records, references by full name)
  and two evolutions of it (avro_generators.evolved / avro_named.evolved_named: fields added
  with defaults, removed, renamed through aliases, promotions, logical types added and removed,
  enum symbols added or dropped for a default, record and union defaults). Each family's
  versions are registered in order under its own subject, under the registry's BACKWARD rule;
  a version the registry refuses ends that family's evolution there (counted).
* **The topic.** A bundle record holds a ``ts`` and one field per family; bundle version ``j``
  holds every family's version ``j`` (BACKWARD where each family is), registered in order
  under ``<topic>-value``. Records are written by ``AvroSerializer`` (one per version), old and
  new writers interleaved, over two partitions.
* **The read.** One query, ``value.decode=true`` (PERMISSIVE: an undecodable record is a row
  with its reason), ``eventTime.field`` on ``ts`` or a path drawn into a family
  (``onInvalid=skip``), capped by ``maxOffsetsPerTrigger`` (several batches), the rows taken
  through Arrow (times beyond Python's datetime compare too).
* **The reference.** test_avro_differential.Oracle over fastavro's ``schemaless_reader(bytes,
  writer, reader)`` with the rules written down there (floats by bits, every NaN equal;
  timestamps as microseconds, the reader's logical types; Java's union branch; defaults by the
  specification). A record the reference refuses must be a row whose reason names its schema id
  (the row names its topic, partition and offset) and the field.

The small version runs in ``make test``; ``slow`` runs 81 families, thousands of records, three
seeds, and prints its numbers.
"""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pytest
from avro_generators import evolved, records, strip, values
from avro_named import evolved_named, named_records, normalized
from avro_support import norm, plain_values, text
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from test_avro_differential import FAILS, Oracle, _expected_time, _Fails, _paths

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.debezium import _client, avro_serializer
from kafkasync_source.formats.avro.schema import SchemaError, parse
from kafkasync_source.spark.source import register

VERSIONS = 3
T = 1_700_000_000_000


@dataclass
class Family:
    versions: list[Any]
    pools: list[list[Any]]
    """Per version, values its writer writes (fastavro's tuple notation)."""


@dataclass
class Outcome:
    compared: int = 0
    differing: list[str] = field(default_factory=list)
    failures: int = 0
    failures_named: int = 0
    time_compared: int = 0
    refused_versions: int = 0
    query_failures: list[str] = field(default_factory=list)
    """Queries that failed, each naming topic-partition, offset, schema id and field."""


def drawn_families(seed_value: int, count: int) -> list[Family]:
    """``count`` families drawn by hypothesis (seeded: the same every run), from the later of
    twice as many examples (hypothesis's first examples are its simplest)."""
    collected: list[Family] = []

    @seed(seed_value)
    @settings(max_examples=2 * count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data: Any) -> None:
        named = data.draw(st.booleans())
        versions = [data.draw(named_records() if named else records())]
        for _ in range(VERSIONS - 1):
            versions.append(data.draw(evolved_named(versions[-1]) if named else evolved(versions[-1])))
        try:
            for version in versions:
                parse(text(version))
        except SchemaError:
            return
        pools = [data.draw(st.lists(values(normalized(v)), min_size=2, max_size=5)) for v in versions]
        collected.append(Family(versions, pools))
    collect()
    return collected[-count:]


def bundle(families: list[Family], version: int, oracle: bool = False) -> dict:
    fields = [{"name": "ts", "type": "long"}]
    for number, family in enumerate(families):
        schema = family.versions[version]
        fields.append({"name": f"fam{number}", "type": normalized(schema) if oracle else schema})
    # In the null namespace: a family's types keep the full names its values' unions are labelled by.
    return {"type": "record", "name": "DifferentialBundle", "fields": fields}


def register_families(client: Any, prefix: str, families: list[Family], outcome: Outcome) -> list[Family]:
    """Each family's versions registered in order under ``<prefix>-famN`` (BACKWARD); a version
    the registry refuses, and those after it, are dropped from the family."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    kept = []
    for number, family in enumerate(families):
        accepted = 0
        for version in family.versions:
            try:
                client.register_schema(f"{prefix}-fam{number}", Schema(json.dumps(version), "AVRO"))
            except SchemaRegistryError:
                break
            accepted += 1
        outcome.refused_versions += len(family.versions) - accepted
        if accepted == len(family.versions):
            kept.append(family)
    return kept


def run_differential(spark: Any, cluster: Any, registry_url: str, topic: str, checkpoint: Any, *, seed_value: int,
                     family_count: int, record_count: int, deep_path: bool) -> Outcome:
    outcome = Outcome()
    client = _client(registry_url)
    families = register_families(client, topic, drawn_families(seed_value, family_count), outcome)
    assert families, "no family survived the registry"
    versions = [bundle(families, v) for v in range(VERSIONS)]
    encoders = [avro_serializer(registry_url, json.dumps(v), client) for v in versions]
    cluster.create_topic(topic, 2)
    rng = random.Random(seed_value)
    written: dict[tuple[int, int], tuple[int, dict, bytes]] = {}
    batch = []
    next_offset = [0, 0]
    # Each version's first record in order (the bundle's versions are registered in order), then
    # old and new writers interleaved.
    order = list(range(VERSIONS)) + [rng.randrange(VERSIONS) for _ in range(record_count - VERSIONS)]
    for n, version in enumerate(order):
        value = {"ts": T + n * 1000 if rng.random() < 0.9 else rng.choice([-1, 2**62, 0])}
        for number, family in enumerate(families):
            value[f"fam{number}"] = rng.choice(family.pools[version])
        payload = encoders[version](value, topic)
        partition = n % 2
        written[(partition, next_offset[partition])] = (version, value, payload)
        batch.append(Record(partition, T + n, None, payload))
        next_offset[partition] += 1
    cluster.produce(topic, batch)
    reader = bundle(families, VERSIONS - 1)
    reader_oracle = bundle(families, VERSIONS - 1, oracle=True)
    candidates = [steps for steps, _ in _paths(reader_oracle)] if deep_path else [("ts",)]
    steps = rng.choice(candidates)
    leaf = dict(_paths(reader_oracle))[steps]

    frame = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("schema.registry.url", registry_url).option("value.format", "avro-confluent")
             .option("value.decode", "true").option("value.decode.mode", "PERMISSIVE")
             .option("eventTime.field", ".".join(steps)).option("eventTime.onInvalid", "skip")
             .option("maxOffsetsPerTrigger", str(max(50, record_count // 3))).load())
    # Each batch through Arrow as Spark sends it (foreachBatch): the memory sink makes Java rows,
    # whose java.sql.Timestamp and Date overflow on timestamps and dates Spark itself holds, and
    # toArrow() casts to the declared nullability, which a PERMISSIVE null valueDecoded fails.
    import pyarrow as pa
    batches: list = []

    def collect(frame: Any, batch_id: int) -> None:
        batches.extend(frame.select("partition", "offset", "eventTime", "valueDecoded", "valueDecodeError")
                       ._collect_as_arrow())
    query = (frame.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(600)
    finally:
        query.stop()
    if query.exception() is not None:
        # The one failure the design allows: a writer whose every record cannot be read as the
        # reader on the eventTime path fails the query, naming the record, the id and the field.
        message = str(query.exception())
        named = re.search(rf"kafkasync: {re.escape(topic)}-\d+ offset \d+: writer schema id \d+ does not resolve "
                          r"to the reader schema: field '[^']+'", message)
        assert named, f"the query failed without naming the record, schema id and field: {message[:3000]}"
        outcome.query_failures.append(named.group(0))
        return outcome
    table = pa.Table.from_batches(batches)
    assert table.num_rows == len(written), (table.num_rows, len(written))
    decoded = plain_values(table.column("valueDecoded").combine_chunks())
    times = table.column("eventTime").cast("int64").to_pylist()
    errors = table.column("valueDecodeError").to_pylist()
    writers = {v: fastavro.parse_schema(strip(versions[v])) for v in range(VERSIONS)}
    reader_parsed = fastavro.parse_schema(strip(reader))
    oracles = {v: Oracle(bundle(families, v, oracle=True), reader_oracle) for v in range(VERSIONS)}
    for row, (partition, offset) in enumerate(zip(table.column("partition").to_pylist(),
                                                  table.column("offset").to_pylist())):
        version, value, payload = written[(partition, offset)]
        where = f"{topic}-{partition} offset {offset} (writer version {version + 1})"
        writer_oracle = bundle(families, version, oracle=True)
        try:  # as test_avro_differential's: fastavro's failures and the rules' decide FAILS
            try:
                fv = fastavro.schemaless_reader(io.BytesIO(payload[5:]), writers[version], reader_parsed)
            except UnicodeDecodeError:  # fastavro took a string branch Java does not take (the rules)
                expected = oracles[version].expect(reader_oracle, writer_oracle, value, None, fastavro_agrees=False)
            else:
                expected = oracles[version].expect(reader_oracle, writer_oracle, value, fv)
        except (_Fails, fastavro.read.SchemaResolutionError, UnicodeDecodeError):  # bytes not UTF-8 read as text
            expected = FAILS
        outcome.compared += 1
        if expected is FAILS:
            outcome.failures += 1
            reason = errors[row] or ""
            schema_id = int.from_bytes(payload[1:5], "big")
            if decoded[row] is not None or not reason:
                outcome.differing.append(f"{where}: the reference refuses it, kafkasync gives {decoded[row]!r}")
            elif f"schema id {schema_id}" in reason and re.search(r"field '[^']+'|\bf\d|fam\d", reason):
                outcome.failures_named += 1
            continue
        if errors[row] is not None or decoded[row] != norm(expected):
            outcome.differing.append(f"{where}: kafkasync {decoded[row]!r} ({errors[row]}), "
                                     f"reference {norm(expected)!r}")
            continue
        expected_time = _expected_time(expected, steps, leaf)
        got = "invalid" if times[row] is None else times[row] // 1000
        outcome.time_compared += 1
        if got != expected_time:
            outcome.differing.append(f"{where}: eventTime at {'.'.join(steps)} {got}, reference {expected_time}")
    return outcome


def test_random_families_through_the_registry_and_spark_equal_fastavros_resolution(
        spark, kafka_cluster, unique_topic, schema_registry_url, tmp_path):
    register(spark)
    outcome = run_differential(spark, kafka_cluster, schema_registry_url, unique_topic("avro-differential"),
                               tmp_path / "checkpoint", seed_value=61, family_count=4, record_count=240,
                               deep_path=False)
    print(f"\nregistry differential: {outcome}")
    assert outcome.differing == [] and outcome.query_failures == [], "\n".join(outcome.differing[:20])
    assert outcome.compared == 240 and outcome.failures == outcome.failures_named


@pytest.mark.slow
@pytest.mark.parametrize("seed_value", [1, 2, 3])
def test_eighty_one_families_through_the_registry_and_spark_equal_fastavros_resolution(
        spark, kafka_cluster, unique_topic, schema_registry_url, tmp_path, seed_value):
    register(spark)
    totals = Outcome()
    for bundle_number in range(9):  # 9 bundles of 9 families: 81 families per seed
        outcome = run_differential(spark, kafka_cluster, schema_registry_url,
                                   unique_topic(f"avro-differential-{seed_value}-{bundle_number}"),
                                   tmp_path / f"checkpoint-{bundle_number}", seed_value=seed_value * 100 + bundle_number,
                                   family_count=9, record_count=400, deep_path=bundle_number % 2 == 1)
        totals.compared += outcome.compared
        totals.differing += outcome.differing
        totals.failures += outcome.failures
        totals.failures_named += outcome.failures_named
        totals.time_compared += outcome.time_compared
        totals.refused_versions += outcome.refused_versions
        totals.query_failures += outcome.query_failures
    print(f"\nregistry differential, seed {seed_value}: compared {totals.compared}, differing {len(totals.differing)}, "
          f"failures {totals.failures} (named {totals.failures_named}), times {totals.time_compared}, "
          f"versions the registry refused {totals.refused_versions}, queries failed naming record, id and field "
          f"{totals.query_failures}")
    assert totals.differing == [], "\n".join(totals.differing[:20])
    assert totals.failures == totals.failures_named
