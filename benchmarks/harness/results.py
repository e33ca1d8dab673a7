"""The results file (``benchmarks/results.json``), the log, and the arithmetic every summary uses.

``make bench`` writes the whole file (``benchmarks.run``), then ``benchmarks.side_by_side`` merges
its comparisons in under ``side_by_side``; a measurement run alone with ``--write`` merges its
figures under its own key, leaving the rest as the last full run left them.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(HERE, "results.json")
PICTURES = os.path.join(HERE, os.pardir, "docs", "img")


def log(message: str) -> None:
    """A progress line on stderr, with the time: a full run takes most of an hour."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write(results: dict[str, Any], path: str = RESULTS) -> None:
    with open(path, "w") as out:
        json.dump(results, out, indent=1, sort_keys=True)
        out.write("\n")


def merge(keys: tuple[str, ...], figures: dict[str, Any], path: str = RESULTS) -> None:
    """``figures`` into the results file at ``keys`` (``("side_by_side", "live_rate")``), the rest kept."""
    merged = json.load(open(path)) if os.path.exists(path) else {}
    into = merged
    for key in keys[:-1]:
        into = into.setdefault(key, {})
    into[keys[-1]] = figures
    write(merged, path)


def print_json(figures: dict[str, Any]) -> None:
    print(json.dumps(figures, indent=2))


def median_of_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure (nested), the median over the runs that have it."""
    median: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if key in run]
        if isinstance(values[0], dict):
            median[key] = median_of_runs(values)
        elif isinstance(values[0], (int, float)):
            median[key] = statistics.median(values)
    return median


_COMPARE: dict[str, Callable[[float, float], bool]] = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}


def target(value: float, comparison: str, limit: float, digits: Optional[int] = 3, **beside: Any) -> dict[str, Any]:
    """A target's entry in the results: the value (rounded to ``digits``), the target as text, whether
    it is met, and what ``beside`` adds (what the value is compared with)."""
    return {"value": value if digits is None else round(value, digits), "target": f"{comparison} {limit}",
            "met": _COMPARE[comparison](value, limit), **beside}
