"""A real Kafka broker for the benchmarks that need one (format("kafka") cannot talk to the
embedded cluster, and broker bytes are only meaningful on a real broker).

``KAFKASYNC_BOOTSTRAP`` names one; else, where Maven and Java 17+ are installed, one is started
on loopback from the official Apache Kafka release on Maven Central (``KAFKA_VERSION``, the
integration suite's default otherwise) and stopped at the end; else the reason is given.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from kafkasync_source.testing.kafka_dist import DEFAULT_KAFKA_VERSION, maven_kafka, maven_problem


@contextlib.contextmanager
def real_broker() -> Iterator[tuple[Optional[str], Optional[str]]]:
    """``(bootstrap, None)`` with a broker for the block, or ``(None, why there is none)``.
    While a started broker runs, ``KAFKASYNC_BOOTSTRAP`` names it for the benchmarks' parts."""
    named = os.environ.get("KAFKASYNC_BOOTSTRAP", "").strip()
    if named:
        yield named, None
        return
    problem = maven_problem()
    if problem:
        yield None, f"no real broker: KAFKASYNC_BOOTSTRAP is not set and {problem}"
        return
    from kafkasync_source.testing.local_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(maven_kafka(os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION)).start()
    os.environ["KAFKASYNC_BOOTSTRAP"] = broker.bootstrap_servers
    try:
        yield broker.bootstrap_servers, None
    finally:
        os.environ.pop("KAFKASYNC_BOOTSTRAP", None)
        broker.close()
