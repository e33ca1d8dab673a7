"""A certificate authority and a broker certificate for 127.0.0.1, made for a test with the
``openssl`` command line (no Python dependency): what a TLS listener and its clients need.

``Certificates.keystore`` is the broker's PEM keystore (private key, then its certificate),
which Kafka reads with ``ssl.keystore.type=PEM`` (KIP-651); ``ca`` is the CA certificate a
client trusts; ``other_ca`` a CA that did not sign the broker's certificate, for a client that
must refuse the broker; ``client_keystore`` a client's PEM key and certificate signed by ``ca``,
for mutual TLS.

:func:`make_java_stores` writes the same as the Java stores a ``format("kafka")`` user has:
JKS and PKCS12 truststores made by the JDK's ``keytool``, a client keystore exported by
``openssl pkcs12``, and the JDK's JKS and PKCS12 copies of it (the JKS one with a key password
of its own).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Certificates:
    ca: str
    other_ca: str
    keystore: str
    client_keystore: str
    client_certificate: str


@dataclass(frozen=True)
class JavaStores:
    """Java stores of :class:`Certificates`, each opened with ``password``; the JKS keystore's key
    with ``key_password``."""

    password: str
    key_password: str
    truststore_jks: str
    truststore_pkcs12: str
    keystore_pkcs12: str
    """Exported by ``openssl pkcs12 -export`` (the client key, its certificate and the CA)."""
    keystore_jks: str
    keystore_pkcs12_by_keytool: str


def _openssl(*arguments: str, cwd: str) -> None:
    result = subprocess.run(["openssl", *arguments], cwd=cwd, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {arguments[0]} failed: {result.stderr[-1000:]}")


def _keytool(*arguments: str, cwd: str) -> None:
    result = subprocess.run(["keytool", *arguments], cwd=cwd, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(f"keytool {arguments[0]} failed: {(result.stdout + result.stderr)[-1000:]}")


def _concatenate(directory: str, target: str, *parts: str) -> str:
    path = os.path.join(directory, target)
    with open(path, "w") as out:
        for part in parts:
            with open(os.path.join(directory, part)) as handle:
                out.write(handle.read())
    return path


def make_certificates(directory: str) -> Certificates:
    """A CA, a second CA, a broker certificate for IP 127.0.0.1 and DNS localhost and a client
    certificate, both signed by the first, valid for two days, written into ``directory``."""
    for name in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=kafkasync-test-{name}", cwd=directory)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=localhost", cwd=directory)
    with open(os.path.join(directory, "san.ext"), "w") as handle:
        handle.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.crt", "-days", "2", "-extfile", "san.ext", cwd=directory)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
             "-subj", "/CN=kafkasync-test-client", cwd=directory)
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "client.crt", "-days", "2", cwd=directory)
    return Certificates(ca=os.path.join(directory, "ca.pem"), other_ca=os.path.join(directory, "other-ca.pem"),
                        keystore=_concatenate(directory, "broker-keystore.pem", "broker.key", "broker.crt"),
                        client_keystore=_concatenate(directory, "client-keystore.pem", "client.key", "client.crt"),
                        client_certificate=os.path.join(directory, "client.crt"))


def make_java_stores(directory: str, password: str = "store-pass-8812", key_password: str = "key-pass-3307"
                     ) -> JavaStores:
    """The Java stores of the certificates :func:`make_certificates` wrote into ``directory``."""
    for store_type, name in (("JKS", "truststore.jks"), ("PKCS12", "truststore.p12")):
        _keytool("-importcert", "-noprompt", "-alias", "kafkasync-test-ca", "-file", "ca.pem", "-keystore", name,
                 "-storetype", store_type, "-storepass", password, cwd=directory)
    _openssl("pkcs12", "-export", "-in", "client.crt", "-inkey", "client.key", "-certfile", "ca.pem",
             "-name", "client", "-out", "client.p12", "-passout", f"pass:{password}", cwd=directory)
    _keytool("-importkeystore", "-noprompt", "-srckeystore", "client.p12", "-srcstoretype", "PKCS12",
             "-srcstorepass", password, "-destkeystore", "client.jks", "-deststoretype", "JKS",
             "-deststorepass", password, "-srcalias", "client", "-destalias", "client",
             "-destkeypass", key_password, cwd=directory)
    _keytool("-importkeystore", "-noprompt", "-srckeystore", "client.jks", "-srcstoretype", "JKS",
             "-srcstorepass", password, "-srckeypass", key_password, "-destkeystore", "client-keytool.p12",
             "-deststoretype", "PKCS12", "-deststorepass", password, "-srcalias", "client", cwd=directory)
    return JavaStores(
        password=password, key_password=key_password,
        **{field: os.path.join(directory, name) for field, name in (
            ("truststore_jks", "truststore.jks"), ("truststore_pkcs12", "truststore.p12"),
            ("keystore_pkcs12", "client.p12"), ("keystore_jks", "client.jks"),
            ("keystore_pkcs12_by_keytool", "client-keytool.p12"))},
    )
