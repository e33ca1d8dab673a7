"""Java-client settings that librdkafka does not have, refused at query start naming the
librdkafka setting to use instead; and the translation of Java's ``sasl.jaas.config``.

A query moved from ``format("kafka")`` brings the Java consumer's security settings along. Its
truststore and keystore (JKS, PKCS12 or PEM) are given to librdkafka as PEM text
(java_keystores.py): a store named by an absolute path is read on the driver at query start and
its PEM text travels in the client settings; one named by a relative path (shipped with
``--files``) is checked on the driver, keeps its location and passwords in the client settings,
and is read where each client is created (:func:`with_shipped_stores_read`). The rest is
refused or translated here.
librdkafka (the client under kafkasync) rejects most of them with "No such configuration
property" — only once a consumer is created, and without saying what to use instead. Facts
used below: librdkafka's CONFIGURATION.md (``ssl.keystore.location`` "Path to client's
keystore (PKCS#12)", ``ssl.ca.location``/``ssl.ca.pem``, ``ssl.key.pem``,
``ssl.certificate.pem``, ``sasl.oauthbearer.*``, ``sasl.kerberos.*``) and the Java client's
``SslConfigs``/``SaslConfigs`` names. Every key listed here was checked to be refused by
librdkafka 2.16 ("No such configuration property"); no librdkafka property ends in ``.class``
or ``.classes``.

Messages name keys, never values: a JAAS line, a password or a PEM is a secret.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Sequence

from kafkasync_source.config.java_keystores import JavaKeystoreError, keystore_as_pem, truststore_as_pem

_CA = "'kafka.ssl.ca.location' (a PEM file or directory) or 'kafka.ssl.ca.pem' (PEM text)"
_TRUSTSTORE_PART = (
    "goes with 'kafka.ssl.truststore.location' (a JKS, PKCS12 or PEM truststore, which kafkasync "
    "reads and gives librdkafka as 'kafka.ssl.ca.pem'); alone it applies to nothing. "
    "librdkafka's own settings are " + _CA
)
_PEM_CLIENT_KEY = (
    "'kafka.ssl.key.location' + 'kafka.ssl.certificate.location' (PEM files) or "
    "'kafka.ssl.key.pem' + 'kafka.ssl.certificate.pem' (PEM text)"
)
_KEYSTORE_PART = (
    "goes with 'kafka.ssl.keystore.location' (a PKCS12, JKS or PEM keystore, which kafkasync "
    "reads) or 'kafka.ssl.keystore.key'; alone it applies to nothing. librdkafka's "
    "own settings are " + _PEM_CLIENT_KEY
)
_JSSE = (
    "a Java (JSSE) setting with no librdkafka equivalent: librdkafka uses OpenSSL; remove it"
)
_OAUTH = (
    "'kafka.sasl.mechanism=OAUTHBEARER' with 'kafka.sasl.oauthbearer.method=oidc', "
    "'kafka.sasl.oauthbearer.client.id', 'kafka.sasl.oauthbearer.client.secret', "
    "'kafka.sasl.oauthbearer.token.endpoint.url' and optionally 'kafka.sasl.oauthbearer.scope'"
)
_KERBEROS = (
    "'kafka.sasl.mechanism=GSSAPI' with 'kafka.sasl.kerberos.principal', "
    "'kafka.sasl.kerberos.keytab' and 'kafka.sasl.kerberos.service.name' (librdkafka runs "
    "'kafka.sasl.kerberos.kinit.cmd' with them)"
)
_JAVA_CLASSES = "Java classes cannot run in librdkafka"

JAVA_ONLY_SETTINGS: dict[str, str] = {
    "ssl.truststore.password": _TRUSTSTORE_PART,
    "ssl.truststore.type": _TRUSTSTORE_PART,
    "ssl.truststore.certificates": (
        "inline certificates need 'kafka.ssl.truststore.type=PEM' (KIP-651), as in the Java client; "
        "or give the same PEM text as 'kafka.ssl.ca.pem'"),
    "ssl.keystore.type": _KEYSTORE_PART,
    "ssl.protocol": _JSSE,
    "ssl.enabled.protocols": _JSSE,
    "ssl.provider": _JSSE,
    "ssl.keymanager.algorithm": _JSSE,
    "ssl.trustmanager.algorithm": _JSSE,
    "ssl.secure.random.implementation": _JSSE,
    "metric.reporters": f"{_JAVA_CLASSES}; there is no equivalent",
    "sasl.login.callback.handler.class": f"{_JAVA_CLASSES}; for OAuth use {_OAUTH}",
    "sasl.client.callback.handler.class": (
        f"{_JAVA_CLASSES}; use 'kafka.sasl.username' + 'kafka.sasl.password' (PLAIN/SCRAM) "
        f"or, for OAuth, {_OAUTH}"
    ),
    "sasl.login.class": f"{_JAVA_CLASSES}; for OAuth use {_OAUTH}; for Kerberos {_KERBEROS}",
    "ssl.engine.factory.class": f"{_JAVA_CLASSES}; give keys and certificates as {_PEM_CLIENT_KEY}",
}
"""Java-client-only settings -> what to set in librdkafka instead (without the ``kafka.``
prefix, as Spark users write them after ``kafka.``). The truststore and keystore settings are
listed for when they come without the location they go with."""


class JavaClientSettingError(ValueError):
    """A Java-client-only setting; the message names it and its librdkafka equivalent."""


_STORE_SETTINGS: dict[str, tuple[str, ...]] = {
    "ssl.truststore.location": ("ssl.truststore.password", "ssl.truststore.type"),
    "ssl.keystore.location": ("ssl.keystore.password", "ssl.keystore.type", "ssl.key.password"),
}
"""Each store's location -> the settings it is read with."""
_STORE_PEM: dict[str, tuple[str, ...]] = {
    "ssl.truststore.location": ("ssl.ca.pem",),
    "ssl.keystore.location": ("ssl.certificate.pem", "ssl.key.pem"),
}
"""Each store's location -> the librdkafka settings its contents become."""


def _shipped_store_settings(config: Mapping[str, str]) -> dict[str, str]:
    """The settings of the stores ``config`` names by a relative path: the name of a file
    shipped with ``--files`` / ``spark.files``, which Spark puts in each executor's working
    directory and the Java client opens in each process by that path. Read likewise in each
    process, such a store keeps its private key out of the tasks, which carry only its location
    and passwords."""
    return {key: config[key] for location, settings in _STORE_SETTINGS.items()
            if location in config and not os.path.isabs(config[location])
            for key in (location, *settings) if key in config}


def _translate_truststore(config: dict[str, str]) -> None:
    """``ssl.truststore.location`` (JKS, PKCS12 or PEM, with its password and type) or
    ``ssl.truststore.certificates`` (KIP-651's inline PEM) becomes librdkafka's ``ssl.ca.pem``:
    the store is read here, in this process (java_keystores.py)."""
    declared = config.get("ssl.truststore.type")
    pem = (declared or "").strip().upper() == "PEM"
    if pem and "ssl.truststore.password" in config:
        raise JavaClientSettingError(
            "Option 'kafka.ssl.truststore.password': a PEM truststore has no password (the Java "
            "client refuses one too, KIP-651); remove it.")
    given = [key for key in ("ssl.truststore.location", "ssl.truststore.certificates") if key in config]
    if not given or (given == ["ssl.truststore.certificates"] and not pem):
        return  # refused below, naming what to set
    _refuse_both(config, given, ("ssl.ca.location", "ssl.ca.pem"), "name the trusted CA certificates")
    if "ssl.truststore.certificates" in config:
        config["ssl.ca.pem"] = config.pop("ssl.truststore.certificates")
        config.pop("ssl.truststore.type", None)
        return
    config["ssl.ca.pem"] = truststore_as_pem(
        config.pop("ssl.truststore.location"), config.pop("ssl.truststore.password", None),
        config.pop("ssl.truststore.type", None))


def _translate_keystore(config: dict[str, str]) -> None:
    """``ssl.keystore.location`` (PKCS12, JKS or PEM, with ``ssl.keystore.password`` and
    ``ssl.key.password``) or KIP-651's inline ``ssl.keystore.key`` +
    ``ssl.keystore.certificate.chain`` become librdkafka's ``ssl.certificate.pem`` and
    ``ssl.key.pem``. A key taken out of a JKS or PKCS12 store is unencrypted, so its password
    goes; a PEM key stays as written, with ``ssl.key.password`` to decrypt it."""
    given = [key for key in ("ssl.keystore.location", "ssl.keystore.key", "ssl.keystore.certificate.chain")
             if key in config]
    if not given:
        return
    if "ssl.keystore.location" in given and len(given) > 1:
        _refuse_both(config, given[1:], ("ssl.keystore.location",), "name the client's key and certificate")
    _refuse_both(config, given, ("ssl.key.location", "ssl.key.pem", "ssl.certificate.location", "ssl.certificate.pem"),
                 "name the client's key and certificate")
    if "ssl.keystore.location" not in config:
        missing = {"ssl.keystore.key", "ssl.keystore.certificate.chain"} - set(given)
        if missing:
            raise JavaClientSettingError(
                f"Option 'kafka.{given[0]}' needs 'kafka.{missing.pop()}' too (KIP-651: the PEM key "
                "and its certificate chain are given together).")
        config["ssl.key.pem"] = config.pop("ssl.keystore.key")
        config["ssl.certificate.pem"] = config.pop("ssl.keystore.certificate.chain")
        config.pop("ssl.keystore.type", None)
        return
    declared = config.pop("ssl.keystore.type", None)
    pem = (declared or "").strip().upper() == "PEM"
    certificate, key = keystore_as_pem(
        config.pop("ssl.keystore.location"), config.pop("ssl.keystore.password", None),
        config.get("ssl.key.password"), declared)
    if not pem:
        config.pop("ssl.key.password", None)
    config["ssl.certificate.pem"], config["ssl.key.pem"] = certificate, key


def _refuse_both(config: dict[str, str], given: Sequence[str], librdkafka: tuple[str, ...], what: str) -> None:
    clashing = [key for key in librdkafka if key in config]
    if clashing:
        raise JavaClientSettingError(
            f"Options {', '.join(repr('kafka.' + key) for key in [*given, *clashing])} all {what}; "
            "keep one way of giving them.")


def drop_or_refuse_java_settings(config: dict[str, str]) -> None:
    """At query start, on the driver: translate the Java client's truststore and keystore
    settings into librdkafka's PEM ones, then refuse every remaining Java-only setting of
    ``config`` in one error (one line per key), so a migrated query is fixed in one round.

    A store named by a relative path is read here too, so that a wrong password or a missing
    file fails the query now (the driver's own clients need the file as well), but ``config``
    keeps its location and passwords instead of its contents: :func:`with_shipped_stores_read`
    reads it again where each client is created."""
    shipped = _shipped_store_settings(config)
    try:
        _translate_truststore(config)
        _translate_keystore(config)
    except JavaKeystoreError as err:
        raise JavaClientSettingError(str(err)) from None
    for location in shipped.keys() & _STORE_PEM.keys():
        for pem in _STORE_PEM[location]:
            del config[pem]
    config.update(shipped)
    refused = sorted(
        (key, JAVA_ONLY_SETTINGS.get(key, f"{_JAVA_CLASSES}; there is no equivalent"))
        for key in config
        if key not in shipped and (key in JAVA_ONLY_SETTINGS or key.endswith((".class", ".classes")))
    )
    if refused:
        raise JavaClientSettingError(
            "Java-client setting(s) that librdkafka does not have:\n"
            + "\n".join(f"- option 'kafka.{key}': {why}." for key, why in refused)
        )


def with_shipped_stores_read(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as librdkafka takes it, in the process about to create a client with it: the
    stores :func:`drop_or_refuse_java_settings` left named by their relative path are read here
    (on an executor, the copy ``--files`` put in its working directory) into their PEM settings,
    once per process and version of the file (java_keystores._read_cached). Every kafkasync
    client is created through it (client_log.with_python_logging), on the driver and on the
    executors alike."""
    read = dict(config)
    if read.keys() & _STORE_SETTINGS.keys():
        try:
            _translate_truststore(read)
            _translate_keystore(read)
        except JavaKeystoreError as err:
            raise JavaClientSettingError(str(err)) from None
    return read


# One ``name="value"`` pair of a JAAS line; JAAS takes the pairs in any order.
_JAAS_PAIR = re.compile(r"""(?P<name>[A-Za-z_.]+)\s*=\s*"(?P<value>[^"]*)\"""")
# The login module's class name (package dropped) before its control flag.
_JAAS_MODULE = re.compile(
    r"\s*(?:[\w$]+\.)*(?P<module>[\w$]+)\s+(?:required|requisite|sufficient|optional)\b",
    re.IGNORECASE,
)

_JAAS = "Option 'kafka.sasl.jaas.config'"
_JAAS_MODULE_ERRORS = {
    "OAuthBearerLoginModule": f"{_JAAS} (OAuthBearerLoginModule) cannot run in librdkafka; set {_OAUTH}.",
    "Krb5LoginModule": f"{_JAAS} (Krb5LoginModule, Kerberos) cannot run in librdkafka; set {_KERBEROS}.",
}
# Kafka's docs ("Authentication using Delegation Tokens") and KIP-48: a token logs in over
# SCRAM with the extension tokenauth=true in the client-first message. librdkafka's SCRAM
# client writes that message as "n,,n=<user>,r=<nonce>", with no extensions
# (src/rdkafka_sasl_scram.c, rd_kafka_sasl_scram_build_client_first_message), so the broker
# would check a token's id and HMAC as an ordinary SCRAM user and refuse them.
_DELEGATION_TOKEN = (
    f"{_JAAS}: Kafka delegation tokens (ScramLoginModule with tokenauth) are not supported. A "
    "broker knows a token login by the SCRAM extension 'tokenauth=true' (Kafka docs, "
    "'Authentication using Delegation Tokens'; KIP-48), which librdkafka's SCRAM client does "
    "not send, so a token's id and HMAC cannot be used as 'kafka.sasl.username' and "
    "'kafka.sasl.password'; and format(\"kafka\")'s tokens come from Spark's "
    "spark.kafka.clusters.* configs, which kafkasync does not read. Authenticate with a SCRAM "
    "user ('kafka.sasl.mechanism=SCRAM-SHA-512' with 'kafka.sasl.username' and "
    f"'kafka.sasl.password'), with OAuth ({_OAUTH}) or with Kerberos ({_KERBEROS})."
)
_TRANSLATED_MODULES = ("PlainLoginModule", "ScramLoginModule")


def jaas_credentials(jaas: str) -> dict[str, str]:
    """``sasl.username``/``sasl.password`` from a PLAIN or SCRAM JAAS line.

    Java clients configure SASL/PLAIN and SCRAM through a JAAS line; librdkafka takes the
    same credentials as two settings. Other login modules get an error naming the librdkafka
    settings that replace them."""
    module_match = _JAAS_MODULE.match(jaas)
    module = module_match.group("module") if module_match else None
    if module in _JAAS_MODULE_ERRORS:
        raise JavaClientSettingError(_JAAS_MODULE_ERRORS[module])
    pairs = {m.group("name"): m.group("value") for m in _JAAS_PAIR.finditer(jaas)}
    if module == "ScramLoginModule" and pairs.get("tokenauth", "").strip().lower() == "true":
        raise JavaClientSettingError(_DELEGATION_TOKEN)
    if module not in _TRANSLATED_MODULES or "username" not in pairs or "password" not in pairs:
        raise JavaClientSettingError(
            f"{_JAAS} could not be translated: kafkasync understands "
            "'...PlainLoginModule required username=\"...\" password=\"...\";' and the same "
            "with ScramLoginModule (pairs in any order); set 'kafka.sasl.username' and "
            "'kafka.sasl.password' instead."
        )
    return {"sasl.username": pairs["username"], "sasl.password": pairs["password"]}
