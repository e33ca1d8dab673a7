"""The query's librdkafka client settings: the ``kafka.*`` options as librdkafka takes them
(Java-only names translated or refused), the settings kafkasync owns, the consumer group its
consumers name, and the redaction that keeps secrets out of messages.

Secrets (SASL passwords, JAAS configs, SSL keys) pass through to the Kafka client but are
never echoed: :func:`redact` is used wherever client configuration could reach a message.
"""

from __future__ import annotations

import logging
import re
from typing import Mapping, Optional

from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.java_client_settings import (
    JavaClientSettingError,
    drop_or_refuse_java_settings,
    jaas_credentials,
)

logger = logging.getLogger(__name__)

# Client settings kafkasync owns: letting users set them would break exactly-once reads
# (Spark's Kafka source refuses the same ones).
_FORBIDDEN_CLIENT_SETTINGS = {
    "auto.offset.reset": "use the option 'startingOffsets' instead",
    "enable.auto.commit": "offsets live in Spark's checkpoint; kafkasync never auto-commits",
    "key.deserializer": "records are always returned as binary key/value columns",
    "value.deserializer": "records are always returned as binary key/value columns",
    "enable.partition.eof": "kafkasync relies on end-of-partition events to cross offset gaps",
    "interceptor.classes": "Java consumer interceptors do not run in librdkafka (format(\"kafka\") "
                           "refuses them too)",
}

_SECRET_MARKERS = ("password", "secret", "jaas", "key", "token", "credential", "oauthbearer.config", "user.info")
"""``user.info``: ``schema.registry.basic.auth.user.info`` (``user:password``)."""

SPARK_OPTIONS_REDACTION_REGEX = (
    r"(?i)^(kafka|schema\.registry)\..*("
    + "|".join(f"{re.escape(marker[:-1])}[{re.escape(marker[-1])}]" for marker in _SECRET_MARKERS) + ")"
)
"""Java regex for Spark's ``spark.sql.redaction.options.regex``: the ``kafka.*`` and
``schema.registry.*`` options whose values are secrets (``schema.registry.url`` is masked by
Spark's own default, ``(?i)url``). Spark prints a data source's options in ``explain()`` and the UI, masking
only those whose name or value matches that regex (default ``(?i)url``) or
``spark.redaction.regex`` (default ``(?i)secret|password|token|access[.]?key|credential``):
``kafka.ssl.key.pem`` matched neither, so a private key was printed verbatim.

Each marker's last letter stands in brackets (``passwor[d]``): the regex is itself a session conf,
and Spark Connect's config RPC hides a conf whose value matches ``spark.redaction.regex``
(``SparkConnectConfigHandler.isRedacted``: ``get`` fails with SQL_CONF_NOT_FOUND, ``get`` with a
default answers the default), so a regex spelling ``password`` could not be read back to extend."""

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_ISOLATION_LEVEL = "read_uncommitted"
"""As the Java consumer behind ``format("kafka")`` (``isolation.level`` default
``read_uncommitted``, Kafka consumer configs), not librdkafka's ``read_committed`` default
(librdkafka CONFIGURATION.md): a query moved to kafkasync sees the same records."""

DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"
"""``groupIdPrefix`` default for streaming queries: format("kafka")'s (Spark's docs), so a
prefixed group ACL granted for format("kafka") also covers kafkasync's consumers."""
DEFAULT_BATCH_GROUP_ID_PREFIX = "spark-kafka-relation"
"""``groupIdPrefix`` default for batch reads: format("kafka")'s (KafkaSourceProvider
``batchUniqueGroupId`` in Spark's source; the docs name only the streaming default)."""


_CONSUMER_ONLY_SETTINGS = (
    "fetch.", "isolation.level", "queued.", "check.crcs", "max.poll.interval.ms",
    "session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy", "group.",
    "auto.commit", "enable.auto", "enable.partition.eof",
)


def non_consumer_settings(client_config: Mapping[str, str]) -> dict[str, str]:
    """The query's client settings minus consumer-only ones, for a producer or AdminClient
    handle (librdkafka warns about consumer properties there)."""
    return {k: v for k, v in client_config.items() if not k.startswith(_CONSUMER_ONLY_SETTINGS)}


def consumer_group_id(client_config: Mapping[str, str]) -> str:
    """The ``group.id`` of kafkasync's internal consumers (driver fetcher, offset reader,
    executors' range readers, stop-offset store), chosen once by :func:`parse_options`.

    They only ``assign()`` and never commit, but librdkafka needs a group id for
    ``assign()`` (librdkafka issue #3261) and looks up that group's coordinator
    (FindCoordinator) even so, failing with GROUP_AUTHORIZATION_FAILED where the principal may
    not describe the group (confluent-kafka-python issue #250, answer by librdkafka's author:
    "we still look up the coordinator to be able to commit offsets"). Hence the id follows
    format("kafka")'s ``groupIdPrefix`` / ``kafka.group.id``, which users' ACLs are written
    for. A client configuration not made by :func:`parse_options` (tests, benchmarks) gets
    the default prefix's id."""
    return client_config.get("group.id") or _prefixed_group_id(DEFAULT_GROUP_ID_PREFIX)


def query_group_id(
    lowered: Mapping[str, str], fixed_group_id: Optional[str], streaming: Optional[bool]
) -> str:
    """As format("kafka"): ``kafka.group.id`` if set, for every consumer (``groupIdPrefix`` is
    then ignored), else an id starting with ``groupIdPrefix``. Unlike format("kafka"), the id
    carries no per-query UUID: the consumers never join or commit to it."""
    prefix = lowered.get("groupidprefix")
    if prefix is not None and not prefix.strip():
        raise KafkaSyncOptionError(
            "Option 'groupIdPrefix' must not be empty (default "
            f"'{DEFAULT_GROUP_ID_PREFIX}' for streams, '{DEFAULT_BATCH_GROUP_ID_PREFIX}' for "
            "batch reads, as format(\"kafka\"))."
        )
    if fixed_group_id is not None:
        if not fixed_group_id.strip():
            raise KafkaSyncOptionError("Option 'kafka.group.id' must not be empty.")
        if prefix is not None:
            logger.warning("Option 'groupIdPrefix' is ignored: 'kafka.group.id' is set, and "
                           "every kafkasync consumer uses that group, as format(\"kafka\") does.")
        return fixed_group_id
    default = DEFAULT_BATCH_GROUP_ID_PREFIX if streaming is False else DEFAULT_GROUP_ID_PREFIX
    return _prefixed_group_id((prefix or default).strip())


def _prefixed_group_id(prefix: str) -> str:
    return f"{prefix}-kafkasync"


def redact(config: Mapping[str, str]) -> dict[str, str]:
    """A copy of a client configuration that is safe to log: secret values are masked."""
    return {
        key: ("***" if any(marker in key.lower() for marker in _SECRET_MARKERS) else value)
        for key, value in config.items()
    }


def scrub(text: str, config: Mapping[str, str]) -> str:
    """``text`` with every secret value of ``config`` masked: for messages built from
    client errors, which kafkasync does not control."""
    for key, value in config.items():
        if value and len(value) >= 4 and redact({key: value})[key] != value:
            text = text.replace(value, "***")
    return text


def client_config_from(lowered: Mapping[str, str]) -> dict[str, str]:
    config = {key[len("kafka."):]: value for key, value in lowered.items() if key.startswith("kafka.")}
    if not config.get("bootstrap.servers", "").strip():
        raise KafkaSyncOptionError(
            "Option 'kafka.bootstrap.servers' is required (host:port[,host:port...])."
        )
    for name, why in _FORBIDDEN_CLIENT_SETTINGS.items():
        if name in config:
            raise KafkaSyncOptionError(f"Option 'kafka.{name}' is not supported: {why}.")
    jaas = config.pop("sasl.jaas.config", None)
    try:
        drop_or_refuse_java_settings(config)
        # Translate PLAIN/SCRAM JAAS lines so Spark users' configs carry over.
        credentials = jaas_credentials(jaas) if jaas is not None else {}
    except JavaClientSettingError as err:
        raise KafkaSyncOptionError(str(err)) from None
    for key, value in credentials.items():
        config.setdefault(key, value)
    isolation = config.setdefault("isolation.level", DEFAULT_ISOLATION_LEVEL).strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise KafkaSyncOptionError(
            f"Option 'kafka.isolation.level' must be 'read_uncommitted' (default, as "
            f"format(\"kafka\")) or 'read_committed'; got {config['isolation.level']!r}."
        )
    config["isolation.level"] = isolation
    return config
