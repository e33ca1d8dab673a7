"""How many examples a property test draws: its own number in ``make test``, a share of it where
``KAFKASYNC_EXAMPLES_SHARE`` says so. ``make test-core`` runs the same tests again on the oldest
and newest Python the README promises, to show that they hold on that interpreter, not to search
further than ``make test`` on 3.11 does: a quarter of the examples there (the Makefile says so)
keeps every test and saves CI about a minute a run."""

from __future__ import annotations

import os

SHARE = float(os.environ.get("KAFKASYNC_EXAMPLES_SHARE", "1"))


def examples(count: int) -> int:
    """``count`` examples, times the share; at least 10."""
    return max(10, round(count * SHARE))
