"""Schema Registry formats: Confluent-framed Avro, Protobuf and JSON Schema, decoded where the
records are read — on the driver's fetch path (for ``eventTime.field``) and on the executors
(``eventTime.field`` and ``value.decode``) — so this package, like ``event_time/``, runs on both
sides and imports nothing of the driver, the executors or the planner.

* :mod:`~kafkasync_source.formats.framing`: the magic byte, the schema id, Protobuf's indexes;
* :mod:`~kafkasync_source.formats.registry`: the registry client, one per process, its schemas
  fetched by id once and kept; settings whose secrets never show;
* :mod:`~kafkasync_source.formats.options`: ``value.format`` / ``key.format`` as the decoders take them;
* :mod:`~kafkasync_source.formats.avro`, :mod:`~kafkasync_source.formats.protobuf`,
  :mod:`~kafkasync_source.formats.json_schema`: a field's time, the decoded value and its Spark type
  (Protobuf's and JSON's values as Spark's ``from_protobuf`` and ``from_json`` give them:
  :mod:`~kafkasync_source.formats.protobuf_columns`, :mod:`~kafkasync_source.formats.json_values`,
  within the limits of :mod:`~kafkasync_source.formats.json_limits`);
* :mod:`~kafkasync_source.formats.decoded`: a column decoder's answer, its values and the rows
  it could not decode.

The registry client and the decoders are the optional extra ``kafkasync[registry]``; nothing here
imports them before a query asks for a format.
"""

from kafkasync_source.formats.options import (
    AVRO,
    FORMAT_NAMES,
    JSON_SCHEMA,
    PROTOBUF,
    SUBJECT_NAME_STRATEGIES,
    FormatOptions,
    pin_reader_schema,
    require_extra,
    subject_of,
)
from kafkasync_source.formats.registry import EXTRA, KafkaSyncFormatError, RegistrySettings

__all__ = [
    "AVRO",
    "EXTRA",
    "FORMAT_NAMES",
    "JSON_SCHEMA",
    "PROTOBUF",
    "SUBJECT_NAME_STRATEGIES",
    "FormatOptions",
    "KafkaSyncFormatError",
    "RegistrySettings",
    "pin_reader_schema",
    "require_extra",
    "subject_of",
]
