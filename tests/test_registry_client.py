"""The registry as the decoders see it (formats/registry.py), against the client double
(kafkasync_dev/testing/registry_double.py), which answers as confluent-kafka's client does for
Confluent's and Apicurio's registries (integration/test_registry_broker.py confirms each answer
against Apicurio). No registry process, no Kafka.

* An id answered unknown is asked again after UNKNOWN_RETRY_S (it was remembered for the
  process's life: a replica's transient 404 lost the id's records for good).
* Payloads that start with byte 0 and name ids nobody registered cost a bounded number of
  requests, not one per record; ids the registry knows are never held back.
* Known and unknown ids are kept boundedly; a writer whose references do not resolve is
  remembered failing, not fetched again per record.
* A registry that is down fails naming the id and the URL, never its credentials, and is asked
  again at the next record.
* A writer id that is no version of the reader's subject is warned about once.
* The reader schema: the subject's latest (asked afresh), or the version named by
  ``<part>.subject.version``; a pin carried from ``load()`` is taken without asking.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaReference

from kafkasync_dev.testing.registry_double import RegistryDouble, avro_schema, serving
from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.options import parse_options
from kafkasync_source.formats import registry as registry_module
from kafkasync_source.formats.options import ReaderPin
from kafkasync_source.formats.registry import (
    UNKNOWN_ANSWERS_BURST,
    UNKNOWN_ANSWERS_PER_S,
    UNKNOWN_RETRY_S,
    KafkaSyncFormatError,
    RegistrySettings,
    UnknownSchema,
)

URL = "http://127.0.0.1:1/apis/ccompat/v7"
SECRET_URL = "http://svc:url-pw-7731@127.0.0.1:1/apis/ccompat/v7"
V1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                              {"name": "amount", "type": "double"}]})
V2 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                              {"name": "price", "type": "double", "default": 0.0}]})


class Clock:
    """Seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def double():
    return RegistryDouble()


@pytest.fixture
def clock():
    return Clock()


def settings(url: str = URL, **extra: str) -> RegistrySettings:
    return RegistrySettings(url, tuple(sorted(extra.items())))


def test_an_id_a_lagging_replica_did_not_know_is_asked_again_after_the_retry_time(double, clock):
    with serving(double, settings(), clock) as known:
        double.lagging = True
        schema_id = double.register_schema("orders-value", avro_schema(V1))
        with pytest.raises(UnknownSchema, match=f"has no schema id {schema_id}"):
            known.schema(schema_id)
        double.catch_up()
        # Within the retry time the answer stands, without a request per record.
        for _ in range(100):
            with pytest.raises(UnknownSchema):
                known.schema(schema_id)
        assert double.calls["get_schema"] == 1
        clock.now += UNKNOWN_RETRY_S
        assert known.schema(schema_id).schema_str == V1
        assert double.calls["get_schema"] == 2


def test_unframed_payloads_naming_ids_nobody_registered_cost_a_bounded_number_of_requests(double, clock):
    """10,000 payloads that start with byte 0 and four random bytes: each names an id never met.
    The registry is asked while it has not answered 'unknown' too often, then not at all until
    the budget refills at one a second; an id not asked is unknown for now."""
    with serving(double, settings(), clock) as known:
        reasons = set()
        for schema_id in range(10_000, 20_000):
            with pytest.raises(UnknownSchema) as unknown:
                known.schema(schema_id)
            reasons.add("not asked" if "was not asked" in str(unknown.value) else "asked")
        assert double.calls["get_schema"] == UNKNOWN_ANSWERS_BURST
        assert reasons == {"asked", "not asked"}
        clock.now += 5
        for schema_id in range(20_000, 20_100):
            with pytest.raises(UnknownSchema):
                known.schema(schema_id)
        assert double.calls["get_schema"] == UNKNOWN_ANSWERS_BURST + 5


def test_unknown_ids_that_recur_cost_the_same_bounded_requests_once_their_answer_expires(double, clock):
    """The same stray payloads again and again (a topic whose unframed values start with byte 0
    and name 100 ids in turn, each met every second): once an id's 'unknown' is older than
    UNKNOWN_RETRY_S, asking it again is an ask like any other, within the budget. Before, an
    expired answer was asked again outside it: N such ids cost N requests every 30 s (10,000 ids:
    333 a second per process), where the docs promise about one a second."""
    strays = range(10_000, 10_100)
    with serving(double, settings(), clock) as known:
        seconds = 600
        for _ in range(seconds):
            clock.now += 1
            for schema_id in strays:
                try:
                    known.schema(schema_id)
                except UnknownSchema:
                    continue
                raise AssertionError(f"schema id {schema_id} is known")
        assert double.calls["get_schema"] <= UNKNOWN_ANSWERS_BURST + seconds * UNKNOWN_ANSWERS_PER_S


def test_ids_the_registry_knows_spend_nothing_of_the_budget_for_unknown_ones(double, clock):
    with serving(double, settings(), clock) as known:
        ids = [double.register_schema(f"s{i}-value", avro_schema(V1.replace("Order", f"Order{i}")))
               for i in range(3 * UNKNOWN_ANSWERS_BURST)]
        assert [json.loads(known.schema(schema_id).schema_str)["name"] for schema_id in ids] == [
            f"Order{i}" for i in range(len(ids))]
        for schema_id in range(900, 900 + UNKNOWN_ANSWERS_BURST):
            with pytest.raises(UnknownSchema, match="has no schema id"):
                known.schema(schema_id)


def test_known_and_unknown_ids_are_kept_boundedly_least_recently_used_first_out(double, clock, monkeypatch):
    monkeypatch.setattr(registry_module, "KNOWN_CAPACITY", 4)
    monkeypatch.setattr(registry_module, "UNKNOWN_CAPACITY", 3)
    with serving(double, settings(), clock) as known:
        ids = [double.register_schema(f"s{i}-value", avro_schema(V1.replace("Order", f"Order{i}"))) for i in range(6)]
        for schema_id in ids:
            known.schema(schema_id)
        known.schema(ids[2])  # used again: kept
        known.schema(ids[5])
        assert len(known._schemas) == 4 and double.calls["get_schema"] == 6
        known.schema(ids[2])
        assert double.calls["get_schema"] == 6
        known.schema(ids[0])  # dropped first: fetched again
        assert double.calls["get_schema"] == 7
        for schema_id in range(500, 510):
            with pytest.raises(UnknownSchema):
                known.schema(schema_id)
        assert len(known._failing) == 3


def test_a_writer_whose_reference_does_not_resolve_is_remembered_failing_not_fetched_per_record(double, clock):
    envelope = json.dumps({"type": "record", "name": "E", "fields": [{"name": "row", "type": "shop.Row"}]})
    with serving(double, settings(SECRET_URL), clock) as known:
        schema_id = double.register_schema("e-value", avro_schema(envelope, (SchemaReference("shop.Row", "shop.Row", 3),)))
        for _ in range(50):
            with pytest.raises(KafkaSyncFormatError, match=f"schema id {schema_id} references subject 'shop.Row' "
                                                           "version 3, which the registry at "
                                                           f"{URL} does not have"):
                known.schema(schema_id)
        assert (double.calls["get_schema"], double.calls["get_version"]) == (1, 1)
        clock.now += UNKNOWN_RETRY_S
        with pytest.raises(KafkaSyncFormatError):
            known.schema(schema_id)
        assert (double.calls["get_schema"], double.calls["get_version"]) == (2, 2)


def test_a_registry_that_is_down_fails_naming_the_id_and_the_url_and_is_asked_again_next_time(double, clock):
    with serving(double, settings(SECRET_URL, **{"basic.auth.user.info": "svc:auth-pw-8812"}), clock) as known:
        schema_id = double.register_schema("orders-value", avro_schema(V1))
        double.down = True
        with pytest.raises(KafkaSyncFormatError) as failure:
            known.schema(schema_id)
        message = str(failure.value)
        assert message == (f"kafkasync: cannot fetch schema id {schema_id} from the registry at {URL}: "
                           "ConnectError: [Errno 111] Connection refused")
        double.down = False
        assert known.schema(schema_id).schema_str == V1
        assert double.calls["get_schema"] == 2


def test_a_writer_id_of_no_version_of_the_readers_subject_is_warned_about_once(double, clock, caplog):
    """Raw Avro whose first byte is 0 reads as framed: its next four bytes name some schema.
    The registry cannot tell; what it can tell is that the id belongs to another subject."""
    with serving(double, settings(), clock) as known:
        reader = double.register_schema("orders-value", avro_schema(V1))
        own = double.register_schema("orders-value", avro_schema(V2))
        foreign = double.register_schema("payments-value", avro_schema(V1.replace("Order", "Payment")))
        known.reading("orders-value")
        with caplog.at_level(logging.WARNING, logger="kafkasync_source.formats.registry"):
            for _ in range(3):
                for schema_id in (reader, own, foreign):
                    known.schema(schema_id)
            registry_module._Lru.pop(known._schemas, (foreign, None))  # dropped from the cache, fetched again
            known.schema(foreign)
        warnings = [r.getMessage() for r in caplog.records]
        assert warnings == [
            f"kafkasync: schema id {foreign} (registered as 'payments-value' version 1) is no version of the "
            "subject records are read as ('orders-value'); records framed with it are read with that schema. If "
            "the topic holds payloads without Confluent's framing, one that starts with byte 0 is read with "
            "whatever schema its next 4 bytes name (docs/formats.md, 'Schemas by id')."]


# -- the reader schema ------------------------------------------------------------------------------

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders", "value.format": "avro-confluent",
        "schema.registry.url": URL, "value.decode": "true"}


def test_the_reader_is_the_subjects_latest_asked_afresh_or_the_version_named(double, clock):
    with serving(double, settings(), clock):
        v1 = double.register_schema("orders-value", avro_schema(V1))
        assert parse_options(BASE, streaming=True).value_format.pin == ReaderPin("orders-value", 1, v1)
        v2 = double.register_schema("orders-value", avro_schema(V2))
        assert parse_options(BASE, streaming=True).value_format.pin == ReaderPin("orders-value", 2, v2)
        chosen = parse_options({**BASE, "value.subject.version": "1"}, streaming=True).value_format
        assert (chosen.pin, chosen.subject_version) == (ReaderPin("orders-value", 1, v1), 1)
        assert parse_options({**BASE, "value.subject.version": "LATEST"}, streaming=True).value_format.pin.version == 2
        double.delete_version("orders-value", 1)
        with pytest.raises(KafkaSyncOptionError, match=r"Option 'value.subject.version=1': the Schema Registry at "
                                                       rf"{URL} has no version 1 of subject 'orders-value' \(deleted"):
            parse_options({**BASE, "value.subject.version": "1"}, streaming=True)


def test_a_pin_carried_from_load_is_taken_as_it_is_without_asking_the_registry(double, clock):
    with serving(double, settings(), clock):
        double.register_schema("orders-value", avro_schema(V1))
        v2 = double.register_schema("orders-value", avro_schema(V2))
        carried = ReaderPin("orders-value", 1, 1)
        before = sum(double.calls.values())
        options = parse_options(BASE, streaming=True, reader_pins={"value": carried})
        assert options.value_format.pin == carried and v2 != carried.schema_id
        assert sum(double.calls.values()) == before
        with pytest.raises(KafkaSyncOptionError, match="made for the reader schema subject 'other-value' version 1 "
                                                       r"\(schema id 1\), and the options name subject 'orders-value'"):
            parse_options(BASE, streaming=True, reader_pins={"value": ReaderPin("other-value", 1, 1)})


@pytest.mark.parametrize("extra, message", [
    ({"value.subject.version": "0"}, "'value.subject.version' must be a version number of the subject"),
    ({"value.subject.version": "two"}, "'value.subject.version' must be a version number"),
    ({"value.subject.version": "\u00b2"}, "'value.subject.version' must be a version number"),  # str.isdigit: True
    ({"value.subject.version": "\u0661"}, "'value.subject.version' must be a version number"),  # int() reads it as 1
    ({"value.decode.mode": "DROPMALFORMED"}, "'value.decode.mode'"),
    ({"value.decode": "false", "value.decode.mode": "PERMISSIVE"}, "'value.decode.mode' applies to the decoded"),
    ({"value.decode": "false", "value.subject.version": "1"}, "'value.subject.version' chooses the reader schema"),
])
def test_the_new_options_name_what_is_wrong(double, clock, extra, message):
    with serving(double, settings(), clock):
        double.register_schema("orders-value", avro_schema(V1))
        with pytest.raises(KafkaSyncOptionError, match=message):
            parse_options({**BASE, **extra}, streaming=True)


def test_the_decode_mode_is_failfast_unless_permissive_is_asked_for(double, clock):
    with serving(double, settings(), clock):
        double.register_schema("orders-value", avro_schema(V1))
        assert parse_options(BASE, streaming=True).value_format.decode_mode == "FAILFAST"
        permissive = parse_options({**BASE, "value.decode.mode": "permissive"}, streaming=True).value_format
        assert (permissive.decode_mode, permissive.error_column) == ("PERMISSIVE", True)


# -- the double answers as Apicurio does -------------------------------------------------------------

def answers(client, subject: str) -> list:
    """What a client answers, call by call, for one scene: two versions registered, a look-up of
    each kind that kafkasync makes, a soft delete, a permanent delete. An error is kept as
    confluent-kafka raises it: (HTTP status, registry error code, message)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    def ask(call):
        try:
            found = call()
        except SchemaRegistryError as error:
            return ("error", error.http_status_code, error.error_code, error.error_message)
        if isinstance(found, list):
            return sorted((v.subject, v.version) for v in found)
        if hasattr(found, "schema_id"):
            return (found.subject, found.version, found.schema_id == ids[found.version - 1])
        return json.loads(found.schema_str)["fields"][-1]["name"]

    # A record name of the scene's own: Apicurio (as Confluent's registry) gives one id to one
    # schema text under every subject, so V1 as other tests register it would list their subjects too.
    scene = "Order" + subject.replace("-", "_")
    ids = [client.register_schema(subject, avro_schema(V1.replace('"Order"', f'"{scene}"'))),
           client.register_schema(subject, avro_schema(V2.replace('"Order"', f'"{scene}"')))]
    unknown = 2_000_000_000
    seen = [ask(lambda: client.get_schema(ids[0])), ask(lambda: client.get_schema(unknown)),
            ask(lambda: client.get_schema_versions(ids[1])), ask(lambda: client.get_schema_versions(unknown)),
            ask(lambda: client.get_version(subject, "latest")), ask(lambda: client.get_version(subject, 1)),
            ask(lambda: client.get_version(subject, 7)), ask(lambda: client.get_version(f"{subject}-none", "latest"))]
    client.delete_version(subject, 1)
    seen += [ask(lambda: client.get_version(subject, 1)), ask(lambda: client.get_schema(ids[0])),
             ask(lambda: client.get_schema_versions(ids[0])), ask(lambda: client.get_version(subject, "latest"))]
    client.delete_version(subject, 1, permanent=True)
    fresh = type(client)({"url": client._rest_client.base_urls[0]}) if hasattr(client, "_rest_client") else client
    seen += [ask(lambda: fresh.get_schema(ids[0])), ask(lambda: fresh.get_schema_versions(ids[0]))]
    def neutral(message: str) -> str:  # each registry numbers its own ids
        for index, schema_id in enumerate(ids):
            message = message.replace(f"Schema {schema_id} ", f"Schema <registered {index}> ")
        return message.replace(str(unknown), "N").replace(subject, "S")
    return [answer if not (isinstance(answer, tuple) and answer[0] == "error")
            else (*answer[:3], neutral(answer[3])) for answer in seen]


def test_the_double_answers_every_call_kafkasync_makes_as_apicurio_does(schema_registry_url):
    """Each answer the double gives (values, and errors as confluent-kafka's client raises them:
    HTTP status, error code, message) is Apicurio 3.3.3's for the same calls; Confluent's registry
    gives the same codes (40401 subject, 40402 version, 40403 schema)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    subject = f"double-{uuid.uuid4().hex}-value"
    real = answers(SchemaRegistryClient({"url": schema_registry_url}), subject)
    assert answers(RegistryDouble(), subject) == real
    assert ("error", 404, 40403, "Schema N not found.") in real and ("error", 404, 40402, "Version 7 not found.") in real
    assert ("error", 404, 40401, "Subject 'S-none' not found.") in real


def test_whether_the_registry_still_holds_an_id_is_asked_of_it_not_of_the_clients_cache(schema_registry_url):
    """A restart names a recorded reader that is gone for good (spark/stream_reader.py); the process
    may have fetched that id before, and confluent-kafka's ``get_schema`` answers an id it fetched
    from its cache for the client's life (``_sync/schema_registry_client.py``: ``get_schema_by_id``
    first). Before, ``holds`` asked it that way and answered True for an id deleted for good."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    subject = f"holds-{uuid.uuid4().hex}-value"
    admin = SchemaRegistryClient({"url": schema_registry_url})
    schema_id = admin.register_schema(subject, avro_schema(V1.replace("Order", "Held")))
    known = registry_module.Registry(settings(schema_registry_url))
    assert known.schema(schema_id).schema_str and known.holds(schema_id) is True
    admin.delete_version(subject, 1)
    assert known.holds(schema_id) is True  # a soft delete keeps the id
    admin.delete_version(subject, 1, permanent=True)
    assert known.holds(schema_id) is False


def test_the_double_down_raises_what_the_client_raises_for_a_registry_that_does_not_answer():
    """confluent-kafka's client against a port nobody listens on, with no retries: the transport's
    ConnectError (``send_http_request`` re-raises ``httpx.TransportError``), as the double's ``down``."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    real = SchemaRegistryClient({"url": "http://127.0.0.1:1", "max.retries": 0, "timeout": 5})
    double = RegistryDouble()
    double.down = True
    raised = []
    for client in (real, double):
        with pytest.raises(Exception) as failure:
            client.get_schema(1)
        raised.append(type(failure.value))
    assert raised[0] is raised[1] and raised[0].__name__ == "ConnectError"
