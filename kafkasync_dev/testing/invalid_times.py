"""Values whose time cannot be had, for the embedded-cluster and the real-broker suites alike:
the same records, and the same checks of what ``eventTime.onInvalid`` makes of them."""

from __future__ import annotations

import json
import time
from typing import Any

from kafkasync_dev.testing import Record
from kafkasync_dev.testing.patience import PATIENCE_S

LOOKALIKES = {17: b'{"ts": "\xc2\xb2"}', 30: b'{"ts": "1e999999999"}'}
"""Which of :func:`with_numeric_lookalikes`' values only look numeric: "²" passes
``str.isdigit()`` and ``int()`` refuses it; "1e999999999" is a Decimal beyond any context. Both
once escaped the seam and ended the driver's fetch thread. Written round robin to two
partitions, they are partition 1 offset 8 and partition 0 offset 15."""


def payload(event_time: int, **extra: Any) -> bytes:
    """A JSON value with its event time in ``ts``."""
    return json.dumps({"ts": event_time, **extra}).encode()


def with_numeric_lookalikes(first_time: int, count: int = 40) -> list[bytes]:
    """``count`` values a millisecond apart from ``first_time``, two of them :data:`LOOKALIKES`."""
    return [LOOKALIKES.get(i, payload(first_time + i)) for i in range(count)]


def assert_read_as_on_invalid(rows: list, query: Any, topic: str, on_invalid: str, first_time: int) -> None:
    """What a query of :func:`with_numeric_lookalikes` (round robin to two partitions, ``rows``
    with ``partition``, ``offset`` and ``event``) must have read: with ``skip`` every record
    once, the two with a null time; with ``fail`` the failure naming the first of them, after
    every record of its partition before it, and not it."""
    count = len(with_numeric_lookalikes(first_time))
    if on_invalid == "skip":
        assert query.exception() is None
        assert sorted((row.partition, row.offset) for row in rows) == sorted(
            (i % 2, i // 2) for i in range(count)), "every record read once, the bad ones too"
        assert sorted(row.event for row in rows if row.event is not None) == sorted(
            first_time + i for i in range(count) if i not in LOOKALIKES)
        assert {(row.partition, row.offset) for row in rows if row.event is None} == {
            (i % 2, i // 2) for i in LOOKALIKES}
        return
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(PATIENCE_S)
        raise AssertionError("the query did not fail on the record without a time")
    except StreamingQueryException as failure:
        assert f"no event time for {topic}-1 offset 8 (eventTime.jsonPath='$.ts'): '²' is not a number" \
            in str(failure), failure
    read = {(row.partition, row.offset) for row in rows}
    assert read >= {(1, offset) for offset in range(8)}, "every record of the partition before the bad one"
    assert (1, 8) not in read


# --- Invalid times under eventTime.order=nonDecreasing (the probe path) ------------------------

Y2020 = 1_577_836_800_000
"""2020-01-01T00:00:00Z: the event times of a CDC backfill re-written much later."""
MALFORMED_AT = 12
"""The offset of the one malformed time in :func:`assert_a_write_time_stands_in_under_the_promise`."""
INVALID_AT = 25
"""The offset of the record without a time in :func:`assert_an_invalid_time_fails_its_whole_batch`."""


def promised_stream(spark: Any, bootstrap: str, topic: str, checkpoint: str, rows: list, **options: Any) -> Any:
    """A stream of ``topic`` under ``eventTime.order=nonDecreasing`` on ``$.ts``, 10 records a
    batch, collecting ``(offset, event)`` rows (event: epoch ms or None) into ``rows``."""
    stream = (spark.readStream.format("kafkasync").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 10).option("eventTime.jsonPath", "$.ts")
              .option("eventTime.order", "nonDecreasing"))
    for key, value in options.items():
        stream = stream.option(key, value)
    return (stream.load().selectExpr("offset", "unix_millis(eventTime) AS event").writeStream
            .foreachBatch(lambda frame, _: rows.extend(frame.collect()))
            .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds").start())


def _planning(query: Any) -> str:
    """How the query's latest batch was planned (its live report; PySpark >= 4.2)."""
    latest = query.lastProgress["sources"][0]["latestOffset"]
    return (json.loads(latest) if isinstance(latest, str) else latest)["planning"]


def assert_a_write_time_stands_in_under_the_promise(spark: Any, cluster: Any, topic: str, checkpoint: str,
                                                    written: int, planning_mode: str = "auto") -> None:
    """``eventTime.onInvalid=recordTimestamp``: a CDC backfill of 2020 on one partition,
    re-written at ``written`` (every record's Kafka timestamp), one time malformed. Every record
    is read; the malformed one's ``eventTime`` is its write time, which takes no part in the
    promise, so the next valid record (2020, below it) is no broken promise. ``planning_mode``
    ``auto`` plans from records read at chosen offsets, ``fetch`` from every record."""
    values = [payload(Y2020 + 1000 * i) for i in range(30)]
    values[MALFORMED_AT] = b'{"ts": "2020-13-01T00:00:00Z"}'
    cluster.produce(topic, [Record(0, written, None, value) for value in values])
    rows: list = []
    query = promised_stream(spark, cluster.bootstrap_servers, topic, checkpoint, rows,
                            **{"eventTime.onInvalid": "recordTimestamp", "planningMode": planning_mode})
    try:
        deadline = time.monotonic() + PATIENCE_S
        while len(rows) < len(values) and query.exception() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.exception() is None, query.exception()
        planning = _planning(query)
    finally:
        query.stop()
    assert sorted(rows) == [(i, written if i == MALFORMED_AT else Y2020 + 1000 * i) for i in range(len(values))]
    assert planning == {"auto": "recordProbes", "fetch": "fetch"}[planning_mode]


def assert_an_invalid_time_fails_its_whole_batch(spark: Any, cluster: Any, topic: str, checkpoint: str,
                                                 first_time: int, written: int) -> None:
    """``eventTime.onInvalid=fail`` under the promise: the driver, reading a few records, plans
    the record without a time into a batch; an executor meets it and that batch fails as a whole,
    naming it and saying so: the batches before it were processed, no record of its own was."""
    from pyspark.errors import StreamingQueryException

    values = [payload(first_time + i) for i in range(40)]
    values[INVALID_AT] = b'{"id": 25}'
    cluster.produce(topic, [Record(0, written, None, value) for value in values])
    rows: list = []
    query = promised_stream(spark, cluster.bootstrap_servers, topic, checkpoint, rows)
    try:
        query.awaitTermination(PATIENCE_S)
        raise AssertionError("the query did not fail on the record without a time")
    except StreamingQueryException as failure:
        message = str(failure)
        assert f"no event time for {topic}-0 offset {INVALID_AT} (eventTime.jsonPath='$.ts'): the value has no $.ts" \
            in message, message
        assert "fails as a whole (earlier batches were processed, no record of this one was)" in message, message
        planning = _planning(query)
    finally:
        query.stop()
    offsets = sorted(offset for offset, _ in rows)
    assert planning == "recordProbes"
    assert offsets == list(range(len(offsets))) and len(offsets) in (10, 20), \
        f"whole batches before the one holding offset {INVALID_AT}, no record of it: {offsets}"
