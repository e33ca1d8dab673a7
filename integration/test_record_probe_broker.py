"""What one record probe costs a real broker (issue 53, item 3).

Producer batches of about 1 MB, 8 partitions, the driver's record probe asked for one record a
partition at offsets inside the first, second and third batch. What Apache Kafka's source says
(kafkasync_source/driver/record_probe.py's module docstring) and this shows: the broker sends
the whole batch that holds the offset although the probe's ``max.partition.fetch.bytes`` is
16 KiB (a batch is used whole or not at all: the floor of a probe), and no more than that
batch: not the batches after it, which librdkafka fetched before the probe paused a partition
that had answered. The broker's bytes are read from its own sockets (``ss``). On Kafka 4.3.1:
1.01-1.02 batches a probe; 1.02-1.15 (failing here) before the probe's queue held at most one
response.

tests/test_record_probe.py shows the same on the embedded cluster, which sends whole message
sets whatever the limits.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Producer

from benchmarks.broker_bytes import BrokerBytesSampler
from kafkasync_dev.testing.large_batches import BATCH_PAYLOAD_BYTES, BATCH_RECORDS, produce_large_batches
from kafkasync_source.driver.record_probe import RecordProbe
from kafkasync_source.planning.planner import TopicPartition

BASE_TS = int(time.time() * 1000) - 3_600_000


def test_a_probe_costs_the_broker_the_batch_holding_its_record(bootstrap_servers, topic_factory):
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed: the broker's bytes cannot be read")
    partitions = 8
    topic = topic_factory(partitions)
    produce_large_batches(lambda settings: Producer({"bootstrap.servers": bootstrap_servers, **settings}),
                          topic, partitions, 3, BASE_TS)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    port = int(bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
    probe = RecordProbe({"bootstrap.servers": bootstrap_servers})
    costs = {}
    try:
        for offset in (10, BATCH_RECORDS + 100, 2 * BATCH_RECORDS + 450, 5):
            with BrokerBytesSampler(port, interval_s=0.01) as sampled:
                answers = probe.first_records(dict.fromkeys(tps, offset))
                time.sleep(0.3)  # what librdkafka fetched after the answers, too
            assert answers == {tp: (offset, BASE_TS + offset) for tp in tps}
            costs[offset] = sampled.bytes_sent / partitions / BATCH_PAYLOAD_BYTES
    finally:
        probe.close()
    print(f"\nbroker bytes a probe, in producer batches: {costs}")
    assert all(1 <= cost < 1.1 for cost in costs.values()), costs
