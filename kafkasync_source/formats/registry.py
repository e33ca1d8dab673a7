"""The Schema Registry, as the decoders see it: settings that never show their secrets, and one
client per process and registry whose writer schemas are fetched by id once and kept.

Every decoder (the driver's fetcher, the record probe, each executor's reader) asks
:func:`registry` for a schema id; the first ask in a process fetches it
(``GET /schemas/ids/{id}``, confluent-kafka's ``SchemaRegistryClient.get_schema``), later asks
are a dictionary look-up. A registry that is down therefore stops nothing that only meets ids
seen before; a new id is retried by the client with backoff (its ``max.retries`` and
``retries.wait.ms`` / ``retries.max.wait.ms``, full jitter, confluent-kafka
``_sync/schema_registry_client.py`` ``send_http_request``), then fails the query naming the id
and the URL. An id the registry answers it does not know (HTTP 404, error 40403) is unknown: the
records that carry it have an invalid time, and an undecodable value (formats/decoded.py). The
answer is kept for :data:`UNKNOWN_RETRY_S` and then asked again (a replica may not have read a
schema registered a moment ago); a process asks about an id it never met, or one whose
"unknown" has expired, only while the registry has not answered "unknown" too often
(:data:`UNKNOWN_ANSWERS_BURST`), so stray payloads that happen to start with byte 0 cost no
request per record, however often they recur. Both caches are bounded (least recently
used first out), and a writer schema whose references do not resolve is remembered as failing
like an unknown id.

The reader's subject is known to the registry of a process (:meth:`Registry.reading`): a writer
id met that is no version of it is warned about once (``GET /schemas/ids/{id}/versions``), since
Confluent's framing cannot be told from a payload that starts with byte 0 by chance.

An Avro writer schema may name types that other subjects define (schema references: the
``references`` of ``GET /schemas/ids/{id}``, each a type's name, a subject and a version, as
confluent-kafka's ``Schema(..., references=[SchemaReference(name, subject, version)])`` registers
them). Such a schema comes back **standalone**: each referenced subject version is fetched once
(``GET /subjects/{subject}/versions/{version}``, recursively for references of references) and
its named types are written into the schema where it first uses them, as confluent-kafka's own
``AvroDeserializer`` resolves them (``_sync/avro.py`` ``_resolve_named_schema``, then
``common/avro.py`` ``parse_schema_with_repo``: fastavro's ``load_schema`` over a repository of
the referenced schemas). The Avro readers then see one self-contained schema, whatever it
references. Apicurio Registry 3.3.3's Confluent API answers ``references`` as Confluent's does
(tried with confluent-kafka 2.16.1's client). Protobuf schemas keep their references (their
reader builds a descriptor pool from them, formats/protobuf.py).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Literal, Optional, TypeVar, Union
from urllib.parse import urlsplit, urlunsplit

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.event_time.options import KafkaSyncEventTimeError

logger = logging.getLogger(__name__)
K = TypeVar("K")
V = TypeVar("V")

EXTRA = "kafkasync[registry]"
"""The optional extra that installs the registry client and the decoders."""

_SECRET_SETTINGS = ("basic.auth.user.info", "ssl.key.password", "bearer.auth.token", "bearer.auth.client.secret")
_NUMERIC_SETTINGS = {"timeout": float, "max.retries": int, "retries.wait.ms": int, "retries.max.wait.ms": int,
                     "cache.capacity": int, "cache.latest.ttl.sec": float}
"""confluent-kafka's client refuses these as strings (``TypeError: max.retries must be a number``);
Spark hands every option over as text."""
DEFAULT_TIMEOUT_S = 10.0
"""Per HTTP request; confluent-kafka's default is none (httpx's 5 s connect)."""


class KafkaSyncFormatError(KafkaSyncEventTimeError):
    """A record cannot be decoded for a reason no ``onInvalid`` policy should hide: the registry
    is unreachable for a new schema id, or a writer schema cannot be resolved to the reader
    schema. The message names what it can (topic, partition, offset, schema id, field, URL)."""


class UnknownSchema(InvalidTime):
    """The registry does not know the record's schema id: an invalid time, a null decoded value."""


@dataclass(frozen=True)
class RegistrySettings:
    """``schema.registry.url`` and the other ``schema.registry.*`` options, as confluent-kafka's
    ``SchemaRegistryClient`` takes them (without the prefix). Hashable (one client per process
    and settings); its repr, and every message built from it, show the URL without credentials."""

    url: str
    settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        return f"RegistrySettings(url={self.display_url!r})"

    @property
    def display_url(self) -> str:
        """The URL(s) without user info (``https://user:pw@host`` is a form the client accepts)."""
        shown = []
        for url in self.url.split(","):
            parts = urlsplit(url.strip())
            host = parts.netloc.rpartition("@")[2]
            shown.append(urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)))
        return ",".join(shown)

    def secrets(self) -> list[str]:
        """The values that must never be shown: passwords, tokens, the URL's user info."""
        found = [value for key, value in self.settings if key in _SECRET_SETTINGS and value]
        for url in self.url.split(","):
            user_info = urlsplit(url.strip()).netloc.rpartition("@")[0]
            found += [user_info, *user_info.split(":")] if user_info else []
        found += [part for value in list(found) for part in value.split(":", 1)]
        return sorted({value for value in found if len(value) >= 3}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``***`` (messages of the client and httpx)."""
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

    def client_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url, "timeout": DEFAULT_TIMEOUT_S}
        for key, value in self.settings:
            convert = _NUMERIC_SETTINGS.get(key)
            conf[key] = convert(value) if convert else value
        return conf


UNKNOWN_RETRY_S = 30.0
"""How long an id the registry answered unknown (HTTP 404) stays unknown in a process before it
is asked again. A registry may answer 404 for an id registered a moment ago: Confluent's
followers learn new schemas by reading the ``_schemas`` topic, Apicurio's KafkaSQL storage from
its own topic, so a reader that asks a lagging replica right after a producer registered gets
404. Within 30 s a replica has caught up (it lags by its poll of a Kafka topic, milliseconds to
seconds) and the id's records decode again; meanwhile an id that never existed (a stray payload
that starts with byte 0) costs a process at most one request per 30 s, and all such ids together
no more than :data:`UNKNOWN_ANSWERS_PER_S` allows."""
KNOWN_CAPACITY = 1_000
"""Writer schemas kept per process and registry, least recently used dropped first (and fetched
again when met again). confluent-kafka's client keeps its own copy of each schema it fetched."""
UNKNOWN_CAPACITY = 10_000
"""Ids remembered unknown (or failing) per process and registry, least recently used dropped first."""
UNKNOWN_ANSWERS_BURST = 20
UNKNOWN_ANSWERS_PER_S = 1.0
"""A process asks the registry about ids it has never met (or met unknown over
:data:`UNKNOWN_RETRY_S` ago) as long as the registry has not answered "unknown" more than 20
times in a burst, refilled at one a second: garbage framed by
chance (a payload that starts with byte 0 and four random bytes) then costs about one request a
second, however many records hold it, while a topic of many writer schemas is never held back
by them (an answer that knows the id spends nothing). An id not asked is unknown for now, and
asked at a later record once the registry has not answered "unknown" for a while."""


class Registry:
    """One client and its schemas, per process and :class:`RegistrySettings` (see
    :func:`registry`). Thread-safe: the driver's fetcher thread and its planning thread share it.

    ``client``: one answering as confluent-kafka's ``SchemaRegistryClient`` does (the tests'
    double, kafkasync_dev/testing/registry_double.py); by default the real one for ``settings``.
    ``clock``: seconds, monotonic (the tests move it)."""

    def __init__(self, settings: RegistrySettings, client: Optional[Any] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        if client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient  # the registry extra

            try:
                client = SchemaRegistryClient(settings.client_conf())
            except (ValueError, TypeError) as err:
                raise ValueError(f"Options 'schema.registry.*': {settings.scrub(str(err))}") from None
        self._client = client
        self._clock = clock
        self._schemas: _Lru[tuple[int, Optional[str]], Any] = _Lru(KNOWN_CAPACITY)
        self._failing: _Lru[tuple[int, Optional[str]], tuple[float, Exception]] = _Lru(UNKNOWN_CAPACITY)
        """Ids answered unknown, and writer schemas whose references do not resolve: when, and
        what to raise until :data:`UNKNOWN_RETRY_S` has passed."""
        self._unknown_answers = _Budget(UNKNOWN_ANSWERS_BURST, UNKNOWN_ANSWERS_PER_S, clock)
        self._referenced: dict[tuple[str, int], Any] = {}
        """Referenced subject versions (``Schema``), fetched once: several writer ids share them."""
        self._reader_subjects: set[str] = set()
        self._warned: _Lru[int, bool] = _Lru(UNKNOWN_CAPACITY)
        self._lock = threading.Lock()

    def schema(self, schema_id: int, fmt: Optional[str] = None) -> Any:
        """The writer schema with this id (``confluent_kafka.schema_registry.Schema``), fetched
        once, an Avro schema with references made standalone (see the module); :class:`UnknownSchema`
        if the registry has none (asked again after :data:`UNKNOWN_RETRY_S`); :class:`KafkaSyncFormatError`
        if it cannot be asked (after the client's retries) or a reference cannot be resolved."""
        key = (schema_id, fmt)
        found = self._schemas.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._schemas.get(key)
            if found is not None:
                return found
            failing = self._failing.get(key)
            # An id asked again once its answer is old spends the budget as a new one does:
            # stray payloads recur, and their ids would otherwise each cost a request per 30 s.
            if failing is not None and (self._clock() - failing[0] < UNKNOWN_RETRY_S
                                        or not self._unknown_answers.available()):
                # A new exception each time: one raised again and again grows its traceback.
                raise type(failing[1])(*failing[1].args) from None
            if failing is None and not self._unknown_answers.available():
                raise UnknownSchema(
                    f"schema id {schema_id} was not asked of the registry at {self.settings.display_url}: it "
                    f"answered 'unknown' to {UNKNOWN_ANSWERS_BURST} new ids just before (payloads that start "
                    "with byte 0 but are not framed?); it is asked at a later record")
            try:
                fetched = self._client.get_schema(schema_id, fmt=fmt)
            except Exception as err:  # noqa: BLE001 - sorted into unknown id / unreachable below
                if getattr(err, "http_status_code", None) != 404:
                    raise KafkaSyncFormatError(
                        f"kafkasync: cannot fetch schema id {schema_id} from the registry at "
                        f"{self.settings.display_url}: {self._why(err)}"
                    ) from None
                self._unknown_answers.spend()
                unknown = UnknownSchema(f"the registry at {self.settings.display_url} has no schema id {schema_id}")
                self._failing.put(key, (self._clock(), unknown))
                raise unknown from None
            try:
                standalone = self._standalone(fetched, schema_id)
            except KafkaSyncFormatError as failed:
                self._failing.put(key, (self._clock(), failed))
                raise
            self._failing.pop(key)
            self._schemas.put(key, standalone)
            self._warn_if_foreign(schema_id)
            return standalone

    def holds(self, schema_id: int) -> Optional[bool]:
        """Whether the registry has the id now (asked, never from this process's cache: a schema
        fetched before may have been deleted since); None if it cannot be asked. Asked as
        ``GET /schemas/ids/{id}/versions``, which confluent-kafka's client does not cache (its
        ``get_schema`` answers an id it fetched once from its cache for good): 404 for an id
        deleted for good, an answer (empty for an id only soft-deleted) while the id is held."""
        try:
            self._client.get_schema_versions(schema_id)
        except Exception as err:  # noqa: BLE001 - sorted below
            return False if getattr(err, "http_status_code", None) == 404 else None
        return True

    def reading(self, subject: str) -> None:
        """Records are read as a version of ``subject`` in this process: a writer id met later
        that is no version of it (nor of another subject read) is warned about once."""
        self._reader_subjects.add(subject)

    def _warn_if_foreign(self, schema_id: int) -> None:
        """Warn once if ``schema_id`` (just fetched) is no version of a subject read here
        (``GET /schemas/ids/{id}/versions``): a payload that starts with byte 0 is taken for
        Confluent's framing, so Avro written without it (or bytes of another topic) would be
        decoded with whatever schema its second to fifth bytes name."""
        readers = set(self._reader_subjects)
        if not readers or self._warned.get(schema_id):
            return
        self._warned.put(schema_id, True)
        try:
            versions = self._client.get_schema_versions(schema_id)
        except Exception as err:  # noqa: BLE001 - a registry without the endpoint: nothing to tell
            logger.debug("kafkasync: cannot ask which subjects hold schema id %d: %s", schema_id, self._why(err))
            return
        held = sorted(f"{v.subject!r} version {v.version}" for v in versions)
        if any(v.subject in readers for v in versions):
            return
        logger.warning(
            "kafkasync: schema id %d (%s) is no version of the subject records are read as (%s); records "
            "framed with it are read with that schema. If the topic holds payloads without Confluent's "
            "framing, one that starts with byte 0 is read with whatever schema its next 4 bytes name "
            "(docs/formats.md, 'Schemas by id').", schema_id,
            "registered as " + ", ".join(held) if held else "under no subject now",
            ", ".join(repr(s) for s in sorted(readers)))

    def _standalone(self, schema: Any, schema_id: int) -> Any:
        """``schema`` itself, or for an Avro schema with references the same schema with the
        referenced named types written into it (what ``parse_schema_with_repo`` gives
        confluent-kafka's deserializer), as JSON text and without references."""
        if (schema.schema_type or "AVRO") != "AVRO" or not schema.references:
            return schema
        from confluent_kafka.schema_registry import Schema
        from fastavro.schema import load_schema

        named: dict[str, Any] = {}
        self._collect_references(schema, schema_id, named)
        try:
            repository: Any = _References(json.loads(schema.schema_str), named)
            parsed = load_schema(_ROOT, repo=repository, _write_hint=False)
        except Exception as err:  # noqa: BLE001 - fastavro's parse errors: a name no reference defines
            raise KafkaSyncFormatError(
                f"kafkasync: schema id {schema_id} and the schemas it references "
                f"({', '.join(f'{r.subject!r} version {r.version}' for r in schema.references)}) "
                f"do not make one Avro schema: {type(err).__name__}: {str(err)[:300]}"
            ) from None
        return Schema(json.dumps(parsed), "AVRO", [], schema.metadata, schema.rule_set)

    def _collect_references(self, schema: Any, schema_id: int, named: dict[str, Any]) -> None:
        """The raw definitions of every type ``schema`` references, recursively, by the
        reference's name and by the type's full name (confluent-kafka's ``_resolve_named_schema``
        keeps both: a schema may name the type either way)."""
        for reference in schema.references or ():
            found = self._referenced.get((reference.subject, reference.version))
            if found is None:
                try:
                    found = self._client.get_version(reference.subject, reference.version).schema
                except Exception as err:  # noqa: BLE001 - sorted into unknown / unreachable
                    missing = getattr(err, "http_status_code", None) == 404
                    raise KafkaSyncFormatError(
                        f"kafkasync: schema id {schema_id} references subject {reference.subject!r} version "
                        f"{reference.version}, which the registry at {self.settings.display_url} "
                        + ("does not have" if missing else f"cannot give: {self._why(err)}")
                    ) from None
                self._referenced[(reference.subject, reference.version)] = found
            self._collect_references(found, schema_id, named)
            definition = json.loads(str(found.schema_str))
            named[reference.name] = definition
            if isinstance(definition, dict) and "name" in definition:
                name, namespace = definition["name"], definition.get("namespace")
                named.setdefault(f"{namespace}.{name}" if namespace and "." not in name else name, definition)

    def version(self, subject: str, version: Union[int, Literal["latest"]] = "latest") -> Optional[Any]:
        """A version of the subject (``RegisteredSchema``: ``schema_id``, ``version``, ``subject``),
        ``latest`` by default; None if the registry has no such subject or version (404, error
        codes 40401 / 40402); raises ValueError naming the URL (never the credentials) if the
        registry cannot be asked. Always asked: confluent-kafka's ``get_latest_version`` would
        answer a process's first answer for good (its cache of latest versions has no expiry
        unless ``cache.latest.ttl.sec`` is set), and a query pins its reader when it starts."""
        try:
            return self._client.get_version(subject, version)
        except Exception as err:  # noqa: BLE001 - sorted below
            if getattr(err, "http_status_code", None) == 404:
                return None
            raise ValueError(
                f"cannot ask the Schema Registry at {self.settings.display_url} for subject "
                f"{subject!r}: {self._why(err)}"
            ) from None

    def check(self) -> None:
        """Fail now, naming the URL, if the registry does not answer (``GET /subjects``)."""
        try:
            self._client.get_subjects()
        except Exception as err:  # noqa: BLE001 - any failure: the registry cannot be used
            raise ValueError(
                f"the Schema Registry at {self.settings.display_url} does not answer: {self._why(err)}. "
                "Check schema.registry.url and the schema.registry.* settings (TLS, basic.auth.user.info)."
            ) from None

    def _why(self, err: BaseException) -> str:
        return self.settings.scrub(f"{type(err).__name__}: {err}")[:500]


_ROOT = "$root"
"""The schema being resolved, in :class:`_References` (no Avro name holds a ``$``)."""


class _References:
    """fastavro's schema repository (``AbstractSchemaRepository.load``) over the schema being
    resolved and the definitions it references: ``load_schema`` asks it for each name it does not
    know yet, and writes the definition in where the name is first used. Not a subclass: that
    would import fastavro (the optional extra) with this module; fastavro only calls ``load``."""

    def __init__(self, root: Any, named: dict[str, Any]) -> None:
        self._root = root
        self._named = named

    def load(self, name: str) -> Any:
        from fastavro.repository.base import SchemaRepositoryError

        found = self._root if name == _ROOT else self._named.get(name)
        if found is None:
            raise SchemaRepositoryError(f"no referenced schema defines {name!r}")
        return copy.deepcopy(found)  # fastavro's parse edits what it is given


class _Lru(Generic[K, V]):
    """A dictionary of at most ``capacity`` entries that drops the least recently used first.
    Callers hold :class:`Registry`'s lock to change it; a read without it sees a whole entry or none."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> Optional[V]:
        found = self._entries.get(key)
        if found is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile
                pass
        return found

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


class _Budget:
    """A token bucket: ``burst`` tokens, refilled at ``per_s`` a second up to ``burst``."""

    def __init__(self, burst: int, per_s: float, clock: Callable[[], float]) -> None:
        self._burst = burst
        self._per_s = per_s
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def available(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self._burst), self._tokens + (now - self._at) * self._per_s)
        self._at = now
        return self._tokens >= 1

    def spend(self) -> None:
        self._tokens = max(0.0, self._tokens - 1)


_REGISTRIES: OrderedDict[RegistrySettings, Registry] = OrderedDict()
_REGISTRIES_LOCK = threading.Lock()
_PROCESS_REGISTRIES = 16
"""Registries (settings) a process keeps a client for; the least recently used is dropped first."""


def registry(settings: RegistrySettings) -> Registry:
    """The process's :class:`Registry` for these settings (driver and executors alike)."""
    found = _REGISTRIES.get(settings)
    if found is not None:
        return found
    with _REGISTRIES_LOCK:
        if settings not in _REGISTRIES:
            _REGISTRIES[settings] = Registry(settings)
            while len(_REGISTRIES) > _PROCESS_REGISTRIES:
                _REGISTRIES.popitem(last=False)
        return _REGISTRIES[settings]
