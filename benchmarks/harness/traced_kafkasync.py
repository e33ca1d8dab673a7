"""``format("kafkasync-traced")``: kafkasync itself, its runner calls and tasks traced
(:mod:`benchmarks.harness.runner_trace`; unpickling the source in the runner imports that module)."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from benchmarks.harness.runner_trace import timed_method, traced_read
from kafkasync_source.spark.source import KafkaSyncDataSource
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader


class _TracedKafkaSyncStream(KafkaSyncStreamReader):
    """kafkasync's stream reader, each method Spark calls timed (see :func:`timed_method`)."""

    def latestOffset(self, start: Optional[dict] = None, limit: Any = None) -> dict:
        return timed_method("latestOffset", super().latestOffset)(start, limit)

    def partitions(self, start: dict, end: dict):
        return timed_method("partitions", super().partitions)(start, end)

    def commit(self, end: dict) -> None:
        timed_method("commit", super().commit)(end)

    def reportLatestOffset(self) -> Optional[dict]:
        return timed_method("reportLatestOffset", super().reportLatestOffset)()

    def read(self, partition: Any) -> Iterator:
        return traced_read(super().read, partition)


class TracedKafkaSync(KafkaSyncDataSource):
    """``format("kafkasync-traced")``: kafkasync itself, with its runner calls and tasks traced."""

    @classmethod
    def name(cls) -> str:
        return "kafkasync-traced"

    def streamReader(self, schema: Any) -> KafkaSyncStreamReader:
        return _TracedKafkaSyncStream(self._parse(streaming=True), schema)
