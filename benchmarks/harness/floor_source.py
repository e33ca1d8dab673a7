"""Context for the throughput numbers: Spark's ceiling for a Python streaming source.

``format("kafkasync-ceiling")`` is a streaming Python data source that does no Kafka work at
all: its micro-batches have kafkasync's shape on the benchmark data (8 input partitions of
10,000 rows each, one per Kafka partition, the Kafka schema with 8-byte keys and 100-byte
values; ``valueBytes`` sets the values' size), and ``read()`` yields a ready-made Arrow batch.
Whatever it reaches into the ``noop`` sink is the most any Python source can reach with that
batch shape on this machine: Spark's per-batch and per-task costs, Arrow transfer to the JVM, and row conversion.

With ``batches=0`` it is a live stream instead: every trigger finds a new batch, as a Kafka
topic written faster than batches run does, so its trigger durations are Spark's floor per batch
for a Python source with that many tasks (``benchmarks.side_by_side``'s latency comparison).
Its runner calls and tasks are traced like kafkasync's (:mod:`benchmarks.harness.runner_trace`);
``workerFixes=true`` applies kafkasync's fixes for Spark's Python workers
(:mod:`kafkasync_source.spark.python_worker`).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from benchmarks.harness.runner_trace import timed_method, traced_read
from kafkasync_source.driver.bounded_run import SupportsTriggerAvailableNow
from kafkasync_source.spark.python_worker import landed_in_worker
from kafkasync_source.spark.schema import arrow_schema, kafka_schema

FLOOR = "kafkasync-ceiling"
"""The floor source's name: read beside the Kafka sources, what a Python source costs in Spark."""
TUNED_FLOOR = "kafkasync-ceiling-tuned"
"""The floor source with kafkasync's fixes for Spark's Python workers (``python_worker.py``):
what a Python source that applies them costs, so that kafkasync's own cost per batch shows."""
FLOOR_LABEL = "Python source floor, worker fixes"
""":data:`TUNED_FLOOR` in the results: the least a Python source that yields the same rows costs
in Spark (without the fixes each task's worker spends about 50 ms collecting garbage)."""

_CACHE: dict = {}


class _Task(InputPartition):
    def __init__(self, partition: int, rows: int, value_bytes: int) -> None:
        self.partition = partition
        self.rows = rows
        self.value_bytes = value_bytes


def _arrow_batch(partition: int, rows: int, value_bytes: int):
    key = (partition, rows, value_bytes)
    if key not in _CACHE:
        import numpy as np
        import pyarrow as pa

        schema = arrow_schema(kafka_schema(False))
        offsets = np.arange(rows, dtype=np.int64)
        _CACHE[key] = pa.RecordBatch.from_arrays(
            [
                pa.array([b"k%07d" % i for i in range(rows)], pa.binary()),
                pa.array([b"v" * value_bytes] * rows, pa.binary()),
                pa.array(["bench"] * rows, pa.string()),
                pa.array(np.full(rows, partition, dtype=np.int32)),
                pa.array(offsets),
                pa.array((1_704_096_000_000 + offsets * 10) * 1000).cast(schema.field("timestamp").type),
                pa.array(np.zeros(rows, dtype=np.int32)),
            ],
            schema=schema,
        )
    return _CACHE[key]


class _CeilingStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, batches: int, partitions: int, rows: int, value_bytes: int, worker_fixes: bool) -> None:
        self._batches, self._partitions, self._rows, self._value_bytes = batches, partitions, rows, value_bytes
        self._worker_fixes = worker_fixes

    def __setstate__(self, state: dict) -> None:
        # workerFixes: what kafkasync's readers do on landing in a Python worker, for comparison.
        self.__dict__.update(state)
        if self._worker_fixes:
            landed_in_worker()

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        def latest() -> dict:
            current = (start or {"batch": 0})["batch"]
            return {"batch": current + 1 if self._batches == 0 else min(current + 1, self._batches)}

        return timed_method("latestOffset", latest)()

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)`` reads every batch, one a trigger, as a capped backfill
        does: without it Spark fixes the end at the first ``latestOffset``, one batch."""

    def partitions(self, start: dict, end: dict):
        def tasks() -> list:
            return [
                _Task(p, self._rows, self._value_bytes)
                for _ in range(end["batch"] - start["batch"])
                for p in range(self._partitions)
            ]

        return timed_method("partitions", tasks)()

    def read(self, partition: InputPartition) -> Iterator:
        assert isinstance(partition, _Task)
        return traced_read(self._read, partition)

    @staticmethod
    def _read(partition: _Task) -> Iterator:
        yield _arrow_batch(partition.partition, partition.rows, partition.value_bytes)

    def commit(self, end: dict) -> None:
        pass


class CeilingDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FLOOR

    def schema(self):
        return kafka_schema(False)

    def streamReader(self, schema) -> DataSourceStreamReader:
        return _CeilingStream(
            int(self.options.get("batches", "4")),
            int(self.options.get("partitions", "8")),
            int(self.options.get("rows", "10000")),
            int(self.options.get("valueBytes", "100")),
            self.options.get("workerFixes", "false").lower() == "true",
        )


def floor_reader(spark: Any, *, batches: int, partitions: int, rows: int, value_bytes: int,
                 worker_fixes: bool) -> Any:
    """``spark.readStream`` of the floor source (registered here): ``batches`` of ``partitions``
    tasks of ``rows`` rows each (0 batches: a live stream, a new batch every trigger)."""
    spark.dataSource.register(CeilingDataSource)
    return (spark.readStream.format(FLOOR).option("batches", batches).option("partitions", partitions)
            .option("rows", rows).option("valueBytes", value_bytes).option("workerFixes", worker_fixes))
