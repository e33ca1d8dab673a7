"""``format("kafkasync")``: the DataSource Spark instantiates, plus batch reads."""

from __future__ import annotations

import pkgutil
import tempfile
import uuid
import warnings
from typing import Any, Iterator, Mapping, Optional, Sequence

import pyspark
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
    and have Spark mask kafkasync's secret options in plans (see :func:`redact_secret_options`).

    Works where the session's configuration cannot be changed: inside a Spark Declarative
    Pipelines definition file (``spark.conf.set`` raises ``SESSION_MUTATION_IN_DECLARATIVE_
    PIPELINE``) or on a Connect server that refuses the setting, it registers all the same and
    warns once, saying where to set the regex instead (:data:`REDACTION_SETTING`).

    Inside a pipeline definition on PySpark < 4.2 it refuses, naming the version: those runs
    complete having read nothing (see the error). Where Spark's discovery finds kafkasync in this Python (the
    one ``spark-pipelines`` runs, PYSPARK_PYTHON, which its server's workers run too), the
    pipeline's session gets no registration of its own: a Python data source registered in a
    Connect session sends its planning workers' accumulator updates to that session, Spark
    Connect returns them with the pipeline run's last response, and the ``spark-pipelines``
    client fails on them (``UNKNOWN_RESPONSE``), exit 1 after a run that wrote everything.

    On a classic session the registration carries the environment entries that Spark's
    streaming source runner would otherwise add to it when a query starts (see
    :data:`STREAMING_RUNNER_ENVIRONMENT`), so that queries started at once cannot corrupt it."""
    in_pipeline = _in_pipeline_definition()
    if in_pipeline and _pyspark_line() < (4, 2):
        raise RuntimeError(
            f"kafkasync needs PySpark >= 4.2 in a Spark Declarative Pipeline; this is "
            f"{pyspark.__version__}. Pipelines run streaming tables with an AvailableNow trigger, "
            f"which a Python data source supports from PySpark 4.2 on (SupportsTriggerAvailableNow); "
            f"4.1 falls back to a single batch, and kafkasync's first batch there reads nothing: the "
            f"run completes having written 0 rows.")
    try:
        redact_secret_options(spark)
    except Exception as refused:  # noqa: BLE001 - any refusal: the registration itself must go on
        condition = getattr(refused, "getCondition", lambda: None)() or type(refused).__name__
        _warn_once(
            f"kafkasync: this session does not let register() set spark.sql.redaction.options.regex "
            f"({condition}), as inside a Spark Declarative Pipeline or on a locked-down Connect "
            f"server. format(\"kafkasync\") is registered, but Spark will print secret kafka.* "
            f"options (kafka.ssl.key.pem, kafka.sasl.jaas.config) in plans and the UI until the "
            f"regex is set where the session is configured: in spark-pipeline.yml under "
            f"'configuration:', or as --conf '{REDACTION_SETTING}'.")
    if _is_classic(spark):
        _register_with_runner_environment(spark)
    elif in_pipeline:
        _register_in_pipeline(spark)
    else:
        spark.dataSource.register(KafkaSyncDataSource)


def _register_in_pipeline(spark: SparkSession) -> None:
    """Leave the pipeline's session to discovery where discovery finds kafkasync (see
    :func:`register` on ``UNKNOWN_RESPONSE``): the call is then only the version check, which
    a definition file may make on purpose. Register it there otherwise, saying what follows."""
    if _discoverable():
        return
    _warn_once(
        "kafkasync: Spark's discovery does not find format(\"kafkasync\") in this Python, so "
        "register() registers it in the pipeline's session; spark-pipelines will then exit 1 "
        "after the run (UNKNOWN_RESPONSE ... __python_accumulator__), though the run writes "
        "everything. Install kafkasync so that discovery finds it (not a default editable "
        "install: --config-settings editable_mode=compat) into the Python spark-pipelines runs "
        "(PYSPARK_PYTHON), and drop the call.")
    spark.dataSource.register(KafkaSyncDataSource)


REDACTION_SETTING = f"spark.sql.redaction.options.regex=(?i)url|{SPARK_OPTIONS_REDACTION_REGEX}"
"""The setting :func:`register` makes, as a user writes it where the session is configured
(``--conf``, ``spark-defaults.conf``, a pipeline's ``configuration:``): Spark's default
``(?i)url`` and kafkasync's secret options."""


def redact_secret_options(spark: SparkSession) -> None:
    """Extend ``spark.sql.redaction.options.regex`` to the ``kafka.*`` secret options.

    A data source cannot change how Spark prints its options in ``explain()``, the SQL UI or
    event logs: Spark masks the options that match this session conf (or
    ``spark.redaction.regex``), and nothing else. The user's own pattern is kept, and a
    session whose regex already holds kafkasync's (set where the session was configured) is
    left alone: nothing to set, nothing a locked session could refuse."""
    key = "spark.sql.redaction.options.regex"
    current = spark.conf.get(key) or ""
    if SPARK_OPTIONS_REDACTION_REGEX not in current:
        spark.conf.set(key, f"{current}|{SPARK_OPTIONS_REDACTION_REGEX}" if current else SPARK_OPTIONS_REDACTION_REGEX)


_said: set[str] = set()
"""The warnings this process gave already: each is given once."""


def _warn_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        warnings.warn(message, stacklevel=3)


def _in_pipeline_definition() -> bool:
    """Whether ``spark-pipelines`` is registering its definition files right now (PySpark >= 4.1
    sets the active graph element registry around each file it imports)."""
    try:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.pipelines.graph_element_registry import get_active_graph_element_registry
    except ImportError:  # PySpark 4.0, or no pipelines dependencies: no pipeline either
        return False
    try:
        get_active_graph_element_registry()
    except PySparkRuntimeError:
        return False
    return True


def _pyspark_line() -> tuple[int, int]:
    major, minor = pyspark.__version__.split(".")[:2]
    return int(major), int(minor)


def _discoverable() -> bool:
    """Whether Spark's discovery (``pyspark.sql.worker.lookup_data_sources``: the top-level
    ``pyspark_*`` modules ``pkgutil.iter_modules()`` lists) finds kafkasync in this Python."""
    return any(module.name == "pyspark_kafkasync" for module in pkgutil.iter_modules())


STREAMING_RUNNER_ENVIRONMENT = {"SPARK_LOCAL_DIRS": tempfile.gettempdir(), "SPARK_AUTH_SOCKET_TIMEOUT": "15",
                                "SPARK_BUFFER_SIZE": "65536", "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}
"""The keys Spark's ``PythonStreamingSourceRunner.init()`` (Spark 4.0-4.3) puts, unsynchronized, into
the registered data source's own environment map (``func.envVars``: every function
``UserDefinedPythonDataSource.createPythonFunction`` makes shares it) each time a streaming query
starts. Two queries starting at once put into the same ``HashMap`` from two threads; a lost
``size`` update leaves it with one entry more than its size says, and every task that serializes
it (each batch's reader factory carries the data source) then fails to deserialize
(``java.io.OptionalDataException`` in ``HashMap.readObject``). Where the keys are there from the
registration on, a put only replaces a value: nothing in the map's structure changes.

The values are Spark's defaults and the temporary directory, not the running ones (the driver's
block manager directories are not readable from Python): every runner writes its own before it
starts a worker (``PythonStreamingSourceRunner.init``, ``PythonPlannerRunner``,
``BasePythonRunner.compute``), so no process sees these; only the keys matter."""


def _register_with_runner_environment(spark: SparkSession) -> None:
    """``spark.dataSource.register`` with :data:`STREAMING_RUNNER_ENVIRONMENT`'s keys in the
    registration's environment: a classic registration copies ``sparkContext.environment``
    into a new Java map (``_prepare_for_python_RDD``); a key the user set there already stays
    theirs. The context's environment is restored afterwards: later UDFs get none of these."""
    context = spark.sparkContext
    saved = dict(context.environment)
    context.environment.update({key: value for key, value in STREAMING_RUNNER_ENVIRONMENT.items() if key not in saved})
    try:
        spark.dataSource.register(KafkaSyncDataSource)
    finally:
        context.environment.clear()
        context.environment.update(saved)


def _is_classic(spark: SparkSession) -> bool:
    """A classic session (py4j, a ``sparkContext``), not a Spark Connect client: a process may
    hold both (``SPARK_CONNECT_MODE_ENABLED`` says nothing about the session at hand)."""
    return hasattr(spark, "_jsc")
