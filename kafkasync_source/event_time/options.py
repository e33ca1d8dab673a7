"""The ``eventTime.*`` options as the seam takes them: where the time is, its format, and what an
invalid time does (parsed and validated with the other options in config/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON_PATH, HEADER, EXTRACTOR, FIELD = "jsonPath", "header", "extractor", "field"
EVENT_TIME_OPTIONS = {source: f"eventTime.{source}" for source in (JSON_PATH, HEADER, EXTRACTOR, FIELD)}
"""Where the time is, by option name: a JSONPath into the value, a header, a function, a field of
the value decoded by its ``value.format`` (kafkasync_source/formats/)."""

EPOCH_MILLIS, EPOCH_SECONDS, EPOCH_MICROS, ISO8601 = "epochMillis", "epochSeconds", "epochMicros", "iso8601"
FORMATS = (EPOCH_MILLIS, EPOCH_SECONDS, EPOCH_MICROS, ISO8601)
FAIL, SKIP, USE_PARTITION_TIME, RECORD_TIMESTAMP = "fail", "skip", "partitionTime", "recordTimestamp"
INVALID_POLICIES = (FAIL, SKIP, USE_PARTITION_TIME, RECORD_TIMESTAMP)
ANY_ORDER, NON_DECREASING = "any", "nonDecreasing"
ORDERS = (ANY_ORDER, NON_DECREASING)
"""``eventTime.order``: what the user promises of the times within each partition. ``any``: nothing,
so the driver reads every record to plan; ``nonDecreasing``: no record's time is below an earlier
record's of its partition, so the driver plans from a few records read at chosen offsets
(driver/probe_index.py) and the executors check the promise on every record they read."""

class KafkaSyncEventTimeError(ValueError):
    """A record's event time cannot be had and ``eventTime.onInvalid=fail``, or the
    ``eventTime.extractor`` function raised. The message names topic, partition and offset."""


class KafkaSyncExtractionError(RuntimeError):
    """Taking a record's time failed for a reason that is not the record's (the process ran out
    of memory or stack): no ``eventTime.onInvalid`` policy applies, the query stops. Not a
    ValueError, so that no reader takes it for an invalid time. The message names the record."""



@dataclass(frozen=True)
class EventTimeOptions:
    """The validated ``eventTime.*`` options (config/options.py parses them)."""

    source: str
    """:data:`JSON_PATH`, :data:`HEADER` or :data:`EXTRACTOR`."""
    expression: str
    """The JSONPath, the header's name, or ``package.module:function``."""
    format: str = EPOCH_MILLIS
    on_invalid: str = FAIL
    order: str = ANY_ORDER
    value_format: Any = None
    """:data:`FIELD` only: the value's format (``kafkasync_source.formats.FormatOptions``), whose
    ``time_reader(path, format)`` / ``batch_time_reader`` read the field; typed loosely so that
    the seam imports nothing of the formats (their decoders are an optional extra)."""

    @property
    def non_decreasing(self) -> bool:
        """The user promised ``eventTime.order=nonDecreasing``."""
        return self.order == NON_DECREASING

    @property
    def option(self) -> str:
        return EVENT_TIME_OPTIONS[self.source]

    def describe(self) -> str:
        """``eventTime.jsonPath='$.ts'``: for logs, errors and the live report."""
        return f"{self.option}={self.expression!r}"

    def check(self) -> None:
        """Compile the path or import the function now, so that a bad one fails at ``load()``
        (raises ValueError naming the option)."""
        from kafkasync_source.event_time import record_time  # the seam builds on these options

        record_time(self)



def broken_order(topic: str, partition: int, offset: int, time: int, earlier: str) -> KafkaSyncEventTimeError:
    """The error of a record that breaks ``eventTime.order=nonDecreasing``, wherever it is met
    (the driver's probes or an executor's read): the record, its time and what it is below."""
    return KafkaSyncEventTimeError(
        f"kafkasync: {topic}-{partition} offset {offset} has event time {time}, below {earlier}: "
        "eventTime.order=nonDecreasing promises that no record's time is below an earlier record's "
        "of its partition. Remove the option to read such a topic (the driver then reads every "
        "record, and batches follow Kafka Streams' order under any disorder); the query's "
        "checkpoint stays valid."
    )


def record_name(record: Any) -> str:
    return f"{record.topic()}-{record.partition()} offset {record.offset()}"
