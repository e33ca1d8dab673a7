"""An unreachable cluster fails naming the brokers, what failed and how long it was tried
(librdkafka's own exception only says "Broker transport failure")."""

from __future__ import annotations

import pytest

from kafkasync_source.config.options import Subscription
from kafkasync_source.driver import offset_reader
from kafkasync_source.driver.offset_reader import KafkaSyncConnectionError, OffsetReader


@pytest.fixture(autouse=True)
def short_metadata_timeout(monkeypatch):
    # A refused connection, an unknown host and a SASL mismatch fail at the first attempt on
    # 127.0.0.1: two seconds of retrying report them, with room for a busy machine.
    monkeypatch.setattr(offset_reader, "METADATA_TIMEOUT_S", 2.0)


def failure(config):
    with OffsetReader(config) as reader, pytest.raises(KafkaSyncConnectionError) as raised:
        reader.partitions(Subscription(topics=("orders",)), must_exist=True)
    return str(raised.value)


def test_a_refused_connection_names_the_address_and_the_time_tried():
    message = failure({"bootstrap.servers": "127.0.0.1:1"})
    assert "kafka.bootstrap.servers=127.0.0.1:1 (security.protocol=plaintext) for 2 s" in message
    assert "Connection refused" in message


def test_an_unknown_host_says_it_did_not_resolve():
    message = failure({"bootstrap.servers": "no-such-host.invalid:9092"})
    assert "no-such-host.invalid:9092" in message and "resolve" in message


def test_sasl_against_a_plaintext_listener_says_so_without_the_password(kafka_cluster):
    message = failure({"bootstrap.servers": kafka_cluster.bootstrap_servers,
                       "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                       "sasl.username": "svc", "sasl.password": "pw-9931-x"})
    assert "security.protocol=SASL_PLAINTEXT" in message and "SASL" in message.split("reported:")[1]
    assert "pw-9931-x" not in message


@pytest.fixture(params=["server-certificate", "client-certificate-required"])
def tls_listener(tmp_path, request):
    """A TLS listener on 127.0.0.1 serving a certificate signed by the test's CA, and with
    ``client-certificate-required`` asking for the client's (which it has none of): the TLS
    handshake, which comes before any Kafka request, is all a client gets from it."""
    import socket
    import ssl
    import threading

    from kafkasync_dev.testing.certificates import make_certificates

    certificates = make_certificates(str(tmp_path))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates.keystore)
    if request.param == "client-certificate-required":
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certificates.ca)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stopping = threading.Event()

    def serve():
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            try:
                with context.wrap_socket(connection, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass  # the client refused our certificate, as it should

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}", certificates, request.param
    stopping.set()
    thread.join(5)
    server.close()


def test_a_broker_certificate_the_client_does_not_trust_fails_at_once_naming_broker_and_reason(
        monkeypatch, tls_listener):
    import re

    monkeypatch.setattr(offset_reader, "METADATA_TIMEOUT_S", 30.0)
    address, certificates, listener = tls_listener
    trusted_ca = certificates.other_ca if listener == "server-certificate" else certificates.ca
    message = failure({"bootstrap.servers": address, "security.protocol": "SSL", "ssl.ca.location": trusted_ca})
    # "At once": the reader stopped at the first such failure, before its metadata timeout
    # (the time it says it tried), however long a busy machine took to get there (under 5 s of
    # the test's wall clock, asserted before, was as much the machine's speed).
    tried, = re.findall(rf"kafka.bootstrap.servers={re.escape(address)} \(security.protocol=SSL\) for (\d+) s", message)
    assert int(tried) < 30, message
    assert "certificate" in message and "retrying cannot cure" in message
    reason = "SSL handshake failed" if listener == "server-certificate" else "alert certificate required"
    assert f"ssl://{address}/bootstrap: " in message and reason in message, message
