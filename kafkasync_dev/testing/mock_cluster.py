"""An in-process Kafka cluster for tests, built on librdkafka's mock cluster.

librdkafka (bundled in the confluent-kafka wheel) contains a mock Kafka cluster
that speaks the real Kafka protocol on 127.0.0.1 ports. It is reached here
through ``ctypes`` on the same shared library the ``confluent_kafka`` extension
uses, so no Docker engine or JVM broker is needed.

    with MockKafkaCluster(brokers=1) as cluster:
        cluster.create_topic("events", partitions=4)
        cluster.produce("events", [Record(0, 1_000, b"k", b"v")])
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, ...})

Known limits of the mock (measured with librdkafka 2.16):

* Each partition keeps at most ~5 MiB of encoded record batches and silently
  drops the oldest batches beyond that (the low watermark moves up). With
  100-byte values that is ~42,000 records; tiny records produced in large
  batches fit hundreds of thousands.
* ``offsets_for_times`` is not supported (returns offset -1).
* AdminClient ``create_topics`` times out: create topics with
  :meth:`MockKafkaCluster.create_topic`.
* Transactions work and write control records (offset gaps), but aborted
  records are *not* filtered for ``isolation.level=read_committed`` consumers.

The mock API is experimental in librdkafka (no ABI guarantee); every symbol is
resolved when the library is first loaded so a mismatch fails loudly (librdkafka_mock.py holds
that C side; this module is the cluster a test drives).
"""

from __future__ import annotations

import ctypes
import enum
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from kafkasync_dev.testing.librdkafka_mock import NativeHandles, check, load
from kafkasync_dev.testing.patience import PATIENCE_S

__all__ = ["ApiKey", "MockKafkaCluster", "MockRequest", "Record", "produce_confirmed"]

Headers = Union[Sequence[Tuple[str, Optional[bytes]]], Mapping[str, Optional[bytes]], None]


@dataclass(frozen=True)
class Record:
    """One record to produce: explicit partition and timestamp (ms since epoch)."""

    partition: int
    timestamp_ms: int
    key: Optional[Union[bytes, str]] = None
    value: Optional[Union[bytes, str]] = None
    headers: Headers = None


@dataclass(frozen=True)
class MockRequest:
    """A request seen by the mock cluster while request tracking is on."""

    broker_id: int
    api_key: int
    timestamp_us: int  # librdkafka monotonic clock, microseconds


class ApiKey(enum.IntEnum):
    """Kafka protocol request types (for fault injection and request tracking)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28


# Producer settings that make bulk test loads fast on the mock, and the record batches they write
# independent of the machine's speed: a batch goes out when it is full (batch.size,
# batch.num.messages) or at a flush, which overrides linger.ms (librdkafka 1.5.0, CHANGELOG.md),
# never at a linger that a busy machine lets pass between two produce() calls. With 5 ms, six
# records produced together became two batches on a loaded machine, and tests that need a
# record fetched with the one before it (a batch is fetched whole) failed.
_FAST_PRODUCER = {
    "linger.ms": 30_000,
    "batch.num.messages": 10000,
    "batch.size": 1048576,
    "queue.buffering.max.messages": 1000000,
    "queue.buffering.max.kbytes": 1048576,
    # One request in flight keeps per-partition order across retries. Not
    # idempotent on purpose: the idempotent producer waits 0.5-1 s for its
    # producer id on a fresh cluster (a fixed librdkafka timer), which would
    # slow down every test that uses a fresh cluster.
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 1,
    "acks": "all",
    "message.timeout.ms": 60000,
}


class MockKafkaCluster:
    """A librdkafka mock Kafka cluster with ``brokers`` brokers (ids 1..brokers).

    Use as a context manager or call :meth:`close`. All helper clients the
    cluster creates are closed with it; clients you create yourself must be
    closed by you (before the cluster, or they log reconnect failures).
    """

    def __init__(self, brokers: int = 1):
        if brokers < 1:
            raise ValueError("brokers must be >= 1")
        lib = load()
        self._lib = lib
        self.brokers = brokers
        # _lock guards state and native calls (held briefly); _produce_lock
        # serializes produce() so fault injection can run while it waits.
        self._lock = threading.RLock()
        self._produce_lock = threading.Lock()
        self._closed = False
        self._producer = None
        self._admin_consumer = None

        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        # This handle only owns the cluster and never connects anywhere; keep
        # it quiet (it would log "No bootstrap.servers configured").
        for key, val in (("client.id", "kafkasync-mock-cluster"), ("log_level", "4")):
            if lib.rd_kafka_conf_set(conf, key.encode(), val.encode(), errstr, len(errstr)) != 0:
                lib.rd_kafka_conf_destroy(conf)
                raise RuntimeError(f"rd_kafka_conf_set({key}): {errstr.value.decode()}")
        rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0 = RD_KAFKA_PRODUCER
        if not rk:
            lib.rd_kafka_conf_destroy(conf)  # rd_kafka_new keeps conf only on success
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
        mcluster = lib.rd_kafka_mock_cluster_new(rk, brokers)
        if not mcluster:
            lib.rd_kafka_destroy(rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self._handles = NativeHandles(lib, rk, mcluster)
        self._finalizer = weakref.finalize(self, self._handles.destroy)
        self._bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()

    # ------------------------------------------------------------------ basics

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``127.0.0.1:port`` list, one per broker."""
        return self._bootstrap

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "MockKafkaCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._bootstrap
        return f"MockKafkaCluster(brokers={self.brokers}, {state})"

    def close(self) -> None:
        """Close helper clients, then destroy the mock cluster. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producer, self._producer = self._producer, None
            consumer, self._admin_consumer = self._admin_consumer, None
        if producer is not None:
            if producer.flush(5):
                # Undeliverable leftovers (e.g. a broker left down): drop them
                # so close() cannot block on them.
                producer.purge()
                producer.flush(1)
            _close_client(producer)
        if consumer is not None:
            _close_client(consumer)
        self._finalizer()  # runs NativeHandles.destroy exactly once

    def _mcluster(self) -> int:
        mcluster = self._handles.mcluster
        if self._closed or mcluster is None:
            raise RuntimeError("MockKafkaCluster is closed")
        return mcluster

    # ----------------------------------------------------------------- clients

    def client_config(self, **overrides: Any) -> Dict[str, Any]:
        """Base librdkafka config pointing at this cluster (dotted keys may be
        passed as a dict: ``client_config(**{"linger.ms": 0})``)."""
        conf: Dict[str, Any] = {"bootstrap.servers": self._bootstrap}
        conf.update(overrides)
        return conf

    def producer(self, config: Optional[Mapping[str, Any]] = None, **overrides: Any):
        """A new ``confluent_kafka.Producer`` for this cluster, tuned for bulk
        loads (batched, ordered, not idempotent; pass
        ``{"enable.idempotence": True}`` if a test retries through faults).
        The caller owns it and must flush it."""
        from confluent_kafka import Producer

        conf = self.client_config(**_FAST_PRODUCER)
        conf.update(config or {})
        conf.update(overrides)
        return Producer(conf)

    def consumer(self, config: Optional[Mapping[str, Any]] = None, **overrides: Any):
        """A new ``confluent_kafka.Consumer`` (unique group.id, no auto commit,
        ``auto.offset.reset=earliest``). Use ``assign()``; the caller closes it."""
        from confluent_kafka import Consumer

        conf = self.client_config(
            **{
                "group.id": f"kafkasync-test-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
            }
        )
        conf.update(config or {})
        conf.update(overrides)
        return Consumer(conf)

    def _metadata_client(self):
        with self._lock:
            self._mcluster()
            if self._admin_consumer is None:
                self._admin_consumer = self.consumer({"client.id": "kafkasync-mock-admin"})
            return self._admin_consumer

    # ------------------------------------------------------------------ topics

    def create_topic(
        self, name: str, partitions: int = 1, replication: int = 1, timeout: float = PATIENCE_S
    ) -> None:
        """Create ``name`` through the mock API and wait until client metadata
        shows all its partitions with a leader."""
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        if not 1 <= replication <= self.brokers:
            raise ValueError(f"replication must be in 1..{self.brokers}")
        with self._lock:
            code = self._lib.rd_kafka_mock_topic_create(
                self._mcluster(), name.encode(), partitions, replication
            )
        check(f"create_topic({name!r})", code)
        self.wait_for_topic(name, partitions, timeout)

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` with its records, as a broker's DeleteTopics does: fetches of its
        partitions then answer UNKNOWN_TOPIC_OR_PART and metadata no longer lists it."""
        with self._lock:
            code = self._lib.rd_kafka_mock_topic_delete(self._mcluster(), name.encode())
        check(f"delete_topic({name!r})", code)

    def wait_for_topic(self, name: str, partitions: Optional[int] = None, timeout: float = PATIENCE_S):
        """Poll metadata until ``name`` is visible with ``partitions`` led partitions."""
        client = self._metadata_client()
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            # Ask for all topics: asking for one topic by name can auto-create it.
            md = client.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            tmd = md.topics.get(name)
            if tmd is not None and tmd.error is None:
                parts = tmd.partitions
                ready = all(p.leader >= 0 and p.error is None for p in parts.values())
                if ready and (partitions is None or len(parts) == partitions):
                    return md
                last = {p: (pm.leader, pm.error) for p, pm in parts.items()}
            elif tmd is not None:
                last = tmd.error
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {name!r} not ready in metadata after {timeout}s: {last}")
            time.sleep(0.01)

    def partitions(self, topic: str, timeout: float = 10.0) -> List[int]:
        md = self._metadata_client().list_topics(timeout=timeout)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            raise KeyError(f"unknown topic {topic!r}")
        return sorted(tmd.partitions)

    def end_offsets(self, topic: str, timeout: float = 10.0) -> Dict[int, Tuple[int, int]]:
        """``{partition: (low watermark, high watermark)}`` for ``topic``."""
        from confluent_kafka import TopicPartition

        client = self._metadata_client()
        return {
            p: tuple(client.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout))
            for p in self.partitions(topic, timeout)
        }

    watermarks = end_offsets

    def offsets_for_times(
        self, times: Mapping[Tuple[str, int], int], timeout: float = 10.0
    ) -> Dict[Tuple[str, int], int]:
        """What a real broker answers to ListOffsets by time — per ``(topic, partition)`` the
        earliest offset whose record timestamp is >= the time, -1 where none is — computed by
        reading the log, because the mock cluster itself answers -1 to every such request.
        Tests substitute it for ``OffsetReader.offsets_for_times``."""
        from confluent_kafka import KafkaError, TopicPartition

        answers = {}
        consumer = self.consumer({"enable.partition.eof": True})
        try:
            for (topic, partition), time_ms in times.items():
                low, _ = self.end_offsets(topic, timeout)[partition]
                answers[(topic, partition)] = -1
                consumer.assign([TopicPartition(topic, partition, low)])
                deadline = time.monotonic() + timeout
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"reading {topic}-{partition} took over {timeout} s")
                    message = consumer.poll(0.2)
                    if message is None:
                        continue
                    error = message.error()
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        break
                    if error is not None:
                        raise RuntimeError(f"reading {topic}-{partition}: {error}")
                    if message.timestamp()[1] >= time_ms:
                        answers[(topic, partition)] = message.offset()
                        break
        finally:
            consumer.close()
        return answers

    def produce_transaction(self, topic: str, records: Iterable[Record], timeout: float = 10.0) -> None:
        """Produce ``records`` in one committed transaction: the commit marker it leaves takes
        an offset, the offset gap that readers must cross without waiting. Each call uses a
        new transactional producer (idempotence is required for transactions)."""
        producer = self.producer(
            {"transactional.id": f"kafkasync-tx-{uuid.uuid4().hex}", "enable.idempotence": True}
        )
        try:
            producer.init_transactions(timeout)
            producer.begin_transaction()
            produce_confirmed(producer, topic, records, timeout)
            producer.commit_transaction(timeout)
        finally:
            producer.flush(timeout)

    # ---------------------------------------------------------------- produce

    def produce(
        self, topic: str, records: Iterable[Record], timeout: float = 60.0
    ) -> List[Tuple[int, int]]:
        """Produce ``records`` (explicit partition and timestamp each), flush,
        and return ``[(partition, offset)]`` in input order. Each partition's
        records of one call are one record batch, up to ``batch.size`` (1 MiB)
        and ``batch.num.messages`` (10,000), however busy the machine (see
        ``_FAST_PRODUCER``). Raises ``KafkaException`` if any record fails,
        ``TimeoutError`` if not all are delivered within ``timeout`` seconds
        (see :func:`produce_confirmed`)."""
        with self._lock:
            self._mcluster()
            if self._producer is None:
                self._producer = self.producer({"client.id": "kafkasync-mock-producer"})
            producer = self._producer
        # One helper producer, serialized: keeps per-call error accounting exact.
        with self._produce_lock:
            return produce_confirmed(producer, topic, records, timeout)

    # ---------------------------------------------------------------- faults

    def broker_down(self, broker_id: int) -> None:
        """Disconnect broker ``broker_id`` (-1: all) and refuse new connections.
        Does not move partition leadership."""
        with self._lock:
            check("broker_down", self._lib.rd_kafka_mock_broker_set_down(self._mcluster(), broker_id))

    def broker_up(self, broker_id: int) -> None:
        """Let broker ``broker_id`` (-1: all) accept connections again."""
        with self._lock:
            check("broker_up", self._lib.rd_kafka_mock_broker_set_up(self._mcluster(), broker_id))

    def set_rtt(self, broker_id: int, ms: int) -> None:
        """Delay every response of broker ``broker_id`` (-1: all) by ``ms``."""
        with self._lock:
            check("set_rtt", self._lib.rd_kafka_mock_broker_set_rtt(self._mcluster(), broker_id, ms))

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move leadership (``broker_id=-1``: leaderless). Clients notice on
        their next metadata refresh."""
        with self._lock:
            code = self._lib.rd_kafka_mock_partition_set_leader(
                self._mcluster(), topic.encode(), partition, broker_id
            )
        check("set_partition_leader", code)

    def push_request_errors(self, api_key: int, *error_codes: int) -> None:
        """The next ``len(error_codes)`` requests of type ``api_key`` (any
        broker) fail with these codes, in order. ``KafkaError._TRANSPORT``
        (-195) makes the broker drop the connection instead."""
        if not error_codes:
            return
        codes = [int(c) for c in error_codes]
        with self._lock:
            mc = self._mcluster()
            arr_fn = getattr(self._lib, "rd_kafka_mock_push_request_errors_array", None)
            if arr_fn is not None:
                arr = (ctypes.c_int * len(codes))(*codes)
                arr_fn(mc, int(api_key), len(codes), arr)
            else:
                self._lib.rd_kafka_mock_push_request_errors(
                    ctypes.c_void_p(mc), ctypes.c_int16(int(api_key)), ctypes.c_size_t(len(codes)),
                    *[ctypes.c_int(c) for c in codes],
                )

    def push_broker_request_error_rtts(
        self, broker_id: int, api_key: int, *errors_and_rtts: Tuple[int, int]
    ) -> None:
        """Per-broker variant: each item is ``(error_code, rtt_ms)``; error 0
        with an rtt delays one response without failing it."""
        if not errors_and_rtts:
            return
        args: List[Any] = []
        for err, rtt in errors_and_rtts:
            args += [ctypes.c_int(int(err)), ctypes.c_int(int(rtt))]
        with self._lock:
            code = self._lib.rd_kafka_mock_broker_push_request_error_rtts(
                ctypes.c_void_p(self._mcluster()), ctypes.c_int32(broker_id), ctypes.c_int16(int(api_key)),
                ctypes.c_size_t(len(errors_and_rtts)), *args,
            )
        check("push_broker_request_error_rtts", code)

    def push_partition_request_errors(self, topic: str, partition: int, api_key: int,
                                      *error_codes: int) -> None:
        """The next ``len(error_codes)`` requests of type ``api_key`` for one partition answer
        these codes for that partition, in order; 0 answers as usual. Unlike
        :meth:`push_request_errors` the error is the partition's, not the whole response's, as
        a broker answers e.g. OFFSET_OUT_OF_RANGE. Needs a recent librdkafka (2.16 has it:
        ``rd_kafka_mock_partition_push_request_errors``)."""
        if not error_codes:
            return
        push = self._optional("rd_kafka_mock_partition_push_request_errors")
        with self._lock:
            code = push(
                ctypes.c_void_p(self._mcluster()), ctypes.c_char_p(topic.encode()), ctypes.c_int32(partition),
                ctypes.c_int16(int(api_key)), ctypes.c_size_t(len(error_codes)),
                *[ctypes.c_int(int(c)) for c in error_codes],
            )
        check("push_partition_request_errors", code)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Delete the records of ``topic``-``partition`` below ``before_offset``, as a broker's
        DeleteRecords (or retention) does: the log start moves to ``before_offset``, and a
        fetch below it answers OFFSET_OUT_OF_RANGE. Needs a recent librdkafka (2.16 has it)."""
        delete = self._optional("rd_kafka_mock_partition_delete_records")
        with self._lock:
            code = delete(self._mcluster(), topic.encode(), partition, before_offset)
        check(f"delete_records({topic!r}, {partition}, {before_offset})", code)

    def supports(self, *functions: str) -> bool:
        """Whether this librdkafka has these (optional) mock functions."""
        return all(getattr(self._lib, name, None) is not None for name in functions)

    def _optional(self, name: str) -> Any:
        function = getattr(self._lib, name, None)
        if function is None:
            raise NotImplementedError(f"librdkafka {self._lib.rd_kafka_version_str().decode()} has no {name}")
        return function

    def clear_request_errors(self, api_key: int) -> None:
        with self._lock:
            self._lib.rd_kafka_mock_clear_request_errors(self._mcluster(), int(api_key))

    def set_topic_error(self, topic: str, error_code: int) -> None:
        """Error returned for ``topic`` in Metadata responses (0 clears it)."""
        with self._lock:
            self._lib.rd_kafka_mock_topic_set_error(self._mcluster(), topic.encode(), int(error_code))

    # ------------------------------------------------------- request tracking

    def start_request_tracking(self) -> None:
        """Record every request the brokers receive (see :meth:`requests`)."""
        with self._lock:
            self._lib.rd_kafka_mock_start_request_tracking(self._mcluster())

    def stop_request_tracking(self) -> None:
        with self._lock:
            self._lib.rd_kafka_mock_stop_request_tracking(self._mcluster())

    def clear_requests(self) -> None:
        with self._lock:
            self._lib.rd_kafka_mock_clear_requests(self._mcluster())

    def requests(self, api_key: Optional[int] = None) -> List[MockRequest]:
        """Requests recorded since tracking started (optionally one type only)."""
        lib = self._lib
        cnt = ctypes.c_size_t(0)
        with self._lock:
            arr_ptr = lib.rd_kafka_mock_get_requests(self._mcluster(), ctypes.byref(cnt))
        if not arr_ptr:
            return []
        n = cnt.value
        arr = ctypes.cast(arr_ptr, ctypes.POINTER(ctypes.c_void_p))
        out = []
        try:
            for i in range(n):
                req = arr[i]
                out.append(
                    MockRequest(
                        broker_id=lib.rd_kafka_mock_request_id(req),
                        api_key=lib.rd_kafka_mock_request_api_key(req),
                        timestamp_us=lib.rd_kafka_mock_request_timestamp(req),
                    )
                )
        finally:
            destroy_array = getattr(lib, "rd_kafka_mock_request_destroy_array", None)
            if destroy_array is not None:
                destroy_array(arr_ptr, n)
            else:  # pragma: no cover - very old librdkafka; leaks the array itself
                for i in range(n):
                    lib.rd_kafka_mock_request_destroy(arr[i])
        if api_key is not None:
            out = [r for r in out if r.api_key == int(api_key)]
        return out


def produce_confirmed(
    producer: Any, topic: str, records: Iterable[Record], timeout: float = 60.0
) -> List[Tuple[int, int]]:
    """Produce ``records`` (explicit partition and timestamp each) with ``producer``, flush,
    and return ``[(partition, offset)]`` in input order. Every delivery report is checked:
    ``flush()`` returning 0 does not mean delivered (a real broker rejects, e.g., records
    stamped more than 1 h ahead, and the whole batch with them). Raises ``KafkaException``
    naming how many failed and the first error, ``TimeoutError`` if not all are reported
    within ``timeout`` seconds."""
    from confluent_kafka import KafkaError, KafkaException

    results: List[Optional[Tuple[int, int]]] = []
    errors: List[Tuple[int, Any]] = []

    def make_cb(i: int):
        def cb(err, msg):
            if err is not None:
                errors.append((i, err))
            else:
                results[i] = (msg.partition(), msg.offset())

        return cb

    produce = producer.produce
    poll = producer.poll
    for i, rec in enumerate(records):
        results.append(None)
        kwargs = dict(
            value=rec.value,
            key=rec.key,
            partition=rec.partition,
            timestamp=rec.timestamp_ms,
            on_delivery=make_cb(i),
        )
        if rec.headers:
            kwargs["headers"] = rec.headers
        while True:
            try:
                produce(topic, **kwargs)
                break
            except BufferError:
                poll(0.05)
        if i % 10000 == 9999:
            poll(0)
    remaining = producer.flush(timeout)
    if errors:
        i, err = errors[0]
        raise KafkaException(
            KafkaError(
                err.code(),
                f"{len(errors)} of {len(results)} records failed; first: record #{i}: {err.str()}",
            )
        )
    if remaining or any(result is None for result in results):
        raise TimeoutError(
            f"{remaining or sum(r is None for r in results)} records not delivered after {timeout}s"
        )
    return results  # type: ignore[return-value]


def _close_client(client: Any) -> None:
    close = getattr(client, "close", None)  # Producer.close() is confluent-kafka >= 2.x
    if close is not None:
        try:
            close()
        except Exception:  # pragma: no cover - best effort during teardown
            pass
