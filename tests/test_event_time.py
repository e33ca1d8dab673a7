"""The event-time seam (event_time.py) and its options, as pure logic: no Kafka, no Spark.

Records are confluent-kafka ``Message`` objects built in memory, exactly what a consumer hands
the fetcher and the range reader."""

from __future__ import annotations

import json
import logging
import multiprocessing
import re
import struct
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import Message
from hypothesis import example, given, settings
from hypothesis import strategies as st
from property_budget import examples

from kafkasync_dev.testing import extractors
from kafkasync_dev.testing.patience import PATIENCE_S
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options
from kafkasync_source.event_time import (
    KAFKA_TIMESTAMP,
    NO_TIME,
    PARTITION_TIME,
    SKIPPED,
    EventTimeOptions,
    KafkaSyncEventTimeError,
    KafkaSyncExtractionError,
    canonical_time_source,
    parse_json_path,
    record_time,
    stalled_extractions,
    time_source,
    watch,
)
from kafkasync_source.event_time.json_path import canonical_json_path
from kafkasync_source.event_time.seam import _ExtractedTime
from kafkasync_source.executor.record_columns import RecordColumns
from kafkasync_source.planning.offsets import SyncOffset
from kafkasync_source.spark.schema import arrow_schema, kafka_schema

T = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def record(value=None, *, headers=None, key=None, timestamp=(1, 5), offset=7):
    return Message(topic="orders", partition=1, offset=offset, key=key, value=value, headers=headers,
                   timestamp=timestamp)


def time_of(options: EventTimeOptions, message) -> int:
    return record_time(options).time_of(message)


def json_path(path, time_format="epochMillis", on_invalid="fail", order="any"):
    return EventTimeOptions("jsonPath", path, time_format, on_invalid, order)


def header(name, time_format="epochMillis", on_invalid="fail"):
    return EventTimeOptions("header", name, time_format, on_invalid)


def extractor(spec, on_invalid="fail"):
    return EventTimeOptions("extractor", f"kafkasync_dev.testing.extractors:{spec}", on_invalid=on_invalid)


# --- The Kafka timestamp (no eventTime.* option) ---------------------------------------------

def test_without_an_option_the_time_is_the_kafka_timestamp_or_none():
    assert record_time(None) is KAFKA_TIMESTAMP
    assert KAFKA_TIMESTAMP.time_of(record(timestamp=(1, T))) == T  # CreateTime
    assert KAFKA_TIMESTAMP.time_of(record(timestamp=(2, T))) == T  # LogAppendTime
    assert KAFKA_TIMESTAMP.time_of(record(timestamp=(0, -1))) == NO_TIME


# --- JSONPath --------------------------------------------------------------------------------

@pytest.mark.parametrize("path, value, expected", [
    ("$.ts", b'{"id": 1, "ts": 1700000000000, "note": "x"}', T),
    ("$.source.ts_ms", b'{"ts_ms": 1, "source": {"db": "shop", "ts_ms": 1700000000000}}', T),
    ("$['event time']", b'{"event time": 1700000000000}', T),
    ("$.readings[1].at", b'{"readings": [{"at": 1}, {"at": 1700000000000}]}', T),
    ("$[0]", b'[1700000000000, 5]', T),
    ("$", b'1700000000000', T),
    ("$.ts", b'{"ts": "1700000000000"}', T),  # a number written as a string
    ("$.ts", b'{"ts": 1700000000000.9}', T),  # rounded down, as a Kafka timestamp truncates
    ("$.ts", b'{"ts": 1e12}', 10**12),
])
def test_a_json_path_finds_the_time_as_get_json_object_writes_paths(path, value, expected):
    assert time_of(json_path(path), record(value)) == expected


@pytest.mark.parametrize("time_format, raw, expected", [
    ("epochSeconds", b"1700000000", T),
    ("epochSeconds", b"1700000000.001", T + 1),  # not ...000 for a float's last bit
    ("epochSeconds", b'"1700000000.25"', T + 250),
    ("epochMicros", b"1700000000000999", T),
    ("epochMicros", b'"1700000000001000"', T + 1),
    ("iso8601", b'"2023-11-14T22:13:20Z"', T),
    ("iso8601", b'"2023-11-14T22:13:20.250z"', T + 250),
    ("iso8601", b'"2023-11-15T00:13:20+02:00"', T),
    ("iso8601", b'"2023-11-14T17:13:20-0500"', T),
    ("iso8601", b'"2023-11-14 22:13:20.123456789"', T + 123),  # no offset: UTC; ns cut to ms
    ("iso8601", b'"2023-11-14"', T - (22 * 3600 + 13 * 60 + 20) * 1000),
])
def test_each_format(time_format, raw, expected):
    assert time_of(json_path("$.t", time_format), record(b'{"t": ' + raw + b"}")) == expected


@pytest.mark.parametrize("path, value, why", [
    ("$.ts", b'{"id": 1}', "the value has no \\$.ts"),
    ("$.source.ts_ms", b'{"source": {}}', "the value has no \\$.source.ts_ms"),
    ("$.source.ts_ms", b'{"id": 1}', "the value has no \\$.source\\. Set"),
    ("$.source.ts_ms", b'{"source": 5}', "does not hold \\$.source.ts_ms"),
    ("$.r[2]", b'{"r": [1, 2]}', "has no \\$.r\\[2\\] \\(the array has 2 elements\\)"),
    ("$.ts", b'{"ts": null}', "null is not a number"),
    ("$.ts", b'{"ts": true}', "bool .* is not a number"),
    ("$.ts", b'{"ts": {"ms": 1}}', "an object is not a number"),
    ("$.ts", b'{"ts": "soon"}', "'soon' is not a number"),
    ("$.ts", b'{"ts": -1}', "negative"),
    ("$.ts", b'{"ts": 9223372036854776}', "beyond what Spark's timestamp type holds"),
    ("$.ts", b'{"ts": 1e400}', "out of range"),
    ("$.ts", b"{'ts': 1}", "the value is not JSON"),
    ("$.ts", None, "no value \\(a tombstone\\)"),
])
def test_an_invalid_time_fails_naming_the_record_and_why(path, value, why):
    with pytest.raises(KafkaSyncEventTimeError, match=why) as failure:
        time_of(json_path(path), record(value))
    message = str(failure.value)
    assert "orders-1 offset 7" in message and f"eventTime.jsonPath='{path}'" in message
    assert "eventTime.onInvalid" in message, "says how to read such records anyway"


def test_an_invalid_iso_time_names_why():
    with pytest.raises(KafkaSyncEventTimeError, match="not a valid date-time"):
        time_of(json_path("$.t", "iso8601"), record(b'{"t": "2023-02-30T00:00:00Z"}'))
    with pytest.raises(KafkaSyncEventTimeError, match="is not ISO 8601 text"):
        time_of(json_path("$.t", "iso8601"), record(b'{"t": 1700000000000}'))


@pytest.mark.parametrize("path, why", [
    ("ts", "must start with '\\$'"),
    ("$.a[*]", "wildcard"),
    ("$.*", "wildcard"),
    ("$['*']", "wildcard"),
    ("$..a", "not a path get_json_object understands at '..a'"),
    ("$.a[x]", "at '\\[x\\]'"),
    ("$['a", "at \"\\['a\""),
])
def test_a_bad_path_is_refused_naming_the_option(path, why):
    with pytest.raises(ValueError, match=f"Option 'eventTime.jsonPath' .*{why}"):
        parse_json_path(path)


@pytest.mark.parametrize("path, steps", [
    # Spark's JsonPathParser (a scala RegexParsers) skips whitespace before a name, before
    # `['` and an index's digits, and at the end; a dot name keeps its own trailing whitespace.
    ("$. ts", ["ts"]),
    ("$['source'] [' ts_ms']", ["source", "ts_ms"]),
    ("$.r[ 2]", ["r", 2]),
    ("$[0]\n", [0]),
    ("$.ts ", ["ts "]),
    ("$.a [0]", ["a ", 0]),
])
def test_a_path_reads_whitespace_as_get_json_object_does(path, steps):
    assert [step for step, _ in parse_json_path(path)] == steps


@pytest.mark.parametrize("path", ["$ .ts", "$[0 ]", "$. ", "$[' ']", " $.ts"])
def test_whitespace_get_json_object_refuses_is_refused(path):
    with pytest.raises(ValueError, match="Option 'eventTime.jsonPath'"):
        parse_json_path(path)


java_spaces = st.sampled_from(["", " ", "\t", "\n "])  # what Java's \s, and so Spark's grammar, skips
step_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=6).filter(
    lambda name: name[0] not in " \t\n\x0b\f\r" and name != "*" and not ("'" in name and set(".[") & set(name)))
path_steps = st.lists(st.one_of(step_names, st.integers(0, 99)), max_size=4)


def spelled(data, steps) -> str:
    """One of the spellings Spark's grammar reads as ``steps``: a name as ``.name`` where it
    can be, or ``['name']``, with whitespace where the grammar skips it (not before ``['``
    right after a dot name, whose trailing whitespace is its own)."""
    text, after_name = "$", False
    for step in steps:
        if isinstance(step, int):
            text, after_name = text + f"[{data.draw(java_spaces)}{step}]", False
        elif "." not in step and "[" not in step and ("'" in step or data.draw(st.booleans())):
            text, after_name = text + f".{data.draw(java_spaces)}{step}", True
        else:
            text += f"{'' if after_name else data.draw(java_spaces)}['{data.draw(java_spaces)}{step}']"
            after_name = False
    return text if after_name else text + data.draw(java_spaces)


@settings(max_examples=examples(400), deadline=None)
@given(path_steps, path_steps, st.data())
def test_one_path_one_canonical_spelling_and_time_source(steps, other_steps, data):
    """timeSource records the canonical spelling: two spellings of the same steps, and only
    those, record the same time source, and the canonical spelling reads back as the steps."""
    text, same, other = spelled(data, steps), spelled(data, steps), spelled(data, other_steps)
    assert [step for step, _ in parse_json_path(text)] == steps
    canonical = canonical_json_path(text)
    assert [step for step, _ in parse_json_path(canonical)] == steps
    assert canonical_json_path(same) == canonical
    assert time_source(json_path(text)) == time_source(json_path(same))
    assert (time_source(json_path(text)) == time_source(json_path(other))) == (steps == other_steps)
    assert canonical_time_source(f"eventTime.jsonPath={text!r} as epochMillis") == time_source(json_path(text)), \
        "a checkpoint that recorded the raw spelling continues on the same time source"


def test_a_checkpoint_that_recorded_another_spelling_of_the_path_continues_without_re_basing():
    """Offsets written before timeSource was canonical hold the path as the user spelled it."""
    recorded = {"version": 1, "topics": {"orders": {"0": {"offset": 5, "partitionTime": T}}}, "streamTime": T,
                "timeSource": "eventTime.jsonPath=\"$['source']. ts_ms\" as epochMillis"}
    offset = SyncOffset.from_json(recorded)
    current = time_source(json_path("$.source.ts_ms"))
    assert offset.time_source == current == "eventTime.jsonPath='$.source.ts_ms' as epochMillis"
    assert offset.on_time_source(current) is offset, "stream and partition times kept"


@settings(max_examples=examples(400), deadline=None)
@given(st.text(st.sampled_from("$.[]'* \t\n0123abc.\u00a0"), max_size=14).map(lambda text: "$" + text))
def test_any_text_is_a_path_with_one_canonical_spelling_or_refused_naming_the_option(path):
    try:
        steps = [step for step, _ in parse_json_path(path)]
    except ValueError as refused:
        assert str(refused).startswith(f"Option 'eventTime.jsonPath' {path!r}")
        return
    assert [step for step, _ in parse_json_path(canonical_json_path(path))] == steps


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.text(max_size=40), st.text(max_size=12).map(lambda path: f"eventTime.jsonPath={path!r} as x"),
                 st.text(st.sampled_from("{}[]()':\"1a$. \\"), max_size=12).map(
                     lambda text: f"eventTime.jsonPath={text} as epochMillis")))
@example("eventTime.jsonPath={[]: 1} as epochMillis")  # a literal Python refuses with TypeError
def test_a_recorded_time_source_reads_back_whatever_the_checkpoint_holds(recorded):
    """An offset's timeSource is user-visible JSON: anything it holds reads back (unchanged
    unless it is a JSONPath spelled otherwise), never an error."""
    canonical = canonical_time_source(recorded)
    assert canonical == recorded or recorded.startswith("eventTime.jsonPath=")
    assert canonical_time_source(canonical) == canonical


# --- Headers ---------------------------------------------------------------------------------

def test_a_header_holds_text_or_kip_472s_8_byte_big_endian_long():
    assert time_of(header("pt"), record(headers=[("pt", b"1700000000000")])) == T
    assert time_of(header("pt"), record(headers=[("pt", struct.pack(">q", T))])) == T
    assert time_of(header("pt", "epochSeconds"), record(headers=[("pt", struct.pack(">q", T // 1000))])) == T
    assert time_of(header("pt", "iso8601"), record(headers=[("pt", b"2023-11-14T22:13:20Z")])) == T
    # Kafka's Headers.lastHeader: the last one of that name counts; names are case-sensitive.
    assert time_of(header("pt"), record(headers=[("pt", b"1"), ("PT", b"2"), ("pt", b"3")])) == 3


@pytest.mark.parametrize("headers, why", [
    (None, "has no header 'pt'"),
    ([("other", b"1")], "has no header 'pt'"),
    ([("pt", None)], "header 'pt' has no value"),
    ([("pt", b"\xff\xfe")], "neither text nor an 8-byte long"),
    ([("pt", struct.pack(">q", -5))], "negative"),
])
def test_a_missing_or_bad_header_is_invalid(headers, why):
    with pytest.raises(KafkaSyncEventTimeError, match=why):
        time_of(header("pt"), record(headers=headers))


# --- A function ------------------------------------------------------------------------------

def test_a_function_returns_epoch_millis_or_a_datetime():
    assert time_of(extractor("key_millis"), record(key=b"1700000000000")) == T
    value = b'{"placed": "2023-11-15T00:13:20+02:00"}'
    assert time_of(extractor("order_time"), record(value)) == T


def test_a_function_returning_none_is_an_invalid_time():
    with pytest.raises(KafkaSyncEventTimeError, match="returned None"):
        time_of(extractor("key_millis"), record(key=b"abc"))
    assert time_of(extractor("key_millis", on_invalid="skip"), record(key=b"abc")) == SKIPPED


@pytest.mark.parametrize("on_invalid", ["fail", "skip", "partitionTime", "recordTimestamp"])
def test_a_function_that_raises_fails_the_query_whatever_on_invalid_says(on_invalid):
    with pytest.raises(KafkaSyncEventTimeError,
                       match="refuses_odd_keys' raised ValueError on orders-1 offset 7: odd key 3") as failure:
        time_of(extractor("refuses_odd_keys", on_invalid), record(key=b"3"))
    assert isinstance(failure.value.__cause__, ValueError), "the function's own error is kept"


def test_a_function_returning_something_else_fails_naming_what_it_must_return():
    with pytest.raises(KafkaSyncEventTimeError, match="returned a str for orders-1 offset 7; it must return"):
        time_of(extractor("returns_text", on_invalid="skip"), record())


# --- Invalid-time policies -------------------------------------------------------------------

@pytest.mark.parametrize("on_invalid, timestamp, expected", [
    ("skip", (1, T), SKIPPED),
    ("partitionTime", (1, T), PARTITION_TIME),
    ("recordTimestamp", (1, T), T),
    ("recordTimestamp", (0, -1), NO_TIME),  # and no Kafka timestamp either
])
def test_each_invalid_policy(on_invalid, timestamp, expected):
    assert time_of(json_path("$.ts", on_invalid=on_invalid), record(b"{}", timestamp=timestamp)) == expected


# --- The executors' columns ------------------------------------------------------------------

def columns_of(options: EventTimeOptions, values, *, partition_time=-1, partition_time_column=True):
    columns = RecordColumns("orders", False, partition_time=partition_time, partition_time_column=partition_time_column,
                       event_time=record_time(options))
    columns.extend([record(value, offset=offset) for offset, value in enumerate(values)])
    schema = arrow_schema(kafka_schema(False, include_partition_time=partition_time_column,
                                       include_event_time=True))
    rows = columns.to_batch(schema).to_pylist()

    def millis(moment):
        epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
        return None if moment is None else (moment - epoch) // timedelta(milliseconds=1)

    return ([millis(row["eventTime"]) for row in rows],
            [millis(row["partitionTime"]) for row in rows] if partition_time_column else None,
            [millis(row["timestamp"]) for row in rows])


def test_the_event_time_column_and_partition_time_follow_the_extracted_time():
    values = [b'{"ts": 50}', b'{"ts": 30}', b'{}', b'{"ts": 80}']
    event, partition, kafka = columns_of(json_path("$.ts", on_invalid="skip"), values, partition_time=40)
    assert event == [50, 30, None, 80]
    assert partition == [50, 50, 50, 80], "the largest valid time so far, from the range's start"
    assert kafka == [5, 5, 5, 5], "timestamp stays Kafka's"


def test_partition_time_policy_shows_the_partition_time_so_far():
    values = [b'{"ts": 50}', b'{"ts": "x"}', b'{"ts": 70}', b'{}']
    event, partition, _ = columns_of(json_path("$.ts", on_invalid="partitionTime"), values,
                                     partition_time_column=False, partition_time=20)
    assert event == [50, 50, 70, 70]
    assert partition is None


def test_partition_time_policy_fails_while_the_partition_has_no_time_as_kafka_streams_does():
    with pytest.raises(KafkaSyncEventTimeError, match="orders-1 offset 0: .*has no time yet"):
        columns_of(json_path("$.ts", on_invalid="partitionTime"), [b"{}", b'{"ts": 5}'], partition_time=-1)


def test_a_failing_record_fails_the_executor_naming_it():
    with pytest.raises(KafkaSyncEventTimeError, match="orders-1 offset 1 .*no \\$.ts"):
        columns_of(json_path("$.ts"), [b'{"ts": 1}', b"{}"])


Y2020 = 1_577_836_800_000  # 2020-01-01T00:00:00Z
NOW = T + 10**9  # when a CDC connector re-wrote the backfill: its Kafka timestamps


def test_under_the_promise_a_write_time_standing_in_takes_no_part_in_it():
    """A CDC backfill of 2020 with one malformed record, stamped now, under
    onInvalid=recordTimestamp and order=nonDecreasing: the stand-in shows in the eventTime
    column, and the next valid record (2020) is not below it, as far as the promise goes."""
    options = json_path("$.ts", on_invalid="recordTimestamp", order="nonDecreasing")
    messages = [record(value, offset=offset, timestamp=(1, NOW)) for offset, value in
                enumerate([b'{"ts": %d}' % (Y2020 + 1), b'{"ts": "2020-13-01"}', b'{"ts": %d}' % (Y2020 + 2)])]
    assert record_time(options).times_of(messages) == [Y2020 + 1, SKIPPED, Y2020 + 2], \
        "no part in planning: the driver neither buffers it nor takes it for a probe's answer"
    columns = RecordColumns("orders", False, partition_time=-1, partition_time_column=True,
                       event_time=record_time(options), check_order=True)
    columns.extend(messages)
    rows = columns.to_batch(arrow_schema(kafka_schema(False, include_partition_time=True,
                                                      include_event_time=True))).to_pylist()
    millis = [[None if row[column] is None else int(row[column].timestamp() * 1000) for row in rows]
              for column in ("eventTime", "partitionTime")]
    assert millis == [[Y2020 + 1, NOW, Y2020 + 2], [Y2020 + 1, Y2020 + 1, Y2020 + 2]]
    # Without the promise the write time is the record's time, as in Kafka Streams.
    assert record_time(json_path("$.ts", on_invalid="recordTimestamp")).times_of(messages) == \
        [Y2020 + 1, NOW, Y2020 + 2]


@pytest.mark.parametrize("error", [MemoryError, RecursionError])
@pytest.mark.parametrize("on_invalid", ["skip", "partitionTime", "recordTimestamp"])
def test_running_out_of_memory_or_stack_fails_whatever_on_invalid_says(error, on_invalid):
    """Not an invalid time, which skip would drop: whether it happens depends on the process."""
    def read(message):
        raise error("the process's, not the record's")

    seam = _ExtractedTime(json_path("$.ts", on_invalid=on_invalid), read)
    for take in (lambda: seam.time_of(record(b"{}")), lambda: seam.times_of([record(b"{}")])):
        with pytest.raises(KafkaSyncExtractionError, match=f"orders-1 offset 7 .*raised {error.__name__}"):
            take()


def test_a_value_nested_beyond_the_decoders_stack_fails_naming_the_record():
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b', "ts": 5}'
    seam = record_time(json_path("$.ts", on_invalid="skip"))
    with pytest.raises(KafkaSyncExtractionError, match="orders-1 offset 7 .*RecursionError"):
        seam.time_of(record(deep))
    with pytest.raises(KafkaSyncExtractionError, match="orders-1 offset 7 .*RecursionError"):
        seam.times_of([record(b'{"ts": 1}', offset=6), record(deep)])


def _watchdog_running_in_a_forked_child(answer) -> None:
    watch.watched(lambda record: 0, "a reader")
    answer.put([thread.is_alive() for thread in watch._watchdog])


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # Python >= 3.12
def test_a_forked_worker_runs_a_watchdog_of_its_own():
    """PySpark's daemon forks its workers: a parent's watchdog thread does not exist there."""
    watch.watched(lambda record: 0, "a reader")
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_watchdog_running_in_a_forked_child, args=(answer,))
    child.start()
    try:
        assert answer.get(timeout=PATIENCE_S) == [True]
    finally:
        child.join(30)


def test_an_extractor_that_does_not_return_is_named_while_it_runs(monkeypatch, caplog):
    """Python cannot interrupt it; the logs and the driver's live report name its record."""
    seam = record_time(extractor("waits_for_release"))
    extractors.RELEASE.clear()
    taking = threading.Thread(target=seam.time_of, args=(record(b"{}", offset=41, timestamp=(1, T)),))
    taking.start()
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not stalled_extractions(0.05) and time.monotonic() < deadline:
            time.sleep(0.01)
        named = ("eventTime.extractor 'kafkasync_dev.testing.extractors:waits_for_release' has been taking the "
                 r"time of orders-1 offset 41 for \d+ s")
        stalled, = stalled_extractions(0.05)
        assert re.fullmatch(named, stalled), stalled
        assert stalled_extractions() == [], f"not before {watch.STALL_S} s"
        monkeypatch.setattr(watch, "STALL_S", 0.05)
        with caplog.at_level(logging.WARNING, logger=watch.__name__):
            logged = watch._log_new_stalls(set())
            assert watch._log_new_stalls(logged) == logged, "each stalled call is logged once"
        message, = [r.getMessage() for r in caplog.records]
        assert re.fullmatch(f"kafkasync: {named} and has not returned: the query waits for it "
                            r"\(it cannot be interrupted\)\.", message), message
    finally:
        extractors.RELEASE.set()
        taking.join()
    assert stalled_extractions(0) == [], "a call that returned is no longer listed"


# --- Options ---------------------------------------------------------------------------------

def parse(**options):
    return parse_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
                          **{key.replace("_", "."): value for key, value in options.items()}}, streaming=True)


def test_the_options_make_the_seam_and_say_what_they_chose():
    options = parse_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
                             "eventtime.jsonpath": "$.source.ts_ms", "eventtime.format": "EPOCHSECONDS",
                             "eventtime.oninvalid": "PartitionTime"}, streaming=True)
    assert options.event_time == EventTimeOptions("jsonPath", "$.source.ts_ms", "epochSeconds", "partitionTime")
    assert options.tracks_partition_time
    assert parse_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}, streaming=True).event_time is None


@pytest.mark.parametrize("options, message", [
    ({"eventTime.format": "iso8601"}, "'eventTime.format' needs one of the options 'eventTime.jsonPath'"),
    ({"eventTime.onInvalid": "skip"}, "'eventTime.onInvalid' needs one of the options"),
    ({"eventTime.jsonPath": "$.a", "eventTime.header": "h"}, "At most one of the options 'eventTime.jsonPath', "
                                                             "'eventTime.header'"),
    ({"eventTime.header": " "}, "'eventTime.header' must not be empty"),
    ({"eventTime.header": "h", "eventTime.format": "epochNanos"}, "'eventTime.format' must be one of epochMillis"),
    ({"eventTime.header": "h", "eventTime.onInvalid": "drop"}, "'eventTime.onInvalid' must be one of fail, skip"),
    ({"eventTime.jsonPath": "$.a[*]"}, "'eventTime.jsonPath' '\\$.a\\[\\*\\]': a wildcard"),
    ({"eventTime.header": "h", "planningMode": "timeIndex"}, "planningMode=timeIndex: the brokers' time index"),
    ({"eventTime.extractor": "no_such_module_x:f"}, "cannot import 'no_such_module_x' \\(ModuleNotFoundError"),
    ({"eventTime.extractor": "kafkasync_dev.testing.extractors"}, "must be 'package.module:function'"),
    ({"eventTime.extractor": "kafkasync_dev.testing.extractors:nope"}, "has no 'nope'"),
    ({"eventTime.extractor": "kafkasync_dev.testing.extractors:T"}, "has no 'T'"),
    ({"eventTime.extractor": "kafkasync_dev.testing.extractors:one_argument"}, "must take four arguments"),
    ({"eventTime.extractor": "kafkasync_dev.testing.extractors:key_millis", "eventTime.format": "iso8601"},
     "'eventTime.format' does not apply to 'eventTime.extractor'"),
])
def test_bad_event_time_options_fail_at_load_naming_the_option(options, message):
    with pytest.raises(KafkaSyncOptionError, match=message):
        parse_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", **options}, streaming=True)


def test_an_iso_time_before_1970_or_with_a_datetime_is_converted_exactly():
    moment = datetime(2023, 11, 15, 0, 13, 20, tzinfo=timezone(timedelta(hours=2)))
    assert time_of(json_path("$.t", "iso8601"), record(f'{{"t": "{moment.isoformat()}"}}'.encode())) == T
    with pytest.raises(KafkaSyncEventTimeError, match="negative"):
        time_of(json_path("$.t", "iso8601"), record(b'{"t": "1969-12-31T23:59:59Z"}'))


# --- The seam is total: a time, or an invalid time handled by onInvalid ----------------------

# Values that pass a quick numeric test and then raised from the conversion before: a digit
# int() refuses, an exponent beyond decimal's context, a float beyond any time, a digit string
# longer than int()'s limit on Python >= 3.11.
NUMERIC_LOOKALIKES = ["²", "-①", "1e999999999", "1e999999", "9" * 5000, 1e308, -1e308, "1e308", "NaN",
                      "Infinity", "0x10", " 12 34 "]


@pytest.mark.parametrize("value", NUMERIC_LOOKALIKES, ids=repr)
@pytest.mark.parametrize("time_format", ["epochMillis", "epochSeconds", "epochMicros", "iso8601"])
def test_a_value_that_only_looks_numeric_is_an_invalid_time(value, time_format):
    document = json.dumps({"ts": value}).encode()
    with pytest.raises(KafkaSyncEventTimeError, match=r"orders-1 offset 7 \(eventTime.jsonPath='\$.ts'\)"):
        time_of(json_path("$.ts", time_format), record(document))
    assert time_of(json_path("$.ts", time_format, "skip"), record(document)) == SKIPPED
    text = value if isinstance(value, str) else repr(value)
    if len(text.encode()) == 8 and time_format != "iso8601":
        return  # 8 bytes of a header are KIP-472's big-endian long, a time whatever they spell
    assert time_of(header("ts", time_format, "skip"), record(headers=[("ts", text.encode())])) == SKIPPED


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["ts", "a", "0"]), children,
                                                                      max_size=3),
    max_leaves=8,
)
numeric_text = st.from_regex(r"\s*[-+]?[0-9²①.eE]{1,12}\s*", fullmatch=True)
payloads = st.one_of(
    st.none(),
    st.binary(max_size=64),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.one_of(json_values, numeric_text).map(lambda ts: json.dumps({"ts": ts, "nested": {"ts": ts}}).encode()),
)
header_lists = st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["ts", "other"]),
                                                       st.one_of(st.none(), st.binary(max_size=12),
                                                                 numeric_text.map(str.encode))), max_size=3))
def _seam(source: str, time_format: str, on_invalid: str, path: str, order: str) -> EventTimeOptions:
    """The options of a header named ts, or of a JSONPath to a ts field at the top or nested."""
    return EventTimeOptions(source, "ts" if source == "header" else path, time_format, on_invalid, order)


seams = st.builds(
    _seam,
    st.sampled_from(["jsonPath", "header"]),
    st.sampled_from(["epochMillis", "epochSeconds", "epochMicros", "iso8601"]),
    st.sampled_from(["fail", "skip", "partitionTime", "recordTimestamp"]),
    st.sampled_from(["$.ts", "$.nested.ts", "$['nested']. ts", "$. ts"]),
    st.sampled_from(["any", "nonDecreasing"]),
)


@settings(max_examples=examples(600), deadline=None)
@given(seams, payloads, header_lists, st.sampled_from([(0, -1), (1, T), (2, 0)]))
def test_time_of_ends_in_a_time_or_an_invalid_time_whatever_the_record_holds(options, value, headers, timestamp):
    message = record(value, headers=headers, timestamp=timestamp)
    try:
        time = time_of(options, message)
    except KafkaSyncEventTimeError as failure:
        assert options.on_invalid == "fail", f"only 'fail' raises, {options.on_invalid!r} raised {failure}"
        assert "orders-1 offset 7" in str(failure)
        return
    allowed_codes = {"skip": {SKIPPED}, "partitionTime": {PARTITION_TIME},
                     "recordTimestamp": {SKIPPED} if options.non_decreasing else {NO_TIME},
                     "fail": set()}[options.on_invalid]
    assert time >= 0 or time in allowed_codes
    assert time <= (2**63 - 1) // 1000, "within Spark's timestamp range"


# Valid times of every format, so that whole batches often hold only valid times: the batch
# reader (json_path.json_batch_reader) answers those, and falls back to each record otherwise.
valid_times = st.one_of(st.integers(0, (2**63 - 1) // 1000), st.floats(0, 4e9),
                        st.datetimes(timezones=st.just(timezone.utc)).map(datetime.isoformat))
mostly_valid_payloads = valid_times.map(lambda ts: json.dumps({"ts": ts, "nested": {"ts": ts}}).encode())


@settings(max_examples=examples(300), deadline=None)
@given(seams, st.lists(st.tuples(mostly_valid_payloads | payloads, header_lists), max_size=6))
def test_a_batchs_times_are_each_records_time(options, contents):
    """The executors take a consume() batch's times in one call (times_of), handing over the
    values they took for the value column: the same codes as record by record, and the same
    failure, at the first record whose time fails; and so without the values (the driver)."""
    seam = record_time(options)
    messages = [record(value, headers=headers, offset=offset) for offset, (value, headers) in enumerate(contents)]
    values = [message.value() for message in messages]
    expected: list = []
    for message in messages:
        try:
            expected.append(seam.time_of(message))
        except KafkaSyncEventTimeError as failure:
            for given_values in (None, values):
                with pytest.raises(KafkaSyncEventTimeError) as raised:
                    seam.times_of(messages, given_values)
                assert str(raised.value) == str(failure)
            return
    assert seam.times_of(messages) == expected
    assert seam.times_of(messages, values) == expected


def test_the_time_source_names_the_option_and_the_format():
    assert time_source(None) == "kafkaTimestamp"
    assert time_source(json_path("$.ts")) == "eventTime.jsonPath='$.ts' as epochMillis"
    assert time_source(header("ts", "iso8601", "skip")) == time_source(header("ts", "iso8601", "fail")), \
        "onInvalid decides only invalid times: not another time source"
