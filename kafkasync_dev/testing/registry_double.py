"""A Schema Registry client double for unit tests: answers as confluent-kafka's
``SchemaRegistryClient`` does when it talks to Confluent's registry or to Apicurio's
Confluent-compatible API, without a registry process.

What it mimics, and where that comes from:

* Errors are raised as the client raises them. An HTTP error answer becomes
  ``SchemaRegistryError(http_status_code, error_code, message)`` (confluent-kafka 2.16,
  ``schema_registry/_sync/schema_registry_client.py``, ``_RestClient.send_request``: "raise
  SchemaRegistryError(response.status_code, response.json().get('error_code'), ...)"). A registry
  that cannot be reached raises the transport's own error once the client's retries are spent
  (``send_http_request`` re-raises ``httpx.TransportError``): ``httpx.ConnectError`` here, of
  the httpx the client imports (``common/_httpx_compat.py``: ``httpx2`` where installed).
* The codes and messages are Apicurio 3.3.3's, which match Confluent's (its API reference,
  "Errors"); tried against Apicurio with confluent-kafka 2.16.1's client, and confirmed by
  ``integration/test_registry_broker.py``: an unknown id 404/40403 "Schema 9999 not found.", an
  unknown subject 404/40401 "Subject 'x' not found.", an unknown version 404/40402 "Version 7 not
  found."; ``GET /schemas/ids/{id}/versions`` lists the subject versions that hold the id (a
  soft-deleted version no longer), 404/40403 for an unknown id.
* A soft-deleted version (``delete_version``) is gone from its subject (``get_version`` answers
  40402, ``latest`` moves back, ``/schemas/ids/{id}/versions`` no longer lists it) while its id
  still answers ``GET /schemas/ids/{id}``; a permanent delete after it (``permanent=True``) makes
  the id unknown too, as both registries do.

Switches a real registry cannot be asked for on cue:

* ``lagging``: schemas registered while it is set are invisible (answered 404 as unknown ids, as
  a replica that has not yet read them answers) until :meth:`RegistryDouble.catch_up`;
* ``down``: every call raises ``httpx.ConnectError``, as the client does against a registry that
  does not answer.

``calls`` counts the calls by method name, so a test can say how many requests a reader made.
Use :func:`serving` to make kafkasync's process-wide registry for some settings this double.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from typing import Any, Iterator, Optional, Union

from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaReference
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.common.schema_registry_client import SchemaVersion
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kafkasync_source.formats import registry as registry_module
from kafkasync_source.formats.registry import Registry, RegistrySettings


class RegistryDouble:
    """The methods of ``SchemaRegistryClient`` kafkasync calls, and ``register_schema`` /
    ``delete_version`` to set the scene (ids and versions count up from 1, as both registries)."""

    def __init__(self) -> None:
        self._schemas: dict[int, Schema] = {}
        self._versions: dict[str, dict[int, int]] = {}
        """Per subject, its live versions: version -> schema id."""
        self._soft_deleted: dict[str, dict[int, int]] = {}
        """Per subject, its soft-deleted versions: version -> schema id."""
        self._numbered: Counter[str] = Counter()
        """Per subject, the last version number given (deleted versions keep theirs)."""
        self._hidden: set[int] = set()
        self._ids = itertools.count(1)
        self.lagging = False
        self.down = False
        self.calls: Counter[str] = Counter()

    # -- setting the scene ----------------------------------------------------------------------

    def register_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False) -> int:
        """As ``SchemaRegistryClient.register_schema``: the id, the same one for the same text."""
        schema_id = next((known for known, held in self._schemas.items()
                          if held.schema_str == schema.schema_str and held.schema_type == schema.schema_type), None)
        if schema_id is None:
            schema_id = next(self._ids)
            self._schemas[schema_id] = schema
            if self.lagging:
                self._hidden.add(schema_id)
        versions = self._versions.setdefault(subject_name, {})
        if schema_id not in versions.values():
            self._numbered[subject_name] += 1
            versions[self._numbered[subject_name]] = schema_id
        return schema_id

    def delete_version(self, subject_name: str, version: int, permanent: bool = False) -> int:
        """As both registries: a soft delete first (the version leaves its subject, its id still
        answers), then ``permanent=True`` (the id is gone unless another version holds it). A
        permanent delete of a live version is not modelled (Confluent's answer, 40405, was not
        confirmed against Apicurio)."""
        if not permanent:
            schema_id = self._live_version(subject_name, version)
            del self._versions[subject_name][version]
            self._soft_deleted.setdefault(subject_name, {})[version] = schema_id
            return version
        if version not in self._soft_deleted.get(subject_name, {}):
            raise NotImplementedError("the double deletes permanently a version soft-deleted before")
        schema_id = self._soft_deleted[subject_name].pop(version)
        held = [*self._versions.values(), *self._soft_deleted.values()]
        if not any(schema_id in versions.values() for versions in held):
            del self._schemas[schema_id]
        return version

    def catch_up(self) -> None:
        """The replica has read everything registered: lagging ids become visible."""
        self.lagging = False
        self._hidden.clear()

    # -- the client's API ----------------------------------------------------------------------

    def get_subjects(self) -> list[str]:
        self._answer("get_subjects")
        return sorted(self._versions)

    def get_schema(self, schema_id: int, subject_name: Optional[str] = None, fmt: Optional[str] = None,
                   reference_format: Optional[str] = None) -> Schema:
        self._answer("get_schema")
        return self._schema(schema_id)

    def get_schema_versions(self, schema_id: int, subject_name: Optional[str] = None, deleted: bool = False,
                            offset: int = 0, limit: int = -1) -> list[SchemaVersion]:
        self._answer("get_schema_versions")
        self._schema(schema_id)
        return [SchemaVersion(subject=subject, version=version)
                for subject, versions in sorted(self._versions.items())
                for version, held in sorted(versions.items()) if held == schema_id]

    def get_version(self, subject_name: str, version: Union[int, str] = "latest", deleted: bool = False,
                    fmt: Optional[str] = None) -> RegisteredSchema:
        self._answer("get_version")
        if subject_name not in self._versions or not self._visible(subject_name):
            raise SchemaRegistryError(404, 40401, f"Subject '{subject_name}' not found.")
        visible = self._visible(subject_name)
        number = max(visible) if version == "latest" else int(version)
        if number not in visible:
            raise SchemaRegistryError(404, 40402, f"Version {version} not found.")
        schema_id = visible[number]
        return RegisteredSchema(schema_id=schema_id, guid=None, schema=self._schemas[schema_id],
                                subject=subject_name, version=number)

    def get_latest_version(self, subject_name: str, fmt: Optional[str] = None) -> RegisteredSchema:
        return self.get_version(subject_name, "latest", fmt=fmt)

    # -- how it answers ------------------------------------------------------------------------

    def _answer(self, method: str) -> None:
        self.calls[method] += 1
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused")

    def _schema(self, schema_id: int) -> Schema:
        if schema_id not in self._schemas or schema_id in self._hidden:
            raise SchemaRegistryError(404, 40403, f"Schema {schema_id} not found.")
        return self._schemas[schema_id]

    def _visible(self, subject_name: str) -> dict[int, int]:
        return {version: schema_id for version, schema_id in self._versions.get(subject_name, {}).items()
                if schema_id not in self._hidden}

    def _live_version(self, subject_name: str, version: int) -> int:
        if version not in self._versions.get(subject_name, {}):
            raise SchemaRegistryError(404, 40402, f"Version {version} not found.")
        return self._versions[subject_name][version]


def avro_schema(schema_str: str, references: tuple[SchemaReference, ...] = ()) -> Schema:
    """An Avro ``Schema`` as the client registers it."""
    return Schema(schema_str, "AVRO", list(references))


def _forget_decoders() -> None:
    """Each ``serving`` block is a process that starts then: the decoders a process keeps, one per
    query's options (formats/avro, formats/protobuf), hold what they fetched and the registry they
    were made with, and a block must neither see another block's nor leave its own behind."""
    from kafkasync_source.formats import avro, protobuf

    avro._CODECS.clear()
    avro._PATHS.clear()
    protobuf._MESSAGES.clear()


@contextlib.contextmanager
def serving(double: RegistryDouble, settings: RegistrySettings, clock: Any = None) -> Iterator[Registry]:
    """This process's registry for ``settings`` (what every decoder and the option parser ask,
    :func:`kafkasync_source.formats.registry.registry`) answered by ``double`` while the block
    runs; ``clock``: the registry's clock (seconds), to move time in a test."""
    installed = Registry(settings, client=double, **({"clock": clock} if clock is not None else {}))
    previous = registry_module._REGISTRIES.get(settings)
    registry_module._REGISTRIES[settings] = installed
    _forget_decoders()
    try:
        yield installed
    finally:
        _forget_decoders()
        if previous is None:
            registry_module._REGISTRIES.pop(settings, None)
        else:
            registry_module._REGISTRIES[settings] = previous
