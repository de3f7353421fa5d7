"""How the admin tools print: tables on stdout, notices on stderr (so stdout has only tables)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

__all__ = ["notice", "print_table"]


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Left-aligned columns as wide as their widest cell, like Kafka's tools print them."""
    table = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def notice(prefix: str, message: str) -> None:
    """``<prefix>: <message>`` on stderr, e.g. ``riverbed groups: group 'g' does not exist``."""
    print(f"{prefix}: {message}", file=sys.stderr)
