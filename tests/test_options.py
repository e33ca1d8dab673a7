"""Option validation: every bad input fails at query start, naming the option."""

import re

import pytest

from kafkasync_source.config.client_config import redact
from kafkasync_source.config.options import KafkaSyncOptionError, parse_options
from kafkasync_source.planning.planner import NEVER_WAIT, WAIT_FOREVER, TopicPartition

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "orders"}


def parse(streaming=True, **extra):
    return parse_options({**BASE, **extra}, streaming=streaming)


def test_defaults_match_spark_kafka_source():
    options = parse()
    assert options.subscription.topics == ("orders",)
    assert options.starting_offsets == "latest"
    assert options.fail_on_data_loss is True
    assert options.include_headers is False
    assert options.max_task_idle_ms == 0
    assert options.bootstrap_servers == "localhost:9092"
    assert parse(streaming=False).starting_offsets == "earliest"


def test_option_names_are_case_insensitive_and_kafka_prefix_is_stripped():
    options = parse_options(
        {"KAFKA.Bootstrap.Servers": "h:1", "SUBSCRIBE": "a, b,a", "kafka.fetch.max.bytes": "1000",
         "IncludeHeaders": "TRUE"},
        streaming=True,
    )
    assert options.subscription.topics == ("a", "b")
    assert options.client_config == {"bootstrap.servers": "h:1", "fetch.max.bytes": "1000",
                                     "isolation.level": "read_uncommitted",
                                     "group.id": "spark-kafka-source-kafkasync"}
    assert options.include_headers is True


@pytest.mark.parametrize(
    "value, expected",
    [("-1", NEVER_WAIT), ("0", 0), ("2500", 2500), (str(WAIT_FOREVER), WAIT_FOREVER)],
)
def test_max_task_idle_ms_accepts_the_documented_values(value, expected):
    assert parse(**{"max.task.idle.ms": value}).max_task_idle_ms == expected


@pytest.mark.parametrize("value", ["-2", "1.5", "soon", "", str(WAIT_FOREVER + 1)])
def test_max_task_idle_ms_rejects_anything_else(value):
    with pytest.raises(KafkaSyncOptionError, match=r"'max\.task\.idle\.ms'.*-1.*0.*9223372036854775807"):
        parse(**{"max.task.idle.ms": value})


def test_unknown_option_is_named_with_what_is_allowed():
    with pytest.raises(KafkaSyncOptionError, match=r"'maxoffsetpertrigger'.*accepts:.*subscribe"):
        parse(maxOffsetPerTrigger="10")


def test_a_misspelt_option_gets_its_documented_spelling_before_the_list():
    with pytest.raises(KafkaSyncOptionError) as failure:
        parse(maxOffsetPerTrigger="10", startingOffset="earliest", colour="blue")
    message = str(failure.value)
    assert message.startswith(
        "Unknown option(s) 'colour', 'maxoffsetpertrigger' (did you mean 'maxOffsetsPerTrigger'?), "
        "'startingoffset' (did you mean 'startingOffsets'?). kafkasync accepts:"), message


def test_bootstrap_servers_is_required():
    with pytest.raises(KafkaSyncOptionError, match="kafka.bootstrap.servers"):
        parse_options({"subscribe": "t"}, streaming=True)


@pytest.mark.parametrize(
    "subscription",
    [{}, {"subscribe": "a", "subscribePattern": "b.*"}, {"subscribe": " , "},
     {"assign": "[0,1]"}, {"assign": "{}"}, {"subscribePattern": "("}],
)
def test_subscription_must_be_exactly_one_valid_style(subscription):
    with pytest.raises(KafkaSyncOptionError, match="subscribe|assign"):
        parse_options({"kafka.bootstrap.servers": "h:1", **subscription}, streaming=True)


def test_assign_and_pattern_parse():
    assigned = parse_options(
        {"kafka.bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'}, streaming=True
    ).subscription
    assert assigned.assigned == (TopicPartition("a", 2), TopicPartition("b", 0), TopicPartition("b", 1))
    pattern = parse_options(
        {"kafka.bootstrap.servers": "h:1", "subscribePattern": "ord.*"}, streaming=True
    ).subscription
    assert pattern.pattern == "ord.*"


def test_starting_offsets_json_and_keywords():
    spec = parse(startingOffsets='{"orders":{"0":23,"1":-2}}').starting_offsets
    assert spec == {"orders": {0: 23, 1: -2}}
    assert parse(startingOffsets="earliest").starting_offsets == "earliest"
    with pytest.raises(KafkaSyncOptionError, match="'startingOffsets'"):
        parse(startingOffsets="yesterday")
    with pytest.raises(KafkaSyncOptionError, match="'startingOffsets'.*-7.*orders-0"):
        parse(startingOffsets='{"orders":{"0":-7}}')
    with pytest.raises(KafkaSyncOptionError, match="'startingOffsets' cannot be 'latest'"):
        parse(streaming=False, startingOffsets="latest")


def test_ending_offsets_are_for_batch_reads_only():
    assert parse(streaming=False, endingOffsets='{"orders":{"0":5}}').ending_offsets == {"orders": {0: 5}}
    with pytest.raises(KafkaSyncOptionError, match="'endingOffsets'.*batch"):
        parse(endingOffsets="latest")
    with pytest.raises(KafkaSyncOptionError, match="'endingOffsets'.*earliest"):
        parse(streaming=False, endingOffsets='{"orders":{"0":-2}}')
    with pytest.raises(KafkaSyncOptionError, match="'max.task.idle.ms' applies to streaming"):
        parse(streaming=False, **{"max.task.idle.ms": "5"})


@pytest.mark.parametrize("name", ["auto.offset.reset", "enable.auto.commit",
                                  "enable.partition.eof", "interceptor.classes"])
def test_client_settings_kafkasync_owns_are_refused(name):
    with pytest.raises(KafkaSyncOptionError, match=f"'kafka.{name}' is not supported"):
        parse(**{f"kafka.{name}": "x"})


@pytest.mark.parametrize(
    "option, value",
    [("failOnDataLoss", "yes"), ("includeHeaders", "1"), ("buffered.records.per.partition", "0"),
     ("maxRecordsPerPartition", "-5"), ("kafkaConsumer.pollTimeoutMs", "fast")],
)
def test_bad_values_name_the_option(option, value):
    with pytest.raises(KafkaSyncOptionError, match=f"'{option}'"):
        parse(**{option: value})


def test_jaas_config_is_translated_and_secrets_never_echoed():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="alice" password="s3cr3t-pw";')
    options = parse(**{"kafka.sasl.jaas.config": jaas, "kafka.security.protocol": "SASL_SSL"})
    assert options.client_config["sasl.username"] == "alice"
    assert options.client_config["sasl.password"] == "s3cr3t-pw"
    assert "s3cr3t-pw" not in repr(options)
    assert "s3cr3t-pw" not in str(redact(options.client_config))
    with pytest.raises(KafkaSyncOptionError) as failure:
        parse(**{"kafka.sasl.jaas.config": "KerberosLoginModule required keyTab=\"/k\" s3cr3t;"})
    assert "s3cr3t" not in str(failure.value)


def test_jaas_config_takes_the_password_before_the_username():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'password="pw-first" username="alice";')
    options = parse(**{"kafka.sasl.jaas.config": jaas})
    assert options.client_config["sasl.username"] == "alice"
    assert options.client_config["sasl.password"] == "pw-first"


def test_isolation_level_defaults_to_read_uncommitted_like_format_kafka():
    assert parse().client_config["isolation.level"] == "read_uncommitted"
    committed = parse(**{"kafka.isolation.level": "READ_COMMITTED"})
    assert committed.client_config["isolation.level"] == "read_committed"
    with pytest.raises(KafkaSyncOptionError, match=r"'kafka\.isolation\.level'.*'sometimes'"):
        parse(**{"kafka.isolation.level": "sometimes"})


@pytest.mark.parametrize(
    "value, shown",
    [('{"t":[true]}', "true"), ('{"t":[0.9]}', "0.9"), ('{"t":["1"]}', '"1"'),
     ('{"t":[1e0]}', "1.0"), ('{"t":[null]}', "null")],
)
def test_assign_rejects_anything_but_integer_partitions(value, shown):
    with pytest.raises(KafkaSyncOptionError, match=rf"'assign'.*partition of topic 't'.*{re.escape(shown)}"):
        parse_options({"kafka.bootstrap.servers": "h:1", "assign": value}, streaming=True)


@pytest.mark.parametrize("value", ['{"t":[0,1]', '["t"]', '{"t":0}', '{"t":{"0":1}}'])
def test_assign_rejects_other_shapes(value):
    with pytest.raises(KafkaSyncOptionError, match=r"'assign' must be JSON like"):
        parse_options({"kafka.bootstrap.servers": "h:1", "assign": value}, streaming=True)


@pytest.mark.parametrize(
    "value, match",
    [('{"orders":{"0":1.5}}', r"offset of orders-0.*1\.5"),
     ('{"orders":{"0":true}}', r"offset of orders-0.*true"),
     ('{"orders":{"0":"5"}}', r'offset of orders-0.*"5"'),
     ('{"orders":{"0.5":5}}', r"partition '0\.5' of topic 'orders'"),
     ('{"orders":{"x":5}}', r"partition 'x' of topic 'orders'"),
     ('{"orders":[5]}', r"must be 'earliest', 'latest' or JSON")],
)
def test_offsets_reject_anything_but_integers(value, match):
    with pytest.raises(KafkaSyncOptionError, match=rf"'startingOffsets'.*{match}"):
        parse(startingOffsets=value)
    with pytest.raises(KafkaSyncOptionError, match=rf"'endingOffsets'.*{match}"):
        parse(streaming=False, endingOffsets=value.replace("-2", "-1"))


@pytest.mark.parametrize(
    "java, topic, matches",
    [(r"(?<env>prod|dev)\.orders", "prod.orders", True),
     (r"(?<env>prod|dev)\.orders", "test.orders", False),
     (r"(?<x>[a-z])-\k<x>", "a-a", True),
     (r"(?<x>[a-z])-\k<x>", "a-b", False),
     (r"\Qa.b\E.*", "a.b-1", True),
     (r"\Qa.b\E.*", "axb-1", False),
     (r"(?<!x)orders", "orders", True)],
)
def test_subscribe_pattern_translates_java_regex_syntax(java, topic, matches):
    import re as python_re

    pattern = parse_options(
        {"kafka.bootstrap.servers": "h:1", "subscribePattern": java}, streaming=True
    ).subscription.pattern
    assert bool(python_re.fullmatch(pattern, topic)) is matches


@pytest.mark.parametrize("java", [r"\p{Alpha}+", r"[a-z&&[^e]]+"])
def test_subscribe_pattern_names_what_is_unsupported(java):
    with pytest.raises(KafkaSyncOptionError, match=r"'subscribePattern'.*\\p\{\.\.\.\} classes"):
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": java}, streaming=True)
