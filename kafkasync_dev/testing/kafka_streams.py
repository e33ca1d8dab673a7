"""The real Kafka Streams, run to learn its processing order of the records in some topics.

Where a test claims Kafka Streams' order, it runs Kafka Streams: :func:`processing_order` runs
``java/ProcessingOrder.java`` — a Kafka Streams application with one stream thread whose
``default.timestamp.extractor`` reads the JSON value's ``ts`` — and returns the records in the
order its processor saw them.

Where the jars come from: ``org.apache.kafka:kafka-streams`` at the broker's version (default
:data:`~kafkasync_dev.testing.kafka_dist.DEFAULT_KAFKA_VERSION`) and its runtime dependencies
(kafka-clients, rocksdbjni, jackson, slf4j-api; slf4j-simple added for logging), resolved from
Maven Central by ``mvn`` with ``maven/kafka-streams.pom.xml`` into
``~/.cache/kafkasync/kafka-streams-<version>/libs`` (``KAFKASYNC_CACHE`` moves it), once, as
:mod:`~kafkasync_dev.testing.kafka_dist` does for the broker. The program is compiled with
``javac`` at first use into ``.../kafka-streams-<version>/classes-<hash of the source>``:
nothing generated lives in the repository, and an edited source compiles anew.

With ``avro_field`` (:class:`AvroField`) the records' time is a field of their
Confluent-framed Avro values instead, read by ``java/AvroFieldExtractor.java`` with the writer
schema fetched from the Schema Registry by id, as a Kafka Streams user's Avro
``TimestampExtractor`` reads it; Apache Avro joins the jars (the pom's ``avro`` profile, cached
as ``kafka-streams-<version>-avro``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from kafkasync_dev.testing.kafka_dist import DEFAULT_KAFKA_VERSION, _java, _resolve, maven_problem

POM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "maven", "kafka-streams.pom.xml")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "ProcessingOrder.java")
AVRO_SOURCE = os.path.join(os.path.dirname(SOURCE), "AvroFieldExtractor.java")
MAIN_CLASS = "ProcessingOrder"
_COMPLETE = ".complete"

Log = Optional[Callable[[str], None]]


@dataclass(frozen=True)
class AvroField:
    """Take each record's time from ``path`` (dotted, e.g. ``source.ts_ms``) of its
    Confluent-framed Avro value, decoded with its writer schema from the registry at
    ``registry_url`` (the Confluent-compatible base URL)."""

    registry_url: str
    path: str

    def system_properties(self) -> list[str]:
        return ["-Dkafkasync.extractor=AvroFieldExtractor", f"-Dkafkasync.registry.url={self.registry_url}",
                f"-Dkafkasync.avro.field={self.path}"]


def kafka_streams_problem() -> Optional[str]:
    """None if Kafka Streams can be resolved, compiled against and run here (``mvn``, ``javac``,
    a Java 17+ runtime), else what is missing. A cached jar directory still needs ``javac`` for
    a source it has not compiled; both are asked for, so the answer does not depend on the cache."""
    return maven_problem() or jdk_problem()


def jdk_problem() -> Optional[str]:
    """None if ``javac`` is here, else what to install: a JDK is more than the README asks of a
    machine (a Java 17+ runtime), so the test that needs it skips without one."""
    if _javac() is None:
        return ("no 'javac' on PATH or in JAVA_HOME: install a Java 17+ JDK "
                "(e.g. 'apt-get install openjdk-17-jdk-headless')")
    return None


def kafka_streams_jars(version: str = DEFAULT_KAFKA_VERSION, *, avro: bool = False, log: Log = None) -> str:
    """The directory of kafka-streams ``version``'s jars and their dependencies (and Apache
    Avro's, with ``avro``), resolved into the cache at first use. Raises RuntimeError when
    ``mvn`` cannot resolve them."""
    return _resolve(POM, f"kafka-streams-{version}" + ("-avro" if avro else ""),
                    f"Kafka Streams {version} (org.apache.kafka:kafka-streams:{version}"
                    + (" with org.apache.avro:avro" if avro else "") + " and their runtime dependencies)",
                    [f"-Dkafka.version={version}", *(["-Pavro"] if avro else [])], log)


def compiled_program(version: str = DEFAULT_KAFKA_VERSION, *, avro: bool = False, log: Log = None) -> tuple[str, str]:
    """``(classes directory, jar directory)``: ``ProcessingOrder.java`` (and, with ``avro``,
    ``AvroFieldExtractor.java``) compiled against kafka-streams ``version``, once per source
    text (the directory is named by their SHA-256)."""
    libs = kafka_streams_jars(version, avro=avro, log=log)
    sources = [SOURCE, AVRO_SOURCE] if avro else [SOURCE]
    sha = hashlib.sha256()
    for source in sources:
        with open(source, "rb") as handle:
            sha.update(handle.read())
    digest = sha.hexdigest()[:16]
    classes = os.path.join(os.path.dirname(libs), f"classes-{digest}")
    if os.path.exists(os.path.join(classes, _COMPLETE)):
        return classes, libs
    javac = _javac()
    if javac is None:
        raise RuntimeError("no 'javac' on PATH or in JAVA_HOME: install a Java 17+ JDK")
    staging = tempfile.mkdtemp(prefix=f"classes-{digest}.", dir=os.path.dirname(libs))
    os.chmod(staging, 0o755)  # mkdtemp's 0700, like the jar directory beside it
    try:
        result = subprocess.run([javac, "-nowarn", "--release", "17", "-encoding", "UTF-8",
                                 "-cp", os.path.join(libs, "*"), "-d", staging, *sources],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"javac could not compile {', '.join(sources)} (exit {result.returncode}):\n"
                               f"{(result.stdout + result.stderr)[-3000:]}")
        with open(os.path.join(staging, _COMPLETE), "w") as handle:
            handle.write(f"{' '.join(sources)} sha256 {digest}\n")
        try:
            os.replace(staging, classes)
        except OSError:  # compiled by another process meanwhile
            if not os.path.exists(os.path.join(classes, _COMPLETE)):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    (log or _say)(f"kafkasync: compiled {', '.join(map(os.path.basename, sources))} against Kafka Streams "
                  f"{version} into {classes}")
    return classes, libs


def processing_order(bootstrap: str, topics: Sequence[str], records: int, *,
                     version: str = DEFAULT_KAFKA_VERSION, timeout_s: float = 120.0,
                     avro_field: Optional[AvroField] = None, log: Log = None) -> list[tuple[str, int, int]]:
    """The first ``records`` records of ``topics`` (from the earliest offset) as ``(topic,
    partition, offset)``, in the order a Kafka Streams application processes them, their time
    taken from the JSON value's ``ts`` (or ``avro_field`` of an Avro value). Settings and why:
    ``java/ProcessingOrder.java``.

    Raises RuntimeError with the program's stderr when it fails or processes fewer records
    within ``timeout_s``. Kafka Streams merges by time only partitions of one task (partition p
    of each topic): for one merged order give topics of one partition each."""
    classes, libs = compiled_program(version, avro=avro_field is not None, log=log)
    with tempfile.TemporaryDirectory(prefix="kafkasync-streams-") as state_dir:
        command = [_java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                   "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                   *(avro_field.system_properties() if avro_field else []),
                   "-cp", os.pathsep.join([classes, os.path.join(libs, "*")]), MAIN_CLASS,
                   bootstrap, f"kafkasync-order-{uuid.uuid4().hex[:12]}", state_dir, str(records),
                   str(int(timeout_s)), *topics]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"Kafka Streams did not end within {timeout_s + 60:.0f} s: {exc.stderr!r}") from exc
    if result.returncode != 0:
        raise RuntimeError(f"Kafka Streams' ProcessingOrder failed (exit {result.returncode}):\n"
                           f"{result.stderr[-5000:]}")
    order = []
    for line in result.stdout.splitlines():
        topic, partition, offset, _time = line.split()
        order.append((topic, int(partition), int(offset)))
    if len(order) != records:
        raise RuntimeError(f"Kafka Streams' ProcessingOrder wrote {len(order)} records, not {records}:\n"
                           f"{result.stderr[-5000:]}")
    return order


def _javac() -> Optional[str]:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    return shutil.which("javac")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
