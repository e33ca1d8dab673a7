"""Pictures of what a watermark does to a backfill: each partition's event time per batch.

``make bench`` draws docs/img/skew.png (synchronized vs -1) and ``make demo`` its three
variants with :func:`event_time_figure`. matplotlib is imported only here, when drawing."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

HOUR_MS = 3600 * 1000
COLORS = {"orders": "#1f77b4", "payments": "#d62728"}


def topic_of(partition_name: str) -> str:
    """``bench-skew-orders-1`` -> ``bench-skew-orders`` (topic names may hold dashes)."""
    return partition_name.rsplit("-", 1)[0]


def _kind(topic: str) -> str:
    """The backfill's role of a topic (``orders`` / ``payments``), for its colour."""
    return next((kind for kind in COLORS if topic.endswith(kind)), topic)


def event_time_figure(runs: Sequence[Any], first_timestamp_ms: int) -> Any:
    """One panel per run (``benchmarks.skew.SkewRun``, or anything with ``per_batch()``,
    ``title``, ``dropped`` and ``read``): for every partition the event time it has
    reached after each batch (its partitionTime in the source's end offset), and the watermark
    Spark applied to each batch; rows behind it were dropped. Event time is in hours since
    ``first_timestamp_ms``, the backlog's oldest record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def hours(ms: int) -> float | None:
        return (ms - first_timestamp_ms) / HOUR_MS if ms >= 0 else None

    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 4.4), sharey=True, dpi=100, squeeze=False)
    axes = axes[0]
    top = 0.0
    for ax, run in zip(axes, runs):
        batches = run.per_batch()
        x = list(range(1, len(batches) + 1))
        partitions = sorted({tp for b in batches for tp in b["partition_times"]})
        labelled = set()
        for tp in partitions:
            topic = topic_of(tp)
            reached = [hours(b["partition_times"].get(tp, -1)) for b in batches]
            top = max([top] + [h for h in reached if h is not None])
            ax.plot(x, reached, marker="o", markersize=3, linewidth=1.2, alpha=0.8,
                    color=COLORS.get(_kind(topic), "gray"),
                    label=None if topic in labelled else topic)
            labelled.add(topic)
        watermark = [hours(b["watermark"]) if b["watermark"] > 0 else None for b in batches]
        ax.plot(x, watermark, color="black", linestyle="--", linewidth=1.2, marker="x",
                markersize=6, label="watermark applied to the batch's rows")
        ax.set_title(f"{run.title}\n{run.dropped:,} of {run.read:,} records dropped behind the watermark",
                     fontsize=10)
        ax.set_xlabel("micro-batch (batches that read data)")
        ax.grid(True, alpha=0.3)
        ax.set_xticks(x if len(x) <= 20 else x[:: max(1, len(x) // 10)])
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylim(0, top * 1.05 + 0.1)
    axes[0].set_ylabel("event time reached by each partition\n(hours into the backlog)")
    per_topic = Counter(topic_of(tp) for tp in runs[0].per_batch()[0]["partition_times"])
    fig.suptitle("Per-partition event time after each batch: "
                 + ", ".join(f"{n} {topic} partition{'s' if n > 1 else ''}" for topic, n in sorted(per_topic.items()))
                 + f"; {top:.0f} h of backlog", fontsize=11)
    fig.tight_layout()
    return fig


def save_event_time_figure(runs: Sequence[Any], path: str, first_timestamp_ms: int) -> None:
    """Write :func:`event_time_figure` to ``path``."""
    import matplotlib.pyplot as plt

    fig = event_time_figure(runs, first_timestamp_ms)
    fig.savefig(path)
    plt.close(fig)
