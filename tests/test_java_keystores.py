"""Java truststores and keystores as a format("kafka") user writes them become librdkafka's PEM
settings (java_keystores.py, java_client_settings.py). Real stores, made by the JDK's keytool and
openssl (kafkasync_dev/testing/certificates.py); pure option parsing, no Kafka. The real
broker accepts what comes out: integration/test_tls.py."""

from __future__ import annotations

import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pyspark import SparkFiles

from kafkasync_dev.testing.certificates import make_certificates, make_java_stores
from kafkasync_source.config import java_keystores
from kafkasync_source.config.client_config import redact, scrub
from kafkasync_source.config.client_log import with_python_logging
from kafkasync_source.config.java_client_settings import JavaClientSettingError, with_shipped_stores_read
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options

BASE = {"kafka.bootstrap.servers": "localhost:9093", "subscribe": "orders", "kafka.security.protocol": "SSL"}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("stores"))
    return make_certificates(directory), make_java_stores(directory)


def client_config(**options: str) -> dict[str, str]:
    return parse_options({**BASE, **options}, streaming=True).client_config


def certificates_of(pem: str) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem.encode())


def refusal(**options: str) -> str:
    with pytest.raises(KafkaSyncOptionError) as failure:
        parse_options({**BASE, **options}, streaming=True)
    return str(failure.value)


@pytest.mark.parametrize("form, declared_type", [("jks", "JKS"), ("pkcs12", "PKCS12"), ("jks", None),
                                                  ("pkcs12", "JKS")])
def test_a_java_truststore_becomes_the_ca_certificates(stores, form, declared_type):
    """No type is JKS, the Java client's default; a PKCS12 file declared JKS is read all the same
    (the JDK's keystore.type.compat does so too)."""
    certificates, java = stores
    options = {"kafka.ssl.truststore.location": getattr(java, f"truststore_{form}"),
               "kafka.ssl.truststore.password": java.password}
    if declared_type:
        options["kafka.ssl.truststore.type"] = declared_type
    config = client_config(**options)
    with open(certificates.ca, "rb") as handle:
        assert certificates_of(config["ssl.ca.pem"]) == [x509.load_pem_x509_certificate(handle.read())]
    assert not [key for key in config if key.startswith("ssl.truststore")]


def test_a_pem_truststore_file_becomes_the_ca_certificates_too(stores):
    certificates, _ = stores
    config = client_config(**{"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": certificates.ca})
    with open(certificates.ca) as handle:
        assert config["ssl.ca.pem"] == handle.read()
    assert "ssl.ca.location" not in config


@pytest.mark.parametrize("form", ["keystore_pkcs12", "keystore_jks", "keystore_pkcs12_by_keytool", "pem"])
def test_a_java_keystore_becomes_the_client_certificate_chain_and_key(stores, form):
    certificates, java = stores
    if form == "pem":
        options = {"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": certificates.client_keystore}
    else:
        options = {"kafka.ssl.keystore.location": getattr(java, form), "kafka.ssl.keystore.password": java.password,
                   "kafka.ssl.key.password": java.key_password if form == "keystore_jks" else java.password}
    config = client_config(**options)
    chain = certificates_of(config["ssl.certificate.pem"])
    with open(certificates.client_certificate, "rb") as handle:
        assert chain[0] == x509.load_pem_x509_certificate(handle.read())
    key = load_pem_private_key(config["ssl.key.pem"].encode(), password=None)
    assert key.public_key() == chain[0].public_key()
    assert not [k for k in config if k.startswith("ssl.keystore") or k == "ssl.key.password"]


def test_the_key_never_shows_where_kafkasync_shows_settings(stores):
    _, java = stores
    config = client_config(**{"kafka.ssl.keystore.location": java.keystore_pkcs12,
                              "kafka.ssl.keystore.password": java.password})
    key = config["ssl.key.pem"]
    assert redact(config)["ssl.key.pem"] == "***"
    assert key not in scrub(f"error with {key} in it", config)
    assert key not in repr(parse_options({**BASE, "kafka.ssl.keystore.location": java.keystore_pkcs12,
                                          "kafka.ssl.keystore.password": java.password}, streaming=True))


@pytest.mark.parametrize("form", ["truststore_jks", "truststore_pkcs12", "keystore_jks", "keystore_pkcs12"])
def test_a_wrong_password_names_the_option_and_file_but_not_the_password(stores, form):
    _, java = stores
    store = form.split("_")[0]
    message = refusal(**{f"kafka.ssl.{store}.location": getattr(java, form),
                         f"kafka.ssl.{store}.password": "wrong-pass-5521"})
    assert f"'kafka.ssl.{store}.location'" in message and getattr(java, form) in message
    assert f"'kafka.ssl.{store}.password'" in message
    assert "wrong-pass-5521" not in message and java.password not in message


def test_a_jks_key_password_that_does_not_open_the_key_is_named(stores):
    _, java = stores
    message = refusal(**{"kafka.ssl.keystore.location": java.keystore_jks, "kafka.ssl.keystore.password": java.password,
                         "kafka.ssl.key.password": "not-the-key-pass"})
    assert "'kafka.ssl.key.password'" in message and "not-the-key-pass" not in message


def test_a_missing_store_says_it_is_read_on_the_driver(tmp_path):
    message = refusal(**{"kafka.ssl.truststore.location": str(tmp_path / "absent.jks"),
                         "kafka.ssl.truststore.password": "x"})
    assert "'kafka.ssl.truststore.location'" in message and "on the driver" in message


def test_a_truststore_used_as_keystore_says_it_holds_no_key(stores):
    _, java = stores
    message = refusal(**{"kafka.ssl.keystore.location": java.truststore_pkcs12,
                         "kafka.ssl.keystore.password": java.password})
    assert "holds no private key" in message and "'kafka.ssl.truststore.location'" in message


@pytest.mark.parametrize("clash", [{"kafka.ssl.ca.location": "/etc/ca.pem"}, {"kafka.ssl.ca.pem": "x"}])
def test_a_truststore_beside_librdkafkas_ca_setting_is_refused(stores, clash):
    _, java = stores
    message = refusal(**{"kafka.ssl.truststore.location": java.truststore_jks,
                         "kafka.ssl.truststore.password": java.password}, **clash)
    assert "'kafka.ssl.truststore.location'" in message and "keep one" in message


def test_a_keystore_beside_librdkafkas_key_setting_is_refused(stores):
    _, java = stores
    message = refusal(**{"kafka.ssl.keystore.location": java.keystore_pkcs12,
                         "kafka.ssl.keystore.password": java.password, "kafka.ssl.key.location": "/k.pem"})
    assert "'kafka.ssl.keystore.location'" in message and "'kafka.ssl.key.location'" in message


def test_an_inline_pem_keystore_is_librdkafkas_pem_settings():
    config = client_config(**{"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY--",
                              "kafka.ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE--"})
    assert (config["ssl.key.pem"], config["ssl.certificate.pem"]) == ("-----BEGIN PRIVATE KEY--",
                                                                      "-----BEGIN CERTIFICATE--")
    assert "needs 'kafka.ssl.keystore.certificate.chain'" in refusal(**{"kafka.ssl.keystore.key": "k"})


def test_an_unknown_store_type_is_named():
    message = refusal(**{"kafka.ssl.truststore.type": "BCFKS", "kafka.ssl.truststore.location": "/t.bcfks"})
    assert "'kafka.ssl.truststore.type'" in message and "JKS, PKCS12" in message


def test_a_jks_keystore_listing_its_ca_before_the_key_is_read(stores, tmp_path):
    """Confluent's keystores hold the CA as a trustedCertEntry 'CARoot' beside the client's key,
    which has a key password of its own here; keytool lists entries in alias order, so the CA
    comes first, and its alias was taken for the key's."""
    certificates, java = stores
    keystore = str(tmp_path / "client-with-caroot.jks")
    shutil.copy(java.keystore_jks, keystore)
    for command in (["-importcert", "-noprompt", "-alias", "CARoot", "-file", certificates.ca],
                    ["-J-Duser.language=en", "-list", "-v"]):
        listed = subprocess.run(["keytool", *command, "-keystore", keystore, "-storepass", java.password],
                                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=True)
    assert re.findall(r"^(?:Alias name|Entry type): (.*)$", listed.stdout, re.M) == [
        "caroot", "trustedCertEntry", "client", "PrivateKeyEntry"]
    config = client_config(**{"kafka.ssl.keystore.location": keystore, "kafka.ssl.keystore.password": java.password,
                              "kafka.ssl.key.password": java.key_password})
    chain = certificates_of(config["ssl.certificate.pem"])
    with open(certificates.client_certificate, "rb") as handle:
        assert chain[0] == x509.load_pem_x509_certificate(handle.read())
    assert load_pem_private_key(config["ssl.key.pem"].encode(), password=None).public_key() == chain[0].public_key()


def test_a_keytool_that_hangs_is_stopped_naming_the_option_and_file(stores, tmp_path, monkeypatch):
    _, java = stores
    keystore = str(tmp_path / "unread.jks")  # a path of its own: no earlier read is cached
    shutil.copy(java.keystore_jks, keystore)
    hanging = tmp_path / "keytool"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    monkeypatch.setattr(java_keystores, "_keytool", lambda option, location: str(hanging))
    monkeypatch.setattr(java_keystores, "_KEYTOOL_TIMEOUT_S", 1)
    message = refusal(**{"kafka.ssl.keystore.location": keystore, "kafka.ssl.keystore.password": java.password,
                         "kafka.ssl.key.password": java.key_password})
    assert f"Option 'kafka.ssl.keystore.location': keytool did not finish reading {keystore} within 1 s" in message
    assert java.password not in message and java.key_password not in message


def shipped(java, directory: Path, form: str) -> Path:
    """The ``form`` (jks, pkcs12) stores as ``--files`` ships them: copies under their bare names
    in ``directory``."""
    directory.mkdir()
    for store in ("truststore", "keystore"):
        shutil.copy(getattr(java, f"{store}_{form}"), directory / f"{store}.{form}")
    return directory


def shipped_options(java, form: str) -> dict[str, str]:
    return {"kafka.ssl.truststore.location": f"truststore.{form}", "kafka.ssl.truststore.password": java.password,
            "kafka.ssl.keystore.location": f"keystore.{form}", "kafka.ssl.keystore.password": java.password,
            "kafka.ssl.key.password": java.key_password if form == "jks" else java.password}


def test_stores_shipped_by_relative_path_are_read_where_each_client_is_created(stores, tmp_path, monkeypatch):
    """format("kafka") users ship their stores with --files and name them by their bare name,
    which the Java client opens on each executor: the key then stays out of the tasks."""
    certificates, java = stores
    monkeypatch.chdir(shipped(java, tmp_path / "driver", "jks"))
    config = client_config(**shipped_options(java, "jks"))
    assert {key: config[key] for key in config if key.startswith("ssl.")} == {
        key[len("kafka."):]: value for key, value in shipped_options(java, "jks").items()}
    assert b"PRIVATE KEY" not in pickle.dumps(config) and b"CERTIFICATE" not in pickle.dumps(config)

    monkeypatch.chdir(shipped(java, tmp_path / "executor", "jks"))  # another process's copies
    keytool_runs = []
    run_keytool = java_keystores._run_keytool

    def counted_keytool_run(*arguments):
        keytool_runs.append(arguments)
        return run_keytool(*arguments)

    monkeypatch.setattr(java_keystores, "_run_keytool", counted_keytool_run)
    read = with_shipped_stores_read({**config, "group.id": "g"})
    runs = len(keytool_runs)
    assert runs > 0  # read here, in the "executor"'s directory
    assert with_shipped_stores_read({**config, "group.id": "g"}) == read and len(keytool_runs) == runs  # cached
    assert not [key for key in read if key.startswith(("ssl.truststore", "ssl.keystore")) or key == "ssl.key.password"]
    with open(certificates.ca, "rb") as handle:
        assert certificates_of(read["ssl.ca.pem"]) == [x509.load_pem_x509_certificate(handle.read())]
    chain = certificates_of(read["ssl.certificate.pem"])
    assert load_pem_private_key(read["ssl.key.pem"].encode(), password=None).public_key() == chain[0].public_key()
    assert read["group.id"] == "g"


def test_a_shipped_store_is_found_in_sparks_files_directory_or_named_as_missing(stores, tmp_path, monkeypatch):
    """On the driver and in local mode, Spark keeps --files in a temporary directory of its own,
    not the working directory."""
    _, java = stores
    monkeypatch.chdir(shipped(java, tmp_path / "driver", "pkcs12"))
    config = client_config(**shipped_options(java, "pkcs12"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(SparkFiles, "_is_running_on_worker", True)
    monkeypatch.setattr(SparkFiles, "_root_directory", str(shipped(java, tmp_path / "userFiles", "pkcs12")))
    assert "ssl.key.pem" in with_shipped_stores_read(config)

    monkeypatch.setattr(SparkFiles, "_root_directory", str(tmp_path / "nothing-shipped"))
    with pytest.raises(JavaClientSettingError) as missing:
        with_shipped_stores_read(config)
    message = str(missing.value)
    assert message.startswith("Option 'kafka.ssl.truststore.location': truststore.pkcs12 is neither in this process's "
                              f"working directory ({tmp_path}) nor in Spark's files directory")
    assert "--files" in message and java.password not in message


def test_every_client_kafkasync_creates_reads_a_shipped_store_itself(stores, tmp_path, monkeypatch):
    """The driver's and the executors' clients are all configured through with_python_logging:
    a store named by a relative path becomes librdkafka's PEM settings there."""
    _, java = stores
    monkeypatch.chdir(shipped(java, tmp_path / "worker", "pkcs12"))
    configured = with_python_logging(client_config(**shipped_options(java, "pkcs12")))
    assert "ssl.truststore.location" not in configured and "ssl.keystore.location" not in configured
    assert "BEGIN CERTIFICATE" in configured["ssl.ca.pem"] and "PRIVATE KEY" in configured["ssl.key.pem"]
