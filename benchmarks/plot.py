"""benchmarks/skew.png: per-partition event time per batch, synchronized vs -1."""

from __future__ import annotations

from typing import Sequence

from benchmarks.workloads import BASE_TS

HOUR_MS = 3600 * 1000


def plot_skew(runs: Sequence, path: str) -> None:
    """One panel per run (``benchmarks.skew.SkewRun``): for every partition the event time it
    has reached after each batch (its partitionTime in the source's end offset), and the
    watermark Spark applied to each batch; rows behind it were dropped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(11, 4.2), sharey=True, dpi=100)
    colors = {"orders": "#1f77b4", "payments": "#d62728"}
    for ax, run in zip(axes, runs):
        batches = run.per_batch()
        x = list(range(1, len(batches) + 1))
        partitions = sorted({tp for b in batches for tp in b["partition_times"]})
        for tp in partitions:
            base = tp.split("-")[0]
            hours = [
                (b["partition_times"][tp] - BASE_TS) / HOUR_MS if b["partition_times"][tp] >= 0 else None
                for b in batches
            ]
            ax.plot(x, hours, marker="o", markersize=3, linewidth=1.2, color=colors.get(base, "gray"),
                    alpha=0.8, label=base if tp.endswith("-0") else None)
        watermark = [(b["watermark"] - BASE_TS) / HOUR_MS if b["watermark"] > 0 else None for b in batches]
        ax.plot(x, watermark, color="black", linestyle="--", linewidth=1.2, marker="x",
                markersize=6, label="watermark applied to the batch's rows")
        title = ("synchronized (max.task.idle.ms=0, default)" if run.max_task_idle_ms == 0
                 else f"max.task.idle.ms={run.max_task_idle_ms} (like format(\"kafka\"))")
        ax.set_title(f"{title}\n{run.dropped:,} of {run.read:,} records dropped behind the watermark",
                     fontsize=10)
        if run.max_task_idle_ms >= 0:
            ax.text(0.03, 0.96, "orders and payments coincide:\nevery batch ends at the same event time",
                    transform=ax.transAxes, fontsize=8, va="top")
        ax.set_xlabel("micro-batch (batches that read data)")
        ax.set_ylim(0, 25)
        ax.grid(True, alpha=0.3)
        ax.set_xticks(x if len(x) <= 20 else x[:: max(1, len(x) // 10)])
    axes[0].set_ylabel("event time reached by each partition\n(hours into the backlog)")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Per-partition event time after each batch: 6 order + 2 payment partitions, "
                 "same 24 h backlog", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
