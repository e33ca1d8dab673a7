"""Where a real Apache Kafka comes from for the integration suite and the benchmarks.

Two kinds of distribution start the same KRaft broker:

* :class:`KafkaHome` — an unpacked Apache Kafka binary download (``KAFKA_HOME``): its own
  ``bin/kafka-storage.sh`` and ``bin/kafka-server-start.sh``;
* :class:`KafkaJars` — the official release jars from Maven Central
  (``org.apache.kafka:kafka_2.13`` and its dependencies, see ``maven/kafka-broker.pom.xml``),
  run directly: ``java -cp libs/* kafka.tools.StorageTool format`` and ``java -cp libs/*
  kafka.Kafka``, with a logging configuration of our own.

:func:`maven_kafka` resolves a version into a cache outside the repository
(``~/.cache/kafkasync/kafka-<version>/``, ``KAFKASYNC_CACHE`` to move it), once: later calls
find the cache complete and run no ``mvn``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol, Sequence

DEFAULT_KAFKA_VERSION = "4.3.1"
"""The Kafka release ``make integration`` provisions when ``KAFKA_VERSION`` is not set."""

POM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "maven", "kafka-broker.pom.xml")
_COMPLETE = ".complete"
"""Written last into a cache directory: a resolution cut off half way is not taken as done."""


@dataclass(frozen=True)
class BrokerJvm:
    """How a broker's JVM is sized. ``heap``: ``-Xmx``/``-Xms`` (``KAFKA_HEAP_OPTS`` for a
    ``KAFKA_HOME``); ``performance``: collector and JIT (``KAFKA_JVM_PERFORMANCE_OPTS``), None for
    the distribution's own (``-XX:+UseG1GC`` here, ``kafka-run-class.sh``'s G1 settings there)."""

    heap: str
    performance: Optional[str] = None


BROKER_JVM = BrokerJvm("-Xmx768m -Xms256m")
"""A broker alone on the machine (the integration suite's session broker, the benchmarks): room
for any test's topics, G1 and the full JIT as in production."""

SMALL_BROKER_JVM = BrokerJvm(
    # A test cluster's node holds a few partitions of small records and no log-cleaner dedupe
    # buffer (LocalKafkaCluster shrinks it from 128 MiB): it runs in well under 200 MiB, so three
    # of them take 1.1 GiB at most instead of 2.3 GiB, beside Spark's driver, on a CI machine of 7.
    "-Xmx384m -Xms128m",
    # Serial GC: one collector thread, no concurrent marking or refinement threads — G1 gives each
    # JVM two parallel and one concurrent GC thread on a 2-core machine, and three nodes' worth of
    # those compete with Spark for the same two cores. A young collection of a heap this small
    # takes milliseconds, far below any Kafka timeout.
    # TieredStopAtLevel=1: the C1 compiler only. C2 compiles a starting JVM's hot paths again,
    # optimized, on compiler threads that take whole cores for a while — after every restart a
    # test makes, too; test traffic (a few hundred records a second) needs no C2 code.
    "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true",
)
"""A node of a three-node cluster on a 2-core machine (:class:`~kafkasync_dev.testing.
local_broker.LocalKafkaCluster`): three of these beside Spark and a producer must leave Spark
the CPU it needs (a Python worker that cannot start within Spark's 10 s fails the query)."""


SUITE_BROKER_JVM = BrokerJvm(BROKER_JVM.heap, SMALL_BROKER_JVM.performance)
"""The real-broker suite's brokers (its session broker and each test's own): a single broker's heap,
with a test node's collector and compiler (:data:`SMALL_BROKER_JVM` says why), since the suite's
Spark and its Python workers share the machine's two cores with it (issue 64)."""


class KafkaDistribution(Protocol):
    """How to run a Kafka release's storage tool and broker on this machine."""

    version: str

    def storage_command(self, arguments: Sequence[str], work_dir: str) -> list[str]:
        """The command line of ``kafka-storage.sh`` with ``arguments``."""

    def server_command(self, properties: str, work_dir: str, jvm: BrokerJvm = BROKER_JVM) -> list[str]:
        """The command line that runs a broker from ``properties`` in the foreground, its JVM
        sized by ``jvm`` (a script-based distribution reads it from the environment instead:
        :meth:`LocalKafkaBroker._env <kafkasync_dev.testing.local_broker.LocalKafkaBroker>`)."""


class KafkaHome:
    """An unpacked Apache Kafka binary download, run through its own scripts."""

    SCRIPTS = ("bin/kafka-storage.sh", "bin/kafka-server-start.sh")

    def __init__(self, home: str) -> None:
        missing = [s for s in self.SCRIPTS if not os.access(os.path.join(home, s), os.X_OK)]
        if missing:
            raise ValueError(f"KAFKA_HOME={home} has no executable {', '.join(missing)}")
        self.home = os.path.abspath(home)
        self.version = _version_from_jars(os.path.join(self.home, "libs"))

    def storage_command(self, arguments: Sequence[str], work_dir: str) -> list[str]:
        return [os.path.join(self.home, "bin/kafka-storage.sh"), *arguments]

    def server_command(self, properties: str, work_dir: str, jvm: BrokerJvm = BROKER_JVM) -> list[str]:
        """``jvm`` reaches the script through ``KAFKA_HEAP_OPTS`` and ``KAFKA_JVM_PERFORMANCE_OPTS``
        in the environment the caller starts it with."""
        return [os.path.join(self.home, "bin/kafka-server-start.sh"), properties]


class KafkaJars:
    """A directory of the release's jars (what :func:`maven_kafka` resolves), run with ``java``."""

    def __init__(self, libs: str, *, java: Optional[str] = None) -> None:
        self.libs = os.path.abspath(libs)
        self.version = _version_from_jars(self.libs)
        self._java = java or _java()

    def storage_command(self, arguments: Sequence[str], work_dir: str) -> list[str]:
        return self._java_command("kafka.tools.StorageTool", arguments, work_dir, heap="-Xmx256m")

    def server_command(self, properties: str, work_dir: str, jvm: BrokerJvm = BROKER_JVM) -> list[str]:
        return self._java_command("kafka.Kafka", [properties], work_dir, heap=jvm.heap,
                                  performance=jvm.performance)

    def _java_command(self, main: str, arguments: Sequence[str], work_dir: str, heap: str,
                      performance: Optional[str] = None) -> list[str]:
        performance = performance or "-XX:+UseG1GC -Djava.awt.headless=true"
        return [self._java, *heap.split(), *performance.split(),
                *self._logging(work_dir), "-cp", os.path.join(self.libs, "*"), main, *arguments]

    def _logging(self, work_dir: str) -> list[str]:
        """Kafka 4 logs through log4j2 (KIP-653), 3.x through reload4j: a file appender into
        ``work_dir/server-logs``, warnings only from the noisy request loggers."""
        log_dir = os.path.join(work_dir, "server-logs")
        os.makedirs(log_dir, exist_ok=True)
        if _major(self.version) >= 4:
            path = os.path.join(work_dir, "log4j2.properties")
            _write_once(path, "\n".join([
                "status = warn",
                "appender.file.type = File",
                "appender.file.name = file",
                f"appender.file.fileName = {log_dir}/server.log",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                "rootLogger.level = INFO",
                "rootLogger.appenderRef.file.ref = file",
                "logger.request.name = kafka.request.logger",
                "logger.request.level = WARN",
                "",
            ]))
            return [f"-Dlog4j2.configurationFile={path}"]
        path = os.path.join(work_dir, "log4j.properties")
        _write_once(path, "\n".join([
            "log4j.rootLogger=INFO, file",
            "log4j.appender.file=org.apache.log4j.FileAppender",
            f"log4j.appender.file.File={log_dir}/server.log",
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.kafka.request.logger=WARN",
            "",
        ]))
        return [f"-Dlog4j.configuration=file:{path}"]


def maven_problem() -> Optional[str]:
    """None if ``mvn`` and a Java 17+ runtime are there, else what is missing."""
    if shutil.which("mvn") is None:
        return "Maven ('mvn') is not on PATH: install it (e.g. 'apt-get install maven') and Java 17+"
    try:
        java = _java()
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired, FileNotFoundError) as exc:
        return f"no runnable Java ({exc}): install Java 17+"
    text = out.stderr + out.stdout
    try:
        version = text.split('"')[1]
        major = int(version.split(".")[0] if not version.startswith("1.") else version.split(".")[1])
    except (IndexError, ValueError):
        return f"cannot read the Java version from {text.strip()[:200]!r}"
    if major < 17:
        return f"Java {version} is too old: Kafka 4 and Spark 4 need Java 17+"
    return None


def cache_root() -> str:
    """Where resolved jars are kept: ``$KAFKASYNC_CACHE`` or ``~/.cache/kafkasync``."""
    return os.environ.get("KAFKASYNC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kafkasync")


def maven_kafka(version: str = DEFAULT_KAFKA_VERSION, *, log=None) -> KafkaJars:
    """The official Apache Kafka ``version`` from Maven Central, resolved once into the cache.

    ``log`` (default: print to stderr) is told what is downloaded and how long it took."""
    profile = "log4j2" if _major(version) >= 4 else "reload4j"
    libs = _resolve(POM, f"kafka-{version}", f"Apache Kafka {version} (org.apache.kafka:kafka_2.13:"
                    f"{version} and its runtime dependencies)",
                    [f"-P{profile}", f"-Dkafka.version={version}"], log)
    return KafkaJars(libs)


_MAVEN = os.path.dirname(POM)
"""The poms each resolve one set of jars; their comments say which artifacts and why only those."""
_SPARK_CONNECTOR_JARS = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
                         "kafka-clients", "commons-pool2")
SPARK_FUNCTIONS = {"spark-avro": "Spark's Avro functions", "spark-protobuf": "Spark's Protobuf functions"}
"""The Spark modules :func:`maven_spark_functions` resolves, each by ``maven/<module>.pom.xml``:
``from_avro``/``to_avro`` (Apache Avro itself is among Spark's jars) and ``from_protobuf``
(protobuf-java shaded inside)."""


def maven_spark_kafka_connector(spark_version: str, *, log=None) -> list[str]:
    """The jars that put Spark's own ``format("kafka")`` on ``spark.jars``, at
    ``spark_version`` (it must be the running PySpark's), resolved once into the cache."""
    return maven_jars("spark-kafka-connector.pom.xml", f"spark-kafka-{spark_version}",
                      f"Spark's Kafka connector {spark_version} (org.apache.spark:spark-sql-kafka-0-10_2.13)",
                      {"spark.version": spark_version}, _SPARK_CONNECTOR_JARS, log)


def maven_spark_functions(module: str, spark_version: str, *, log=None) -> list[str]:
    """The jar of Spark's own ``org.apache.spark:<module>_2.13`` (a :data:`SPARK_FUNCTIONS` key)
    for ``spark.jars`` at ``spark_version`` (the running PySpark's), resolved once into the cache."""
    return maven_jars(f"{module}.pom.xml", f"{module}-{spark_version}",
                      f"{SPARK_FUNCTIONS[module]} {spark_version} (org.apache.spark:{module}_2.13)",
                      {"spark.version": spark_version}, (f"{module}_2.13",), log)


def maven_delta_spark(delta_version: str, spark_line: str, *, log=None) -> list[str]:
    """Delta Lake's Spark connector ``io.delta:delta-spark_<spark_line>_2.13:<delta_version>``
    and its ``delta-storage`` for ``spark.jars``, resolved once into the cache. Only these two:
    the rest of its dependency tree (Hadoop, Jackson, Parquet, Scala) is Spark's own."""
    artifact = f"delta-spark_{spark_line}_2.13"
    return maven_jars("delta-spark.pom.xml", f"delta-{delta_version}-spark{spark_line}",
                      f"Delta Lake {delta_version} for Spark {spark_line} (io.delta:{artifact})",
                      {"delta.version": delta_version, "spark.line": spark_line}, (artifact, "delta-storage"), log)


def maven_jars(pom: str, name: str, what: str, properties: Mapping[str, str], artifacts: Sequence[str],
               log=None) -> list[str]:
    """The jars of ``artifacts`` that ``maven/<pom>`` resolves with ``properties`` (``-D``), for
    ``spark.jars``: copied once into ``<cache>/<name>/libs`` (:func:`_resolve`), ``what`` said."""
    libs = _resolve(os.path.join(_MAVEN, pom), name, what,
                    [*(f"-D{key}={value}" for key, value in properties.items()),
                     "-DincludeArtifactIds=" + ",".join(artifacts)], log)
    return sorted(os.path.join(libs, jar) for jar in os.listdir(libs) if jar.endswith(".jar"))


def _resolve(pom: str, name: str, what: str, arguments: Sequence[str], log=None) -> str:
    """Runs ``mvn dependency:copy-dependencies`` on ``pom`` into ``<cache>/<name>/libs`` once;
    returns that directory. Says what it resolves and how long it took."""
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    libs = os.path.join(cache_root(), name, "libs")
    if os.path.exists(os.path.join(libs, _COMPLETE)):
        return libs
    problem = maven_problem()
    if problem:
        raise RuntimeError(problem)
    staging = libs + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    command = ["mvn", "-B", "-ntp", "-f", pom, "dependency:copy-dependencies", *arguments,
               "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
    say(f"kafkasync: resolving {what} from Maven Central into {libs}")
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        tail = "\n".join(line for line in result.stdout.splitlines() if "ERROR" in line)[-3000:]
        raise RuntimeError(f"mvn could not resolve {what} (exit {result.returncode}):\n{tail}")
    jars = sorted(name for name in os.listdir(staging) if name.endswith(".jar"))
    shutil.rmtree(libs, ignore_errors=True)
    os.replace(staging, libs)
    with open(os.path.join(libs, _COMPLETE), "w") as handle:
        handle.write("\n".join(jars) + "\n")
    size = sum(os.path.getsize(os.path.join(libs, jar)) for jar in jars)
    say(f"kafkasync: {what}: {len(jars)} jars, {size / 2**20:.0f} MiB, resolved in "
        f"{time.monotonic() - started:.1f} s: {', '.join(jars)}")
    return libs


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise FileNotFoundError("no 'java' on PATH or in JAVA_HOME")
    return found


def _version_from_jars(libs: str) -> str:
    """The release's version, from its kafka-clients jar name (``kafka-clients-4.3.1.jar``)."""
    for name in sorted(os.listdir(libs)):
        if name.startswith("kafka-clients-") and name.endswith(".jar"):
            return name[len("kafka-clients-"):-len(".jar")]
    return "unknown"


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 4


def _write_once(path: str, text: str) -> None:
    if not os.path.exists(path):
        with open(path, "w") as handle:
            handle.write(text)


def main(argv: Sequence[str]) -> int:
    """``python -m kafkasync_dev.testing.kafka_dist [VERSION]``: resolve a release into the
    cache (what ``make integration`` does first) and print its jar directory; exit 3 with the
    reason when Maven or Java is missing."""
    version = argv[0] if argv else os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION
    try:
        jars = maven_kafka(version)
    except RuntimeError as exc:
        print(f"kafkasync: cannot provision Apache Kafka {version}: {exc}", file=sys.stderr)
        return 3
    print(jars.libs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
