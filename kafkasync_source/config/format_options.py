"""``value.format`` / ``key.format`` and the options read with them (``schema.registry.*``,
``<part>.subject``, ``.subject.name.strategy``, ``.record.name``, ``.decode``), parsed into the
:class:`~kafkasync_source.formats.options.FormatOptions` the decoders take. Apart from
options.py because a format's options are a small language of their own (a subject, a reader
schema pinned in the registry), and options.py holds everything else."""

from __future__ import annotations

from typing import Mapping, Optional

from kafkasync_source.config.errors import KafkaSyncOptionError
from kafkasync_source.config.option_values import boolean, one_of
from kafkasync_source.formats.options import (
    DECODE_MODES,
    FORMAT_NAMES,
    LATEST,
    SUBJECT_NAME_STRATEGIES,
    FormatOptions,
    ReaderPin,
    pin_reader_schema,
    require_extra,
    subject_of,
)
from kafkasync_source.formats.registry import RegistrySettings

REGISTRY_PREFIX = "schema.registry."
_MAX_VERSION = 2**31 - 1
"""Versions are Java ints in Confluent's registry (and Apicurio's compatible API)."""
_PART_OPTIONS = ("subject", "subject.name.strategy", "subject.version", "record.name", "decode", "decode.mode")
FORMAT_OPTIONS = ("schema.registry.url", "schema.registry.*",
                  *(f"{part}.{name}" for part in ("key", "value") for name in ("format", *_PART_OPTIONS)))
"""The Schema Registry formats' options (read through :func:`format_options`), for the options reference's test."""


def format_options(lowered: Mapping[str, str], topics: tuple[str, ...], *, part: str, needs_reader: bool,
                   carried: Optional[ReaderPin] = None) -> Optional[FormatOptions]:
    """``<part>.format`` with ``schema.registry.*`` and ``<part>.subject`` / ``.subject.name.strategy``
    / ``.subject.version`` / ``.record.name`` / ``.decode`` / ``.decode.mode``. Where the value is
    decoded or a field of it is the event time, the reader schema is pinned: ``carried``, the pin
    an earlier process of this query made (spark/schema.py), else the subject's version asked of
    the registry now (it must answer, or the query does not start; formats/options.py).
    ``topics``: the subscribed topics, which name the subject under ``topic-name``."""
    given = [f"{part}.{name}" for name in _PART_OPTIONS if f"{part}.{name}" in lowered]
    if f"{part}.format" not in lowered:
        if given:
            raise KafkaSyncOptionError(f"Option '{given[0]}' needs '{part}.format'.")
        return None
    option = f"{part}.format"
    format_name = one_of(lowered, option, FORMAT_NAMES)
    url = lowered.get(f"{REGISTRY_PREFIX}url", "").strip()
    if not url:
        raise KafkaSyncOptionError(f"Option '{option}={format_name}' needs 'schema.registry.url'.")
    settings = tuple(sorted((key[len(REGISTRY_PREFIX):], value) for key, value in lowered.items()
                            if key.startswith(REGISTRY_PREFIX) and key != f"{REGISTRY_PREFIX}url"))
    registry_settings = RegistrySettings(url, settings)
    decode = boolean(lowered, f"{part}.decode", f"{part}.decode", False)
    if f"{part}.decode.mode" in lowered and not decode:
        raise KafkaSyncOptionError(f"Option '{part}.decode.mode' applies to the decoded column: set '{part}.decode'.")
    decode_mode = one_of(lowered, f"{part}.decode.mode", DECODE_MODES)
    strategy = one_of(lowered, f"{part}.subject.name.strategy", SUBJECT_NAME_STRATEGIES)
    subject_version = _subject_version(lowered, part)
    if subject_version is not None and not (decode or needs_reader):
        raise KafkaSyncOptionError(
            f"Option '{part}.subject.version' chooses the reader schema of '{part}.decode' or "
            "'eventTime.field': set one of them.")
    try:
        require_extra(format_name, option)
        record_name = lowered.get(f"{part}.record.name", "").strip() or None
        subject = lowered.get(f"{part}.subject") or subject_of(strategy, part, topics, record_name)
        options = FormatOptions(format_name, registry_settings, part, subject, decode=decode, record_name=record_name,
                                subject_version=subject_version, decode_mode=decode_mode)
        if decode or needs_reader:
            options = pin_reader_schema(options, required=decode, carried=carried)
    except ValueError as err:
        raise KafkaSyncOptionError(registry_settings.scrub(str(err))) from None
    return options


def _subject_version(lowered: Mapping[str, str], part: str) -> Optional[int]:
    """``<part>.subject.version``: a version number of the subject, or ``latest`` (None)."""
    value = lowered.get(f"{part}.subject.version", LATEST).strip()
    if value.lower() == LATEST:
        return None
    # ASCII digits only: str.isdigit() also takes '²' (int() then raises) and '١' (int() reads 1).
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= _MAX_VERSION:
        raise KafkaSyncOptionError(
            f"Option '{part}.subject.version' must be a version number of the subject (1, 2, ...) or "
            f"'{LATEST}'; got {value!r}.")
    return int(value)
