"""A small HTTP/1.1 lookup service on 127.0.0.1 for testing and benchmarking ``async_map``.

It runs an asyncio streams server in a thread of the calling process; Spark's Python workers
reach it over real TCP. Each request says how it should be answered, so one service covers every
case a test needs::

    GET /lookup?id=7&key=k1&latency_ms=40&transient=2&permanent=0&slow_ms=0

* ``latency_ms``: answer after this long;
* ``transient=n``: the first ``n`` attempts for this ``id`` get ``503``, later ones succeed;
* ``permanent=1``: always ``500``;
* ``slow_ms``: the first attempt for this ``id`` takes this long instead (to provoke a timeout).

A ``200`` answer's body is JSON ``{"id", "key", "attempt", "value"}``. The service records, per key,
the ids in the order their requests arrived and how often a request arrived while another for
the same key was still being answered (``overlaps``): the check that per-key ordering holds,
made where it matters, at the service.

``fetch`` (asyncio) and ``fetch_blocking`` (a blocking socket, for thread pools) are the clients;
both keep connections alive (per event loop / per thread), as a real service client would, so
that a call costs one request, not a TCP handshake.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Awaitable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlencode, urlsplit


@dataclass
class ServiceStats:
    """What the service saw (a copy: safe to read while it runs)."""

    requests: int = 0
    attempts: Dict[str, int] = field(default_factory=dict)  # id -> requests seen
    starts_by_key: Dict[str, List[str]] = field(default_factory=dict)  # key -> ids in arrival order
    overlaps: int = 0  # requests that arrived while one for the same key was being answered
    max_concurrent: int = 0
    first_request_at: Optional[float] = None  # time.monotonic() of the first request
    last_answer_at: Optional[float] = None  # ... and of the last answer

    def calls_per_second(self) -> Optional[float]:
        """Requests per second between the first request and the last answer: the rate the
        callers kept up while they were calling (no Spark job start-up or tail in it)."""
        if self.first_request_at is None or self.last_answer_at in (None, self.first_request_at):
            return None
        return self.requests / (self.last_answer_at - self.first_request_at)


class LookupService:
    """``with LookupService() as service: service.port`` — started and stopped with the block."""

    def __init__(self) -> None:
        self.port = 0
        self._lock = threading.Lock()
        self._stats = ServiceStats()
        self._active_by_key: Dict[str, int] = collections.Counter()
        self._active = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lookup-service", daemon=True)
        self._server: Optional[asyncio.base_events.Server] = None
        self._handlers: Dict[asyncio.Task, asyncio.StreamWriter] = {}

    def __enter__(self) -> "LookupService":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024), self._loop).result()
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc_info) -> None:
        server = self._server
        assert server is not None, "the service was not started"

        async def close() -> None:
            server.close()
            # Idle keep-alive connections wait for a next request: closing them ends their handlers
            # (cancelling the handlers instead makes asyncio log each one as an error).
            handlers = list(self._handlers.items())
            for _, writer in handlers:
                writer.close()
            if handlers:
                await asyncio.wait([handler for handler, _ in handlers], timeout=5)
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def stats(self) -> ServiceStats:
        with self._lock:
            s = self._stats
            return ServiceStats(s.requests, dict(s.attempts), {k: list(v) for k, v in s.starts_by_key.items()},
                                s.overlaps, s.max_concurrent, s.first_request_at, s.last_answer_at)

    def reset(self) -> None:
        with self._lock:
            self._stats = ServiceStats()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests on one connection until the client closes it (HTTP/1.1 keep-alive)."""
        handler = asyncio.current_task()
        assert handler is not None  # a connection's handler runs as a task of the server
        self._handlers[handler] = writer
        try:
            while request_line := await reader.readline():
                close = False
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    close |= header.lower().startswith(b"connection:") and b"close" in header.lower()
                parts = request_line.decode("latin-1").split()
                if len(parts) < 2:
                    return
                url = urlsplit(parts[1])
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                answered = await self._unless_gone(reader, self._answer(url.path, query))
                if answered is None:
                    return  # the client gave up (a timeout) while its answer was being made
                status, body = answered
                payload = body.encode()
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                await writer.drain()
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up (a timeout): nothing to answer
        finally:
            self._handlers.pop(handler, None)
            writer.close()

    @staticmethod
    async def _unless_gone(reader: asyncio.StreamReader, answer: Awaitable[Tuple[str, str]]
                           ) -> Optional[Tuple[str, str]]:
        """``answer``'s result, or None once the client closed the connection first: a slow
        answer (``slow_ms``) ends with its caller's timeout instead of outliving the test."""
        answering = asyncio.ensure_future(answer)
        gone = asyncio.ensure_future(reader.read(1))  # a client sends nothing more until answered
        await asyncio.wait((answering, gone), return_when=asyncio.FIRST_COMPLETED)
        unfinished = gone if answering.done() else answering
        unfinished.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await unfinished  # a read still waiting would collide with the next request's
        return answering.result() if answering.done() and not answering.cancelled() else None

    async def _answer(self, path: str, query: Dict[str, str]) -> Tuple[str, str]:
        if path != "/lookup":
            return "404 Not Found", json.dumps({"error": f"no such path {path}"})
        row_id, key = query.get("id", ""), query.get("key", "")
        with self._lock:
            stats = self._stats
            stats.requests += 1
            if stats.first_request_at is None:
                stats.first_request_at = time.monotonic()
            attempt = stats.attempts.get(row_id, 0) + 1
            stats.attempts[row_id] = attempt
            stats.starts_by_key.setdefault(key, []).append(row_id)
            if self._active_by_key[key] > 0:
                stats.overlaps += 1
            self._active_by_key[key] += 1
            self._active += 1
            stats.max_concurrent = max(stats.max_concurrent, self._active)
        try:
            slow = int(query.get("slow_ms", 0)) if attempt == 1 else 0
            await asyncio.sleep((slow or int(query.get("latency_ms", 0))) / 1000)
        finally:
            with self._lock:
                self._active_by_key[key] -= 1
                self._active -= 1
                self._stats.last_answer_at = time.monotonic()
        if query.get("permanent") == "1":
            return "500 Internal Server Error", json.dumps({"error": f"id {row_id} cannot be looked up"})
        if attempt <= int(query.get("transient", 0)):
            return "503 Service Unavailable", json.dumps({"error": f"busy (attempt {attempt})"})
        return "200 OK", json.dumps({"id": row_id, "key": key, "attempt": attempt, "value": f"v-{row_id}"})


def lookup_path(**params: object) -> str:
    return "/lookup?" + urlencode(params)


class HttpError(Exception):
    """A non-200 answer; the message carries the status line and body."""


def _parse(raw: bytes) -> dict:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    if " 200 " not in status_line + " ":
        raise HttpError(f"{status_line.partition(' ')[2]}: {body.decode(errors='replace')}")
    return json.loads(body)


class _Connections:
    """Idle keep-alive connections to the service, per event loop (each Spark task has its own)."""

    def __init__(self) -> None:
        # Keyed by the loop object itself (weakly): a connection cannot move to another loop.
        self._idle: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[int, list]]" = \
            weakref.WeakKeyDictionary()

    def take(self, port: int):
        idle = self._idle.get(asyncio.get_running_loop(), {}).get(port)
        return idle.pop() if idle else None

    def give_back(self, port: int, connection) -> None:
        self._idle.setdefault(asyncio.get_running_loop(), {}).setdefault(port, []).append(connection)


_CONNECTIONS = _Connections()


async def fetch(port: int, path: str) -> dict:
    """GET ``path`` from the service on ``port`` (asyncio, keep-alive); the JSON body, or
    ``HttpError``. A call cancelled mid-way (a timeout) closes its connection."""
    connection = _CONNECTIONS.take(port) or await asyncio.open_connection("127.0.0.1", port)
    reader, writer = connection
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(_content_length(head))
    except BaseException:
        writer.close()
        raise
    _CONNECTIONS.give_back(port, connection)
    return _parse(head + body)


_THREAD_CONNECTIONS = threading.local()


def fetch_blocking(port: int, path: str, timeout: float = 30.0) -> dict:
    """``fetch`` with a blocking socket kept per thread, for thread-pool callers."""
    sock = getattr(_THREAD_CONNECTIONS, "sock", None)
    if sock is None:
        sock = _THREAD_CONNECTIONS.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        _THREAD_CONNECTIONS.file = sock.makefile("rb")
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        lines = [_THREAD_CONNECTIONS.file.readline()]
        while lines[-1] not in (b"\r\n", b""):
            lines.append(_THREAD_CONNECTIONS.file.readline())
        head = b"".join(lines)
        body = _THREAD_CONNECTIONS.file.read(_content_length(head))
    except BaseException:
        sock.close()
        _THREAD_CONNECTIONS.sock = None
        raise
    return _parse(head + body)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise HttpError(f"no Content-Length in {head[:200]!r}")
