"""Where the measurements' Kafka and Schema Registry come from.

A real broker: ``KAFKASYNC_BOOTSTRAP``, else Apache Kafka from Maven Central started for the run
(``kafkasync_dev.testing.local_broker.real_broker``; one broker: its port is the one whose bytes
are sampled). Spark's own Kafka connector (``format("kafka")``) must match the running Spark, and
Maven Central serves none for some releases (4.3.0): the measurements beside it run in ``make
parity``'s virtualenv. A registry: ``KAFKASYNC_SCHEMA_REGISTRY_URL``, else Apicurio started here.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional


def broker_port(bootstrap: str) -> int:
    """The first broker's port: the one :class:`~benchmarks.harness.samplers.BrokerBytesSampler` samples."""
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


def on_real_broker(measure: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """``measure(bootstrap)`` on a real broker, or ``{"skipped": why there is none}``."""
    from kafkasync_dev.testing.local_broker import real_broker

    with real_broker() as (bootstrap, why_not):
        return {"skipped": str(why_not)} if bootstrap is None else measure(bootstrap)


@contextmanager
def broker_and_connector() -> Iterator[tuple[Optional[str], str, str]]:
    """``(bootstrap, jars, "")``: a real broker and Spark's Kafka connector's jars for this
    PySpark; ``(None, "", why not)`` where either cannot be had."""
    from kafkasync_dev.testing.local_broker import real_broker
    from kafkasync_dev.testing.spark import format_kafka_jars

    jars, why_not = format_kafka_jars()
    if jars is None:
        yield None, "", str(why_not)
        return
    with real_broker() as (bootstrap, why_not):
        yield bootstrap, jars, "" if bootstrap is not None else str(why_not)


def with_registry(measure_with: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """``measure_with(url)`` against ``KAFKASYNC_SCHEMA_REGISTRY_URL`` or a registry started here,
    or ``{"skipped": why}`` where none can be started."""
    from kafkasync_dev.testing.schema_registry import EXTERNAL_REGISTRY, RegistryUnavailable, start_registry

    if os.environ.get(EXTERNAL_REGISTRY):
        return measure_with(os.environ[EXTERNAL_REGISTRY].rstrip("/"))
    try:
        with start_registry() as registry:
            return measure_with(registry.url)
    except RegistryUnavailable as why:
        return {"skipped": f"no Schema Registry: {why}"}
