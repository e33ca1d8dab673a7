"""Executor side: the settings of the consumer a range is read with, its prefetch above all.

Kept apart from the read loop (range_reader.py) because they are a study of their own: how much
librdkafka fetches ahead of a range decides how many bytes the broker sends per payload byte
(tails dropped by a pause, fetches cut at their byte limit) and whether a read waits on the
network. The numbers behind each choice are in :func:`prefetch_settings` and docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Mapping, Optional

from kafkasync_source.config.client_config import consumer_group_id

_PARTITION_FETCH_BYTES = 8 * 1024 * 1024
_PRODUCER_BATCH_BYTES = 1024 * 1024
"""About the largest record batch a producer writes (librdkafka's ``batch.size`` 1,000,000 B, a
broker's ``message.max.bytes`` 1 MiB by default)."""
_QUEUE_BYTES = 16 * 1024 * 1024
_EMPTY_QUEUE_KBYTES = 1
"""The least librdkafka takes: it fetches once its queue is empty (prefetch_settings)."""
_EMPTY_QUEUE_FETCHES = 8
"""A range read with an empty queue fetches about an eighth of it at a time (prefetch_settings)."""
_EMPTY_QUEUE_FETCH_BYTES = (128 * 1024, 1024 * 1024)
"""The least and most such a fetch asks for: at least 8 of a Java producer's batches
(``batch.size`` 16,384), at most a librdkafka producer's (``batch.size`` 1,000,000)."""
_PREFETCH_SHARE = 32
"""A range whose share is a producer batch or more prefetches a whole fetch ahead."""
GUESSED_RECORD_BYTES = 1024
"""Bytes per record assumed for a topic this worker has read no range of yet."""
_FETCH_QUEUE_BACKOFF_MS = 1
_FETCH_WAIT_MAX_MS = 10


def consumer_settings(client_config: Mapping[str, str]) -> dict:
    """The settings of a range's consumer: the user's ``kafka.*`` ones between the reader's
    defaults and what reading exactly ``[start, end)`` needs."""
    return {
        # max.partition.fetch.bytes and queued.max.messages.kbytes: sized per consumer to
        # the range it is created for (prefetch_settings), unless the user set them.
        # A range ends at or below the log end the driver saw, so a reader never needs the
        # broker to hold a fetch for records to come (librdkafka's default: 500 ms). Such a
        # fetch, sent once the prefetch reached the log end, is still in flight when the
        # pooled consumer is taken again, and the fetch from the next range's start waits
        # for it: 510 ms per 100-record range of a 2 MB partition on Kafka 4.3.1, 15-170 ms
        # where the prefetch had not reached the log end.
        "fetch.wait.max.ms": _FETCH_WAIT_MAX_MS,
        # A prefetch sized to a share of the range is over its threshold after most fetches;
        # librdkafka then looks again only after this backoff (its default: 1 s), while a
        # task drains the queue in about a millisecond (see fetcher.py, benchmarks/raw.py).
        "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS,
        # The user's kafka.* settings win over the defaults above (kafka.queued.*,
        # kafka.fetch.* among them), not over the reader's own needs below.
        **client_config,
        # Needed even for assign(); nothing is ever committed to it (see consumer_group_id).
        "group.id": consumer_group_id(client_config),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    }


def prefetch_settings(
    records: int, record_bytes: Optional[float], client_config: Mapping[str, str]
) -> tuple[int, dict[str, int]]:
    """The prefetch of a consumer created to read ``records`` offsets of records of about
    ``record_bytes`` bytes (None: not known yet): the most it holds ahead in bytes (0 where the
    user's settings fix it), and the librdkafka settings that make it, bar those the user set.

    librdkafka fetches a partition while its queue holds less than ``queued.max.messages.kbytes``
    (and ``queued.min.messages``), each fetch up to ``max.partition.fetch.bytes``, whatever the
    reader still needs (``rd_kafka_toppar_fetch_decide`` in rdkafka_fetcher.c, which looks again
    every ``fetch.queue.backoff.ms`` while the queue is full); both are read only when a consumer
    is created. What it fetched past the range's end is kept for the next range (range_tails.py),
    but a fetch still in flight when the consumer is paused for the pool is dropped, a whole
    fetch (a pause starts a new fetch version, ``rd_kafka_toppar_pause_resume`` in
    rdkafka_partition.c). One is in flight when the queue fell below its threshold while the
    reader took the tail: with a queue of 64 KiB (sized to 1/32 of the range, as before tails
    were kept) 19 of 64 capped ranges of 200 B records lost one, with 1 KiB 3 (its debug log,
    Kafka 4.3.1), and the broker sent 1.38 and 1.19 bytes per payload byte. So a range below 32
    producer batches (a capped backfill's, a live stream's) fetches when its queue is empty.

    That fetch is not always avoided: librdkafka's broker thread looks at the queue every
    ``fetch.queue.backoff.ms`` and serves the pause in turn, so the fetch can go first (in the
    debug log, 1 of a partition's 8 capped ranges outside Spark, 5 of 8 in Spark, where more
    threads share the cores). A longer back-off narrows that window but holds every fetch of a
    range read with an empty queue (5 ms: a capped read of 1 KB records took twice as long). So
    the race costs one fetch, and such a range fetches about an eighth of itself at a time
    (:func:`_empty_queue_fetch_bytes`): fewer, larger fetches lose more to it, smaller ones take
    a round trip each, and the queue is empty while each is under way.

    A fetch is cut wherever its byte limit falls (the broker's ``LogSegment.read`` slices raw
    bytes) and the client drops the cut-off record batch, to fetch it again; a fetch smaller
    than the first batch returns that batch whole (``minOneMessage``) and cuts none. The fetch
    stays within 128 KiB (8 of a Java producer's batches, ``batch.size`` 16,384: Kafka Connect,
    Debezium, Kafka Streams) and 1 MiB (librdkafka's ``batch.size``, whose batches a producer
    writing at full speed fills to 0.6-1 MB). Capped reads of 8 x 50,000 records (ranges of
    6,250) outside Spark (two workers, Kafka 4.3.1), broker bytes per payload byte with fetches of
    1 MiB / 256 KiB: 1 KB records in 0.6 MB batches 1.16 / 1.07, in 16 KB batches 1.06 / 1.03,
    200 B records 1.30 / 1.27 and 1.23 / 1.13; but the 1 KB read in 16 KB batches took 2.1-3.1 s
    with 1 MiB, 3.2-4.1 s with 256 KiB and 2.7-2.8 s with 512 KiB, its eighth (1.03-1.04 bytes
    per payload byte). In Spark, capped 200 B records in 16 KB batches (ranges of about 1.3 MB):
    1.22-1.24 with 256 KiB fetches, 1.14 with 128 KiB, their eighth, at the same speed; more in
    docs/benchmarks.md.

    A range of 32 producer batches or more is read 8 MiB at a time within a queue of 16 MiB, as
    before tails: an uncapped read of 8 x 50,000 records of 1 KB then sent 1.05 bytes per payload
    byte, and prefetching a whole fetch ahead keeps the read going while the reader builds its
    batches."""
    range_bytes = records * (record_bytes or GUESSED_RECORD_BYTES)
    if range_bytes / _PREFETCH_SHARE < _PRODUCER_BATCH_BYTES:
        queue_kbytes, fetch = _EMPTY_QUEUE_KBYTES, _empty_queue_fetch_bytes(range_bytes)
    else:
        queue_kbytes, fetch = _QUEUE_BYTES // 1024, _PARTITION_FETCH_BYTES
    sized = {"queued.max.messages.kbytes": queue_kbytes, "max.partition.fetch.bytes": fetch}
    own = {key: value for key, value in sized.items() if key not in client_config}
    return (queue_kbytes * 1024 + fetch if own else 0), own


def _empty_queue_fetch_bytes(range_bytes: float) -> int:
    """About an eighth of the range, the power of two at or below it, within
    :data:`_EMPTY_QUEUE_FETCH_BYTES`: a fetch the pause drops costs at most about an eighth of
    the range, and a range takes about 8 to 16 round trips (prefetch_settings)."""
    least, most = _EMPTY_QUEUE_FETCH_BYTES
    eighth = int(range_bytes / _EMPTY_QUEUE_FETCHES)
    return max(least, min(most, 1 << max(eighth, 1).bit_length() - 1))
