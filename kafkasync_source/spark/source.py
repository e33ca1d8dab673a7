"""``format("kafkasync")``: the DataSource Spark instantiates, plus batch reads."""

from __future__ import annotations

import uuid
from typing import Any, Iterator, Mapping, Optional, Sequence

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kafkasync_source.config.client_config import SPARK_OPTIONS_REDACTION_REGEX
from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.options import SourceOptions, parse_options
from kafkasync_source.driver.offset_reader import OffsetReader
from kafkasync_source.formats.options import ReaderPin
from kafkasync_source.spark.executor_import import RANGE_READER_MODULE, RebuiltAfterImport
from kafkasync_source.spark.input_partitions import KafkaRanges, plan_input_partitions
from kafkasync_source.spark.python_worker import landed_in_worker
from kafkasync_source.spark.schema import carried_pins, check_decoded_type, check_given_columns, source_schema
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader


class KafkaSyncDataSource(RebuiltAfterImport, DataSource):
    """Kafka topics as event-time-synchronized micro-batches.

    A drop-in for ``format("kafka")``: same options, same schema (key, value, topic,
    partition, offset, timestamp, timestampType [, headers]; kafkasync's own options add
    ``eventTime`` and ``partitionTime``). Each micro-batch is cut where
    Kafka Streams would stop (KIP-353/KIP-695): at stream time T = min over partitions of the
    largest buffered timestamp, so a lagging partition's records are not overtaken by the
    watermark, and re-runs over the same data give the same batches.

    ================================  =========  ==============================================
    option                            default    meaning
    ================================  =========  ==============================================
    kafka.bootstrap.servers           required   brokers, ``host:port[,host:port]``
    subscribe / subscribePattern /    one of     topics: comma list / Java-style regex /
    assign                            these      JSON ``{"t":[0,1]}``
    startingOffsets                   latest     ``earliest`` / ``latest`` / JSON
                                      (stream),  ``{"t":{"0":23,"1":-2}}`` (-2 earliest,
                                      earliest   -1 latest)
                                      (batch)
    endingOffsets (batch only)        latest     ``latest`` / JSON
    max.task.idle.ms                  0          -1 never wait: format("kafka")'s admission
                                                 (with maxOffsetsPerTrigger, its proportional
                                                 split); 0 wait for fetches, not producers; N
                                                 wait up to N ms for an idle partition;
                                                 9223372036854775807 wait forever
    maxOffsetsPerTrigger              none       records per batch (format("kafka")'s name);
                                                 synchronized: the first N in Kafka Streams'
                                                 order; -1: Spark's proportional split
    minOffsetsPerTrigger              none       hold a batch until this many new offsets ...
    maxTriggerDelay                   15m        ... or this long since the last batch
    maxEventTimePerTrigger            none       duration (``30 minutes``): a batch advances
                                                 stream time at most this far (not with -1)
    failOnDataLoss                    true       fail when needed records are gone (retention,
                                                 a topic deleted with unread records, a log
                                                 recreated below the query); false: warn, drop
                                                 deleted partitions, restart moved-back ones
    includeHeaders                    false      add ``headers`` array<struct<key,value>>
    driver.buffer.bytes               67108864   driver buffer for all partitions (16 bytes a
                                                 fetched record), split evenly
    buffered.records.per.partition    none       optional cap per partition below that (a full
                                                 partition ends its contribution to a batch)
    minPartitions                     CPU count  about this many Spark tasks a batch: large
                                                 ranges split, small ones packed together
    maxRecordsPerPartition            200000     at most this many offsets per Spark task
    kafkaConsumer.pollTimeoutMs       120000     executor: fail if a range stalls this long;
                                                 AvailableNow: fail if the driver cannot fetch
                                                 records below the stop offsets this long
    fetchOffset.numRetries /          3 / 1000   retries of offset look-ups after retriable
    fetchOffset.retryIntervalMs                  errors (leader election, topic just created)
    partitionDiscoveryIntervalMs      10000      how often to look for new partitions (not
                                                 during an AvailableNow run: partitions created
                                                 during a run are read by the next run)
    autostop.offsets                  transient  trigger(availableNow=True) stop offsets:
                                                 ``transient`` captures them on every start
                                                 (Spark's behaviour); ``durable`` stores them so
                                                 a restart after a failure stops at the same
                                                 place; a clean finish clears them (KIP-95)
    autostop.key                      required   names the query's bounded runs (one key per
                                      with       checkpoint); key of the stored stop offsets
                                      durable
    autostop.topic                    kafkasync- compacted topic holding durable stop offsets;
                                      autostop   created (1 partition, compact) if missing
    includePartitionTime              false      add ``partitionTime``: the partition's largest
                                                 timestamp up to each record (KIP-472),
                                                 continuing from the checkpoint
    eventTime.jsonPath /              none       where the event time is when the Kafka
    eventTime.header /                (Kafka     timestamp is the write time: a JSONPath into
    eventTime.extractor               time-      the value (``$.source.ts_ms``), a header, or
                                      stamp)     ``module:function(key, value, headers, ts)``;
                                                 batches synchronize on it, an ``eventTime``
                                                 column is added
    eventTime.format                  epoch-     ``epochMillis``, ``epochSeconds``,
                                      Millis     ``epochMicros``, ``iso8601``
    eventTime.onInvalid               fail       ``fail`` (naming the record), ``skip``,
                                                 ``partitionTime``, ``recordTimestamp``
    planningMode                      auto       where the driver learns timestamps: ``auto``
                                                 from the brokers' time index (ListOffsets,
                                                 no record read) where it answers exactly,
                                                 else by fetching them for that batch;
                                                 ``timeIndex`` the index only (fails naming
                                                 why); ``fetch`` always fetch
    kafka.isolation.level             read_un-   ``read_uncommitted`` as format("kafka")'s Java
                                      committed  consumer (not librdkafka's read_committed
                                                 default); with ``read_committed`` lag is
                                                 measured against the last stable offset (an
                                                 open transaction makes a partition idle, not
                                                 stuck)
    kafka.*                                      passed to librdkafka (``kafka.`` stripped);
                                                 ``kafka.sasl.jaas.config`` PLAIN/SCRAM lines
                                                 are translated
    ================================  =========  ==============================================

    Example::

        from pyspark.sql import SparkSession, functions as F
        import kafkasync_source

        spark = SparkSession.builder.getOrCreate()
        kafkasync_source.register(spark)  # not needed after `pip install kafkasync`
        events = (spark.readStream.format("kafkasync")
                  .option("kafka.bootstrap.servers", "localhost:9092")
                  .option("subscribe", "orders,payments")
                  .option("startingOffsets", "earliest")
                  .load())
        counts = (events.withWatermark("timestamp", "1 minute")
                  .groupBy(F.window("timestamp", "5 minutes"), "topic").count())
        counts.writeStream.outputMode("append").format("console").start()
    """

    @classmethod
    def name(cls) -> str:
        return "kafkasync"

    def schema(self) -> StructType:
        # Validate here: Spark calls schema() at load(), so bad options fail at query start.
        # schema() serves spark.read and spark.readStream alike: the checks that depend on
        # the mode (endingOffsets, max.task.idle.ms, autostop.*) run in reader()/streamReader().
        # The reader schemas are pinned here, once per query, and carried in the schema's
        # metadata to the processes that run streamReader()/reader() (spark/schema.py).
        options = self._parse(streaming=None)
        return source_schema(options, {f.part: f.spark_type() for f in options.decoded_formats})

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaSyncStreamReader(self._parse(streaming=True, schema=schema), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaSyncBatchReader(self._parse(streaming=False, schema=schema), schema)

    def _parse(self, *, streaming: Optional[bool], schema: Optional[StructType] = None) -> SourceOptions:
        """The options; with the schema Spark hands a reader, the reader schemas it carries from
        ``load()`` (or, where it carries none, pinned now and checked against its columns)."""
        if schema is None:
            return parse_options(self.options, streaming=streaming)
        try:
            pins = carried_pins(schema)
        except ValueError as err:
            raise KafkaSyncOptionError(f"kafkasync: {err}") from None
        options = parse_options(self.options, streaming=streaming, reader_pins=pins)
        if streaming:
            _refuse_latest_pinned_twice(options, pins)
        for format_options in options.decoded_formats:
            if format_options.part not in pins:
                check_decoded_type(format_options, schema)
        check_given_columns(options, schema)
        return options


def _refuse_latest_pinned_twice(options: SourceOptions, carried: Mapping[str, ReaderPin]) -> None:
    """A stream whose schema was given without pins (``readStream.schema(...)``) pins each part's
    reader where ``streamReader`` runs: in the source's runner and, apart from it, in the read
    planner whose reader goes to the executors, each when the query starts. Under ``latest`` a
    version registered in between would be read with by one of them only (the offsets recording
    one id, the executors decoding with another), so the version must be named."""
    for format_options in (options.key_format, options.value_format):
        if (format_options is None or format_options.pin is None or format_options.part in carried
                or format_options.subject_version is not None):
            continue
        raise KafkaSyncOptionError(
            f"kafkasync: the schema given to this stream (readStream.schema(...)) carries no reader schema for the "
            f"{format_options.part}, and '{format_options.version_option}' is latest: the query's processes each take "
            "the subject's latest when they start, and could read as different versions. Name the version with "
            f"'{format_options.version_option}' (now {format_options.pin.version}), or give no schema (the source "
            "pins the reader when the query is loaded), or a loaded DataFrame's (df.schema carries its pin).")


class KafkaSyncBatchReader(RebuiltAfterImport, DataSourceReader):
    """``spark.read.format("kafkasync")``: every record between startingOffsets and
    endingOffsets, resolved once when the query is planned."""

    EXECUTOR_MODULES = (RANGE_READER_MODULE,)

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema

    def __setstate__(self, state: dict) -> None:
        # Unpickled in an executor's Python worker before it reads the task's input (python_worker.py).
        self.__dict__.update(state)
        landed_in_worker()

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        with OffsetReader(options.client_config, **options.offset_reader_settings()) as offsets:
            partitions = offsets.partitions(options.subscription, must_exist=True)
            starts = offsets.starting_offsets(options, partitions)
            ends = offsets.ending_offsets(options, partitions)
        for tp in partitions:
            if ends[tp] < starts[tp]:
                raise ValueError(
                    f"kafkasync: for {tp.topic}-{tp.partition} endingOffsets ({ends[tp]}) is "
                    f"before startingOffsets ({starts[tp]})."
                )
        ranges = [(tp, starts[tp], ends[tp]) for tp in partitions]
        # A batch read starts where startingOffsets says: the records before are not read,
        # so partitionTime starts at the first record read.
        partition_times = {tp: -1 for tp in partitions} if options.tracks_partition_time else None
        return plan_input_partitions(ranges, options.max_records_per_partition, options.min_partitions,
                                     consumer_scope=uuid.uuid4().hex, partition_times=partition_times,
                                     in_time_order=options.in_time_order)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from kafkasync_source.executor.range_reader import RangeReader  # EXECUTOR_MODULES

        assert isinstance(partition, KafkaRanges)
        return RangeReader.from_options(self._options, self._schema).read(partition)


def register(spark: SparkSession) -> None:
    """Register ``format("kafkasync")`` explicitly (installed packages are found without it),
    and have Spark mask kafkasync's secret options in plans (see :func:`redact_secret_options`)."""
    redact_secret_options(spark)
    spark.dataSource.register(KafkaSyncDataSource)


def redact_secret_options(spark: SparkSession) -> None:
    """Extend ``spark.sql.redaction.options.regex`` to the ``kafka.*`` secret options.

    A data source cannot change how Spark prints its options in ``explain()``, the SQL UI or
    event logs: Spark masks the options that match this session conf (or
    ``spark.redaction.regex``), and nothing else. The user's own pattern is kept."""
    key = "spark.sql.redaction.options.regex"
    current = spark.conf.get(key) or ""
    if SPARK_OPTIONS_REDACTION_REGEX not in current:
        spark.conf.set(key, f"{current}|{SPARK_OPTIONS_REDACTION_REGEX}" if current else SPARK_OPTIONS_REDACTION_REGEX)
