"""A small local SparkSession for tests, the demo and benchmarks (one way to build it)."""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable, Mapping, Optional

from kafkasync_dev.testing.kafka_dist import SPARK_FUNCTIONS, maven_spark_functions, maven_spark_kafka_connector


def local_spark_session(
    app_name: str,
    warehouse_dir: str,
    conf: Optional[Mapping[str, str]] = None,
    *,
    jvm_log: Optional[str] = None,
    worker_python: Optional[str] = None,
):
    """``local[2]``, UI off, two shuffle partitions, UTC, bound to loopback, quiet logs.

    Spark's Python workers must run this interpreter (a virtualenv's workers otherwise fail
    to connect back), so the worker variables are set before the JVM starts; ``worker_python``
    runs it another way (:func:`workers_on_the_installed_pyspark`). With ``jvm_log``, the JVM
    (and the Python workers it starts) write their stderr to that file instead of the
    terminal: they inherit file descriptor 2 at start-up.
    """
    if jvm_log is None:
        return _start(app_name, warehouse_dir, conf, worker_python)
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(jvm_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 2)
    try:
        return _start(app_name, warehouse_dir, conf, worker_python)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


def workers_on_the_installed_pyspark(directory: str) -> str:
    """A ``PYSPARK_PYTHON`` for the test suites (``worker_python``): this interpreter, with
    the pyspark and py4j zips Spark puts first on its workers' ``PYTHONPATH``
    (``$SPARK_HOME/python/lib``, ``PythonUtils.sparkPythonPath``) left out, so that they import
    the installed pyspark — the same files of the same version — whose bytecode is compiled
    once, where a zip's modules are compiled at every start: the streaming source runner's
    imports take 2.1 CPU seconds from the zip, 0.7 installed. Spark gives that runner a fixed
    10 s to start and connect back, which a busy machine missed (issue 64;
    kafkasync_dev/testing/query_start.py). ``sys.executable`` itself where the zip holds
    another version than the one installed."""
    import shlex
    import zipfile

    import pyspark

    zips = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    try:
        with zipfile.ZipFile(os.path.join(zips, "pyspark.zip")) as shipped:
            version = shipped.read("pyspark/version.py").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return sys.executable
    if not any(f"{quote}{pyspark.__version__}{quote}" in version for quote in "'\""):
        return sys.executable
    wrapper = os.path.join(directory, "python")
    with open(wrapper, "w") as script:
        script.write("#!/bin/sh\n"
                     f"PYTHONPATH=$(printf '%s' \"$PYTHONPATH\" | tr ':' '\\n' | grep -vF {shlex.quote(zips + os.sep)} "
                     "| paste -sd: -)\n"
                     "export PYTHONPATH\n"
                     f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    return wrapper


def _start(app_name: str, warehouse_dir: str, conf: Optional[Mapping[str, str]], worker_python: Optional[str]):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = worker_python or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", warehouse_dir)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    from kafkasync_source.spark.source import redact_secret_options

    redact_secret_options(session)
    return session


SUITE_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The test suites' Spark driver JVM (``spark.driver.extraJavaOptions``; in ``local[2]`` it runs the
tasks too): the C1 compiler only and one GC thread. A suite starts hundreds of short queries on
small data, where C2's compiler threads and G1's concurrent threads take whole cores from the
Python workers beside them on a 2-core machine: tests/test_rate_limits.py with test_stream.py ran
in 135 s instead of 149 s (issue 64). The benchmarks keep the JVM's defaults, as users run it."""


FORMAT_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def has_format_kafka(spark) -> bool:
    """Whether Spark's own Kafka source is on the session's classpath. Jars of ``spark.jars``
    are loaded by Spark's own class loader, the thread's context loader, not py4j's:
    ``Class.forName`` from Python does not see them."""
    return _loadable(spark, FORMAT_KAFKA_PROVIDER)


def _loadable(spark, name: str) -> bool:
    try:
        spark._jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(name)
        return True
    except Exception:
        return False


def format_kafka_jars() -> tuple[Optional[str], Optional[str]]:
    """``(jars, None)``: the comma-separated jars that put Spark's own ``format("kafka")`` on
    ``spark.jars`` — ``KAFKASYNC_SPARK_KAFKA_JARS``, else Spark's Kafka connector at the running
    PySpark's version from Maven Central — or ``(None, why not)``. Maven Central serves no
    connector for some Spark releases (4.3.0): ``make parity`` and ``make bench`` then run
    format("kafka") in a virtualenv of the newest PySpark whose connector is served."""
    return _named_or_resolved("KAFKASYNC_SPARK_KAFKA_JARS", "Spark's Kafka connector", maven_spark_kafka_connector,
                              '; `make parity` runs format("kafka") on the newest PySpark whose connector is served')


def _named_or_resolved(variable: Optional[str], what: str, resolve: Callable[[str], list[str]],
                       advice: str = "") -> tuple[Optional[str], Optional[str]]:
    """``(jars, None)``: the environment ``variable``'s jars where it is set, else ``resolve``'s at
    the running PySpark's version, comma-separated for ``spark.jars``; or ``(None, why not)``,
    naming ``what`` could not be had, and ``advice``."""
    named = os.environ.get(variable, "").strip() if variable else ""
    if named:
        return named, None
    import pyspark

    try:
        return ",".join(resolve(pyspark.__version__)), None
    except RuntimeError as exc:
        return None, (f"{what} {pyspark.__version__} cannot be had from Maven Central "
                      f"({str(exc).splitlines()[0][:200]}){advice}")


SPARK_AVRO_FUNCTIONS = "org.apache.spark.sql.avro.AvroDataToCatalyst"
"""``from_avro``'s expression, in spark-avro. Not ``org.apache.spark.sql.avro.functions``: Spark 4
keeps that in spark-sql-api, on the classpath whether spark-avro is or not (PySpark 4.2.0's jars)."""


def has_spark_avro(spark) -> bool:
    """Whether Spark's own ``from_avro`` is on the session's classpath (:func:`has_format_kafka`)."""
    return _loadable(spark, SPARK_AVRO_FUNCTIONS)


def spark_avro_jars() -> tuple[Optional[str], Optional[str]]:
    """``(jar, None)``: Spark's own Avro functions (``from_avro``) at the running PySpark's
    version from Maven Central, for ``spark.jars`` beside :func:`format_kafka_jars` — what a
    ``format("kafka")`` user decodes Confluent-framed Avro with — or ``(None, why not)``."""
    return _named_or_resolved(None, SPARK_FUNCTIONS["spark-avro"],
                              functools.partial(maven_spark_functions, "spark-avro"))


SPARK_PROTOBUF_FUNCTIONS = "org.apache.spark.sql.protobuf.ProtobufDataToCatalyst"
"""``from_protobuf``'s expression, in spark-protobuf (its ``functions`` is in spark-sql-api)."""


def has_spark_protobuf(spark) -> bool:
    """Whether Spark's own ``from_protobuf`` is on the session's classpath (:func:`has_format_kafka`)."""
    return _loadable(spark, SPARK_PROTOBUF_FUNCTIONS)


def spark_protobuf_jars() -> tuple[Optional[str], Optional[str]]:
    """``(jar, None)``: Spark's own Protobuf functions (``from_protobuf``) for ``spark.jars`` —
    ``KAFKASYNC_SPARK_PROTOBUF_JARS``, else ``spark-protobuf_2.13`` at the running PySpark's
    version from Maven Central — or ``(None, why not)``."""
    return _named_or_resolved("KAFKASYNC_SPARK_PROTOBUF_JARS", SPARK_FUNCTIONS["spark-protobuf"],
                              functools.partial(maven_spark_functions, "spark-protobuf"),
                              "; set KAFKASYNC_SPARK_PROTOBUF_JARS to the jar")
