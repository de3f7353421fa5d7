"""The argparse pieces the subcommands share, so that one flag has one spelling and meaning.

- ``add_command`` adds a subcommand (``riverbed broker``) or an action of one (``riverbed
  cdc run``); ``add_command_with_actions`` adds one made of actions and returns the
  subparsers to add them to;
- ``add_action`` adds one action of a Kafka tool (``riverbed topics create``): the
  connection arguments, and its ``run`` wrapped so that no Kafka error escapes as a
  traceback;
- ``add_connection_arguments`` adds ``--bootstrap`` and ``--connect-timeout-ms``
  (``add_bootstrap_argument`` and ``add_connect_timeout_argument`` one each, with their own
  help);
- ``add_assignments`` adds a repeatable ``KEY=VALUE`` flag and ``add_client_properties``
  the librdkafka passthrough (``--producer-property``); ``parse_assignments`` and
  ``client_properties`` turn what was given into a dict (exit 2 on a bad one);
- ``add_number`` adds a number flag whose help ends with its default;
- ``add_state_filter`` adds a repeatable ``--state``;
- ``positive_int`` and ``non_negative_int`` are argparse types for counts and offsets.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

from riverbed.cli.confluent import kafka_errors
from riverbed.cli.errors import CliError

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CONNECT_TIMEOUT_MS",
    "add_action",
    "add_assignments",
    "add_bootstrap_argument",
    "add_client_properties",
    "add_command",
    "add_command_with_actions",
    "add_connect_timeout_argument",
    "add_connection_arguments",
    "add_number",
    "add_state_filter",
    "client_properties",
    "non_negative_int",
    "parse_assignments",
    "positive_int",
]

# DESIGN.md, "Setup and commands": every tool defaults to the broker's default listener.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# How long a tool waits for the first metadata before saying no broker is reachable. Kafka's
# own tools retry forever; 10 s is long enough for a broker that is still starting up.
DEFAULT_CONNECT_TIMEOUT_MS = 10_000

Run = Callable[[argparse.Namespace], int]


def add_command(
    commands: Any, name: str, help_text: str, description: str | None = None
) -> argparse.ArgumentParser:
    """``name``'s parser: ``help_text`` in its parent's list, ``description`` atop its own
    ``--help`` (none if None)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=description
    )
    return parser


def add_command_with_actions(
    commands: Any, name: str, help_text: str, description: str, *, dest: str = "action"
) -> Any:
    """A subcommand made of actions (``riverbed topics create|list|...``), one of which must
    be given (``args.<dest>`` names it): the subparsers to add them to."""
    parser = add_command(commands, name, help_text, description)
    return parser.add_subparsers(dest=dest, metavar=dest.upper(), required=True)


def add_action(actions: Any, name: str, run: Run, help_text: str) -> argparse.ArgumentParser:
    """Add action ``name`` to a Kafka tool's subparsers; ``run`` is wrapped with
    ``kafka_errors``, and its description is ``help_text`` as a sentence."""
    parser = add_command(actions, name, help_text, help_text[0].upper() + help_text[1:] + ".")
    add_connection_arguments(parser)
    parser.set_defaults(run=kafka_errors(run))
    return parser


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap HOST:PORT`` and ``--connect-timeout-ms MS`` to one tool's parser."""
    add_bootstrap_argument(parser, "broker(s) to connect to, comma-separated")
    add_connect_timeout_argument(parser, "give up when no broker answers within this time")


def add_bootstrap_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--bootstrap HOST:PORT[,...]`` (Kafka's tools: ``--bootstrap-server``)."""
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"{help_text} (default {DEFAULT_BOOTSTRAP})",
    )


def add_connect_timeout_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--connect-timeout-ms MS``: how long to wait for the first answer."""
    add_number(
        parser,
        "--connect-timeout-ms",
        positive_int,
        DEFAULT_CONNECT_TIMEOUT_MS,
        help_text,
        metavar="MS",
    )


def add_assignments(
    parser: argparse.ArgumentParser, flag: str, help_text: str, *, metavar: str = "KEY=VALUE"
) -> None:
    """A repeatable ``flag KEY=VALUE``: a list of what was given, for ``parse_assignments``."""
    parser.add_argument(flag, action="append", default=[], metavar=metavar, help=help_text)


def add_client_properties(parser: argparse.ArgumentParser, client: str) -> None:
    """``--<client>-property KEY=VALUE``: a librdkafka setting passed through to the
    ``client`` ("producer", "consumer") as it is; it wins over the tool's own flags."""
    add_assignments(
        parser,
        f"--{client}-property",
        f"a librdkafka {client} setting, passed through (repeatable; wins over flags)",
    )


def add_number(
    parser: argparse.ArgumentParser,
    flag: str,
    parse: Callable[[str], float],
    default: float,
    what: str,
    *,
    metavar: str = "N",
    note: str = "",
) -> None:
    """``flag`` read with ``parse``; its help is ``what (default 30000)``, or ``what (default
    30000; note)`` (a float default shown as ``%g``)."""
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    parser.add_argument(
        flag,
        type=parse,
        default=default,
        metavar=metavar,
        help=f"{what} (default {shown}{'; ' + note if note else ''})",
    )


def client_properties(args: argparse.Namespace, client: str) -> dict[str, str]:
    """What ``add_client_properties(parser, client)``'s flag was given, as a dict."""
    given: list[str] = getattr(args, f"{client}_property")
    return parse_assignments(given, flag=f"--{client}-property")


def parse_assignments(assignments: Iterable[str], *, flag: str) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` → ``{"a": "1", "b": "x=y"}``; a malformed one is a usage error."""
    result: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects KEY=VALUE, got {assignment!r}", exit_code=2)
        result[key.strip()] = value
    return result


def add_state_filter(
    parser: argparse.ArgumentParser, parse: Callable[[str], Any], *, states: Iterable[str], of: str
) -> None:
    """``--state STATE[,STATE...]``, repeatable: ``args.state`` is a list of ``parse`` results."""
    parser.add_argument(
        "--state",
        action="append",
        default=[],
        type=parse,
        metavar="STATE[,STATE...]",
        help=f"only {of} in these states: " + ", ".join(states) + " (repeatable)",
    )


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts and durations: an integer > 0."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse ``type=`` for partitions, offsets and timestamps: an integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
    return value
