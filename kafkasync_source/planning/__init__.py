"""Pure planning: buffers, lags, a clock and options in; the cut out.

Nothing here imports Kafka or Spark, sleeps or does I/O (checked by tests/test_layout.py), so
every decision is unit-tested without a broker, as Kafka Streams keeps ``PartitionGroup`` apart
from the clients that feed it.
"""
