"""``riverbed search DIR QUERY``: ask a search index kept by ``riverbed sink run search``.

The query is Tantivy's query syntax over every text column (``blue shoes``, ``title:shoes``,
``"exact phrase"``, ``shoes AND NOT red``); the matching rows are printed as JSON lines,
best first. It reads the index's last commit, so it works while the sink runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from riverbed.cli.arguments import add_command, add_number, positive_int
from riverbed.cli.errors import CliError
from riverbed.sinks.changes import SinkError

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    parser = add_command(
        commands,
        "search",
        "full-text search in an index kept by `riverbed sink run search`",
        "Print the rows matching QUERY (Tantivy's query syntax over every text column; "
        "COLUMN:word for one column) as JSON lines, best first.",
    )
    parser.add_argument("directory", metavar="DIR", help="the index directory")
    parser.add_argument("query", metavar="QUERY", help="what to look for")
    add_number(parser, "--limit", positive_int, 10, "at most this many rows", metavar="N")
    parser.set_defaults(run=_search)


def _search(args: argparse.Namespace) -> int:
    from riverbed.sinks.search_store import search  # here: every riverbed command imports this

    try:
        hits = search(args.directory, args.query, limit=args.limit)
    except SinkError as e:
        raise CliError(str(e)) from None
    for hit in hits:
        sys.stdout.write(orjson.dumps(hit.row).decode() + "\n")
    return 0
