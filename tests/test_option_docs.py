"""The options reference and the code cannot drift: docs/reference/options.md is what
option_docs.py generates, and every option options.py reads is documented there."""

from __future__ import annotations

import os
import re

from kafkasync_source.config import client_config, format_options, options
from kafkasync_source.config.option_docs import documented_source_options, reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_committed_reference_is_what_the_code_generates():
    with open(os.path.join(ROOT, "docs", "reference", "options.md")) as committed:
        assert committed.read() == reference(), (
            "docs/reference/options.md is stale: run python -m kafkasync_source.config.option_docs "
            "> docs/reference/options.md")


def test_every_option_the_code_reads_is_documented_and_every_documented_one_accepted():
    # The options are read in options.py and format_options.py, and the group id's in client_config.py.
    code = "".join(open(module.__file__).read() for module in (options, format_options, client_config))
    # Each option is read from the lower-cased map as lowered.get("x"), "x" in lowered, or a
    # helper(lowered, "x" or "xDisplayName", ...) that lower-cases it.
    read = {name.lower() for name in re.findall(r'lowered(?:\.get\(|,)\s*"([A-Za-z][A-Za-z0-9.]*)"', code)}
    read |= set(re.findall(r'"([a-z][a-z0-9.]*)" in lowered', code))
    read |= {name.lower() for pair in re.findall(r'_timestamp_spec\(lowered, "(\w+)", "(\w+)"\)', code)
             for name in pair}
    read |= set(options._SUBSCRIPTIONS)
    read |= {name.lower() for name in options.EVENT_TIME_OPTIONS.values()}  # read through that map
    read |= {name.lower() for name in format_options.FORMAT_OPTIONS}  # read by key/value part
    source_options = {name for name in read if not name.startswith("kafka.")}
    assert len(source_options) > 25, sorted(source_options)  # the patterns still find them
    assert source_options - documented_source_options() == set()
    assert documented_source_options() - source_options == set(), "documented but never read"
    assert options._KNOWN_OPTIONS == documented_source_options() | {"path"}


def test_an_undocumented_option_is_refused_naming_it():
    import pytest

    with pytest.raises(options.KafkaSyncOptionError, match="maxoffsetpertrigger"):
        options.parse_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
                               "maxOffsetPerTrigger": "5"}, streaming=True)
