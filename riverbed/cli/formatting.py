"""How ``riverbed consume`` prints a record: kcat's format strings, or Kafka's print.* properties.

Two ways to say the same thing, both compiled to a ``Formatter`` (record → bytes):

- ``--format`` takes a kcat-style format string (``kcat -f``):

  ======  =====================================================
  ``%s``  value (nothing for a null value)
  ``%S``  value length in bytes (-1 for null)
  ``%k``  key (nothing for a null key)
  ``%K``  key length in bytes (-1 for null)
  ``%t``  topic
  ``%p``  partition
  ``%o``  offset
  ``%T``  timestamp, milliseconds since the epoch (-1 if none)
  ``%h``  headers as ``k=v,k2=v2`` (nothing if none)
  ``%%``  a percent sign
  ======  =====================================================

  and the escapes ``\\n``, ``\\t``, ``\\r`` and ``\\\\``. The default is ``%s\\n``, one value per
  line, like kafka-console-consumer.
- ``--property print.key=true`` and friends follow Kafka's DefaultMessageFormatter: fields in
  the order timestamp (``CreateTime:1700000000000``), partition (``Partition:0``), offset
  (``Offset:5``), headers (``k:v,k2:v2`` or ``NO_HEADERS``), key, value, separated by
  ``key.separator`` (tab), ended by ``line.separator`` (newline); nulls print as
  ``null.literal`` (``null``).

Keys, values and header values are written as raw bytes, so binary data passes through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from riverbed.cli.errors import CliError
from riverbed.cli.properties import boolean, unescape, with_defaults

__all__ = [
    "DEFAULT_FORMAT",
    "FORMAT_PROPERTIES",
    "Formatter",
    "compile_format",
    "compile_properties",
]

DEFAULT_FORMAT = "%s\\n"

# Kafka's DefaultMessageFormatter properties (kafka.tools.consumer.DefaultMessageFormatter).
FORMAT_PROPERTIES: dict[str, str] = {
    "print.timestamp": "false",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "print.key": "false",
    "print.value": "true",
    "key.separator": "\\t",
    "line.separator": "\\n",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.literal": "null",
}

Field = Callable[[Any], bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class Formatter:
    """Renders one confluent-kafka ``Message`` as the bytes to print."""

    parts: Sequence[bytes | Field]

    def __call__(self, message: Any) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part(message) for part in self.parts)


def _bytes(data: bytes | str | None, null: bytes = b"") -> bytes:
    if data is None:
        return null
    return data.encode() if isinstance(data, str) else data


def _length(data: bytes | str | None) -> bytes:
    return b"-1" if data is None else str(len(_bytes(data))).encode()


def _timestamp_ms(message: Any) -> int:
    kind, value = message.timestamp()
    return int(value) if kind != 0 else -1  # 0 is TIMESTAMP_NOT_AVAILABLE


def _headers(message: Any, *, pair: bytes, separator: bytes, null: bytes) -> bytes:
    headers = message.headers() or []
    return separator.join(_bytes(key) + pair + _bytes(value, null) for key, value in headers)


_PLACEHOLDERS: dict[str, Field] = {
    "s": lambda m: _bytes(m.value()),
    "S": lambda m: _length(m.value()),
    "k": lambda m: _bytes(m.key()),
    "K": lambda m: _length(m.key()),
    "t": lambda m: _bytes(m.topic()),
    "p": lambda m: str(m.partition()).encode(),
    "o": lambda m: str(m.offset()).encode(),
    "T": lambda m: str(_timestamp_ms(m)).encode(),
    "h": lambda m: _headers(m, pair=b"=", separator=b",", null=b""),
}


def compile_format(fmt: str) -> Formatter:
    """A kcat-style format string → ``Formatter``; an unknown ``%x`` is a usage error (exit 2)."""
    text = unescape(fmt)
    parts: list[bytes | Field] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            literal.append(char)
            i += 1
            continue
        if i + 1 >= len(text):
            raise CliError(f"--format ends with a lone '%': {fmt!r}", exit_code=2)
        code = text[i + 1]
        i += 2
        if code == "%":
            literal.append("%")
            continue
        if code not in _PLACEHOLDERS:
            known = " ".join(f"%{c}" for c in _PLACEHOLDERS)
            raise CliError(f"--format: unknown placeholder %{code} (known: {known})", exit_code=2)
        if literal:
            parts.append("".join(literal).encode())
            literal = []
        parts.append(_PLACEHOLDERS[code])
    if literal:
        parts.append("".join(literal).encode())
    return Formatter(parts=parts)


def compile_properties(properties: dict[str, str]) -> Formatter:
    """Kafka's ``print.*`` properties → ``Formatter``; an unknown property is a usage error."""
    settings = with_defaults(properties, FORMAT_PROPERTIES)

    def flag(name: str) -> bool:
        return boolean(settings, name)

    def text(name: str) -> bytes:
        return unescape(settings[name]).encode()

    null = text("null.literal")
    pair, header_separator = text("headers.key.separator"), text("headers.separator")

    def timestamp(message: Any) -> bytes:
        kind, value = message.timestamp()
        names = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}
        return f"{names[kind]}:{value}".encode() if kind in names else b"NO_TIMESTAMP"

    def headers(message: Any) -> bytes:
        if not message.headers():
            return b"NO_HEADERS"
        return _headers(message, pair=pair, separator=header_separator, null=null)

    fields: list[Field] = []
    if flag("print.timestamp"):
        fields.append(timestamp)
    if flag("print.partition"):
        fields.append(lambda m: f"Partition:{m.partition()}".encode())
    if flag("print.offset"):
        fields.append(lambda m: f"Offset:{m.offset()}".encode())
    if flag("print.headers"):
        fields.append(headers)
    if flag("print.key"):
        fields.append(lambda m: _bytes(m.key(), null))
    if flag("print.value"):
        fields.append(lambda m: _bytes(m.value(), null))
    parts: list[bytes | Field] = []
    for index, field in enumerate(fields):
        if index:
            parts.append(text("key.separator"))
        parts.append(field)
    parts.append(text("line.separator"))
    return Formatter(parts=parts)
