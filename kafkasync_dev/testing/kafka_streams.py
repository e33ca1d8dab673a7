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
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from typing import Callable, Optional, Sequence

from kafkasync_dev.testing.kafka_dist import DEFAULT_KAFKA_VERSION, _java, _resolve, maven_problem

POM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "maven", "kafka-streams.pom.xml")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "ProcessingOrder.java")
MAIN_CLASS = "ProcessingOrder"
_COMPLETE = ".complete"

Log = Optional[Callable[[str], None]]


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


def kafka_streams_jars(version: str = DEFAULT_KAFKA_VERSION, *, log: Log = None) -> str:
    """The directory of kafka-streams ``version``'s jars and their dependencies, resolved into
    the cache at first use. Raises RuntimeError when ``mvn`` cannot resolve them."""
    return _resolve(POM, f"kafka-streams-{version}",
                    f"Kafka Streams {version} (org.apache.kafka:kafka-streams:{version} and its runtime dependencies)",
                    [f"-Dkafka.version={version}"], log)


def compiled_program(version: str = DEFAULT_KAFKA_VERSION, *, log: Log = None) -> tuple[str, str]:
    """``(classes directory, jar directory)``: ``ProcessingOrder.java`` compiled against
    kafka-streams ``version``, once per source text (the directory is named by its SHA-256)."""
    libs = kafka_streams_jars(version, log=log)
    with open(SOURCE, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:16]
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
                                 "-cp", os.path.join(libs, "*"), "-d", staging, SOURCE],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"javac could not compile {SOURCE} (exit {result.returncode}):\n"
                               f"{(result.stdout + result.stderr)[-3000:]}")
        with open(os.path.join(staging, _COMPLETE), "w") as handle:
            handle.write(f"{SOURCE} sha256 {digest}\n")
        try:
            os.replace(staging, classes)
        except OSError:  # compiled by another process meanwhile
            if not os.path.exists(os.path.join(classes, _COMPLETE)):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    (log or _say)(f"kafkasync: compiled {os.path.basename(SOURCE)} against Kafka Streams {version} into {classes}")
    return classes, libs


def processing_order(bootstrap: str, topics: Sequence[str], records: int, *,
                     version: str = DEFAULT_KAFKA_VERSION, timeout_s: float = 120.0,
                     log: Log = None) -> list[tuple[str, int, int]]:
    """The first ``records`` records of ``topics`` (from the earliest offset) as ``(topic,
    partition, offset)``, in the order a Kafka Streams application processes them, their time
    taken from the JSON value's ``ts``. Settings and why: ``java/ProcessingOrder.java``.

    Raises RuntimeError with the program's stderr when it fails or processes fewer records
    within ``timeout_s``. Kafka Streams merges by time only partitions of one task (partition p
    of each topic): for one merged order give topics of one partition each."""
    classes, libs = compiled_program(version, log=log)
    with tempfile.TemporaryDirectory(prefix="kafkasync-streams-") as state_dir:
        command = [_java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                   "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
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
