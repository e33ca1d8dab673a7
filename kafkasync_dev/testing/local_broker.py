"""A real single-node Apache Kafka broker started on loopback from a distribution.

The integration suite needs a broker it controls: one it can stop and restart under a running
query, and one with SASL users. :class:`LocalKafkaBroker` formats a KRaft broker + controller
in a temporary directory on free loopback ports with the distribution's storage tool, starts
it, waits until it answers, and removes its data when closed. The distribution is the release
jars from Maven Central (:func:`~kafkasync_dev.testing.kafka_dist.maven_kafka`, what
``make integration`` uses by default) or an unpacked binary download (``KAFKA_HOME``). Any
Apache Kafka 3.7 or newer works (``--add-scram`` needs 3.5+, a static
``controller.quorum.voters`` quorum is accepted by every KRaft version)::

    make integration                        # Kafka 4.3.1 from Maven Central
    make integration KAFKA_VERSION=3.9.2
    KAFKA_HOME=~/kafka_2.13-4.1.0 make integration
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional

from kafkasync_dev.testing.kafka_dist import BROKER_JVM, SMALL_BROKER_JVM, BrokerJvm, KafkaDistribution


def stop_process_group(process: Optional[subprocess.Popen], timeout: float) -> None:
    """End a JVM started in a session of its own and whatever it started: SIGTERM (its clean
    shutdown), SIGKILL if it has not ended within ``timeout`` s. Nothing if it already ended."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server process this machine starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tail_of_file(path: str) -> str:
    """The last 2,000 bytes of a server's log, for the error that says it did not start."""
    try:
        with open(path, "rb") as handle:
            return handle.read()[-2000:].decode(errors="replace")
    except OSError:
        return "(no log)"


@dataclass
class SaslUsers:
    """SASL_PLAINTEXT users: PLAIN users live in the broker's JAAS config, SCRAM-SHA-512 users
    are written into the metadata log when the storage is formatted (``--add-scram``)."""

    plain: Mapping[str, str] = field(default_factory=dict)
    scram_sha_512: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Quorum:
    """A KRaft cluster's id, its voters (node id -> controller port) and the replication of
    its internal topics (offsets, transaction state) and of topics created without one."""

    cluster_id: str
    voters: Mapping[int, int]
    replication: int


class LocalKafkaBroker:
    """One KRaft broker + controller process of ``distribution``; ``bootstrap_servers`` is the
    PLAINTEXT listener, ``sasl_bootstrap_servers`` the SASL_PLAINTEXT one (when ``sasl``)."""

    def __init__(self, distribution: KafkaDistribution, *, sasl: Optional[SaslUsers] = None,
                 tls_keystore: Optional[str] = None, tls_client_ca: Optional[str] = None,
                 quorum: Optional["Quorum"] = None, node_id: int = 1, jvm: BrokerJvm = BROKER_JVM,
                 properties: Optional[Mapping[str, str]] = None) -> None:
        """``quorum``: the KRaft quorum this node is one of (:class:`LocalKafkaCluster`); a
        quorum of its own by default. ``jvm``: the broker JVM's heap, collector and JIT;
        ``properties``: broker settings that replace or add to the defaults of
        ``_write_properties`` (:class:`LocalKafkaCluster` sizes its nodes with both).
        ``tls_keystore`` (a PEM keystore, see
        :mod:`~kafkasync_dev.testing.certificates`; with ``sasl``): a SASL_SSL listener too,
        ``sasl_ssl_bootstrap_servers``; with ``tls_client_ca`` (a PEM CA certificate) it requires
        each client's certificate, signed by that CA (mutual TLS)."""
        if tls_keystore is not None and sasl is None:
            raise ValueError("a SASL_SSL listener needs SASL users")
        self.distribution = distribution
        self._sasl = sasl
        self._tls_keystore = tls_keystore
        self._tls_client_ca = tls_client_ca
        self._sasl_ssl_port = free_port() if tls_keystore else None
        self.sasl_ssl_bootstrap_servers = f"127.0.0.1:{self._sasl_ssl_port}" if tls_keystore else None
        self.node_id = node_id
        self._jvm = jvm
        self._overrides = dict(properties or {})
        self._dir = tempfile.mkdtemp(prefix="kafkasync-broker-")
        self._port = free_port()
        self._quorum = quorum or Quorum(_cluster_id(), {node_id: free_port()}, replication=1)
        self._controller_port = self._quorum.voters[node_id]
        self._sasl_port = free_port() if sasl else None
        self.bootstrap_servers = f"127.0.0.1:{self._port}"
        self.sasl_bootstrap_servers = f"127.0.0.1:{self._sasl_port}" if sasl else None
        self._process: Optional[subprocess.Popen] = None
        self._properties = os.path.join(self._dir, "server.properties")
        self._write_properties()
        self._format()

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 90.0) -> "LocalKafkaBroker":
        """Start the broker (again, on the same data and ports) and wait until it answers."""
        self.launch()
        self.wait_until_answering(timeout)
        return self

    def launch(self) -> None:
        """Start the process without waiting: the nodes of a quorum answer only once a
        majority of them runs."""
        if self._process is not None and self._process.poll() is None:
            return
        log = open(os.path.join(self._dir, "server.out"), "ab")
        self._process = subprocess.Popen(
            self.distribution.server_command(self._properties, self._dir, self._jvm),
            stdout=log, stderr=subprocess.STDOUT, env=self._env(self._jvm.heap, self._jvm.performance),
            start_new_session=True,
        )
        log.close()

    def kill(self) -> None:
        """End the process at once (SIGKILL): a crash, no clean shutdown."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the broker (SIGTERM, a clean shutdown; SIGKILL if it does not end in time)."""
        process, self._process = self._process, None
        stop_process_group(process, timeout)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the broker and remove its data."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "LocalKafkaBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self) -> str:
        """The broker's release (e.g. ``4.3.1``)."""
        return self.distribution.version

    # ------------------------------------------------------------------ internals

    def _write_properties(self) -> None:
        listeners = [f"PLAINTEXT://127.0.0.1:{self._port}", f"CONTROLLER://127.0.0.1:{self._controller_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        advertised = [f"PLAINTEXT://127.0.0.1:{self._port}"]
        extra = []
        if self._sasl is not None:
            listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{self._sasl_port}")
            advertised.append(f"SASL_PLAINTEXT://127.0.0.1:{self._sasl_port}")
            protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
            plain_users = " ".join(f'user_{name}="{password}"' for name, password in self._sasl.plain.items())
            extra += [
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                "org.apache.kafka.common.security.plain.PlainLoginModule required " + plain_users + ";",
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ]
        if self._tls_keystore is not None:
            listeners.append(f"SASL_SSL://127.0.0.1:{self._sasl_ssl_port}")
            advertised.append(f"SASL_SSL://127.0.0.1:{self._sasl_ssl_port}")
            protocols.append("SASL_SSL:SASL_SSL")
            extra += [
                "listener.name.sasl_ssl.ssl.keystore.type=PEM",  # KIP-651
                f"listener.name.sasl_ssl.ssl.keystore.location={self._tls_keystore}",
                "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ]
            if self._tls_client_ca is not None:
                extra += [
                    "listener.name.sasl_ssl.ssl.client.auth=required",
                    "listener.name.sasl_ssl.ssl.truststore.type=PEM",
                    f"listener.name.sasl_ssl.ssl.truststore.location={self._tls_client_ca}",
                ]
        replication = self._quorum.replication
        lines = [
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            "controller.quorum.voters=" + ",".join(
                f"{node}@127.0.0.1:{port}" for node, port in sorted(self._quorum.voters.items())),
            "listeners=" + ",".join(listeners),
            "advertised.listeners=" + ",".join(advertised),
            "listener.security.protocol.map=" + ",".join(protocols),
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={os.path.join(self._dir, 'data')}",
            "num.partitions=1",
            f"offsets.topic.replication.factor={replication}",
            "offsets.topic.num.partitions=1",
            f"transaction.state.log.replication.factor={replication}",
            f"transaction.state.log.min.isr={min(replication, 2)}",
            f"share.coordinator.state.topic.replication.factor={replication}",
            f"share.coordinator.state.topic.min.isr={min(replication, 2)}",
            f"default.replication.factor={replication}",
            f"min.insync.replicas={min(replication, 2)}",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            # Retention checks every 5 minutes by default; the retention test needs seconds.
            "log.retention.check.interval.ms=1000",
            "log.segment.delete.delay.ms=0",
            *extra,
        ]
        if self._overrides:  # each key once: replaced where it is, added at the end otherwise
            keys = [line.split("=", 1)[0] for line in lines]
            lines = [f"{key}={self._overrides[key]}" if key in self._overrides else line
                     for key, line in zip(keys, lines)]
            lines += [f"{key}={value}" for key, value in self._overrides.items() if key not in keys]
        with open(self._properties, "w") as handle:
            handle.write("\n".join(lines) + "\n")

    def _format(self) -> None:
        arguments = ["format", "-t", self._quorum.cluster_id, "-c", self._properties]
        for name, password in (self._sasl.scram_sha_512.items() if self._sasl else ()):
            arguments += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
        result = subprocess.run(self.distribution.storage_command(arguments, self._dir),
                                capture_output=True, text=True, env=self._env("-Xmx256m"), timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({result.returncode}): "
                               f"{(result.stderr or result.stdout)[-2000:]}")

    def _env(self, heap: str, performance: Optional[str] = None) -> dict[str, str]:
        """The scripts of a ``KAFKA_HOME`` read their heap, collector and JIT options
        (``performance``; their own G1 settings when None) and log directory from here."""
        env = {**os.environ, "KAFKA_HEAP_OPTS": heap, "LOG_DIR": os.path.join(self._dir, "server-logs")}
        env.pop("KAFKA_OPTS", None)
        env.pop("KAFKA_JVM_PERFORMANCE_OPTS", None)
        if performance:
            env["KAFKA_JVM_PERFORMANCE_OPTS"] = performance
        return env

    def wait_until_answering(self, timeout: float = 90.0) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"the broker exited with {self._process.returncode}: "
                                   f"{self._tail_of_log()}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:  # not up yet
                pass
            time.sleep(0.3)
        raise TimeoutError(f"the broker at {self.bootstrap_servers} did not answer within "
                           f"{timeout:.0f} s: {self._tail_of_log()}")

    def _tail_of_log(self) -> str:
        return tail_of_file(os.path.join(self._dir, "server.out"))


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting
    with "-" (which the command line would read as an option; Kafka's ``Uuid.randomUuid``
    avoids it too), as ``kafka-storage.sh random-uuid`` prints."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class LocalKafkaCluster:
    """``nodes`` KRaft nodes, each broker and controller in one process, on loopback: a quorum
    that survives one node down; topics replicated ``nodes`` times with ``min.insync.replicas``
    2 unless created otherwise. Nodes are numbered from 1 (``node(i)``).

    Each node is sized for a 2-core CI machine that runs the three of them beside Spark and a
    producer (``SMALL_BROKER_JVM``, ``NODE_PROPERTIES``): with production-sized nodes a CI run
    of the three-broker tests there, at a load average of 20, failed two of them — a Python
    worker Spark started did not connect back within Spark's fixed 10 s."""

    NODE_PROPERTIES = {
        # Threads. The defaults size a broker for a production machine's cores and clients:
        # 3 network threads a listener, 8 request handlers, 10 background threads, 4 group
        # coordinator threads. A test node serves one producer, a few consumers and its two
        # peers' replica fetches, a few hundred records a second. What fewer threads save is
        # memory and scheduler churn (idle threads cost little CPU; the CPU is saved by
        # SMALL_BROKER_JVM): fewer threads woken at once, three nodes over, on two cores.
        "num.network.threads": "1",  # one selector thread handles a test's few connections
        "num.io.threads": "2",  # two, so that one slow request does not hold up the others
        "background.threads": "2",  # retention, segment deletion, producer-id expiry: rare here
        "group.coordinator.threads": "1",  # readers assign their partitions; few groups, little state
        "num.recovery.threads.per.data.dir": "1",  # a restart recovers a handful of small logs
        # One fetcher thread a source broker (the default, stated so it is not raised): the
        # tests' replication is a few hundred small records a second.
        "num.replica.fetchers": "1",
        # The log cleaner allocates its dedupe buffer on the heap when it starts: 128 MiB by
        # default, a third of SMALL_BROKER_JVM's heap. The tests compact nothing but the offsets
        # topic; 16 MiB is room for hundreds of thousands of keys. (Not log.cleaner.enable=false:
        # deprecated in Kafka 4, which asks nobody set it to false before its removal in 5.0.)
        "log.cleaner.dedupe.buffer.size": str(16 * 2**20),
        # The default (5 minutes), not LocalKafkaBroker's 1 s, which is for the retention tests
        # on a broker of their own: no test here deletes by retention, and each check walks all
        # of a node's partitions.
        "log.retention.check.interval.ms": "300000",
    }
    """What each node replaces in :class:`LocalKafkaBroker`'s settings. Not changed: the KRaft
    and replication timeouts (a node killed by a test must still be fenced and lose its
    leaderships within ``broker.session.timeout.ms``, 9 s)."""

    def __init__(self, distribution: KafkaDistribution, nodes: int = 3) -> None:
        quorum = Quorum(_cluster_id(), {node: free_port() for node in range(1, nodes + 1)}, replication=nodes)
        self.nodes = [LocalKafkaBroker(distribution, quorum=quorum, node_id=node, jvm=SMALL_BROKER_JVM,
                                       properties=self.NODE_PROPERTIES)
                      for node in quorum.voters]
        self.bootstrap_servers = ",".join(node.bootstrap_servers for node in self.nodes)

    def node(self, node_id: int) -> LocalKafkaBroker:
        return self.nodes[node_id - 1]

    def start(self, timeout: float = 120.0) -> "LocalKafkaCluster":
        for node in self.nodes:
            node.launch()
        for node in self.nodes:
            node.wait_until_answering(timeout)
        return self

    def close(self) -> None:
        """End every node at once and remove their data. Not a clean shutdown one node after
        another: the last node's controlled shutdown waits for a controller quorum that is gone,
        60 s until ``stop`` kills it, and data about to be deleted needs no clean shutdown."""
        for node in self.nodes:
            node.kill()
        for node in self.nodes:
            node.close()

    def __enter__(self) -> "LocalKafkaCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def real_broker() -> Iterator[tuple[Optional[str], Optional[str]]]:
    """A real Kafka broker for what the embedded cluster cannot show (format("kafka")'s Java
    client cannot talk to it; broker bytes mean something only on a real broker):
    ``(bootstrap, None)`` for the block, or ``(None, why there is none)``.

    ``KAFKASYNC_BOOTSTRAP`` names one; else, where Maven and Java 17+ are installed, one is
    started on loopback from the official Apache Kafka release on Maven Central
    (``KAFKA_VERSION``, the integration suite's default otherwise) and stopped at the end.
    While a started broker runs, ``KAFKASYNC_BOOTSTRAP`` names it."""
    from kafkasync_dev.testing.kafka_dist import DEFAULT_KAFKA_VERSION, maven_kafka, maven_problem

    named = os.environ.get("KAFKASYNC_BOOTSTRAP", "").strip()
    if named:
        yield named, None
        return
    problem = maven_problem()
    if problem:
        yield None, f"no real broker: KAFKASYNC_BOOTSTRAP is not set and {problem}"
        return
    broker = LocalKafkaBroker(maven_kafka(os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION)).start()
    os.environ["KAFKASYNC_BOOTSTRAP"] = broker.bootstrap_servers
    try:
        yield broker.bootstrap_servers, None
    finally:
        os.environ.pop("KAFKASYNC_BOOTSTRAP", None)
        broker.close()
