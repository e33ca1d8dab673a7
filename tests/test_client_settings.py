"""Java-client-only settings fail at query start naming the option and the librdkafka setting
to use instead, and never echo a secret value. Pure option parsing: no Kafka needed."""

import pytest

from kafkasync_source.config.java_client_settings import with_shipped_stores_read
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "orders"}
SECRET = "zq-Secret-Val-4471"
"""The value given to every refused setting: it must never appear in a message."""


def refusal(**settings: str) -> str:
    with pytest.raises(KafkaSyncOptionError) as failure:
        parse_options({**BASE, **settings}, streaming=True)
    message = str(failure.value)
    assert SECRET not in message
    return message


@pytest.mark.parametrize(
    "key, equivalents",
    [
        ("ssl.truststore.password", ("kafka.ssl.truststore.location", "kafka.ssl.ca.location", "kafka.ssl.ca.pem")),
        ("ssl.truststore.type", ("kafka.ssl.truststore.location", "kafka.ssl.ca.location")),
        ("ssl.truststore.certificates", ("kafka.ssl.truststore.type=PEM", "kafka.ssl.ca.pem")),
        ("ssl.keystore.type", ("kafka.ssl.keystore.location", "kafka.ssl.key.pem", "kafka.ssl.certificate.pem")),
        ("ssl.enabled.protocols", ("OpenSSL",)),
        ("ssl.keymanager.algorithm", ("OpenSSL",)),
        ("metric.reporters", ("Java classes cannot run in librdkafka",)),
        ("sasl.login.callback.handler.class",
         ("Java classes", "kafka.sasl.oauthbearer.method=oidc", "kafka.sasl.oauthbearer.client.id",
          "kafka.sasl.oauthbearer.client.secret", "kafka.sasl.oauthbearer.token.endpoint.url")),
        ("sasl.client.callback.handler.class", ("Java classes", "kafka.sasl.username")),
        ("sasl.login.class", ("Java classes", "kafka.sasl.kerberos.keytab")),
        ("ssl.engine.factory.class", ("Java classes", "kafka.ssl.key.pem")),
        ("some.future.plugin.classes", ("Java classes cannot run in librdkafka",)),
    ],
)
def test_java_only_setting_names_the_librdkafka_equivalent(key, equivalents):
    message = refusal(**{f"kafka.{key}": SECRET})
    assert f"'kafka.{key}'" in message
    for equivalent in equivalents:
        assert equivalent in message


def test_a_keystore_type_kafkasync_cannot_read_is_refused():
    message = refusal(**{"kafka.ssl.keystore.type": "BCFKS",
                         "kafka.ssl.keystore.location": "/k", "kafka.ssl.keystore.password": SECRET})
    assert "'kafka.ssl.keystore.type'" in message and "JKS, PKCS12" in message


def test_every_java_only_setting_is_named_in_one_error():
    message = refusal(**{"kafka.ssl.truststore.password": SECRET,
                         "kafka.ssl.keystore.type": SECRET,
                         "kafka.ssl.enabled.protocols": SECRET})
    assert message.count("\n- option ") == 3


def test_oauthbearer_jaas_login_module_names_the_oidc_settings():
    jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'clientId="svc" clientSecret="{SECRET}";')
    message = refusal(**{"kafka.sasl.jaas.config": jaas})
    for name in ("kafka.sasl.jaas.config", "kafka.sasl.mechanism=OAUTHBEARER",
                 "kafka.sasl.oauthbearer.method=oidc", "kafka.sasl.oauthbearer.client.id",
                 "kafka.sasl.oauthbearer.client.secret", "kafka.sasl.oauthbearer.token.endpoint.url",
                 "kafka.sasl.oauthbearer.scope"):
        assert name in message


def test_kerberos_jaas_login_module_names_the_kerberos_settings():
    jaas = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
            f'keyTab="/etc/{SECRET}.keytab" principal="svc@EXAMPLE.COM";')
    message = refusal(**{"kafka.sasl.jaas.config": jaas})
    for name in ("kafka.sasl.jaas.config", "kafka.sasl.mechanism=GSSAPI",
                 "kafka.sasl.kerberos.principal", "kafka.sasl.kerberos.keytab",
                 "kafka.sasl.kerberos.service.name"):
        assert name in message
    assert "svc@EXAMPLE.COM" not in message


def test_delegation_token_login_is_refused_with_why_and_what_to_use():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="token-id-77" password="{SECRET}" tokenauth="true";')
    message = refusal(**{"kafka.sasl.jaas.config": jaas, "kafka.sasl.mechanism": "SCRAM-SHA-512"})
    assert "kafka.sasl.jaas.config" in message and "delegation tokens" in message
    assert "tokenauth=true" in message  # why: the SCRAM extension librdkafka does not send
    assert "kafka.sasl.username" in message and "kafka.sasl.oauthbearer.method=oidc" in message
    assert "token-id-77" not in message


def test_scram_jaas_without_tokenauth_is_still_translated():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED '
            f'username="alice" password="{SECRET}" tokenauth="false";')
    config = parse_options({**BASE, "kafka.sasl.jaas.config": jaas}, streaming=True).client_config
    assert (config["sasl.username"], config["sasl.password"]) == ("alice", SECRET)


def test_an_unknown_login_module_is_refused_without_echoing_the_line():
    message = refusal(**{"kafka.sasl.jaas.config": f'{SECRET} required username="a" password="b";'})
    assert "kafka.sasl.jaas.config" in message and "kafka.sasl.username" in message


def test_inline_pem_truststore_certificates_are_librdkafkas_ca_pem():
    """KIP-651: ssl.truststore.type=PEM with the certificates inline (a PEM truststore file is
    read on the driver: tests/test_java_keystores.py)."""
    inline = parse_options({**BASE, "kafka.ssl.truststore.type": "PEM",
                            "kafka.ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----..."},
                           streaming=True)
    assert inline.client_config["ssl.ca.pem"] == "-----BEGIN CERTIFICATE-----..."
    assert not [key for key in inline.client_config if key.startswith("ssl.truststore")]


def test_a_pem_truststore_with_a_password_is_refused_without_echoing_it():
    message = refusal(**{"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
                         "kafka.ssl.truststore.password": SECRET})
    assert "'kafka.ssl.truststore.password'" in message and "PEM truststore has no password" in message


def test_a_store_named_by_a_relative_path_must_be_on_the_driver_too(tmp_path, monkeypatch):
    """A relative path names a file shipped with --files, which the driver's own clients read
    as well: one missing there fails the query at start, not its first task."""
    monkeypatch.chdir(tmp_path)
    message = refusal(**{"kafka.ssl.truststore.location": "truststore.jks", "kafka.ssl.truststore.password": SECRET})
    assert "Option 'kafka.ssl.truststore.location': truststore.jks is neither in this process's working " \
           f"directory ({tmp_path})" in message
    assert "--files" in message


def test_the_clients_of_a_query_without_stores_get_its_settings_unchanged():
    """Every client is created through with_shipped_stores_read (tests/test_java_keystores.py
    for a query with stores)."""
    config = {**parse_options({**BASE, "kafka.sasl.username": "u"}, streaming=True).client_config,
              "fetch.wait.max.ms": 10}
    read = with_shipped_stores_read(config)
    assert read == config and read is not config
