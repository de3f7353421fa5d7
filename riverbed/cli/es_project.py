"""``riverbed es project``: a projection (read model) of the carts, until SIGTERM or Ctrl-C
(:mod:`riverbed.eventsourcing.projections`).

- ``--to topic``: the carts' states in a compacted topic (``--topic``, default
  ``shop.carts.state``), each batch and its position one Kafka transaction;
- ``--to postgres``: the carts' states in a table (``--table``, default ``carts``) of the
  database at ``--dsn``, each batch and its position one PostgreSQL transaction.

``--rebuild`` makes the model anew from the first event, then goes on; ``--until-caught-up``
stops once every events partition has been read to its end. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from riverbed.cli.arguments import (
    add_command,
    add_connection_arguments,
    add_number,
    positive_int,
)
from riverbed.cli.confluent import quiet_settings
from riverbed.cli.errors import CliError
from riverbed.cli.output import notice
from riverbed.cli.stopping import StopSignals
from riverbed.eventsourcing import EventSourcingError
from riverbed.eventsourcing.projection_changelog import ChangelogStore
from riverbed.eventsourcing.projection_postgres import PostgresStore
from riverbed.eventsourcing.projection_runner import ProjectionConfig, ProjectionRunner
from riverbed.eventsourcing.projections import ProjectionStore
from riverbed.eventsourcing.shop import AGGREGATE_TYPES

__all__ = ["add_parser"]

DEFAULT_TOPIC = "shop.carts.state"
DEFAULT_TABLE = "carts"


def add_parser(actions: Any) -> None:
    """``project``, an action of ``riverbed es`` (``actions``: its subparsers)."""
    project = add_command(
        actions,
        "project",
        "a projection (read model) of the carts, until stopped (SIGTERM or Ctrl-C)",
        "Fold shop.carts.events into the carts' current states: a compacted topic or a "
        "PostgreSQL table, each batch with its position in one transaction (exactly once). "
        "Restarted, it goes on from the position its model holds.",
    )
    project.add_argument("aggregate", choices=sorted(AGGREGATE_TYPES), help="the aggregate type")
    add_connection_arguments(project)
    project.add_argument("--to", required=True, choices=("topic", "postgres"),
                         help="where the model lives")  # fmt: skip
    project.add_argument("--topic", default=DEFAULT_TOPIC,
                         help=f"with --to topic: the compacted topic (default "
                         f"{DEFAULT_TOPIC})")  # fmt: skip
    project.add_argument("--dsn", metavar="URL", help="with --to postgres: the database")
    project.add_argument("--table", default=DEFAULT_TABLE,
                         help=f"with --to postgres: the table (default {DEFAULT_TABLE}); its "
                         "position is in riverbed_projection_positions")  # fmt: skip
    project.add_argument("--rebuild", action="store_true",
                         help="make the model anew from the first event, then go on")  # fmt: skip
    project.add_argument("--until-caught-up", action="store_true",
                         help="stop once every events partition is read to its end")  # fmt: skip
    add_number(project, "--max-batch", positive_int, 5_000,
               "events per transaction at most", metavar="N")  # fmt: skip
    project.set_defaults(run=_project)


def _project(args: argparse.Namespace) -> int:
    kind = AGGREGATE_TYPES[args.aggregate]
    timeout_s = args.connect_timeout_ms / 1000
    store: ProjectionStore[Any]
    if args.to == "postgres":
        if not args.dsn:
            raise CliError("--to postgres needs --dsn URL", exit_code=2)
        store = PostgresStore(kind, dsn=args.dsn, table=args.table, timeout_s=timeout_s)
    else:
        store = ChangelogStore(kind, bootstrap=args.bootstrap, topic=args.topic,
                               timeout_s=timeout_s, extra=quiet_settings())  # fmt: skip
    config = ProjectionConfig(bootstrap=args.bootstrap, max_batch=args.max_batch,
                              timeout_s=timeout_s, extra=quiet_settings())  # fmt: skip
    runner = ProjectionRunner(config, kind, store, say=partial(notice, "riverbed es"))
    with StopSignals() as stop:
        try:
            runner.run(stopping=stop.requested, rebuild=args.rebuild,
                       until_caught_up=args.until_caught_up)  # fmt: skip
        except EventSourcingError as e:
            raise CliError(str(e)) from None
    return 0
