"""The Schema Registry, as the decoders see it: settings that never show their secrets, and one
client per process and registry whose writer schemas are fetched by id once and kept.

Every decoder (the driver's fetcher, the record probe, each executor's reader) asks
:func:`registry` for a schema id; the first ask in a process fetches it
(``GET /schemas/ids/{id}``, confluent-kafka's ``SchemaRegistryClient.get_schema``), later asks
are a dictionary look-up. A registry that is down therefore stops nothing that only meets ids
seen before; a new id is retried by the client with backoff (its ``max.retries`` and
``retries.wait.ms`` / ``retries.max.wait.ms``, full jitter, confluent-kafka
``_sync/schema_registry_client.py`` ``send_http_request``), then fails the query naming the id
and the URL. An id the registry answers it does not know (HTTP 404) is remembered as unknown:
the records that carry it have an invalid time and a null decoded value.

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
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from kafkasync_source.event_time.formats import InvalidTime
from kafkasync_source.event_time.options import KafkaSyncEventTimeError

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


class Registry:
    """One client and its schemas, per process and :class:`RegistrySettings` (see
    :func:`registry`). Thread-safe: the driver's fetcher thread and its planning thread share it."""

    def __init__(self, settings: RegistrySettings) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient  # the registry extra

        self.settings = settings
        try:
            self._client = SchemaRegistryClient(settings.client_conf())
        except (ValueError, TypeError) as err:
            raise ValueError(f"Options 'schema.registry.*': {settings.scrub(str(err))}") from None
        self._schemas: dict[tuple[int, Optional[str]], Any] = {}
        self._unknown: set[tuple[int, Optional[str]]] = set()
        self._referenced: dict[tuple[str, int], Any] = {}
        """Referenced subject versions (``Schema``), fetched once: several writer ids share them."""
        self._lock = threading.Lock()

    def schema(self, schema_id: int, fmt: Optional[str] = None) -> Any:
        """The writer schema with this id (``confluent_kafka.schema_registry.Schema``), fetched
        once, an Avro schema with references made standalone (see the module); :class:`UnknownSchema`
        if the registry has none; :class:`KafkaSyncFormatError` if it cannot be asked (after the
        client's retries) or a reference cannot be resolved."""
        key = (schema_id, fmt)
        found = self._schemas.get(key)
        if found is not None:
            return found
        if key in self._unknown:
            raise UnknownSchema(f"the registry at {self.settings.display_url} has no schema id {schema_id}")
        with self._lock:
            if key not in self._schemas:
                try:
                    fetched = self._client.get_schema(schema_id, fmt=fmt)
                except Exception as err:  # noqa: BLE001 - sorted into unknown id / unreachable below
                    if getattr(err, "http_status_code", None) == 404:
                        self._unknown.add(key)
                        raise UnknownSchema(
                            f"the registry at {self.settings.display_url} has no schema id {schema_id}"
                        ) from None
                    raise KafkaSyncFormatError(
                        f"kafkasync: cannot fetch schema id {schema_id} from the registry at "
                        f"{self.settings.display_url}: {self._why(err)}"
                    ) from None
                self._schemas[key] = self._standalone(fetched, schema_id)
            return self._schemas[key]

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

    def latest(self, subject: str, fmt: Optional[str] = None) -> Optional[Any]:
        """The subject's latest version (``RegisteredSchema``), None if it has none; raises
        ValueError naming the URL (never the credentials) if the registry cannot be asked."""
        try:
            return self._client.get_latest_version(subject, fmt=fmt)
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


@lru_cache(maxsize=16)
def registry(settings: RegistrySettings) -> Registry:
    """The process's :class:`Registry` for these settings (driver and executors alike)."""
    return Registry(settings)
