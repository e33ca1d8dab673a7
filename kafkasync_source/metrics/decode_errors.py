"""Counting the records a query could not decode (``<part>.decode.mode=PERMISSIVE``), per kind,
where every query can see them: Spark's observed metrics.

Under PERMISSIVE each record whose value (key) cannot be decoded has a null ``valueDecoded`` and
its reason in ``valueDecodeError`` (executor/decode_policy.py), ``kind: reason (schema id N)``
with a kind of formats/decoded.py. A Python data source cannot count them itself: no channel
leads from its executors back to the query (no custom source metrics, no accumulator without a
SparkContext; DESIGN.md, "Lessons from round 4"). The rows do reach the query, so they are
counted there, by ``DataFrame.observe``: Spark sums the counts of each micro-batch's successful
tasks and reports them in the batch's progress (``progress.observedMetrics[name]``), on classic
and Spark Connect sessions alike, and :class:`~kafkasync_source.metrics.listener.KafkaSyncListener`
adds them up per query (``SyncMetrics.decode_errors`` / ``decode_errors_total``).

::

    events = spark.readStream.format("kafkasync")...option("value.decode.mode", "PERMISSIVE").load()
    events = observe_decode_errors(events)      # before any filter: every record counted
    bad = events.where("valueDecodeError IS NOT NULL")   # a dead-letter table, if wanted
"""

from __future__ import annotations

from typing import Any

from kafkasync_source.formats.decoded import KINDS

DECODE_ERRORS = "kafkasync_decode_errors"
"""The observed metrics' default name (unique per query: Spark refuses two of one name)."""
ERROR_COLUMNS = ("keyDecodeError", "valueDecodeError")


def metric_name(column: str, kind: str) -> str:
    """``valueNotFramed``, ``keyUnknownSchema``...: the observed count of ``column``'s records of ``kind``."""
    return column[: -len("DecodeError")] + "".join(word.capitalize() for word in kind.split("-"))


def observe_decode_errors(frame: Any, name: str = DECODE_ERRORS) -> Any:
    """``frame`` observed (``DataFrame.observe(name, ...)``) with, for each of its
    ``<part>DecodeError`` columns, the count of its records of each kind (:func:`metric_name`)
    and of all of them (``valueUndecodable``). Apply it to the source's DataFrame before any
    filter, so that every record read is counted. ValueError where ``frame`` has no such column
    (set ``value.decode=true`` and ``value.decode.mode=PERMISSIVE``)."""
    from pyspark.sql import functions as F

    columns = [column for column in ERROR_COLUMNS if column in frame.columns]
    if not columns:
        raise ValueError(
            "observe_decode_errors: the DataFrame has no keyDecodeError or valueDecodeError column; set "
            "value.decode=true (key.decode) and value.decode.mode=PERMISSIVE on the kafkasync source.")
    counts = []
    for column in columns:
        error = F.col(column)
        counts += [F.count(F.when(error.startswith(f"{kind}:"), 1)).alias(metric_name(column, kind)) for kind in KINDS]
        counts.append(F.count(error).alias(column[: -len("DecodeError")] + "Undecodable"))
    return frame.observe(name, *counts)
