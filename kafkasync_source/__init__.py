"""kafkasync: event-time-synchronized Kafka micro-batches for PySpark.

``spark.readStream.format("kafkasync")`` — see :class:`KafkaSyncDataSource` for the options.
"""

from kafkasync_source.driver.stop_offset_store import read_stop_offsets, reset_stop_offsets
from kafkasync_source.enrich.core import Retry
from kafkasync_source.enrich.map import async_map
from kafkasync_source.enrich.metrics import AsyncMetrics
from kafkasync_source.metrics.listener import KafkaSyncListener, PartitionMetrics, SyncMetrics
from kafkasync_source.spark.source import KafkaSyncDataSource, register

__version__ = "0.1.0.dev0"
"""PEP 440: ``MAJOR.MINOR.PATCH``, with ``.devN`` between releases (CHANGELOG.md). Until 1.0
a minor release may change options or offsets, and says so in the changelog."""

__all__ = [
    "AsyncMetrics",
    "KafkaSyncDataSource",
    "KafkaSyncListener",
    "PartitionMetrics",
    "Retry",
    "SyncMetrics",
    "__version__",
    "async_map",
    "read_stop_offsets",
    "register",
    "reset_stop_offsets",
]
