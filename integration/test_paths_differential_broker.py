"""On Apache Kafka, ``planningMode=auto`` cuts the batches ``planningMode=fetch`` cuts, and hands on
the same times.

tests/test_paths_differential.py runs both paths as their own queries over a model broker; this
is the same comparison over a real log: transaction markers (stamped with the broker's clock at
commit, ``MemoryRecords.withEndTransactionMarker``), an aborted transaction, a plain partition
beside the transactional ones, and under ``eventTime.order=nonDecreasing`` heartbeats (values
without a time, ``eventTime.onInvalid=skip``). ``maxEventTimePerTrigger`` makes a batch of every
slice of event time, so most batches cut partitions inside their windows, where the index paths
used to hand on the level of the cut rather than the largest time taken.

Each run is a bounded query (``trigger(availableNow=True)``) driven as Spark drives the source,
without Spark: per batch, the records it holds (from the delivery reports: committed records
and heartbeats, not markers or aborted records), the partition times and stream time its end
offset hands on, and the enforced-processing count. Both runs must be equal, and the
time-index or record-probe path must have planned batches of its own (else the test compares
the fetch path with itself).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer

from kafkasync_dev.testing import Record, produce_confirmed
from kafkasync_dev.testing.heartbeats import HEARTBEAT
from kafkasync_source.config.options import parse_options
from kafkasync_source.driver.sync_driver import SyncDriver

STEP_MS = 400
"""maxEventTimePerTrigger: about 10 slices over each partition's span of 4 s."""


def write_log(bootstrap: str, topic: str, promise: bool) -> dict[int, list[int]]:
    """Three partitions over the same 4 s of event time at different rates: partitions 0 and 1
    in transactions of 7 records (one transaction of partition 1 aborted), partition 2 plain,
    each in time order. Under the promise the time is the value's ``ts`` and partition 2 has a
    heartbeat after every third record; else it is the Kafka timestamp, stamped 20 minutes
    ahead so that the markers (the broker's clock now) are older than every record, and the
    time index answers for them rather than sending the batch to the fetch path. Returns, per
    partition, the offsets a read_committed consumer is handed (heartbeats included)."""
    base = int(time.time() * 1000) + (0 if promise else 20 * 60_000)
    counts = {0: 50, 1: 21, 2: 35}
    held: dict[int, list[int]] = {p: [] for p in counts}

    def record(partition: int, i: int) -> Record:
        ts = base + i * 4_000 // counts[partition]
        if promise:
            return Record(partition, int(time.time() * 1000), None, json.dumps({"ts": ts}).encode())
        return Record(partition, ts, None, b"v")

    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"it-{uuid.uuid4().hex}",
                              "enable.idempotence": True, "linger.ms": 5})
    transactional.init_transactions(30)
    for partition in (0, 1):
        for number, first in enumerate(range(0, counts[partition], 7)):
            transactional.begin_transaction()
            chunk = [record(partition, i) for i in range(first, min(first + 7, counts[partition]))]
            offsets = produce_confirmed(transactional, topic, chunk, 30)
            if partition == 1 and number == 1:
                transactional.abort_transaction(30)
            else:
                transactional.commit_transaction(30)
                held[partition] += [offset for _, offset in offsets]
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    records = []
    for i in range(counts[2]):
        records.append(record(2, i))
        if promise and i % 3 == 2:
            records.append(Record(2, int(time.time() * 1000), None, HEARTBEAT))
    held[2] = [offset for _, offset in produce_confirmed(plain, topic, records, 30)]
    return held


def bounded_run(options: dict[str, str]) -> tuple[list[tuple], list[str]]:
    """The run's batches, each: per partition the offsets it holds (as ``[start, end)``), the
    partition times and stream time its end hands on, the enforced count; and the path that
    planned each batch."""
    driver = SyncDriver(parse_options(options, streaming=True))
    batches, paths = [], []
    try:
        driver.prepare_available_now()
        start = driver.initial_offset()
        while (end := driver.available_now.next_offset(driver, start)) is not start:
            batches.append((
                {tp.partition: (start.partitions[tp].next_offset, position.next_offset)
                 for tp, position in end.partitions.items()},
                {tp.partition: position.partition_time for tp, position in end.partitions.items()},
                end.stream_time, end.enforced_processing_total,
            ))
            paths.append(driver.planning)
            start = end
    finally:
        driver.close()
    return batches, paths


def holding(batches: list[tuple], held: dict[int, list[int]]) -> list[tuple]:
    """The batches as the records they hold (offset ranges differ by markers where one path
    ends a partition at a marker and the other at the record after it); batches without a
    record are left out."""
    out = []
    for ranges, partition_times, stream_time, enforced in batches:
        records = {p: [o for o in held[p] if start <= o < end] for p, (start, end) in ranges.items()}
        records = {p: offsets for p, offsets in records.items() if offsets}
        if records:
            out.append((records, partition_times, stream_time, enforced))
    return out


@pytest.mark.parametrize("promise", [False, True], ids=["kafka-timestamps", "event-time-in-order"])
def test_auto_cuts_and_hands_on_what_reading_every_record_does(bootstrap_servers, topic_factory, promise):
    topic = topic_factory(3)
    held = write_log(bootstrap_servers, topic, promise)
    options = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic, "startingOffsets": "earliest",
               "maxEventTimePerTrigger": f"{STEP_MS}ms"}
    if promise:
        options.update({"eventTime.jsonPath": "$.ts", "eventTime.onInvalid": "skip",
                        "eventTime.order": "nonDecreasing"})
    auto, paths = bounded_run(options)
    fetch, fetch_paths = bounded_run({**options, "planningMode": "fetch"})
    assert set(fetch_paths) == {"fetch"}
    own_path = "recordProbes" if promise else "timeIndex"
    assert paths.count(own_path) >= 5, f"the {own_path} path planned too few batches: {paths}"
    assert holding(auto, held) == holding(fetch, held), f"auto planned by {paths}"
    every = {p: [o for ranges, *_ in holding(fetch, held) for o in ranges.get(p, [])] for p in held}
    assert every == held, "every record once, in order"
    assert len(fetch) >= 8, "slices of event time, most cutting partitions inside their windows"
