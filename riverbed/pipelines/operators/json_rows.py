"""Rows and JSON values as the operators handle them: keys, values and states are JSON.

Nothing here knows Spark: the pure logic and the Spark operators both use it.

- :data:`Json` and :data:`Row`: a JSON value, a JSON object (a row of a table, an event);
- :func:`dumps`: the compact JSON text of a value, keys in their order: the form of output
  keys and values;
- :func:`json_text`: the canonical JSON text of a value (keys sorted): the name of a key
  in state maps, equal for equal values;
- :func:`state_text` and :func:`read_state`: a state's JSON text written and read back;
- :func:`loads`: any JSON text read;
- :func:`plain`: a numpy scalar (a grouping key as PySpark hands it over) as the Python
  value that JSON can encode.

**orjson where it gives the same result.** The operators read and write JSON for every
record and every state they touch, and orjson reads about six times and writes about ten
times as fast as ``json`` (a Debezium envelope: 1.6 against 9.9 µs read; a key's canonical
text: 0.4 against 5.0 µs). Where orjson would differ, ``json`` does the work: orjson reads
an integer beyond 64 bits as a float and refuses ``NaN`` and ``Infinity`` (which ``json``
writes), writes floats in another form (``1e16``, not ``1e+16``), writes ``NaN`` as
``null`` and refuses integers beyond 64 bits. So :func:`loads` gives what ``json.loads``
gives, :func:`dumps` and :func:`json_text` the text ``json.dumps`` writes (a key's name in a
checkpoint must not change), and :func:`state_text` text that reads back to the value. A
state text marks the values that ``json`` wrote (:data:`JSON_WROTE`), so that
:func:`read_state` need not look for long numbers in every slot it reads (that look costs
about a fifth of orjson's read).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson

__all__ = [
    "JSON_WROTE",
    "Json",
    "Row",
    "dumps",
    "json_text",
    "loads",
    "nonfinite_read",
    "plain",
    "read_state",
    "state_text",
]

Json = Any
"""A JSON value (what json.dumps accepts)."""
Row = dict[str, Json]
"""A row as a JSON object."""


_EXACT_SCALARS = frozenset({str, int, bool, type(None)})
"""Types that orjson writes as ``json`` does (an int beyond 64 bits it refuses)."""
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19
"""19 digits in a row: maybe an integer beyond 64 bits, which orjson reads as a float."""


def _exact_for_orjson(value: Json) -> bool:
    """Whether orjson writes ``value`` as ``json`` does: no float in it, and every object's
    keys strings (orjson refuses other keys; ``json`` turns them into strings). Loops, not
    generators: it runs on every key's name (``json_text``)."""
    kind = type(value)
    if kind in _EXACT_SCALARS:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) not in _EXACT_SCALARS and not _exact_for_orjson(item):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _EXACT_SCALARS and not _exact_for_orjson(item):
                return False
        return True
    return False


def _quoted(value: Json) -> str | None:
    """The JSON text of a string of printable ASCII without a quote or a backslash (the
    usual key: a card, a search id), which needs no escape; None for anything else."""
    plain_ascii = type(value) is str and value.isascii() and value.isprintable()
    if plain_ascii and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return None


def _as_json_writes(value: Json, *, sort_keys: bool) -> str:
    """The compact JSON text ``json.dumps`` writes of ``value`` (non-ASCII as it is, keys
    sorted or not), made by orjson when that gives the same text."""
    quoted = _quoted(value)
    if quoted is not None:
        return quoted
    if _exact_for_orjson(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None).decode()
        except TypeError:  # an integer beyond 64 bits, a lone surrogate
            pass
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)


def dumps(value: Json) -> str:
    """The compact JSON text of ``value`` (no spaces, non-ASCII as it is, keys in their
    order), exactly as ``json.dumps`` writes it."""
    return _as_json_writes(value, sort_keys=False)


JSON_WROTE = " "
"""The start of a state text that ``json`` wrote (JSON allows the space): what orjson would
have read differently is in it."""
_MARKS = (JSON_WROTE, JSON_WROTE.encode())


def state_text(value: Json, *, parsed: bool = False) -> str:
    """Compact JSON text of ``value`` for a state, as :func:`dumps` writes it but for floats,
    written in their shortest form (``1e16``, not ``1e+16``), which :func:`read_state` and
    :func:`loads` read back to the same value. An integer beyond 64 bits, and a ``NaN`` or
    an infinity (which orjson writes as ``null``), are written by ``json``, after
    :data:`JSON_WROTE`. A text with a ``null`` is read back and compared with ``value`` to
    tell (orjson's read and Python's comparison of the two cost half a walk over the value
    in Python); one that differs for another reason (a tuple, read back as a list) is
    written by ``json`` too.

    ``parsed``: the caller vouches that every float in ``value`` was read by :func:`loads`
    or :func:`read_state` (none computed). orjson reads no
    ``NaN`` or infinity, and those two note when ``json`` read one (:func:`nonfinite_read`),
    so the read-back is skipped unless this process has read one: for states of parsed
    events and rows, nearly every one of which holds a ``null``, it was about three times
    orjson's write."""
    try:
        text = orjson.dumps(value)
    except TypeError:
        return JSON_WROTE + dumps(value)
    if (not parsed or _nonfinite_read) and b"null" in text and orjson.loads(text) != value:
        return JSON_WROTE + dumps(value)
    return text.decode()


_nonfinite_read = False
"""Whether :func:`loads` or :func:`read_state` has read a ``NaN`` or an infinity in this
process (``json`` did: orjson refuses them)."""


def nonfinite_read() -> bool:
    """Whether this process has read a ``NaN`` or an infinity (:func:`state_text`)."""
    return _nonfinite_read


def _json_read(text: str | bytes) -> Json:
    """``json.loads``, noting a non-finite float in what it read (:func:`nonfinite_read`)."""
    global _nonfinite_read
    value = json.loads(text)
    if not _nonfinite_read and _has_nonfinite(value):
        _nonfinite_read = True
    return value


def _has_nonfinite(value: Json) -> bool:
    """Whether ``value`` holds a ``NaN`` or an infinity (a loop, not recursion: the value
    may nest as deep as ``json`` reads)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float and not math.isfinite(item):
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def read_state(text: str | bytes) -> Json:
    """The value of a text :func:`state_text` wrote: orjson reads it, without the check
    :func:`loads` makes for long numbers, unless it starts with :data:`JSON_WROTE`. (A state
    written before that mark existed, holding an integer beyond 64 bits, is read as a
    float, as it was then.)"""
    if text[:1] in _MARKS:
        return _json_read(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN or Infinity in a state written before the mark
        return _json_read(text)


def loads(text: str | bytes) -> Json:
    """The value of JSON text, as ``json.loads`` reads it: orjson's, unless the text holds
    19 digits in a row (an integer beyond 64 bits, which orjson would read as a float) or
    something orjson refuses (``NaN``, ``Infinity``, UTF-16, an error)."""
    raw = text.encode(errors="surrogatepass") if isinstance(text, str) else text
    if _LONG_NUMBER not in raw.translate(_DIGITS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return _json_read(text)


def json_text(value: Json) -> str:
    """The canonical JSON text of a value (sorted keys): the name of a key in state maps,
    exactly as ``json.dumps(value, sort_keys=True, ...)`` writes it."""
    return _as_json_writes(value, sort_keys=True)


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value JSON can encode (anything else as it is)."""
    return value.item() if isinstance(value, np.generic) else value
