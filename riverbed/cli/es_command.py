"""``riverbed es run carts``: the shop's carts, event-sourced (DESIGN.md, "Event sourcing").

``run`` is the command processor until SIGTERM or Ctrl-C; several instances (each its own
``--instance``) share the commands topic's partitions as a consumer group. Its progress goes
to stderr. See :mod:`riverbed.eventsourcing.processor` for what happens when.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from riverbed.cli.arguments import (
    add_bootstrap_argument,
    add_command,
    add_command_with_actions,
    add_connect_timeout_argument,
    add_number,
    positive_int,
)
from riverbed.cli.errors import CliError
from riverbed.cli.stopping import StopSignals
from riverbed.eventsourcing import EventSourcingError
from riverbed.eventsourcing.processor import CommandProcessor, ProcessorConfig
from riverbed.eventsourcing.shop import carts

__all__ = ["add_parser"]

AGGREGATES = ("carts",)


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "es",
        "event sourcing: the shop's carts' command processor",
        "Event sourcing on the log: commands decided into events, state derived by replay.",
    )
    run = add_command(
        actions,
        "run",
        "the command processor, until stopped (SIGTERM or Ctrl-C)",
        "Decide the commands of shop.carts.commands into events, results and offsets, one "
        "transaction a batch. Instances with the same --group share the partitions.",
    )
    run.add_argument("aggregate", choices=AGGREGATES, help="the aggregate type")
    add_bootstrap_argument(run, "broker(s) to connect to")
    add_connect_timeout_argument(run, "give up when no broker answers within this time")
    run.add_argument("--group", default="riverbed-es-carts", help="consumer group id")
    run.add_argument(
        "--instance",
        default="1",
        help="this instance's name (transactional id GROUP-INSTANCE): its own per instance, "
        "the same on restart (default 1)",
    )
    add_number(run, "--partitions", positive_int, 3, "partitions of the topics it creates")
    run.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"riverbed es: {line}", file=sys.stderr, flush=True)

    config = ProcessorConfig(
        bootstrap=args.bootstrap,
        group_id=args.group,
        instance_id=args.instance,
        partitions=args.partitions,
        timeout_s=args.connect_timeout_ms / 1000,
    )
    processor = CommandProcessor(config, carts.CART_TYPE, say=say)
    with StopSignals() as stop:
        try:
            processor.run(stopping=stop.requested)
        except EventSourcingError as e:
            raise CliError(str(e)) from None
    return 0
