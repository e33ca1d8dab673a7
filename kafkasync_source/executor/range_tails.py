"""Executor side: what a range's consumer fetched past the range's end, kept for the next range.

A broker answers a fetch with whole record batches (``minOneMessage``: the batch holding the
fetch offset comes whole, from its first record), so the reader of a range ending inside a
producer batch has fetched that batch's rest, and librdkafka holds it queued when the range is
done. Pausing the consumer for the pool purges that queue (consumer_pool.py), and the next range
of the partition, starting at this range's end, fetched the whole batch again: under
``maxOffsetsPerTrigger`` once per range and partition. At producer batches of about 1 MB
(librdkafka's ``batch.size``) and capped ranges of 1.25 MB (6,250 records of 200 B) that made
the broker send 1.55 bytes per payload byte where format("kafka") sent 1.08 (Kafka 4.3.1,
docs/benchmarks.md). format("kafka") keeps what a ``poll`` returned past the offset a task
needed in its executor-wide ``FetchedDataPool`` (apache/spark ``KafkaDataConsumer.scala``), so
the next task of the partition continues from it.

Here the next range of a partition is read by whichever of the executor's Python workers Spark
hands its task to (``PythonWorkerFactory.create`` takes the idle worker that came back first),
each with a consumer pool of its own, so the tail is kept where every worker of the host finds
it: a file per range start under a temporary directory only this user may enter, named by the
query run's consumer scope, the cluster, topic, partition and offset (never the client's
settings: they may hold secrets). A tail is taken only where the consumer likely holds enough
past the range (consumer_tails._worth_a_tail), at most :data:`MAX_TAIL_BYTES`; files are removed
when taken, and those of stopped queries after :data:`STALE_AFTER_S`.

Records fetched earlier may have been deleted since (``DeleteRecords``, retention) or, after an
unclean leader election, truncated away: format("kafka") hands its cached records over
regardless; a tail is used only after the partition's log start and end, asked of the broker,
show it still holds every offset the tail stands for. Otherwise the range is fetched afresh and
a loss is found and reported as without tails (data_loss.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

logger = logging.getLogger(__name__)

MIN_TAIL_BYTES = 64 * 1024
"""What a range's consumer must be likely to hold past the range's end for it to be taken and
kept (consumer_tails._worth_a_tail): a tail is checked with a log look-up, a round trip, and a
live stream's consumer holds a few records past its range, fetched with the next range anyway.
Once taken, any tail is kept, however small: the producer batch it ends (up to 1 MB) would be
fetched whole again for it (measured: tails of 44 records, dropped as too small, cost a refetch
of the 700 KB batch holding them)."""
MAX_TAIL_BYTES = 16 * 1024 * 1024
"""At most a consumer's largest prefetch (consumer_settings.prefetch_settings)."""
STALE_AFTER_S = 120.0
"""Tails not taken for this long are of a query that stopped, or of a partition read elsewhere."""
_SWEEP_EVERY_S = 60.0


class StashedRecord:
    """A record kept in a tail: answers as confluent-kafka's ``Message`` does, for what the range
    reader, the event-time seam and the decoders ask of a record."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_timestamp", "_headers")

    def __init__(self, topic: str, partition: int, offset: int, key: Optional[bytes], value: Optional[bytes],
                 timestamp: tuple[int, int], headers: Optional[list]) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._timestamp, self._headers = key, value, timestamp, headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> Optional[bytes]:
        return self._key

    def value(self) -> Optional[bytes]:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def headers(self) -> Optional[list]:
        return self._headers

    def error(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._value or b"")


@dataclass(frozen=True)
class Tail:
    """The records of one partition at offsets ``[start, end)``, every one the log held there
    when fetched (offsets in between are transaction markers, aborted or compacted records)."""

    start: int
    end: int
    records: list


def record_bytes(records: Sequence) -> int:
    """Key and value bytes of ``records``."""
    return sum(len(m.value() or b"") + len(m.key() or b"") for m in records)


class RangeTails:
    """The tails of one host's ranges, shared by its Python workers through files."""

    def __init__(self, directory: Optional[str] = None, clock: Callable[[], float] = time.time) -> None:
        self._directory = directory or os.path.join(tempfile.gettempdir(), f"kafkasync-tails-{os.getuid()}")
        self._clock = clock
        self._swept_at = 0.0
        self.kept = 0
        self.taken = 0
        self.refused = 0
        """Tails taken but not used: the log no longer held them (consumer_tails._log_holds)."""

    def _private_directory(self, create: bool) -> bool:
        """Whether the directory is this user's alone (creating it so if ``create``). Where
        another user made it first in a shared temporary directory, records stay out of it, and
        nothing in it is unpickled: a file planted there would run code when loaded."""
        if create:
            os.makedirs(self._directory, mode=0o700, exist_ok=True)
        try:
            status = os.lstat(self._directory)
        except FileNotFoundError:
            return False
        return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o077

    def _path(self, scope: str, cluster: str, topic: str, partition: int, start: int) -> str:
        """One file per range start: pieces of one partition's range, read at the same time by
        tasks of their own (input_partitions.py), each keep theirs."""
        name = hashlib.sha256(f"{scope}\0{cluster}\0{topic}\0{partition}\0{start}".encode()).hexdigest()[:40]
        return os.path.join(self._directory, name)

    def keep(self, scope: str, cluster: str, topic: str, partition: int, start: int, records: list) -> bool:
        """Keep ``records`` (in offset order, every record the partition holds from ``start`` up
        to the last of them) for the range starting at ``start``; False where they are not kept."""
        if not scope or not records:
            return False
        if record_bytes(records) > MAX_TAIL_BYTES:
            return False
        rows = [(m.offset(), m.key(), m.value(), m.timestamp(), m.headers()) for m in records]
        path = self._path(scope, cluster, topic, partition, start)
        try:
            if not self._private_directory(create=True):
                logger.warning("kafkasync: %s is not this user's alone; what ranges fetch past their end is "
                               "not kept there", self._directory)
                return False
            self._sweep()
            fd, temporary = tempfile.mkstemp(dir=self._directory, prefix=".writing-")
            with os.fdopen(fd, "wb") as file:
                pickle.dump((records[-1].offset() + 1, rows), file, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, path)
            self.kept += 1
        except OSError as err:  # a full or unwritable disk: the next range fetches again
            logger.info("kafkasync: could not keep what %s-%d fetched past offset %d (%s)", topic, partition,
                        start, err)
            return False
        return True

    def take(self, scope: str, cluster: str, topic: str, partition: int, start: int) -> Optional[Tail]:
        """The tail kept for a range of the partition starting at ``start``, removed; None if none.
        The caller checks that the log still holds it."""
        if not scope:
            return None
        path = self._path(scope, cluster, topic, partition, start)
        try:
            if not self._private_directory(create=False):
                return None
            with open(path, "rb") as file:
                os.unlink(path)
                tail_end, rows = pickle.load(file)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError):
            return None  # none kept, or one damaged (a disk that filled while it was written)
        self.taken += 1
        return Tail(start, tail_end, [StashedRecord(topic, partition, *row) for row in rows])

    def _sweep(self) -> None:
        """Remove tails older than :data:`STALE_AFTER_S`, at most once a minute per process."""
        now = self._clock()
        if now - self._swept_at < _SWEEP_EVERY_S:
            return
        self._swept_at = now
        try:
            entries = list(os.scandir(self._directory))
        except OSError:
            return
        for entry in entries:
            try:
                if now - entry.stat().st_mtime > STALE_AFTER_S:
                    os.unlink(entry.path)
            except OSError:
                pass  # taken or swept by another worker meanwhile


TAILS = RangeTails()
