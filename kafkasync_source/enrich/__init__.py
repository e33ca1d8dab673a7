"""Asynchronous enrichment (KIP-311's execution side): ``async_map`` calls an async function per
row with many calls in flight and hands rows back in order. A feature of its own beside the
source; the names users import are re-exported by ``kafkasync_source``."""

from kafkasync_source.enrich.core import Retry
from kafkasync_source.enrich.map import async_map
from kafkasync_source.enrich.metrics import AsyncMetrics

__all__ = ["AsyncMetrics", "Retry", "async_map"]
