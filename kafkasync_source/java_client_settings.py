"""Java-client settings that librdkafka does not have, refused at query start naming the
librdkafka setting to use instead; and the translation of Java's ``sasl.jaas.config``.

A query moved from ``format("kafka")`` brings the Java consumer's security settings along.
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

import re

_CA = "'kafka.ssl.ca.location' (a PEM file or directory) or 'kafka.ssl.ca.pem' (PEM text)"
_TRUSTSTORE = (
    "librdkafka (OpenSSL) has no Java truststore; give the CA certificate(s) with " + _CA
    + "; export them from a JKS/PKCS#12 truststore with 'keytool -exportcert -rfc'"
)
_PEM_CLIENT_KEY = (
    "'kafka.ssl.key.location' + 'kafka.ssl.certificate.location' (PEM files) or "
    "'kafka.ssl.key.pem' + 'kafka.ssl.certificate.pem' (PEM text)"
)
_KEYSTORE_TYPE = (
    "librdkafka's 'kafka.ssl.keystore.location' reads PKCS#12 only; convert a JKS keystore "
    "('keytool -importkeystore -deststoretype PKCS12') or give the key and certificate as "
    + _PEM_CLIENT_KEY
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
    "ssl.truststore.location": _TRUSTSTORE,
    "ssl.truststore.password": _TRUSTSTORE,
    "ssl.truststore.type": _TRUSTSTORE,
    "ssl.truststore.certificates": f"{_TRUSTSTORE}; 'kafka.ssl.ca.pem' takes the same PEM text",
    "ssl.keystore.type": _KEYSTORE_TYPE,
    "ssl.keystore.key": "use 'kafka.ssl.key.pem' (same PEM private key; 'kafka.ssl.key.password' "
                        "if it is encrypted)",
    "ssl.keystore.certificate.chain": "use 'kafka.ssl.certificate.pem' (PEM certificate)",
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
prefix, as Spark users write them after ``kafka.``)."""

_PKCS12 = "PKCS12"
"""The one ``ssl.keystore.type`` librdkafka reads: it is dropped, not refused."""


class JavaClientSettingError(ValueError):
    """A Java-client-only setting; the message names it and its librdkafka equivalent."""


_PEM_TRUSTSTORE = {"ssl.truststore.location": "ssl.ca.location", "ssl.truststore.certificates": "ssl.ca.pem"}
"""A PEM truststore (KIP-651: ``ssl.truststore.type=PEM`` with a PEM file, or the certificates
inline) is what librdkafka's CA settings take."""


def _translate_pem_truststore(config: dict[str, str]) -> None:
    """``ssl.truststore.type=PEM`` as a format("kafka") user writes it becomes librdkafka's
    ``ssl.ca.location`` / ``ssl.ca.pem``. Other truststore types stay, to be refused naming
    the PEM settings (librdkafka reads no JKS or PKCS#12 truststore)."""
    if config.get("ssl.truststore.type", "").strip().upper() != "PEM":
        return
    if "ssl.truststore.password" in config:
        raise JavaClientSettingError(
            "Option 'kafka.ssl.truststore.password': a PEM truststore has no password (the Java "
            "client refuses one too, KIP-651); remove it.")
    del config["ssl.truststore.type"]
    for java, librdkafka in _PEM_TRUSTSTORE.items():
        if java not in config:
            continue
        if librdkafka in config:
            raise JavaClientSettingError(
                f"Options 'kafka.{java}' and 'kafka.{librdkafka}' both name the trusted CA "
                "certificates; keep one.")
        config[librdkafka] = config.pop(java)


def drop_or_refuse_java_settings(config: dict[str, str]) -> None:
    """Refuse every Java-only setting of ``config`` in one error (one line per key), so a
    migrated query is fixed in one round. ``ssl.keystore.type=PKCS12`` is dropped: it says
    what librdkafka's keystore already is; a PEM truststore is translated."""
    if config.get("ssl.keystore.type", "").strip().upper() == _PKCS12:
        del config["ssl.keystore.type"]
    _translate_pem_truststore(config)
    refused = sorted(
        (key, JAVA_ONLY_SETTINGS.get(key, f"{_JAVA_CLASSES}; there is no equivalent"))
        for key in config
        if key in JAVA_ONLY_SETTINGS or key.endswith((".class", ".classes"))
    )
    if refused:
        raise JavaClientSettingError(
            "Java-client setting(s) that librdkafka does not have:\n"
            + "\n".join(f"- option 'kafka.{key}': {why}." for key, why in refused)
        )


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
