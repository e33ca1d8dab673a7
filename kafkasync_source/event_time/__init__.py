"""A record's event time: the one seam every reader of time shares (driver and executors).

* :mod:`~kafkasync_source.event_time.seam`: ``record -> time code``, the invalid policies;
* :mod:`~kafkasync_source.event_time.codes`: the time codes (:class:`TimeCode`);
* :mod:`~kafkasync_source.event_time.watch`: extraction calls that do not return, named;
* :mod:`~kafkasync_source.event_time.options`: the ``eventTime.*`` options the seam is built from;
* :mod:`~kafkasync_source.event_time.json_path`, :mod:`~kafkasync_source.event_time.formats`,
  :mod:`~kafkasync_source.event_time.extractor`: where a time is read and how it is converted.
"""

from typing import TYPE_CHECKING, Any

from kafkasync_source.event_time.codes import TimeCode
from kafkasync_source.event_time.formats import MAX_TIME_MS
from kafkasync_source.event_time.options import (
    EVENT_TIME_OPTIONS,
    FORMATS,
    INVALID_POLICIES,
    USE_PARTITION_TIME,
    EventTimeOptions,
    KafkaSyncEventTimeError,
    KafkaSyncExtractionError,
    broken_order,
)
from kafkasync_source.event_time.seam import (
    KAFKA_TIMESTAMP,
    KAFKA_TIMESTAMP_SOURCE,
    NO_TIME,
    PARTITION_TIME,
    SKIPPED,
    RecordTime,
    canonical_time_source,
    record_time,
    time_source,
)
from kafkasync_source.event_time.watch import stalled_extractions

if TYPE_CHECKING:  # pragma: no cover
    from kafkasync_source.event_time.json_path import parse_json_path

__all__ = [
    "EVENT_TIME_OPTIONS",
    "FORMATS",
    "INVALID_POLICIES",
    "KAFKA_TIMESTAMP",
    "KAFKA_TIMESTAMP_SOURCE",
    "MAX_TIME_MS",
    "NO_TIME",
    "PARTITION_TIME",
    "SKIPPED",
    "USE_PARTITION_TIME",
    "EventTimeOptions",
    "KafkaSyncEventTimeError",
    "KafkaSyncExtractionError",
    "RecordTime",
    "TimeCode",
    "broken_order",
    "canonical_time_source",
    "parse_json_path",
    "record_time",
    "stalled_extractions",
    "time_source",
]


def __getattr__(name: str) -> Any:
    """``parse_json_path`` on first use: the JSONPath module and msgspec are imported where a
    query reads a JSONPath (:func:`~kafkasync_source.event_time.seam.record_time`), not by every
    process that plans or reads a query."""
    if name == "parse_json_path":
        from kafkasync_source.event_time.json_path import parse_json_path

        return parse_json_path
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
