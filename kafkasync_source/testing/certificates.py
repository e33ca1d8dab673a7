"""A certificate authority and a broker certificate for 127.0.0.1, made for a test with the
``openssl`` command line (no Python dependency): what a TLS listener and its clients need.

``Certificates.keystore`` is the broker's PEM keystore (private key, then its certificate),
which Kafka reads with ``ssl.keystore.type=PEM`` (KIP-651); ``ca`` is the CA certificate a
client trusts; ``other_ca`` a CA that did not sign the broker's certificate, for a client that
must refuse the broker.
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


def _openssl(*arguments: str, cwd: str) -> None:
    result = subprocess.run(["openssl", *arguments], cwd=cwd, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {arguments[0]} failed: {result.stderr[-1000:]}")


def make_certificates(directory: str) -> Certificates:
    """A CA, a second CA, and a broker certificate for IP 127.0.0.1 and DNS localhost signed by
    the first, valid for two days, written into ``directory``."""
    for name in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=kafkasync-test-{name}", cwd=directory)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=localhost", cwd=directory)
    with open(os.path.join(directory, "san.ext"), "w") as handle:
        handle.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.crt", "-days", "2", "-extfile", "san.ext", cwd=directory)
    keystore = os.path.join(directory, "broker-keystore.pem")
    with open(keystore, "w") as out:
        for part in ("broker.key", "broker.crt"):
            with open(os.path.join(directory, part)) as handle:
                out.write(handle.read())
    return Certificates(ca=os.path.join(directory, "ca.pem"), other_ca=os.path.join(directory, "other-ca.pem"),
                        keystore=keystore)
