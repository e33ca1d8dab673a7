"""``subscribePattern`` is a ``java.util.regex`` pattern in Spark: translated to Python ``re``."""

from __future__ import annotations

import re

from kafkasync_source.config.errors import KafkaSyncOptionError

# Java's ``(?<name>...)`` and ``\k<name>``; not the look-behinds ``(?<=`` and ``(?<!``.
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")
_JAVA_NAMED_BACKREF = re.compile(r"\\k<([A-Za-z][A-Za-z0-9]*)>")
_JAVA_QUOTE = re.compile(r"\\Q(.*?)(?:\\E|$)", re.S)


def java_regex_to_python(pattern: str) -> str:
    """Translate ``subscribePattern`` (a ``java.util.regex`` pattern in Spark) to Python ``re``.

    Translated: named groups ``(?<name>...)``, named back-references ``\\k<name>`` and
    ``\\Q...\\E`` quoting. Possessive quantifiers and atomic groups need Python >= 3.11.
    Java-only constructs such as ``\\p{Alpha}`` classes, ``[a-z&&[^e]]`` intersections and
    ``\\G`` are not translated: Python rejects most of them, and the error names the option."""
    python = _JAVA_QUOTE.sub(lambda m: re.escape(m.group(1)), pattern)
    python = _JAVA_NAMED_GROUP.sub("(?P<", python)
    python = _JAVA_NAMED_BACKREF.sub(r"(?P=\1)", python)
    try:
        if "&&" in python:  # Python reads [a-z&&[^e]] as a set of characters, silently
            raise re.error("Java character class intersection (&&)")
        re.compile(python)
    except re.error as err:
        raise KafkaSyncOptionError(
            f"Option 'subscribePattern' {pattern!r} is not a regex kafkasync can use: {err}. "
            "Java's named groups, \\k<name> and \\Q...\\E are translated; Java-only "
            "constructs such as \\p{...} classes and [..&&..] intersections are not supported."
        ) from None
    return python
