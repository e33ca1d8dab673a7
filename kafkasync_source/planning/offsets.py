"""The offset JSON kafkasync hands to Spark, and its typed model.

Spark writes every batch's end offset to the checkpoint's offset log and hands it back as the
next batch's start, also after a restart. That makes the offset the durable home for what
must survive restarts besides the positions themselves (KIP-472 wanted partition time to
survive; Kafka Streams keeps it in commit metadata): per partition the next offset and the
partition time, plus the query's stream time and cumulative counters.

Times mean nothing without the time they were measured on, so the offset also records the
query's *time source* (``timeSource``: ``kafkaTimestamp``, or the ``eventTime.*`` option and
format). A checkpoint written before the field existed was planned on Kafka timestamps (the
only time there was before ``eventTime.*``, and the default since). When a restart's options
name another time source, :meth:`SyncOffset.on_time_source` re-bases the offset: stream time
and partition times start afresh on the new time from the first batch (docs/event-time.md).

What a checkpoint's records were decoded with is part of it too: a query that decodes a Schema
Registry format records each part's reader schema (``readerSchemas``: subject, version and id,
as formats/options.py's ``ReaderPin`` writes them), which Spark fixed at ``load()``. A restart
pinned to another one notices it at its first trigger (spark/stream_reader.py) instead of
silently changing the decoded column's type. Written only where a part has a reader schema.

The JSON is written with sorted topics and numerically sorted partitions, so two equal
offsets always serialise identically (Spark compares offsets by their JSON).

Example::

    {"version": 1,
     "topics": {"orders": {"0": {"offset": 1200, "partitionTime": 1700000000000}}},
     "streamTime": 1700000000000,
     "enforcedProcessingTotal": 3,
     "lateRecordsTotal": 0,
     "timeSource": "kafkaTimestamp",
     "readerSchemas": {"value": {"subject": "orders-value", "version": 2, "id": 7}}}
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from kafkasync_source.event_time import KAFKA_TIMESTAMP_SOURCE, canonical_time_source
from kafkasync_source.planning.planner import NO_TIMESTAMP, TopicPartition

OFFSET_FORMAT_VERSION = 1


class KafkaSyncOffsetError(ValueError):
    """An offset handed back by Spark cannot be understood (e.g. a foreign checkpoint)."""


@dataclass(frozen=True)
class PartitionOffset:
    """Where one partition stands after a batch."""

    next_offset: int
    partition_time: int = NO_TIMESTAMP


@dataclass(frozen=True)
class SyncOffset:
    """A kafkasync source offset: per-partition positions plus durable counters."""

    partitions: Mapping[TopicPartition, PartitionOffset]
    stream_time: int = NO_TIMESTAMP
    enforced_processing_total: int = 0
    late_records_total: int = 0
    time_source: str = KAFKA_TIMESTAMP_SOURCE
    """What ``stream_time`` and the partition times were measured on (see the module doc)."""
    reader_schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """By part (``value``, ``key``), the reader schema its records were decoded with:
    ``{"subject", "version", "id"}``; empty for a query that decodes none (see the module doc)."""

    def next_offsets(self) -> dict[TopicPartition, int]:
        return {tp: p.next_offset for tp, p in self.partitions.items()}

    def with_partitions(self, partitions: Mapping[TopicPartition, PartitionOffset]) -> "SyncOffset":
        return replace(self, partitions=dict(partitions))

    def read_as(self, reader_schemas: Mapping[str, Mapping[str, Any]]) -> "SyncOffset":
        """This offset recording ``reader_schemas`` as what its records were decoded with."""
        return self if reader_schemas == self.reader_schemas else replace(self, reader_schemas=dict(reader_schemas))

    def on_time_source(self, time_source: str) -> "SyncOffset":
        """This offset as a query synchronizing on ``time_source`` continues from it: itself
        when that is what it was planned on; else the same positions and counters with stream
        time and partition times unknown, to be learned again on the new time (times of
        another source would cap or release batches by the wrong clock)."""
        if time_source == self.time_source:
            return self
        return replace(
            self,
            partitions={tp: PartitionOffset(p.next_offset) for tp, p in self.partitions.items()},
            stream_time=NO_TIMESTAMP,
            time_source=time_source,
        )

    def to_json(self) -> dict[str, Any]:
        topics: dict[str, dict[str, dict[str, int]]] = {}
        for tp in sorted(self.partitions):
            position = self.partitions[tp]
            topics.setdefault(tp.topic, {})[str(tp.partition)] = {
                "offset": position.next_offset,
                "partitionTime": position.partition_time,
            }
        written: dict[str, Any] = {
            "version": OFFSET_FORMAT_VERSION,
            "topics": topics,
            "streamTime": self.stream_time,
            "enforcedProcessingTotal": self.enforced_processing_total,
            "lateRecordsTotal": self.late_records_total,
            "timeSource": self.time_source,
        }
        if self.reader_schemas:
            written["readerSchemas"] = {part: dict(self.reader_schemas[part]) for part in sorted(self.reader_schemas)}
        return written

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SyncOffset":
        if not isinstance(data, Mapping) or "topics" not in data:
            raise KafkaSyncOffsetError(
                f"Not a kafkasync offset: {str(data)[:200]!r}. Was this checkpoint written by "
                "another source (e.g. format(\"kafka\"))? Use a new checkpointLocation."
            )
        version = data.get("version", OFFSET_FORMAT_VERSION)
        if version > OFFSET_FORMAT_VERSION:
            raise KafkaSyncOffsetError(
                f"The checkpoint's kafkasync offset has version {version}; this kafkasync "
                f"understands up to {OFFSET_FORMAT_VERSION}. Upgrade kafkasync."
            )
        try:
            partitions = {
                TopicPartition(topic, int(partition)): PartitionOffset(
                    int(entry["offset"]), int(entry.get("partitionTime", NO_TIMESTAMP))
                )
                for topic, entries in data["topics"].items()
                for partition, entry in entries.items()
            }
            return cls(
                partitions=partitions,
                stream_time=int(data.get("streamTime", NO_TIMESTAMP)),
                enforced_processing_total=int(data.get("enforcedProcessingTotal", 0)),
                late_records_total=int(data.get("lateRecordsTotal", 0)),
                # A JSONPath recorded before time sources were canonical reads as today's
                # spelling: the same path continues without re-basing (event_time/seam.py).
                time_source=canonical_time_source(str(data.get("timeSource", KAFKA_TIMESTAMP_SOURCE))),
                reader_schemas=_reader_schemas(data.get("readerSchemas", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise KafkaSyncOffsetError(
                f"Malformed kafkasync offset ({err!r}): {str(data)[:200]!r}"
            ) from None


def _reader_schemas(data: Any) -> dict[str, dict[str, Any]]:
    """``readerSchemas`` as written: by part, a subject (text), a version and an id (integers)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"readerSchemas is not an object: {data!r}")
    found = {}
    for part, pin in data.items():
        if not isinstance(pin, Mapping) or not isinstance(pin.get("subject"), str) or not all(
                type(pin.get(key)) is int for key in ("version", "id")):
            raise ValueError(f"readerSchemas[{part!r}] is not a subject, version and id: {pin!r}")
        found[str(part)] = {"subject": pin["subject"], "version": pin["version"], "id": pin["id"]}
    return found
