"""The soak benchmark's loss and duplication count (``benchmarks.soak.Ledger``): its "0 lost,
0 duplicated" means something only if a gap, an overlap and a repeated row are counted."""

from __future__ import annotations

from benchmarks.soak import Ledger


def test_contiguous_batches_up_to_the_high_watermark_lose_and_duplicate_nothing() -> None:
    ledger = Ledger()
    ledger.add(0, 0, 9, rows=10, distinct=10)
    ledger.add(0, 10, 19, rows=10, distinct=10)
    ledger.add(1, 0, 4, rows=5, distinct=5)
    assert ledger.check({0: 20, 1: 5}) == {"lost": 0, "duplicated": 0, "rows": 25}


def test_a_gap_between_batches_and_the_unread_tail_are_lost() -> None:
    ledger = Ledger()
    ledger.add(0, 0, 9, rows=10, distinct=10)
    ledger.add(0, 13, 19, rows=7, distinct=7)  # 10-12 never read
    assert ledger.check({0: 25, 1: 2})["lost"] == 3 + 5 + 2  # and 20-24, and partition 1's two


def test_a_gap_inside_a_batch_is_lost() -> None:
    ledger = Ledger()
    ledger.add(0, 0, 9, rows=8, distinct=8)
    assert ledger.check({0: 10}) == {"lost": 2, "duplicated": 0, "rows": 8}


def test_overlapping_batches_and_repeated_rows_are_duplicated() -> None:
    ledger = Ledger()
    ledger.add(0, 0, 9, rows=10, distinct=10)
    ledger.add(0, 5, 14, rows=10, distinct=10)  # 5-9 again
    ledger.add(0, 15, 19, rows=6, distinct=5)  # one row twice
    ledger.add(0, 0, 3, rows=4, distinct=4)  # a batch read again, behind
    assert ledger.check({0: 20}) == {"lost": 0, "duplicated": 5 + 1 + 4, "rows": 30}
