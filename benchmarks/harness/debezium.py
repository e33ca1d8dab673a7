"""Debezium change events of an orders table in Confluent-framed Avro, as the Schema Registry
measurements read them (``formats_bench``, ``event_time.avro_extraction``).

Updates with ``before`` and ``after`` rows, ``source``, ``op`` and ``ts_ms``, about 200 B framed,
the schema registered by confluent-kafka's ``AvroSerializer`` in a real registry. The records are
encoded with fastavro's ``schemaless_writer`` behind the serializer's header, which is what
``AvroSerializer`` writes (checked byte for byte on a sample: :func:`avro_encoder`), so that
producing 1.6 M records takes seconds, not minutes.
"""

from __future__ import annotations

import io
import json
import time
from typing import Any, Callable, Iterator

from benchmarks.harness.backlogs import PARTITIONS, write_topic
from kafkasync_dev.testing import Record

SPAN_MS = 6 * 3_600_000


def envelope_schema() -> str:
    from kafkasync_dev.testing.debezium import VALUE_V2, envelope_schema

    return envelope_schema(VALUE_V2)


def change_event(partition: int, i: int, committed_ms: int, processed_ms: int) -> dict[str, Any]:
    """An update of an order: about 200 B framed."""
    from kafkasync_dev.testing.debezium import change_event as debezium_change_event

    amount = round((i % 10_000) / 7, 2)
    row = {"id": f"order-{partition}-{i:08d}", "customer": f"customer-{(i * 7919) % 1_000_000:07d}@example.com",
           "amount": amount, "currency": "EUR"}
    event = debezium_change_event(row, committed_ms, processed_ms, op="u")
    event["before"] = {**row, "amount": amount + 1}
    return event


def avro_encoder(registry_url: str, topic: str) -> Callable[[dict], bytes]:
    """``event -> framed bytes``: the serializer's header (its registered id) and fastavro's
    ``schemaless_writer`` body, checked against ``AvroSerializer``'s own bytes on a sample."""
    import fastavro

    from kafkasync_dev.testing.debezium import avro_serializer

    schema = envelope_schema()
    serialize = avro_serializer(registry_url, schema)
    parsed = fastavro.parse_schema(json.loads(schema))
    sample = [change_event(p, i, 1_700_000_000_000 + i, 1_700_000_000_000) for p in range(2) for i in (0, 7, 123_456)]
    header = serialize(sample[0], topic)[:5]

    def encode(event: dict) -> bytes:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, event)
        return header + body.getvalue()
    for event in sample:
        if encode(event) != serialize(event, topic):
            raise AssertionError("fastavro's encoding differs from AvroSerializer's: the benchmark would not "
                                 "read what confluent-kafka writes")
    return encode


def produce_changes(bootstrap: str, registry_url: str, topic: str, records_per_partition: int) -> dict[str, Any]:
    """8 partitions of change events: Kafka timestamps a copy job's write time (10 records a ms),
    the event time, ``source.ts_ms``, over 6 hours in order within each partition; the records
    and mean framed value bytes."""
    encode = avro_encoder(registry_url, topic)
    now = int(time.time() * 1000)
    event_start = now - SPAN_MS - 3_600_000
    step = SPAN_MS // records_per_partition
    copy_started = now - 60_000 - PARTITIONS * records_per_partition // 10
    value_bytes = [0]

    def records() -> Iterator[Record]:
        for i in range(records_per_partition):
            for partition in range(PARTITIONS):
                written = copy_started + (i * PARTITIONS + partition) // 10
                value = encode(change_event(partition, i, event_start + i * step + partition, written))
                value_bytes[0] += len(value)
                yield Record(partition, written, b"k%07d" % i, value)

    write_topic(bootstrap, topic, records())
    count = PARTITIONS * records_per_partition
    return {"records": count, "mean_value_bytes": round(value_bytes[0] / count, 1)}


def changes_in_memory(count: int, registry_url: str, topic: str = "bench-debezium") -> tuple[list, list]:
    """``count`` change events framed as Avro, and the same events as JSON: ``(avro values, json
    values)``, for the measurements that need no broker."""
    encode = avro_encoder(registry_url, topic)
    now = int(time.time() * 1000)
    events = [change_event(0, i, now - 3_600_000 + i, now + i) for i in range(count)]
    return [encode(event) for event in events], [json.dumps(event, separators=(",", ":")).encode() for event in events]
