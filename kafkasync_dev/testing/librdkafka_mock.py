"""librdkafka's mock cluster API, reached through ``ctypes`` on confluent_kafka's own library.

Kept apart from :class:`~kafkasync_dev.testing.mock_cluster.MockKafkaCluster` because it is the
one place that knows the C side: where the shared library is, each symbol's signature (the
mock API is experimental in librdkafka, with no ABI guarantee, so every required symbol is
resolved at load and a mismatch fails loudly), which symbols are optional by version, and
how the native handles are freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

_lib_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def librdkafka_path() -> str:
    """Path of the librdkafka shared library that confluent_kafka itself uses."""
    import confluent_kafka

    pkg_dir = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    site_dir = os.path.dirname(pkg_dir)
    patterns = [
        # manylinux wheels (auditwheel): site-packages/confluent_kafka.libs/
        os.path.join(site_dir, "confluent_kafka.libs", "librdkafka*.so*"),
        # macOS wheels (delocate): confluent_kafka/.dylibs/
        os.path.join(pkg_dir, ".dylibs", "librdkafka*.dylib"),
        os.path.join(pkg_dir, "*.libs", "librdkafka*"),
        os.path.join(pkg_dir, "librdkafka*.so*"),
    ]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    # confluent_kafka built from source against a system librdkafka.
    system = ctypes.util.find_library("rdkafka")
    if system:
        return system
    raise RuntimeError(
        "cannot find the librdkafka shared library used by confluent_kafka "
        f"(looked under {site_dir}); install the confluent-kafka wheel"
    )


_c_void_p = ctypes.c_void_p
_c_char_p = ctypes.c_char_p
_c_int = ctypes.c_int
_c_int16 = ctypes.c_int16
_c_int32 = ctypes.c_int32
_c_int64 = ctypes.c_int64
_c_size_t = ctypes.c_size_t

# name -> (restype, argtypes)
_SIGNATURES: Dict[str, Tuple[Any, List[Any]]] = {
    "rd_kafka_version_str": (_c_char_p, []),
    "rd_kafka_err2str": (_c_char_p, [_c_int]),
    "rd_kafka_err2name": (_c_char_p, [_c_int]),
    "rd_kafka_conf_new": (_c_void_p, []),
    "rd_kafka_conf_destroy": (None, [_c_void_p]),
    "rd_kafka_conf_set": (_c_int, [_c_void_p, _c_char_p, _c_char_p, _c_char_p, _c_size_t]),
    "rd_kafka_new": (_c_void_p, [_c_int, _c_void_p, _c_char_p, _c_size_t]),
    "rd_kafka_destroy": (None, [_c_void_p]),
    "rd_kafka_mock_cluster_new": (_c_void_p, [_c_void_p, _c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [_c_void_p]),
    "rd_kafka_mock_cluster_bootstraps": (_c_char_p, [_c_void_p]),
    "rd_kafka_mock_topic_create": (_c_int, [_c_void_p, _c_char_p, _c_int, _c_int]),
    "rd_kafka_mock_topic_set_error": (None, [_c_void_p, _c_char_p, _c_int]),
    "rd_kafka_mock_topic_delete": (_c_int, [_c_void_p, _c_char_p]),
    "rd_kafka_mock_broker_set_down": (_c_int, [_c_void_p, _c_int32]),
    "rd_kafka_mock_broker_set_up": (_c_int, [_c_void_p, _c_int32]),
    "rd_kafka_mock_broker_set_rtt": (_c_int, [_c_void_p, _c_int32, _c_int]),
    "rd_kafka_mock_partition_set_leader": (_c_int, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
    "rd_kafka_mock_clear_request_errors": (None, [_c_void_p, _c_int16]),
    "rd_kafka_mock_start_request_tracking": (None, [_c_void_p]),
    "rd_kafka_mock_stop_request_tracking": (None, [_c_void_p]),
    "rd_kafka_mock_clear_requests": (None, [_c_void_p]),
    "rd_kafka_mock_get_requests": (_c_void_p, [_c_void_p, ctypes.POINTER(_c_size_t)]),
    "rd_kafka_mock_request_id": (_c_int32, [_c_void_p]),
    "rd_kafka_mock_request_api_key": (_c_int16, [_c_void_p]),
    "rd_kafka_mock_request_timestamp": (_c_int64, [_c_void_p]),
    "rd_kafka_mock_request_destroy": (None, [_c_void_p]),
}
# Present in librdkafka >= 2.x; used when available.
_OPTIONAL_SIGNATURES: Dict[str, Tuple[Any, List[Any]]] = {
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [_c_void_p, _c_int16, _c_size_t, ctypes.POINTER(_c_int)],
    ),
    "rd_kafka_mock_request_destroy_array": (None, [_c_void_p, _c_size_t]),
    # DeleteRecords on a mock partition (added in 2026; librdkafka 2.16 has it, 2.14 not).
    "rd_kafka_mock_partition_delete_records": (_c_int, [_c_void_p, _c_char_p, _c_int32, _c_int64]),
}


def load() -> ctypes.CDLL:
    """librdkafka, loaded once, with every mock-cluster symbol's signature declared."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        import confluent_kafka  # noqa: F401  (loads the very same library first)

        lib = ctypes.CDLL(librdkafka_path())
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)  # AttributeError => incompatible librdkafka
            fn.restype = restype
            fn.argtypes = argtypes
        for name, (restype, argtypes) in _OPTIONAL_SIGNATURES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = argtypes
        # Variadic functions: only the fixed arguments are declared; callers
        # pass the variadic ones as explicit ctypes.c_int values.
        lib.rd_kafka_mock_push_request_errors.restype = None
        lib.rd_kafka_mock_broker_push_request_error_rtts.restype = _c_int
        partition_errors = getattr(lib, "rd_kafka_mock_partition_push_request_errors", None)
        if partition_errors is not None:  # librdkafka 2.16 has it
            partition_errors.restype = _c_int
        _lib = lib
        return lib


class MockClusterError(RuntimeError):
    """A mock-cluster call returned a librdkafka error code."""

    def __init__(self, what: str, code: int):
        lib = load()
        name = (lib.rd_kafka_err2name(code) or b"?").decode()
        text = (lib.rd_kafka_err2str(code) or b"?").decode()
        super().__init__(f"{what}: {name} ({code}): {text}")
        self.code = code


def check(what: str, code: int) -> None:
    """Raise :class:`MockClusterError` where a mock-cluster call returned an error code."""
    if code:
        raise MockClusterError(what, code)


class NativeHandles:
    """Native handles, kept apart from the cluster object so a weakref
    finalizer can free them without keeping the cluster alive."""

    def __init__(self, lib: ctypes.CDLL, rk: int, mcluster: int):
        self.lib = lib
        self.rk: Optional[int] = rk
        self.mcluster: Optional[int] = mcluster

    def destroy(self) -> None:
        mcluster, rk = self.mcluster, self.rk
        self.mcluster = self.rk = None
        if mcluster:
            self.lib.rd_kafka_mock_cluster_destroy(mcluster)
        if rk:
            self.lib.rd_kafka_destroy(rk)
