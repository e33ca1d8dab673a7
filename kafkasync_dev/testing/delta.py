"""Delta Lake for the tests that write kafkasync streams into Delta tables.

Delta's Spark connector is built per Spark line: since Delta 4.1 its Maven artifacts carry the
line in their name (``io.delta:delta-spark_4.2_2.13``), and a connector runs only on the line it
was built for. :data:`DELTA_FOR_SPARK_LINE` pins, for each PySpark line kafkasync supports, the
Delta release the tests use; :func:`delta_jars` resolves it from Maven Central into the cache
outside the repository (``kafka_dist.maven_delta_spark``), or says why there is none.
"""

from __future__ import annotations

from typing import Optional

DELTA_FOR_SPARK_LINE = {"4.0": "4.4.0", "4.1": "4.4.0", "4.2": "4.4.0"}
"""Delta 4.4.0 (2026-08) publishes ``delta-spark_4.0_2.13``, ``delta-spark_4.1_2.13`` and
``delta-spark_4.2_2.13``, each built on that Spark line; Maven Central serves no Delta 4.4.1
(PyPI's delta-spark 4.4.1 asks for jars that are not there) and no connector for Spark 4.3.
The Python package ``delta-spark`` 4.4.0 requires ``pyspark<=4.2.0``, so the tests use Delta
through SQL (``MERGE INTO``) and the DataFrame API with the jars alone."""

DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What a session needs, beside the jars, for ``format("delta")`` and Delta's SQL (Delta's
quickstart): static settings, given when the session is built."""


def spark_line(spark_version: str) -> str:
    """``4.2.0`` -> ``4.2``."""
    return ".".join(spark_version.split(".")[:2])


def delta_jars(spark_version: str) -> tuple[Optional[list[str]], Optional[str]]:
    """``(jars, None)`` for ``spark.jars`` at ``spark_version``, or ``(None, why not)``."""
    from kafkasync_dev.testing.kafka_dist import maven_delta_spark

    line = spark_line(spark_version)
    delta = DELTA_FOR_SPARK_LINE.get(line)
    if delta is None:
        return None, (f"no Delta Lake release for Spark {line}: Maven Central's newest, Delta "
                      f"{max(DELTA_FOR_SPARK_LINE.values())}, is built for Spark "
                      f"{', '.join(sorted(DELTA_FOR_SPARK_LINE))} (make parity runs the Delta tests "
                      f"on PySpark 4.2)")
    try:
        return maven_delta_spark(delta, line), None
    except RuntimeError as exc:
        return None, f"Delta Lake {delta} for Spark {line} could not be resolved from Maven Central: {exc}"
