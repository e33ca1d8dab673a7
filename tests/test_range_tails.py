"""What a range's reader fetched past its end, kept for the next range in any Python worker of
the host (executor/range_tails.py). Pure: files only, no Kafka (the readers that keep and take
tails are tested in test_range_reader.py, the log-start check on a real broker in
integration/test_range_reader_broker.py)."""

from __future__ import annotations

import os

import pytest

from kafkasync_source.executor.range_tails import MAX_TAIL_BYTES, RangeTails, StashedRecord


def records(offsets, value=b"v" * 100):
    return [StashedRecord("t", 3, offset, b"k", value, (1, 1_700_000_000_000 + offset), [("h", b"x")])
            for offset in offsets]


@pytest.fixture
def tails(tmp_path):
    return RangeTails(str(tmp_path / "tails"))


def test_a_tail_is_taken_once_by_the_range_that_starts_where_it_starts(tails):
    assert tails.keep("scope", "broker:9092", "t", 3, 100, records([100, 101, 103]))  # 102: a marker
    assert tails.take("scope", "broker:9092", "t", 3, 101) is None, "kept for a range starting at 100"
    tail = tails.take("scope", "broker:9092", "t", 3, 100)
    assert (tail.start, tail.end) == (100, 104)
    assert [(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp(), m.headers(), m.error())
            for m in tail.records] == [
        ("t", 3, offset, b"k", b"v" * 100, (1, 1_700_000_000_000 + offset), [("h", b"x")], None)
        for offset in (100, 101, 103)]
    assert tails.take("scope", "broker:9092", "t", 3, 100) is None, "a tail is read once"
    assert (tails.kept, tails.taken) == (1, 1)


def test_tails_of_other_queries_clusters_topics_and_partitions_are_apart(tails):
    tails.keep("scope", "broker:9092", "t", 3, 100, records([100]))
    for other in (("other scope", "broker:9092", "t", 3), ("scope", "other:9092", "t", 3),
                  ("scope", "broker:9092", "u", 3), ("scope", "broker:9092", "t", 4)):
        assert tails.take(*other, 100) is None, other
    assert tails.take("scope", "broker:9092", "t", 3, 100) is not None


def test_a_read_without_a_consumer_scope_keeps_no_tail(tails):
    """A batch read's ranges carry no scope: a tail could then outlive a topic recreated under
    its name (consumer_pool.py on scopes)."""
    assert not tails.keep("", "broker:9092", "t", 3, 100, records([100]))
    assert tails.take("", "broker:9092", "t", 3, 100) is None


def test_a_tail_larger_than_the_largest_prefetch_is_not_kept(tails):
    assert not tails.keep("scope", "b", "t", 3, 0, records(range(2), value=b"x" * (MAX_TAIL_BYTES // 2 + 1)))


def test_tails_nobody_took_are_swept_after_a_while(tmp_path):
    now = [1_000.0]
    tails = RangeTails(str(tmp_path / "tails"), clock=lambda: now[0])
    tails.keep("scope", "b", "t", 3, 100, records([100]))
    stale = os.path.join(str(tmp_path / "tails"), os.listdir(tmp_path / "tails")[0])
    os.utime(stale, (now[0] - 300, now[0] - 300))
    now[0] += 61  # the next keep sweeps (at most once a minute)
    tails.keep("scope", "b", "t", 3, 200, records([200]))
    assert tails.take("scope", "b", "t", 3, 100) is None, "swept: older than STALE_AFTER_S"
    assert tails.take("scope", "b", "t", 3, 200) is not None


def test_records_are_kept_only_in_a_directory_this_user_alone_may_enter(tmp_path, caplog):
    shared = tmp_path / "tails"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)  # as if another user had made it first in a shared /tmp
    tails = RangeTails(str(shared))
    with caplog.at_level("WARNING", logger="kafkasync_source.executor.range_tails"):
        assert not tails.keep("scope", "b", "t", 3, 100, records([100]))
    assert os.listdir(shared) == []
    assert "not this user's alone" in caplog.text


def test_a_damaged_tail_counts_as_none(tails, tmp_path):
    tails.keep("scope", "b", "t", 3, 100, records([100]))
    (path,) = (tmp_path / "tails").iterdir()
    path.write_bytes(b"not a pickle")
    assert tails.take("scope", "b", "t", 3, 100) is None


def test_nothing_is_loaded_from_a_directory_another_user_may_write(tails, tmp_path):
    """Loading a pickle runs what it says: a file planted in a shared directory must never be."""
    tails.keep("scope", "b", "t", 3, 100, records([100]))
    os.chmod(tmp_path / "tails", 0o777)
    assert tails.take("scope", "b", "t", 3, 100) is None
