"""What one record probe costs a real broker (issue 53, item 3).

Producer batches of about 1 MB, 8 partitions, the driver's record probe asked for one record a
partition at offsets inside the first, second and third batch. What Apache Kafka's source says
(kafkasync_source/driver/record_probe.py's module docstring) and this shows: the broker sends
the whole batch that holds the offset although the probe's ``max.partition.fetch.bytes`` is
16 KiB (a batch is used whole or not at all: the floor of a probe), and no more than that
batch: not the batches after it, which librdkafka fetched before the probe paused a partition
that had answered. The bytes are those the probe's consumer received, counted by librdkafka
(``rx_bytes``) once no request of it waits for an answer (ClientStatistics.settled), not sampled
from the broker's sockets (``ss``) every 10 ms with a sleep for the rest, which a loaded machine
made miss bytes (issue 64). On Kafka 4.3.1, sampled so: 1.01-1.02 batches a probe; 1.02-1.15
(failing here) before the probe's queue held at most one response.

tests/test_record_probe.py shows the same on the embedded cluster, which sends whole message
sets whatever the limits.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from kafkasync_dev.testing.client_statistics import ClientStatistics
from kafkasync_dev.testing.large_batches import BATCH_PAYLOAD_BYTES, BATCH_RECORDS, produce_large_batches
from kafkasync_source.driver.record_probe import RecordProbe
from kafkasync_source.planning.planner import TopicPartition

BASE_TS = int(time.time() * 1000) - 3_600_000


def test_a_probe_costs_the_broker_the_batch_holding_its_record(bootstrap_servers, topic_factory):
    partitions = 8
    topic = topic_factory(partitions)
    produce_large_batches(lambda settings: Producer({"bootstrap.servers": bootstrap_servers, **settings}),
                          topic, partitions, 3, BASE_TS)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    statistics = ClientStatistics()
    probe = RecordProbe({"bootstrap.servers": bootstrap_servers, **statistics.settings()})
    costs, received = {}, 0
    try:
        for offset in (10, BATCH_RECORDS + 100, 2 * BATCH_RECORDS + 450, 5):
            answers = probe.first_records(dict.fromkeys(tps, offset))
            assert answers == {tp: (offset, BASE_TS + offset) for tp in tps}
            # Every partition is paused now (the probe's rounds end so): nothing more is asked.
            settled = statistics.settled(probe._consumer.poll)["rx_bytes"]
            costs[offset], received = (settled - received) / partitions / BATCH_PAYLOAD_BYTES, settled
    finally:
        probe.close()
    print(f"\nbytes received a probe, in producer batches: {costs}")
    assert all(1 <= cost < 1.1 for cost in costs.values()), costs
