"""Kafka-tool ``--property NAME=VALUE`` settings: defaults, booleans and escaped separators.

kafka-console-producer and -consumer configure their line reader and message formatter with
``--property``; ``riverbed produce`` and ``consume`` accept the same names. Values that are
separators understand ``\\t``, ``\\n``, ``\\r`` and ``\\\\`` (typing a tab into a shell is awkward).
"""

from __future__ import annotations

from riverbed.cli.errors import CliError

__all__ = ["boolean", "unescape", "with_defaults"]

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def with_defaults(given: dict[str, str], defaults: dict[str, str]) -> dict[str, str]:
    """``defaults`` overridden by ``given``; a name not in ``defaults`` is a usage error."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise CliError(
            f"unknown --property {', '.join(unknown)} (known: {', '.join(defaults)})",
            exit_code=2,
        )
    return {**defaults, **given}


def boolean(settings: dict[str, str], name: str) -> bool:
    """``true``/``false`` (any case), as Kafka's tools read them; anything else exits 2."""
    value = settings[name].strip().lower()
    if value not in ("true", "false"):
        raise CliError(f"--property {name} must be true or false, not {value!r}", exit_code=2)
    return value == "true"


def unescape(text: str) -> str:
    """``\\t`` → tab, ``\\n`` → newline, ``\\r``, ``\\\\``; other backslashes stay as they are."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)
