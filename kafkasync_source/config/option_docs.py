"""The options reference: one entry per option (or group of options read together), with its
default and meaning as users read them. ``options.py`` accepts exactly these names
(:data:`kafkasync_source.config.options._KNOWN_OPTIONS` is derived from them), and
``python -m kafkasync_source.config.option_docs`` writes ``docs/reference/options.md`` from them, so the
code and the reference cannot drift (``tests/test_option_docs.py``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class OptionDoc:
    """Options documented together (Spark's spelling), their default(s) and meaning (Markdown)."""

    names: tuple[str, ...]
    default: str
    meaning: str


OPTION_DOCS: tuple[OptionDoc, ...] = (
    OptionDoc(
        ('kafka.bootstrap.servers',),
        'required',
        'brokers',
    ),
    OptionDoc(
        ('subscribe', 'subscribePattern', 'assign'),
        'exactly one',
        (
            'topic list / regex / JSON `{"t":[0,1]}` (partitions and offsets must be JSON integers: '
            '`true`, `0.9`, `1.5` are rejected). `subscribePattern` is a Java regex, as in Spark: named '
            "groups `(?<name>…)`, `\\k<name>` and `\\Q…\\E` are translated to Python's `re`; possessive "
            'quantifiers and atomic groups need Python >= 3.11; Java-only classes such as `\\p{Alpha}` and'
            ' `[a-z&&[^e]]` are rejected with an error naming the option'
        ),
    ),
    OptionDoc(
        ('startingOffsets',),
        '`latest` (stream), `earliest` (batch)',
        '`earliest`, `latest` or JSON `{"t":{"0":23,"1":-2}}` (-2 earliest, -1 latest)',
    ),
    OptionDoc(
        ('endingOffsets',),
        '`latest`',
        'batch reads only: `latest` or JSON',
    ),
    OptionDoc(
        ('startingTimestamp', 'startingOffsetsByTimestamp', 'startingOffsetsByTimestampStrategy'),
        'none, `error`',
        (
            'start every partition (or each named one) at its first record with a timestamp >= the time '
            '(epoch ms); precedence over `startingOffsets`. No such record: `error` fails naming '
            'partition and time, `latest` starts there at the latest offset'
        ),
    ),
    OptionDoc(
        ('endingTimestamp', 'endingOffsetsByTimestamp'),
        'none',
        (
            'end at the first record with a timestamp >= the time (the latest offset when there is none):'
            ' a batch read, as in `format("kafka")`, or a `trigger(availableNow=True)` run (kafkasync\'s '
            'own, see [Bounded runs](../bounded-runs.md#bounded-runs-triggeravailablenowtrue)); '
            'any other trigger fails at start naming the option'
        ),
    ),
    OptionDoc(
        ('max.task.idle.ms',),
        '`0`',
        (
            '`-1` never wait: `format("kafka")`\'s admission (each batch reads up to the log end known '
            'when it is planned, or `maxOffsetsPerTrigger` split as Spark splits it); `0` wait for '
            "fetches, never for producers; `N` wait up to N ms for an idle partition's producer; "
            '`9223372036854775807` wait forever'
        ),
    ),
    OptionDoc(
        ('maxOffsetsPerTrigger',),
        'none',
        (
            "at most N records a batch. Synchronized: the first N records in Kafka Streams' processing "
            "order; `-1`: Spark's proportional split of N offsets. Applies within `availableNow` too"
        ),
    ),
    OptionDoc(
        ('minOffsetsPerTrigger', 'maxTriggerDelay'),
        'none, `15m`',
        (
            'hold a batch until N new offsets are available or `maxTriggerDelay` has passed since the '
            'last trigger let through (as `format("kafka")`\'s `delayBatch`: the first trigger is never '
            'held, and a trigger let through with nothing to read restarts the clock, so a query started '
            'at `latest` holds a trickle; not applied within `availableNow`, which must end)'
        ),
    ),
    OptionDoc(
        ('maxEventTimePerTrigger',),
        'none',
        (
            "kafkasync's own: a duration (`30 minutes`, `2h`); no batch advances stream time more than "
            'this (synchronized only)'
        ),
    ),
    OptionDoc(
        ('failOnDataLoss',),
        '`true`',
        (
            'fail (naming partition and offsets) when records a batch needs are gone: removed by '
            'retention, a topic deleted with records still unread (noticed at the next partition '
            'discovery, or after 5 s by a read that makes no progress), or a log that now ends below the '
            "query's position (topic deleted and recreated). With `false`: log a warning naming them, "
            'drop deleted partitions and restart a moved-back partition at its new log start. A topic '
            'deleted after being read to its end (up to the largest log end the query saw) leaves the '
            'offsets without an error. `format("kafka")` differs on deleted topics, see [Option '
            'parity](../parity.md#option-parity-with-formatkafka)'
        ),
    ),
    OptionDoc(
        ('includeHeaders',),
        '`false`',
        'add the `headers` column',
    ),
    OptionDoc(
        ('includePartitionTime',),
        '`false`',
        (
            "kafkasync's own (KIP-472): add a `partitionTime` timestamp column, the largest record "
            'timestamp of the partition up to and including each record, continuing from the partition '
            "time in the batch's start offset — the same on every replay and after a restart. Computed by"
            " the executors from the records they read; with it a partition's range in a batch is read by"
            ' one task (not split), so the running maximum is exact — unless `eventTime.order=nonDecreasing`'
            ' is set: then ranges split, and each later piece continues from the last time before it. A '
            'batch read starts it at its first '
            'record. See "Partition time on every record"'
        ),
    ),
    OptionDoc(
        ('eventTime.jsonPath', 'eventTime.header', 'eventTime.extractor'),
        'none (the Kafka timestamp)',
        (
            "kafkasync's own: where each record's event time is, when its Kafka timestamp is not it (a "
            're-published topic, CDC, buffered uploads). At most one: a JSONPath into the value as '
            "`get_json_object` writes it (`$.ts`, `$.source.ts_ms`, `$['a b'][0]`; no wildcards); a "
            "header's name; or `package.module:function`, a Python callable `(key, value, headers, "
            'timestamp_ms) -> int | datetime | None` (epoch ms; a naive datetime is UTC) importable on the '
            'driver and every executor. Batches synchronize on that time (cut, caps, idling, '
            '`maxEventTimePerTrigger`, partition time), an `eventTime` timestamp column is added '
            '(`timestamp` stays Kafka\'s), and batches are planned from records the driver reads (the '
            "brokers' time index knows Kafka timestamps only; `planningMode=timeIndex` is refused). "
            'A path that cannot parse, a module that does not import, fail at `load()`. See [Event time '
            'from the record](../event-time.md)'
        ),
    ),
    OptionDoc(
        ('eventTime.format',),
        '`epochMillis`',
        (
            '`epochMillis`, `epochSeconds` (fractions allowed), `epochMicros` — a JSON number or a string '
            'holding one — or `iso8601` text (`2024-05-01T12:00:00.250Z`, `+02:00`; no offset: UTC). A '
            'header in an epoch format may also hold an 8-byte big-endian long (KIP-472\'s encoding). Not '
            'with `eventTime.extractor`'
        ),
    ),
    OptionDoc(
        ('eventTime.onInvalid',),
        '`fail`',
        (
            'a record without a valid time (missing, null, not in the format, negative, not JSON, a '
            'function returning None): `fail` the query once every record before it was processed, naming'
            ' topic, partition, offset and why (Kafka Streams\' `FailOnInvalidTimestamp`); `skip`: read it '
            'with a null `eventTime`, taking no part in synchronization; `partitionTime`: the partition\'s'
            ' time so far (`UsePartitionTimeOnInvalidTimestamp`; fails while the partition has none; a '
            "partition's range in a batch is then read by one task, as with `includePartitionTime`, "
            'unless `eventTime.order=nonDecreasing`); '
            '`recordTimestamp`: its Kafka timestamp (with `eventTime.order=nonDecreasing` shown in the '
            'column only, taking no part in the promise nor in synchronization). Under '
            '`eventTime.order=nonDecreasing` `fail` fails the whole batch holding a record the driver '
            'did not read (see [Event time from the record](../event-time.md)). A function that raises '
            'always fails the query'
        ),
    ),
    OptionDoc(
        ('eventTime.order',),
        '`any`',
        (
            'what you promise of the event times within each partition. `any`: nothing — the driver '
            'reads every record to plan, and batches are Kafka Streams\' order under any disorder. '
            '`nonDecreasing`: no record\'s time is below an earlier record\'s of its partition (a '
            'database\'s commit log, a table re-published in time order): the driver plans from a few '
            'records read at chosen offsets (a binary search, `O(log n)` records a partition and trigger) '
            'and the brokers send each record about once. The executors check the promise on every '
            'record: one whose time is below its partition\'s time before it fails the query, naming '
            'topic, partition, offset and both times. A partition\'s range splits as without the promise '
            '(`maxRecordsPerPartition`, `minPartitions`): each later piece first reads the last record '
            'with a time before its start. See [Event time from the record](../event-time.md)'
        ),
    ),
    OptionDoc(
        ('eventTime.field',),
        'none',
        (
            "kafkasync's own: the event time is a field of the value decoded by its `value.format` "
            '(Schema Registry formats), a path of field names: `source.ts_ms` (Debezium), '
            '`after.updated_at`. Avro `timestamp-millis`/`-micros`/`local-timestamp-*` and `date`, and '
            "Protobuf's `google.protobuf.Timestamp`, are times as they are; other numbers and strings "
            'follow `eventTime.format`. Each record is read with its writer schema (fetched by id once '
            "per process), the path named as the reader schema names it (the subject's version "
            '`value.subject.version`, pinned at `load()`; Avro aliases followed, a field the writer lacks '
            'takes its default). A record that is not framed, or whose schema id the registry does not '
            "know, has an invalid time (`eventTime.onInvalid`); a "
            'writer schema that does not resolve fails the query naming topic, partition, offset, schema '
            'id and field. Everything else as `eventTime.jsonPath`. See [Schema Registry '
            'formats](../formats.md)'
        ),
    ),
    OptionDoc(
        ('value.format', 'key.format'),
        'none (bytes)',
        (
            "Flink's names: `avro-confluent`, `protobuf-confluent`, `json-schema-confluent`: records "
            "written by Confluent's serializers (magic byte, schema id, then the record). Needs "
            "`schema.registry.url` and the optional extra `pip install 'kafkasync[registry]'` on the "
            'driver and every executor; without it the query fails at start naming the extra'
        ),
    ),
    OptionDoc(
        ('schema.registry.url', 'schema.registry.*'),
        'none',
        (
            "the Schema Registry's URL (several: comma-separated); every other `schema.registry.*` "
            "option is passed to confluent-kafka's `SchemaRegistryClient` without the prefix: "
            '`basic.auth.user.info` (`user:password`), `basic.auth.credentials.source`, '
            '`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`, `timeout` (s, default '
            '10), `max.retries`, `retries.wait.ms`, `retries.max.wait.ms`. When the query starts the '
            'registry must answer or the query fails naming the URL; later a new schema id is retried '
            "with the client's backoff, then fails naming the id and the URL. An id the registry answers "
            'unknown stays unknown for 30 s in a process, then is asked again. Credentials never appear in '
            'messages, logs, offsets, progress or plans'
        ),
    ),
    OptionDoc(
        ('value.subject', 'value.subject.name.strategy', 'value.record.name',
         'key.subject', 'key.subject.name.strategy', 'key.record.name'),
        'none, `topic-name`, none',
        (
            'the subject whose version (`value.subject.version`: its latest when the query is loaded) is '
            "the reader schema. By default named as Confluent's serializers name it: `topic-name` "
            '(`<topic>-value`, one topic subscribed; `<topic>-key` for the key), `record-name` '
            '(`<record.name>`) or `topic-record-name` (`<topic>-<record.name>`). `record.name` is what the '
            "serializer names the subject after: Avro's record full name (`namespace.Name`), Protobuf's "
            "message full name (`package.Message`, which also picks the reader's message in a file of "
            "several), JSON Schema's `title`. `value.subject` names it outright. Without one (several "
            'topics), each record is read with its writer schema as it is'
        ),
    ),
    OptionDoc(
        ('value.subject.version', 'key.subject.version'),
        '`latest`',
        (
            "which version of the subject is the reader schema: `latest` (the subject's latest when the "
            'query is loaded) or a version number. The reader is pinned once per query, at `load()`, and '
            'the driver and every executor read with it; a streaming query records it in its checkpoint '
            "(the offsets' `readerSchemas`). A restart whose pin differs from the checkpoint's (a new "
            'version registered meanwhile) fails at its first trigger naming both: set this option to the '
            "checkpoint's version to keep the old reader, or to the new version to move the query to it "
            '(the checkpoint then records the new one). See [moving a running query to a new reader '
            'schema](../formats.md#moving-a-running-query-to-a-new-reader-schema)'
        ),
    ),
    OptionDoc(
        ('value.decode', 'key.decode'),
        '`false`',
        (
            'add the decoded value (key) as a struct column `valueDecoded` (`keyDecoded`), of the Spark '
            'type `from_avro`/`from_protobuf` gives for the reader schema; each record is resolved from '
            'its writer schema to it (Avro: defaults, aliases, promotions). The raw `value` stays; a '
            'tombstone (no value) is null. A record that cannot be decoded (not framed, an unknown '
            'schema id, bytes that do not match their schema, a writer that does not resolve) is handled '
            'by `value.decode.mode`'
        ),
    ),
    OptionDoc(
        ('value.decode.mode', 'key.decode.mode'),
        '`FAILFAST`',
        (
            "as `from_avro`/`from_protobuf`'s `mode`: `FAILFAST` fails the query at the first record "
            'that cannot be decoded, naming topic, partition, offset, schema id, what is wrong '
            '(`not-framed`, `unknown-schema`, `malformed`, `incompatible`) and why (the field); '
            '`PERMISSIVE` makes it null and adds a string column `valueDecodeError` (`keyDecodeError`) '
            'beside the decoded one: null where the record decoded (or is a tombstone), else '
            '`kind: reason (schema id N)`. Count, watch or route those rows to a dead-letter table '
            '(`kafkasync_source.observe_decode_errors` counts them per kind in the progress and '
            '`KafkaSyncListener`); the first record of each kind is logged once per worker. See '
            '[Schema Registry formats](../formats.md#records-that-cannot-be-decoded)'
        ),
    ),
    OptionDoc(
        ('driver.buffer.bytes',),
        '`33554432` (32 MiB)',
        (
            "the driver's buffer of fetched offsets and timestamps (16 bytes a record, about 2.1 million "
            'records), split evenly over the partitions; a partition whose share is full ends its '
            'contribution to a batch there'
        ),
    ),
    OptionDoc(
        ('buffered.records.per.partition',),
        'none',
        'optional lower cap per partition',
    ),
    OptionDoc(
        ('minPartitions',),
        "the driver's CPU count",
        (
            'about how many Spark tasks a batch gets. Like `format("kafka")` (SPARK-23541), large ranges '
            'are split in proportion to their size to reach it; unlike it, small ranges are also packed '
            'together down to it (each task reads its ranges one after another). The default, '
            '`os.cpu_count()` of the driver, is exact for `local[*]`; on a cluster set it to the total '
            'executor cores'
        ),
    ),
    OptionDoc(
        ('maxRecordsPerPartition',),
        '`200000`',
        (
            'at most this many offsets per Spark task (`format("kafka")`\'s meaning, SPARK-49259): larger '
            'ranges are split into equal parts, small ones packed together without going over it'
        ),
    ),
    OptionDoc(
        ('kafkaConsumer.pollTimeoutMs',),
        '`120000`',
        (
            'executor: fail when a range makes no progress this long; a bounded run: fail when a '
            'partition below its stop offset cannot be fetched this long'
        ),
    ),
    OptionDoc(
        ('partitionDiscoveryIntervalMs',),
        '`10000`',
        (
            'how often to look for new partitions (read from their beginning; not during a bounded run). '
            'A discovery that fails (e.g. the cluster is just back from an outage) is logged and tried '
            'again at the next interval'
        ),
    ),
    OptionDoc(
        ('fetchOffset.numRetries', 'fetchOffset.retryIntervalMs'),
        '`3`, `1000`',
        (
            'as `format("kafka")` (its code defaults; its docs table says 10 ms): a ListOffsets or '
            'metadata answer with a retriable error (a leader election, a topic created a moment ago) is '
            'retried this often, this far apart, then fails naming the partition, the attempts and the '
            'time'
        ),
    ),
    OptionDoc(
        ('planningMode',),
        '`auto`',
        (
            "where the driver learns the timestamps it cuts by. `auto`: from the brokers' time index "
            '(ListOffsets; each answer the cut uses is checked against the one record a consumer reads '
            'there, since transaction markers and aborted records are in the index too) wherever that '
            'answers exactly, else, for that batch, by fetching timestamps on the driver (the reason is '
            'logged once); `timeIndex`: the index only — the query fails at start if the brokers cannot '
            'answer, and at a batch only fetched records can cut, naming the partition and why; `fetch`: '
            'always fetch (round-2 behaviour). See "Planning from the brokers\' time index"'
        ),
    ),
    OptionDoc(
        ('autostop.offsets', 'autostop.key', 'autostop.topic'),
        '`transient`',
        'bounded runs, see below',
    ),
    OptionDoc(
        ('kafka.isolation.level',),
        '`read_uncommitted`',
        (
            'as `format("kafka")`, whose Java consumer defaults to `read_uncommitted` (Kafka consumer '
            "configs, `isolation.level`); librdkafka's own default, `read_committed` (librdkafka 1.2.0 "
            'release notes, CONFIGURATION.md), is not used unless set. With `read_committed` records of '
            "open and aborted transactions are not returned; a partition's lag is measured against its "
            'last stable offset, so an open transaction makes the partition idle (it does not stall the '
            'query), and an AvailableNow run stops at the last stable offsets'
        ),
    ),
    OptionDoc(
        ('groupIdPrefix',),
        '`spark-kafka-source` (stream), `spark-kafka-relation` (batch)',
        (
            "kafkasync's consumers use the group id `<prefix>-kafkasync`. They only `assign()` partitions"
            " and never join or commit to it, but librdkafka still looks up the group's coordinator, "
            'which a broker refuses with `GROUP_AUTHORIZATION_FAILED` when no ACL allows the group '
            '(confluent-kafka-python issue #250): a prefixed group ACL written for `format("kafka")` '
            'covers kafkasync'
        ),
    ),
    OptionDoc(
        ('kafka.group.id',),
        'none',
        (
            'every kafkasync consumer uses this group id (`groupIdPrefix` is then ignored, with a '
            "warning), and each finished batch's offsets are committed to it, for lag monitoring only"
        ),
    ),
    OptionDoc(
        ('kafka.*',),
        '',
        (
            'passed to librdkafka; `kafka.sasl.jaas.config` PLAIN/SCRAM lines are translated to '
            '`sasl.username`/`sasl.password`. Java-client-only settings fail at start with the librdkafka'
            ' setting to use, see [Java client settings](client-settings.md#java-client-settings). '
            'Any `kafka.queued.*`, `kafka.fetch.*` or `kafka.max.partition.fetch.bytes` you set wins over '
            "the executors' own prefetch sizing ([Sizing the executors' consumers]"
            "(../deployment.md#sizing-the-executors-consumers)). Fixed without an error: "
            '`kafka.enable.auto.offset.store` (always false: kafkasync stores no offsets), and in the '
            "driver's record fetcher (`planningMode=fetch`, `eventTime.*`) `kafka.queued.max.messages.kbytes` "
            "(16384) and `kafka.fetch.queue.backoff.ms` (10); in the driver's record probe (the index paths' "
            'reads of single records) `kafka.max.partition.fetch.bytes` (16384), `kafka.fetch.max.bytes` '
            '(4194304), `kafka.fetch.wait.max.ms` (10), `kafka.queued.min.messages` (1), '
            '`kafka.queued.max.messages.kbytes` (4096) and `kafka.fetch.queue.backoff.ms` (1): a probe '
            'costs the brokers the producer batch holding its record '
            '([What a trigger costs](../concepts.md#thousands-of-partitions-what-a-trigger-costs))'
        ),
    ),
)

_HEADER = """# Options

<!-- Generated by `python -m kafkasync_source.config.option_docs` from kafkasync_source/config/option_docs.py;
     edit there, not here (tests/test_option_docs.py checks the two agree). -->

Same names and meanings as `format("kafka")` where they exist; where they differ, see
[Option parity](../parity.md). Unknown options, bad values and settings kafkasync owns
(`kafka.auto.offset.reset`, `kafka.enable.auto.commit`, deserializers) fail when the query
starts, with a message naming the option. Secrets never appear in kafkasync's messages, logs,
progress or offsets.

| option | default | meaning |
|---|---|---|
"""


def reference() -> str:
    """``docs/reference/options.md``, as generated from :data:`OPTION_DOCS`."""
    rows = [
        f"| {' / '.join(f'`{name}`' for name in doc.names)} | {doc.default} | {doc.meaning} |" for doc in OPTION_DOCS
    ]
    return _HEADER + "\n".join(rows) + "\n"


def documented_source_options() -> set[str]:
    """The lower-cased names of the source's own options (``kafka.*`` client settings apart)."""
    return {name.lower() for doc in OPTION_DOCS for name in doc.names if not name.startswith("kafka.")}


if __name__ == "__main__":
    sys.stdout.write(reference())
