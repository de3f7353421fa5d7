"""``riverbed sink run|verify``: derived stores that follow the log (DESIGN.md, "Derived data").

- ``run KIND`` applies changelog topics (CDC topics, riverbed changelogs) to a store until
  SIGTERM or Ctrl-C: ``redis`` (the cache), ``search`` (a Tantivy index), ``duckdb`` (an
  analytics database). Its progress goes to stderr (:mod:`riverbed.sinks.runner`).
- ``verify`` compares PostgreSQL's tables with the stores (:mod:`riverbed.cli.sink_verify`).
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Any

from riverbed.cli import sink_verify
from riverbed.cli.arguments import (
    add_command,
    add_command_with_actions,
    add_connection_arguments,
    positive_int,
)
from riverbed.cli.confluent import quiet_settings
from riverbed.cli.errors import CliError
from riverbed.cli.output import notice
from riverbed.cli.stopping import StopSignals
from riverbed.sinks.changes import SinkError
from riverbed.sinks.redis_store import DEFAULT_URL, RedisStore
from riverbed.sinks.runner import SinkConfig, SinkCounts, run_sink
from riverbed.sinks.store import Store

__all__ = ["DECODERS", "MAX_BATCH", "add_parser", "sink_config"]

say = partial(notice, "riverbed sink")
KINDS = ("redis", "search", "duckdb")
MAX_BATCH = {"redis": 5_000, "search": 5_000, "duckdb": 20_000}
"""``--max-batch``'s default per store. DuckDB writes a batch column-wise, one statement and
one commit (7 ms) whatever its size: 20,000 took 9-23% more rows/s than 5,000 (BENCHMARKS.md).
Redis runs a batch as one script, which holds its other clients that long."""
DECODERS = {"redis": 1, "search": 1, "duckdb": 2}
"""``--decoders``' default per store. DuckDB folds a batch where it is decoded and writes it
column-wise, so with two decoder processes the sink's own process only writes: 200,000 CDC
changes on 2 cores went in at 83,000-86,000 rows/s in one process, 126,000-135,000 with two
decoders. Redis and search take the changes themselves, sent from the decoders: Redis gave
the same with 2 as with 1, search less (BENCHMARKS.md)."""
_PROGRESS_S = 10.0


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "sink",
        "keep a cache, a search index or an analytics store in step with topics",
        "Derived stores that follow changelog topics (CDC topics, riverbed changelogs) "
        "instead of being written by the application.",
    )
    run = add_command(
        actions,
        "run",
        "apply changelog topics to a store until stopped (SIGTERM or Ctrl-C)",
        "Apply the topics' changes to the store, a batch at a time, each batch stored with "
        "the sink's position in one step: killed and restarted, it resumes exactly.",
    )
    run.add_argument("kind", choices=KINDS, help="the store")
    add_connection_arguments(run)
    run.add_argument(
        "--topics", required=True, metavar="T1,T2,...", help="compacted topics to follow"
    )
    run.add_argument(
        "--from-beginning",
        action="store_true",
        help="read every topic from its beginning, whatever position the store holds "
        "(a new store starts there anyway)",
    )
    run.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once every partition has been applied to its end (scripts, rebuilds)",
    )
    run.add_argument("--redis", default=DEFAULT_URL, metavar="URL",
                     help=f"redis: the server (default {DEFAULT_URL})")  # fmt: skip
    run.add_argument("--index", metavar="DIR", help="search: the index directory")
    run.add_argument("--database", metavar="FILE", help="duckdb: the database file")
    run.add_argument("--group", help="consumer group the positions are also committed to, "
                     "for Kafka's tools (default riverbed-sink-KIND)")  # fmt: skip
    run.add_argument(
        "--max-batch", type=positive_int, metavar="N",
        help="changes applied in one step at most (default "
        + "; ".join(f"{kind}: {n}" for kind, n in MAX_BATCH.items())
        + ")",
    )  # fmt: skip
    run.add_argument(
        "--decoders", type=positive_int, metavar="N",
        help="processes that read and decode the topics, each a share of the partitions (at "
        "most one per partition; 1: the sink's own process; default "
        + "; ".join(f"{kind}: {n}" for kind, n in DECODERS.items())
        + ")",
    )  # fmt: skip
    run.set_defaults(run=_run)
    sink_verify.add_parser(actions)


def open_store(kind: str, args: argparse.Namespace) -> Store:
    """The store ``kind`` names, from its option (a usage error when it is missing)."""
    if kind == "redis":
        return RedisStore(args.redis, timeout_s=args.connect_timeout_ms / 1000)
    if kind == "search":
        if not args.index:
            raise CliError("sink run search needs --index DIR", exit_code=2)
        from riverbed.sinks.search_store import SearchStore  # here: tantivy, for this store only

        return SearchStore(args.index)
    if not args.database:
        raise CliError("sink run duckdb needs --database FILE", exit_code=2)
    from riverbed.sinks.duckdb_store import DuckDBStore  # here: duckdb and pyarrow, 0.15 s

    return DuckDBStore(args.database)


def sink_config(args: argparse.Namespace) -> SinkConfig:
    """The runner's settings from ``sink run``'s arguments."""
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip())
    if not topics:
        raise CliError("--topics names no topic", exit_code=2)
    return SinkConfig(
        bootstrap=args.bootstrap,
        topics=topics,
        group_id=args.group or f"riverbed-sink-{args.kind}",
        from_beginning=args.from_beginning,
        until_caught_up=args.until_caught_up,
        max_batch=args.max_batch or MAX_BATCH[args.kind],
        decoders=args.decoders or DECODERS[args.kind],
        timeout_s=args.connect_timeout_ms / 1000,
        settings=quiet_settings(),
    )


def _run(args: argparse.Namespace) -> int:
    config = sink_config(args)
    store = open_store(args.kind, args)
    said_at, said_changes = time.monotonic(), 0

    def progress(counts: SinkCounts) -> None:
        nonlocal said_at, said_changes
        now = time.monotonic()
        if now - said_at >= _PROGRESS_S:
            rate = (counts.changes - said_changes) / (now - said_at)
            say(f"{counts.describe()} ({rate:,.0f}/s)")
            said_at, said_changes = now, counts.changes

    with StopSignals() as stop:
        try:
            counts = run_sink(config, store, stopping=stop.requested, say=say, on_commit=progress)
        except SinkError as e:
            raise CliError(str(e)) from None
    say(f"stopped: {counts.describe()}")
    return 0
