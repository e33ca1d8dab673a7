"""Invalid event times under ``eventTime.order=nonDecreasing`` on Apache Kafka, through Spark:
the same scenarios as the embedded cluster's (tests/test_event_time_stream.py), from
kafkasync_dev/testing/invalid_times.py.

* ``onInvalid=recordTimestamp``: a CDC backfill of 2020 re-written now, one time malformed: the
  write time stands in for the column and breaks no promise;
* ``onInvalid=fail``: a record without a time that no probe read fails its whole batch, naming
  it and saying so (Spark cannot run a batch in part: event_time/seam.py, "Invalid times").
"""

from __future__ import annotations

import time

import pytest

from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.invalid_times import (
    assert_a_write_time_stands_in_under_the_promise,
    assert_an_invalid_time_fails_its_whole_batch,
)
from kafkasync_source.spark.source import register


@pytest.fixture(scope="module")
def broker(bootstrap_servers, spark):
    register(spark)
    return KafkaBroker(bootstrap_servers)


def now_ms() -> int:
    """A write time the broker accepts (Kafka >= 4.0 refuses stamps over an hour ahead)."""
    return int(time.time() * 1000)


def test_under_the_promise_a_malformed_record_stamped_now_does_not_fail_a_backfill(
    spark, broker, topic_factory, tmp_path
):
    assert_a_write_time_stands_in_under_the_promise(spark, broker, topic_factory(1), str(tmp_path / "cp"), now_ms())


def test_under_the_promise_an_invalid_time_no_probe_read_fails_its_whole_batch(spark, broker, topic_factory, tmp_path):
    written = now_ms()
    assert_an_invalid_time_fails_its_whole_batch(spark, broker, topic_factory(1), str(tmp_path / "cp"),
                                                 written - 3_600_000, written)
