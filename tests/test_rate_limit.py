"""Unit tests of format("kafka")'s rate-limit rules (pure functions, no Kafka)."""

from __future__ import annotations

import pytest

from kafkasync_source.planning.rate_limit import TriggerDelay, proportional_ends


def test_proportional_ends_hand_computed():
    # 1,000 + 3,000 remaining, cap 100: 25 and 75.
    assert proportional_ends(100, {"a": 0, "b": 500}, {"a": 1000, "b": 3500}) == {"a": 25, "b": 575}


def test_proportional_ends_rounds_small_shares_up_and_never_passes_the_end():
    assert proportional_ends(3, {"a": 0, "b": 0, "c": 0}, {"a": 100, "b": 1, "c": 1}) == {
        "a": 2, "b": 1, "c": 1,  # 3*100/102 = 2.94 -> 2; 3/102 -> 1 each (Spark: ceil below 1)
    }


def test_proportional_ends_keeps_the_end_of_partitions_with_nothing_left_or_no_start():
    assert proportional_ends(10, {"a": 7}, {"a": 7, "b": 40}) == {"a": 7, "b": 40}
    assert proportional_ends(10, {"a": 7}, {"a": 5}) == {"a": 5}


def test_proportional_ends_rejects_a_non_positive_limit():
    with pytest.raises(ValueError):
        proportional_ends(0, {"a": 0}, {"a": 1})


def test_trigger_delay_never_delays_the_first_trigger_like_spark():
    delay = TriggerDelay(min_offsets=100, max_delay_ms=1_000)
    assert not delay.should_delay(available_offsets=1, now_ms=50_000)


def test_trigger_delay_holds_until_enough_offsets_or_the_max_delay_since_the_last_batch():
    delay = TriggerDelay(min_offsets=100, max_delay_ms=1_000)
    delay.restart(10_000)
    assert delay.should_delay(available_offsets=99, now_ms=10_500)
    assert delay.deadline_ms() == 11_000
    assert not delay.should_delay(available_offsets=100, now_ms=10_600)  # enough
    assert delay.should_delay(available_offsets=5, now_ms=10_999)
    assert not delay.should_delay(available_offsets=5, now_ms=11_000)  # max delay passed
    delay.restart(11_000)
    assert delay.should_delay(available_offsets=5, now_ms=11_001)
