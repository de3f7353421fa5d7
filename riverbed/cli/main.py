"""The ``riverbed`` command: one subcommand per tool, Kafka's tool names and flags where they exist.

User mistakes (a wrong flag, a missing server, a bad value) end with a one-line message on
stderr and exit code 2 (usage) or 1 (failure), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from riverbed.cli import (
    broker_command,
    cdc_command,
    consume_command,
    es_command,
    groups_command,
    pipeline_command,
    produce_command,
    search_command,
    sink_command,
    topics_command,
    transactions_command,
    workload_command,
)
from riverbed.cli.errors import CliError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="riverbed",
        description="riverbed: a streaming data platform where the log is the database.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    broker_command.add_parser(commands)
    topics_command.add_parser(commands)
    produce_command.add_parser(commands)
    consume_command.add_parser(commands)
    groups_command.add_parser(commands)
    transactions_command.add_parser(commands)
    cdc_command.add_parser(commands)
    es_command.add_parser(commands)
    pipeline_command.add_parser(commands)
    workload_command.add_parser(commands)
    sink_command.add_parser(commands)
    search_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except CliError as e:
        print(f"riverbed {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
