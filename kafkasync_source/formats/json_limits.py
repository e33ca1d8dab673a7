"""The limits ``from_json`` parses JSON within: Jackson's ``StreamReadConstraints``, which Spark's
``JacksonParser`` keeps at their defaults (Jackson 2.15 and later; Spark 4.3.0 ships 2.21).

Measured with Spark 4.3.0's own ``from_json`` (PERMISSIVE, partial results on), one more than
each limit against the limit itself:

* a number of more than 1,000 digits (an integer's digits, or a float's integer, fraction and
  exponent digits together; the signs do not count), anywhere in the document, even in a field
  the type does not name: the whole record fails (a row of nulls). Jackson checks the length as
  it reads the token, and the parser cannot go on after it;
* an object key of more than 50,000 characters (Java's: UTF-16 code units), anywhere: the
  whole record fails;
* nesting deeper than 1,000 arrays and objects (the document's own object is the first): the
  whole record fails;
* a string of more than 20,000,000 characters that is read (a string field's text, or text
  written back into a string column): that field is null and the others keep their values.
  Jackson reads a string's text only when asked, so one in a field the type does not name costs
  nothing and fails nothing.

kafkasync names a record the first three fail undecodable (formats/decoded.py), as for any
record ``from_json`` has no value for. This reader itself parses as deep as Python's recursion
limit lets msgspec and Python's ``json`` go (they recurse once a level; about 900 levels in a
Spark worker, whose own frames count): a document nested deeper, up to Jackson's 1,000, is
named undecodable too (docs/formats.md lists it). Its depth is measured only then.

The checks of numbers and keys cost a pass over the bytes in C where the document is far from
its limit (a search for a long run of number characters; for a document of more than 50,000
bytes, the distances between its quotes); the exact ones, which find the strings first, run only
where that pass finds the document could be near a limit, and are linear too.
"""

from __future__ import annotations

import re
from typing import Optional

import msgspec
import numpy as np

MAX_NESTING = 1000
MAX_NUMBER_DIGITS = 1000
MAX_NAME_LENGTH = 50_000
MAX_STRING_LENGTH = 20_000_000

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string token, escapes and all (unrolled: one pass, no backtracking)."""
_NUMBER_CHARACTERS = bytes(0x31 if byte in b"0123456789.eE+-" else 0x30 for byte in range(256))
_LONG_RUN = b"1" * (MAX_NUMBER_DIGITS + 1)
_LONG_NUMBER = re.compile(rb"(?<![0-9.eE+-])(?=[0-9.eE+-]{%d})-?([0-9]+)(?:\.([0-9]+))?(?:[eE][+-]?([0-9]+))?"
                          % (MAX_NUMBER_DIGITS + 1))
"""A number token long enough to be near the limit, in text without strings (the look-ahead
stops at the token's end: linear)."""
_KEY_END = re.compile(rb"\s*:")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_DEPTH_STEP = np.full(256, -1, dtype=np.int64)
_DEPTH_STEP[[ord("["), ord("{")]] = 1


def exceeded(document: bytes) -> Optional[str]:
    """Why ``from_json`` has no value for the document, or None: a number's digits, a key's
    length or its nesting beyond the limits (:func:`too_deep` names a depth this reader could not
    parse, within Jackson's limit or not)."""
    if len(document) > MAX_NUMBER_DIGITS and _LONG_RUN in document.translate(_NUMBER_CHARACTERS):
        digits = _most_digits(_STRING.sub(b'""', document))
        if digits > MAX_NUMBER_DIGITS:
            return f"a number has {digits} digits, beyond Jackson's {MAX_NUMBER_DIGITS} (from_json fails such a record)"
    if len(document) > MAX_NAME_LENGTH and _longest_quoted(document) > MAX_NAME_LENGTH:
        longest = _longest_key(document)
        if longest > MAX_NAME_LENGTH:
            return f"a key has {longest} characters, beyond Jackson's {MAX_NAME_LENGTH} (from_json fails such a record)"
    # Python 3.13's parsers go deeper than Jackson's limit before a RecursionError (3.11's do not),
    # so the depth is checked here, not only when parsing fails: where the brackets are too few to
    # nest that deep, two counts in C are all it costs.
    if len(document) > MAX_NESTING and document.count(b"[") + document.count(b"{") > MAX_NESTING:
        depth = _depth(_STRING.sub(b'""', document))
        if depth > MAX_NESTING:
            return f"it nests {depth} levels deep, beyond Jackson's {MAX_NESTING} (from_json fails such a record)"
    return None


def too_deep(document: bytes) -> str:
    """Why a document this reader could not parse for its depth (Python's recursion limit) has
    no value: beyond Jackson's limit, or beyond what this reader parses."""
    depth = _depth(_STRING.sub(b'""', document))
    if depth > MAX_NESTING:
        return f"it nests {depth} levels deep, beyond Jackson's {MAX_NESTING} (from_json fails such a record)"
    return f"it nests {depth} levels deep, deeper than this reader parses (Python's recursion limit)"


def string_too_long(text: bytes) -> bool:
    """Whether the JSON value ``text`` (a string, or a value written back as text) holds a
    string of more than :data:`MAX_STRING_LENGTH` characters, which ``from_json`` does not read."""
    if len(text) <= MAX_STRING_LENGTH:  # a character is one byte of JSON text at least
        return False
    return any(_java_length(match.group()) > MAX_STRING_LENGTH for match in _STRING.finditer(text)
               if match.end() - match.start() > MAX_STRING_LENGTH)


def _java_length(token: bytes) -> int:
    """The UTF-16 length of a JSON string token's text, as Java counts a String; 0 for a token
    msgspec does not read (a lone surrogate escape), whose document it refuses anyway."""
    try:
        return len(msgspec.json.decode(token, type=str).encode("utf-16-le", "surrogatepass")) // 2
    except msgspec.DecodeError:
        return 0


def _depth(without_strings: bytes) -> int:
    brackets = without_strings.translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return int(np.cumsum(_DEPTH_STEP[np.frombuffer(brackets, dtype=np.uint8)]).max())


def _most_digits(without_strings: bytes) -> int:
    """The most digits a number token has, as Jackson counts them (see the module)."""
    return max((sum(len(part) for part in match.groups() if part) for match in _LONG_NUMBER.finditer(without_strings)),
               default=0)


def _longest_quoted(document: bytes) -> int:
    """The most bytes between two quotes that are not escaped: at least the longest string's
    (numpy, a few passes; only a quote that follows a backslash is looked at in Python, walking
    back over its backslashes: linear too)."""
    characters = np.frombuffer(document, dtype=np.uint8)
    quotes = np.flatnonzero(characters == ord('"'))
    after_backslash = quotes[(quotes > 0) & (characters[quotes - 1] == ord("\\"))]
    if len(after_backslash):
        quotes = np.setdiff1d(quotes, [q for q in after_backslash.tolist() if _escaped(document, q)])
    return int(np.diff(quotes).max(initial=0))


def _escaped(document: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` follows an odd number of backslashes."""
    start = quote
    while start > 0 and document[start - 1] == 0x5C:
        start -= 1
    return (quote - start) % 2 == 1


def _longest_key(document: bytes) -> int:
    """The longest object key, in Java's characters (only keys long enough in bytes are decoded)."""
    longest = 0
    for match in _STRING.finditer(document):
        if match.end() - match.start() - 2 > MAX_NAME_LENGTH and _KEY_END.match(document, match.end()):
            longest = max(longest, _java_length(match.group()))
    return longest
