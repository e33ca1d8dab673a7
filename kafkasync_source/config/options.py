"""Option parsing and validation for the kafkasync source.

Option names and meanings follow Spark's built-in Kafka source (``format("kafka")``) so that
switching a query to ``format("kafkasync")`` needs no other change. Everything is validated
when the query starts: an unknown option or a bad value fails fast with a message naming the
option and what is allowed, instead of surfacing later as a stuck or silently wrong query.

The client settings the ``kafka.*`` options become (client_config.py), ``subscribePattern``'s
Java regex (java_regex.py), how a value is spelt (option_values.py) and the option reference
(option_docs.py) live beside this module.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

from kafkasync_source.config.client_config import client_config_from, query_group_id
from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.format_options import REGISTRY_PREFIX, format_options
from kafkasync_source.config.java_regex import java_regex_to_python
from kafkasync_source.config.option_docs import OPTION_DOCS, documented_source_options
from kafkasync_source.config.option_values import (
    boolean,
    bounded_int,
    duration_ms,
    json_int,
    json_integer,
    one_of,
    positive_int,
    task_idle_ms,
)
from kafkasync_source.event_time.options import (
    EVENT_TIME_OPTIONS,
    EXTRACTOR,
    FIELD,
    FORMATS,
    INVALID_POLICIES,
    ORDERS,
    USE_PARTITION_TIME,
    EventTimeOptions,
)
from kafkasync_source.formats.options import FormatOptions, ReaderPin
from kafkasync_source.planning.planner import NEVER_WAIT, WAIT_FOREVER, TopicPartition

logger = logging.getLogger(__name__)

EARLIEST = -2
"""Offset placeholder for "earliest" inside a startingOffsets/endingOffsets JSON (Spark's)."""
LATEST = -1
"""Offset placeholder for "latest" inside a startingOffsets/endingOffsets JSON (Spark's)."""

# Spark's Kafka-source options that kafkasync understands, in their lower-case form (Spark
# hands Python data sources a case-insensitive, lower-cased option map): exactly the documented
# ones (option_docs.py, which docs/reference/options.md is generated from).
_SUBSCRIPTIONS = ("subscribe", "subscribepattern", "assign")
_KNOWN_OPTIONS = documented_source_options() | {
    "path",  # Spark may pass an empty "path" through DataFrameReader.load()
}

BYTES_PER_BUFFERED_RECORD = 16
"""The driver keeps an int64 offset and an int64 timestamp per fetched, not yet emitted record."""
DEFAULT_DRIVER_BUFFER_BYTES = 32 * 1024 * 1024
_DRIVER_BUFFER_BYTES_RANGE = (1024 * 1024, 64 * 1024 * 1024 * 1024)
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # format("kafka")'s maxTriggerDelay default, 15m
DEFAULT_MAX_RECORDS_PER_PARTITION = 200_000
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_PARTITION_DISCOVERY_INTERVAL_MS = 10_000
# Spark's code defaults (KafkaOffsetReaderAdmin), see offset_reader.OffsetReader.
DEFAULT_FETCH_OFFSET_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1000

PLANNING_AUTO = "auto"
"""``planningMode`` default: plan from the brokers' time index where it answers exactly, else
from the driver's fetch of every record's timestamp (per batch, with the reason logged once)."""
PLANNING_TIME_INDEX = "timeIndex"
"""``planningMode=timeIndex``: the driver reads no record; a query fails, naming the partition
and why, where only reading records could give the exact cut."""
PLANNING_FETCH = "fetch"
"""``planningMode=fetch``: always fetch timestamps on the driver (round-2 behaviour)."""
PLANNING_MODES = (PLANNING_AUTO, PLANNING_TIME_INDEX, PLANNING_FETCH)

AUTOSTOP_TRANSIENT = "transient"
"""``autostop.offsets`` default: Trigger.AvailableNow captures its stop offsets on every start."""
AUTOSTOP_DURABLE = "durable"
"""``autostop.offsets=durable``: stop offsets survive failure restarts (KIP-95)."""
DEFAULT_AUTOSTOP_TOPIC = "kafkasync-autostop"

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_NO_PINS: Mapping[str, ReaderPin] = {}


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of the three Spark subscription styles."""

    topics: tuple[str, ...] = ()
    pattern: Optional[str] = None
    assigned: tuple[TopicPartition, ...] = ()


OffsetSpec = Union[str, dict[str, dict[int, int]]]
"""``"earliest"``, ``"latest"`` or ``{topic: {partition: offset}}`` with -2/-1 placeholders."""


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one kafkasync query or batch read."""

    subscription: Subscription
    client_config: dict[str, str] = field(repr=False)
    commit_group_id: Optional[str] = None
    """``kafka.group.id``: commit processed offsets to this group, for monitoring only. (The
    internal consumers' group id is ``client_config["group.id"]``, see consumer_group_id.)"""
    starting_offsets: OffsetSpec = "latest"
    ending_offsets: OffsetSpec = "latest"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    include_partition_time: bool = False
    """``includePartitionTime``: a ``partitionTime`` column, the largest record timestamp of
    the partition up to and including each record (KIP-472)."""
    max_task_idle_ms: int = 0
    driver_buffer_bytes: int = DEFAULT_DRIVER_BUFFER_BYTES
    """Bound on the driver's buffered (offset, timestamp) pairs across all partitions."""
    buffered_records_per_partition: Optional[int] = None
    """Optional further bound per partition (default: the budget split evenly)."""
    rate_limits: "RateLimitOptions" = field(default_factory=lambda: RateLimitOptions())
    timestamps: "TimestampOptions" = field(default_factory=lambda: TimestampOptions())
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    min_partitions: Optional[int] = None
    """About how many Spark tasks a batch gets (default: the driver's cores, input_partitions.py)."""
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    partition_discovery_interval_ms: int = DEFAULT_PARTITION_DISCOVERY_INTERVAL_MS
    fetch_offset_retries: int = DEFAULT_FETCH_OFFSET_RETRIES
    """``fetchOffset.numRetries``: retries of a metadata or offset look-up after a retriable error."""
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    autostop_offsets: str = AUTOSTOP_TRANSIENT
    """Trigger.AvailableNow stop offsets: ``transient`` or ``durable`` (see bounded_run.py)."""
    autostop_key: Optional[str] = None
    """Names the bounded run whose stop offsets are stored (``durable`` only)."""
    autostop_topic: str = DEFAULT_AUTOSTOP_TOPIC
    """Compacted Kafka topic holding durable stop offsets."""
    planning_mode: str = PLANNING_AUTO
    """``planningMode``: where the driver learns timestamps (see PLANNING_MODES)."""
    event_time: Optional[EventTimeOptions] = None
    """``eventTime.*``: the record's time is read from its value, a header or a function, not
    its Kafka timestamp (event_time/seam.py); None: the Kafka timestamp."""
    value_format: Optional[FormatOptions] = None
    """``value.format``: the value's Schema Registry format (kafkasync_source/formats/); None: bytes."""
    key_format: Optional[FormatOptions] = None
    """``key.format``, as ``value.format`` for the key."""

    @property
    def decoded_formats(self) -> tuple[FormatOptions, ...]:
        """The formats whose decoded value is a column (``value.decode`` / ``key.decode``), key first."""
        return tuple(f for f in (self.key_format, self.value_format) if f is not None and f.decode)

    @property
    def reader_pins(self) -> dict[str, ReaderPin]:
        """By part (``value``, ``key``), the reader schema its records are decoded with, where one is pinned."""
        return {f.part: f.pin for f in (self.key_format, self.value_format) if f is not None and f.pin is not None}

    @property
    def tracks_partition_time(self) -> bool:
        """Whether executors follow each partition's time through its range: for the
        ``partitionTime`` column, for records that take it as their event time, or to check
        ``eventTime.order=nonDecreasing`` on every record against the time before it."""
        return self.include_partition_time or (
            self.event_time is not None
            and (self.event_time.on_invalid == USE_PARTITION_TIME or self.event_time.non_decreasing)
        )

    @property
    def in_time_order(self) -> bool:
        """The user promised each partition's times in order (``eventTime.order=nonDecreasing``)."""
        return self.event_time is not None and self.event_time.non_decreasing

    @property
    def bootstrap_servers(self) -> str:
        return self.client_config["bootstrap.servers"]

    def offset_reader_settings(self) -> dict[str, int]:
        """Keyword arguments of :class:`~kafkasync_source.driver.offset_reader.OffsetReader`."""
        return {"retries": self.fetch_offset_retries,
                "retry_interval_ms": self.fetch_offset_retry_interval_ms}

    def buffer_capacity(self, partitions: int) -> int:
        """Records the driver may buffer per partition when it reads ``partitions`` of them."""
        capacity = self.driver_buffer_bytes // BYTES_PER_BUFFERED_RECORD // max(1, partitions)
        if self.buffered_records_per_partition is not None:
            capacity = min(capacity, self.buffered_records_per_partition)
        return max(1, capacity)


TimestampSpec = Union[int, dict[str, dict[int, int]]]
"""One timestamp (ms) for every partition, or ``{topic: {partition: timestamp}}``."""


@dataclass(frozen=True)
class TimestampOptions:
    """format("kafka")'s timestamp options: start (and end) at the first offset whose record
    timestamp is >= a time. The global timestamp takes precedence over the per-partition
    JSON, which takes precedence over startingOffsets/endingOffsets (Spark's
    ``KafkaSourceProvider.getKafkaOffsetRangeLimit``). An end bounds a batch read, as in
    format("kafka"), and — beyond it — a trigger(availableNow=True) run."""

    starting: Optional[TimestampSpec] = None
    ending: Optional[TimestampSpec] = None
    strategy: str = "error"
    """``startingOffsetsByTimestampStrategy``: no record at or after the time -> ``error`` or
    ``latest``. An end with no such record is the latest offset, as in Spark."""

    @property
    def starting_option(self) -> str:
        """The name of the option ``starting`` came from, for messages."""
        return "startingTimestamp" if isinstance(self.starting, int) else "startingOffsetsByTimestamp"

    @property
    def ending_option(self) -> str:
        """The name of the option ``ending`` came from, for messages."""
        return "endingTimestamp" if isinstance(self.ending, int) else "endingOffsetsByTimestamp"


@dataclass(frozen=True)
class RateLimitOptions:
    """``maxOffsetsPerTrigger`` / ``minOffsetsPerTrigger`` / ``maxTriggerDelay`` (format("kafka")'s
    names and meanings) and kafkasync's ``maxEventTimePerTrigger``; None where not set."""

    max_offsets_per_trigger: Optional[int] = None
    min_offsets_per_trigger: Optional[int] = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_event_time_per_trigger_ms: Optional[int] = None


def parse_options(options: Mapping[str, str], *, streaming: Optional[bool],
                  reader_pins: Mapping[str, ReaderPin] = _NO_PINS) -> SourceOptions:
    """Validate Spark's option map. Raises :class:`KafkaSyncOptionError` naming the option.

    ``streaming=None`` skips the checks that depend on the read mode: ``DataSource.schema()``
    runs for batch and streaming reads alike and cannot tell which one it serves.
    ``reader_pins``: by part (``value``, ``key``), the reader schemas pinned when the query was
    loaded (spark/schema.py carries them); a part without one is pinned now."""
    lowered = {key.lower(): str(value) for key, value in options.items()}
    client_config = client_config_from(lowered)
    commit_group_id = client_config.get("group.id")
    client_config["group.id"] = query_group_id(lowered, commit_group_id, streaming)
    unknown = sorted(
        key for key in lowered
        if not key.startswith(("kafka.", REGISTRY_PREFIX)) and key not in _KNOWN_OPTIONS
    )
    if unknown:
        raise KafkaSyncOptionError(
            f"Unknown option(s) {', '.join(_with_suggestion(k) for k in unknown)}. kafkasync accepts: "
            + ", ".join(sorted(_KNOWN_OPTIONS - {"path"}))
            + " and kafka.* client settings."
        )
    if streaming is False and "max.task.idle.ms" in lowered:
        raise KafkaSyncOptionError(
            "Option 'max.task.idle.ms' applies to streaming reads only; a batch read "
            "(spark.read) returns every record between startingOffsets and endingOffsets."
        )
    if streaming is True and "endingoffsets" in lowered:
        raise KafkaSyncOptionError(
            "Option 'endingOffsets' is for batch reads (spark.read) only; a streaming query "
            "stops at end-of-log with trigger(availableNow=True)."
        )
    # As in Spark: a stream may start at either end; a batch read starts at "earliest"
    # (starting at "latest" would read nothing) and ends at "latest".
    starting = _offset_spec(
        lowered, "startingOffsets",
        allowed=("latest", "earliest") if streaming is not False else ("earliest",),
    )
    if streaming is False and isinstance(starting, dict) and any(
        offset == LATEST for offsets in starting.values() for offset in offsets.values()
    ):
        raise KafkaSyncOptionError(
            "Option 'startingOffsets': -1 (latest) is not allowed for a batch read (it would "
            "read nothing); use an offset or -2 (earliest)."
        )
    ending = _offset_spec(lowered, "endingOffsets", allowed=("latest",))
    max_task_idle_ms = task_idle_ms(lowered.get("max.task.idle.ms", "0"))
    autostop_offsets, autostop_key, autostop_topic = _autostop(lowered, streaming)
    planning_mode = _planning_mode(lowered)
    subscription = _subscription(lowered)
    topics = _topics(subscription)
    value_format = format_options(lowered, topics, part="value", needs_reader="eventtime.field" in lowered,
                                  carried=reader_pins.get("value"))
    return SourceOptions(
        subscription=subscription,
        client_config=client_config,
        commit_group_id=commit_group_id,
        starting_offsets=starting,
        ending_offsets=ending,
        fail_on_data_loss=boolean(lowered, "failondataloss", "failOnDataLoss", True),
        include_headers=boolean(lowered, "includeheaders", "includeHeaders", False),
        include_partition_time=boolean(lowered, "includepartitiontime", "includePartitionTime", False),
        max_task_idle_ms=max_task_idle_ms,
        driver_buffer_bytes=bounded_int(
            lowered, "driver.buffer.bytes", DEFAULT_DRIVER_BUFFER_BYTES, _DRIVER_BUFFER_BYTES_RANGE
        ),
        buffered_records_per_partition=bounded_int(
            lowered, "buffered.records.per.partition", None,
            (1, _DRIVER_BUFFER_BYTES_RANGE[1] // BYTES_PER_BUFFERED_RECORD),
        ),
        rate_limits=_rate_limits(lowered, streaming, max_task_idle_ms),
        timestamps=_timestamp_options(lowered),
        max_records_per_partition=positive_int(
            lowered, "maxrecordsperpartition", DEFAULT_MAX_RECORDS_PER_PARTITION,
            display="maxRecordsPerPartition",
        ),
        min_partitions=bounded_int(
            lowered, "minpartitions", None, (1, WAIT_FOREVER), display="minPartitions"
        ),
        poll_timeout_ms=positive_int(
            lowered, "kafkaconsumer.polltimeoutms", DEFAULT_POLL_TIMEOUT_MS,
            display="kafkaConsumer.pollTimeoutMs",
        ),
        partition_discovery_interval_ms=positive_int(
            lowered, "partitiondiscoveryintervalms", DEFAULT_PARTITION_DISCOVERY_INTERVAL_MS,
            display="partitionDiscoveryIntervalMs",
        ),
        fetch_offset_retries=bounded_int(
            lowered, "fetchoffset.numretries", DEFAULT_FETCH_OFFSET_RETRIES, (0, 1000),
            display="fetchOffset.numRetries",
        ),
        fetch_offset_retry_interval_ms=bounded_int(
            lowered, "fetchoffset.retryintervalms", DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS,
            (0, 3_600_000), display="fetchOffset.retryIntervalMs",
        ),
        autostop_offsets=autostop_offsets,
        autostop_key=autostop_key,
        autostop_topic=autostop_topic,
        planning_mode=planning_mode,
        event_time=_event_time(lowered, planning_mode, value_format),
        value_format=value_format,
        key_format=format_options(lowered, topics, part="key", needs_reader=False, carried=reader_pins.get("key")),
    )


_OPTION_SPELLINGS = {name.lower(): name for doc in OPTION_DOCS for name in doc.names if not name.startswith("kafka.")}
"""Each option's documented spelling by its lower-cased form (the form Spark hands a source)."""


def _with_suggestion(unknown: str) -> str:
    """``'maxoffsetpertrigger' (did you mean 'maxOffsetsPerTrigger'?)``: a misspelt option is
    named with its closest documented spelling, ahead of the list of every option."""
    import difflib  # only for a misspelt option: not imported by every query's planning runner

    close = difflib.get_close_matches(unknown, _OPTION_SPELLINGS, n=1, cutoff=0.8)
    return f"{unknown!r} (did you mean {_OPTION_SPELLINGS[close[0]]!r}?)" if close else repr(unknown)


def _planning_mode(lowered: Mapping[str, str]) -> str:
    return one_of(lowered, "planningMode", PLANNING_MODES)


def _event_time(lowered: Mapping[str, str], planning_mode: str,
                value_format: Optional[FormatOptions] = None) -> Optional[EventTimeOptions]:
    """``eventTime.jsonPath`` / ``.header`` / ``.extractor`` (at most one), ``eventTime.format``,
    ``eventTime.onInvalid`` and ``eventTime.order``. The path is compiled and the function imported here, so that a
    bad one fails at ``load()``."""
    given = {source: lowered[option.lower()] for source, option in EVENT_TIME_OPTIONS.items()
             if option.lower() in lowered}
    modifiers = [name for name in ("eventTime.format", "eventTime.onInvalid", "eventTime.order")
                 if name.lower() in lowered]
    if not given:
        if modifiers:
            raise KafkaSyncOptionError(
                f"Option '{modifiers[0]}' needs one of the options "
                f"{', '.join(repr(option) for option in EVENT_TIME_OPTIONS.values())}, which say where "
                "the event time is."
            )
        return None
    if len(given) > 1:
        raise KafkaSyncOptionError(
            "At most one of the options "
            f"{', '.join(repr(EVENT_TIME_OPTIONS[source]) for source in given)} may be set: a record "
            "has one event time."
        )
    (source, expression), = given.items()
    option = EVENT_TIME_OPTIONS[source]
    if not expression.strip():
        raise KafkaSyncOptionError(f"Option '{option}' must not be empty.")
    if source == EXTRACTOR and "eventtime.format" in lowered:
        raise KafkaSyncOptionError(
            "Option 'eventTime.format' does not apply to 'eventTime.extractor': the function "
            "returns epoch milliseconds or a datetime."
        )
    if planning_mode == PLANNING_TIME_INDEX:
        raise KafkaSyncOptionError(
            f"Option '{option}' cannot be combined with planningMode=timeIndex: the brokers' time "
            "index knows Kafka timestamps only, so batches are planned from fetched records (use "
            "planningMode=auto or fetch)."
        )
    if source == FIELD and value_format is None:
        raise KafkaSyncOptionError(
            "Option 'eventTime.field' names a field of the decoded value: set 'value.format' "
            "(avro-confluent, protobuf-confluent or json-schema-confluent) and 'schema.registry.url'."
        )
    options = EventTimeOptions(
        source=source,
        expression=expression.strip() if source in (EXTRACTOR, FIELD) else expression,
        format=one_of(lowered, "eventTime.format", FORMATS),
        on_invalid=one_of(lowered, "eventTime.onInvalid", INVALID_POLICIES),
        order=one_of(lowered, "eventTime.order", ORDERS),
        value_format=value_format if source == FIELD else None,
    )
    try:
        options.check()
    except ValueError as err:
        raise KafkaSyncOptionError(str(err)) from None
    return options




def _topics(subscription: Subscription) -> tuple[str, ...]:
    """The topics a subscription names (none for a pattern): a format's subject may follow from them."""
    return subscription.topics or tuple(sorted({tp.topic for tp in subscription.assigned}))


def _subscription(lowered: Mapping[str, str]) -> Subscription:
    given = [key for key in _SUBSCRIPTIONS if key in lowered]
    if len(given) != 1:
        raise KafkaSyncOptionError(
            "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set"
            + (f"; got {len(given)}." if given else ".")
        )
    kind, value = given[0], lowered[given[0]].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise KafkaSyncOptionError("Option 'subscribe' needs a comma-separated topic list.")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        if not value:
            raise KafkaSyncOptionError("Option 'subscribePattern' must not be empty.")
        return Subscription(pattern=java_regex_to_python(value))
    assign_form = 'Option \'assign\' must be JSON like {"topicA":[0,1],"topicB":[2,4]}'
    parsed = _json_object_of(value, list, assign_form)
    assigned = tuple(
        TopicPartition(topic, json_integer(partition, "assign", f"partition of topic {topic!r}"))
        for topic, partitions in parsed.items()
        for partition in partitions
    )
    if not assigned:
        raise KafkaSyncOptionError("Option 'assign' names no partitions.")
    return Subscription(assigned=tuple(sorted(set(assigned))))


def _json_object_of(value: str, member_type: type, form: str) -> dict:
    """``value`` as a JSON object each of whose members is a ``member_type`` (a topic's
    partitions: a list or an object), or the option's error saying ``form``, the form it needs."""
    try:
        parsed = json.loads(value)
    except ValueError:
        raise KafkaSyncOptionError(f"{form}; got {value!r}.") from None
    if not isinstance(parsed, dict) or not all(isinstance(member, member_type) for member in parsed.values()):
        raise KafkaSyncOptionError(f"{form}; got {value!r}.")
    return parsed


def _offset_spec(lowered: Mapping[str, str], display: str, *, allowed: tuple[str, ...]) -> OffsetSpec:
    """Parse startingOffsets/endingOffsets; ``allowed[0]`` is the default keyword."""
    value = lowered.get(display.lower(), allowed[0]).strip()
    if value.lower() in ("earliest", "latest"):
        if value.lower() not in allowed:
            raise KafkaSyncOptionError(
                f"Option '{display}' cannot be {value.lower()!r} here; use "
                + " or ".join(repr(a) for a in allowed) + " or a JSON offset map."
            )
        return value.lower()
    form = (
        f"Option '{display}' must be 'earliest', 'latest' or JSON like "
        '{"topicA":{"0":23,"1":-2}} (-2 = earliest, -1 = latest)'
    )
    parsed = _json_object_of(value, dict, form)
    spec = {
        topic: {
            _partition_key(p, display, topic): json_integer(o, display, f"offset of {topic}-{p}")
            for p, o in partitions.items()
        }
        for topic, partitions in parsed.items()
    }
    for topic, partitions in spec.items():
        for partition, offset in partitions.items():
            if offset < EARLIEST:
                raise KafkaSyncOptionError(
                    f"Option '{display}': offset {offset} for {topic}-{partition} is invalid "
                    "(use an offset >= 0, -2 for earliest or -1 for latest)."
                )
            if display == "endingOffsets" and offset == EARLIEST:
                raise KafkaSyncOptionError(
                    f"Option 'endingOffsets': -2 (earliest) is not allowed ({topic}-{partition})."
                )
    return spec




def _partition_key(key: str, display: str, topic: str) -> int:
    """A partition number as a JSON object key: a string of decimal digits, e.g. ``"0"``."""
    if not re.fullmatch(r"[0-9]+", key):
        raise KafkaSyncOptionError(
            f"Option '{display}': partition {key!r} of topic {topic!r} must be a non-negative "
            'integer, e.g. {"' + topic + '":{"0":23}}.'
        )
    return int(key)



def _autostop(lowered: Mapping[str, str], streaming: Optional[bool]) -> tuple[str, Optional[str], str]:
    """``autostop.offsets`` / ``autostop.key`` / ``autostop.topic`` (Trigger.AvailableNow)."""
    given = sorted(key for key in lowered if key.startswith("autostop."))
    if streaming is False and given:
        raise KafkaSyncOptionError(
            f"Option '{given[0]}' applies to streaming queries run with "
            "trigger(availableNow=True) only; a batch read stops at endingOffsets."
        )
    mode = lowered.get("autostop.offsets", AUTOSTOP_TRANSIENT).strip().lower()
    if mode not in (AUTOSTOP_TRANSIENT, AUTOSTOP_DURABLE):
        raise KafkaSyncOptionError(
            f"Option 'autostop.offsets' must be '{AUTOSTOP_TRANSIENT}' (default: every "
            f"Trigger.AvailableNow start captures new stop offsets, as Spark does) or "
            f"'{AUTOSTOP_DURABLE}' (a restart after a failure keeps the first start's stop "
            f"offsets); got {lowered['autostop.offsets']!r}."
        )
    key = lowered.get("autostop.key")
    topic = lowered.get("autostop.topic", DEFAULT_AUTOSTOP_TOPIC).strip()
    if mode == AUTOSTOP_TRANSIENT:
        extra = [name for name in ("autostop.key", "autostop.topic") if name in lowered]
        if extra:
            raise KafkaSyncOptionError(
                f"Option '{extra[0]}' only applies with autostop.offsets={AUTOSTOP_DURABLE}."
            )
        return mode, None, topic
    if key is None or not key.strip():
        raise KafkaSyncOptionError(
            f"Option 'autostop.key' is required with autostop.offsets={AUTOSTOP_DURABLE}: a "
            "name for this query's bounded runs, unique per checkpoint (e.g. the query name)."
        )
    if len(key.strip()) > 1000:
        raise KafkaSyncOptionError("Option 'autostop.key' must be at most 1000 characters.")
    if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise KafkaSyncOptionError(
            "Option 'autostop.topic' must be a Kafka topic name (1-249 characters of "
            f"A-Z a-z 0-9 . _ -); got {topic!r}."
        )
    return mode, key.strip(), topic




def _timestamp_options(lowered: Mapping[str, str]) -> TimestampOptions:
    # In a streaming query the ending timestamps bound trigger(availableNow=True) runs
    # (bounded_run.py); format("kafka") rejects them there ("ending offset/timestamp not valid
    # in streaming queries"). Any other trigger is refused at the first latestOffset, the
    # first moment the source knows the trigger (KafkaSyncStreamReader.latestOffset).
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaSyncOptionError(
            "Option 'startingOffsetsByTimestampStrategy' must be 'error' (fail when no record "
            "has a timestamp at or after the time) or 'latest' (start at the latest offset); "
            f"got {lowered['startingoffsetsbytimestampstrategy']!r}."
        )
    return TimestampOptions(
        starting=_timestamp_spec(lowered, "startingTimestamp", "startingOffsetsByTimestamp"),
        ending=_timestamp_spec(lowered, "endingTimestamp", "endingOffsetsByTimestamp"),
        strategy=strategy,
    )


def _timestamp_spec(lowered: Mapping[str, str], single: str, by_partition: str) -> Optional[TimestampSpec]:
    """The global timestamp if given (it takes precedence, as in Spark), else the JSON."""
    if single.lower() in lowered:
        value = lowered[single.lower()].strip()
        if not value.isdigit():
            raise KafkaSyncOptionError(
                f"Option '{single}' must be a timestamp in epoch milliseconds (an integer >= 0); "
                f"got {value!r}."
            )
        return int(value)
    if by_partition.lower() not in lowered:
        return None
    value = lowered[by_partition.lower()]
    try:
        parsed = json.loads(value)
        spec = {
            str(topic): {json_int(p, allow_str=True): json_int(t) for p, t in partitions.items()}
            for topic, partitions in parsed.items()
        }
        if any(t < 0 for partitions in spec.values() for t in partitions.values()):
            raise ValueError("negative timestamp")
    except (ValueError, TypeError, AttributeError):
        raise KafkaSyncOptionError(
            f"Option '{by_partition}' must be JSON like {{\"topicA\":{{\"0\":1700000000000}}}} "
            f"(epoch milliseconds >= 0 for every partition); got {value!r}."
        ) from None
    return spec




_RATE_LIMIT_OPTIONS = {
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "maxeventtimepertrigger": "maxEventTimePerTrigger",
}


def _rate_limits(
    lowered: Mapping[str, str], streaming: Optional[bool], max_task_idle_ms: int
) -> RateLimitOptions:
    """The per-trigger limits; they apply to streaming queries (AvailableNow included)."""
    given = [display for key, display in _RATE_LIMIT_OPTIONS.items() if key in lowered]
    if streaming is False and given:
        raise KafkaSyncOptionError(
            f"Option '{given[0]}' applies to streaming queries only; a batch read (spark.read) "
            "returns every record between its starting and ending offsets."
        )
    if "maxeventtimepertrigger" in lowered and max_task_idle_ms == NEVER_WAIT:
        raise KafkaSyncOptionError(
            "Option 'maxEventTimePerTrigger' bounds the stream time of synchronized batches; it "
            "cannot be combined with max.task.idle.ms=-1, which does not synchronize."
        )
    limits = RateLimitOptions(
        max_offsets_per_trigger=bounded_int(
            lowered, "maxoffsetspertrigger", None, (1, WAIT_FOREVER), display="maxOffsetsPerTrigger"
        ),
        min_offsets_per_trigger=bounded_int(
            lowered, "minoffsetspertrigger", None, (1, WAIT_FOREVER), display="minOffsetsPerTrigger"
        ),
        max_trigger_delay_ms=duration_ms(
            lowered, "maxtriggerdelay", "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS
        ),
        max_event_time_per_trigger_ms=duration_ms(
            lowered, "maxeventtimepertrigger", "maxEventTimePerTrigger", None
        ),
    )
    return limits


# Spark's time strings (JavaUtils.timeSuffixes: us, ms, s, m/min, h, d; a bare number is ms),
# plus the spelled-out units of an interval ("30 minutes"), which read better in an option.
