"""kafkasync: event-time-synchronized Kafka micro-batches for PySpark.

``spark.readStream.format("kafkasync")`` — see :class:`KafkaSyncDataSource` for the options.

The names below are imported on first use (PEP 562), not with the package: every process that
unpickles a kafkasync object imports this package first, and Spark starts a new Python source
runner, which imports everything fresh, for every streaming query. The runner needs the data
source and its driver, not the async enrichment helpers (about 7 ms of CPU per query where
modules are compiled at import, as without bytecode caches; tests/test_runner_imports.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers
    from kafkasync_source.driver.stop_offset_store import read_stop_offsets, reset_stop_offsets
    from kafkasync_source.enrich.core import Retry
    from kafkasync_source.enrich.map import async_map
    from kafkasync_source.enrich.metrics import AsyncMetrics
    from kafkasync_source.metrics.decode_errors import observe_decode_errors
    from kafkasync_source.metrics.listener import KafkaSyncListener, PartitionMetrics, SyncMetrics
    from kafkasync_source.spark.source import KafkaSyncDataSource, register

__version__ = "0.1.0.dev0"
"""PEP 440: ``MAJOR.MINOR.PATCH``, with ``.devN`` between releases (CHANGELOG.md). Until 1.0
a minor release may change options or offsets, and says so in the changelog."""

_EXPORTS = {
    "AsyncMetrics": "kafkasync_source.enrich.metrics",
    "KafkaSyncDataSource": "kafkasync_source.spark.source",
    "KafkaSyncListener": "kafkasync_source.metrics.listener",
    "PartitionMetrics": "kafkasync_source.metrics.listener",
    "Retry": "kafkasync_source.enrich.core",
    "SyncMetrics": "kafkasync_source.metrics.listener",
    "async_map": "kafkasync_source.enrich.map",
    "observe_decode_errors": "kafkasync_source.metrics.decode_errors",
    "read_stop_offsets": "kafkasync_source.driver.stop_offset_store",
    "register": "kafkasync_source.spark.source",
    "reset_stop_offsets": "kafkasync_source.driver.stop_offset_store",
}
"""Each public name and the module that defines it."""

__all__ = [
    "AsyncMetrics",
    "KafkaSyncDataSource",
    "KafkaSyncListener",
    "PartitionMetrics",
    "Retry",
    "SyncMetrics",
    "__version__",
    "async_map",
    "observe_decode_errors",
    "read_stop_offsets",
    "register",
    "reset_stop_offsets",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
