"""The benchmark's picture shows what its titles say: every panel has each partition's event
time per batch and the watermark, in view (docs/img/skew.png once had empty axes: its
event times were counted from another base and fell off the axis, and every topic was
labelled "bench")."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

pytest.importorskip("matplotlib", reason="matplotlib is part of the test extra ('.[test]')")

from kafkasync_dev.testing.plots import event_time_figure  # noqa: E402

HOUR_MS = 3_600_000
FIRST = 1_795_000_000_000


@dataclass
class Run:
    title: str
    batches: list
    dropped: int = 0
    read: int = 0

    def per_batch(self) -> list[dict]:
        return self.batches


def batches(orders_hours, payments_hours, watermarks) -> list[dict]:
    return [
        {"partition_times": {"bench-skew-orders-0": FIRST + int(o * HOUR_MS),
                             "bench-skew-orders-1": FIRST + int(o * HOUR_MS) + 30_000,
                             "bench-skew-payments-0": -1 if p is None else FIRST + int(p * HOUR_MS)},
         "watermark": 0 if w is None else FIRST + int(w * HOUR_MS)}
        for o, p, w in zip(orders_hours, payments_hours, watermarks)
    ]


def points_in_view(ax, line) -> int:
    low, high = ax.get_ylim()
    return sum(1 for y in line.get_ydata() if y is not None and not (isinstance(y, float) and math.isnan(y))
               and low <= float(y) <= high)


def test_every_panel_shows_each_partition_and_the_watermark():
    runs = [Run("synchronized", batches([10.5, 11, 12], [10.5, 11, 12], [None, 10.4, 10.9]), 0, 300),
            Run("-1", batches([4, 8, 12], [None, 11, 12], [None, 3.9, 7.9]), 120, 300)]
    figure = event_time_figure(runs, FIRST)
    for ax in figure.axes:
        lines = ax.get_lines()
        assert len(lines) == 4, "three partitions and the watermark"
        assert all(points_in_view(ax, line) >= 2 for line in lines), "a line has no data in view"
        labels = ax.get_legend_handles_labels()[1]
        assert labels == ["bench-skew-orders", "bench-skew-payments", "watermark applied to the batch's rows"]
    assert "2 bench-skew-orders partitions, 1 bench-skew-payments partition" in figure._suptitle.get_text()


def test_a_panel_without_data_is_caught():
    """The check above fails on the old picture's defect: event times far off the axis."""
    runs = [Run("synchronized", batches([10.5, 11], [10.5, 11], [None, 10.4]))]
    figure = event_time_figure(runs, FIRST - 10_000 * HOUR_MS)  # another base: every point off the axis
    ax = figure.axes[0]
    ax.set_ylim(0, 25)
    assert any(points_in_view(ax, line) == 0 for line in ax.get_lines())
