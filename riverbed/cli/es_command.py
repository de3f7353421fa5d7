"""``riverbed es``: the shop's carts, event-sourced (DESIGN.md, "Event sourcing").

- ``run`` is the command processor until SIGTERM or Ctrl-C; several instances (each its own
  ``--instance``) share the commands topic's partitions as a consumer group. Its progress
  goes to stderr (:mod:`riverbed.eventsourcing.processor`).
- ``send`` reads commands, one JSON object a line, from stdin, sends them and prints each
  result as it arrives (:mod:`riverbed.eventsourcing.sender`); a line that is not a command
  is reported on stderr, and makes the exit code 1, without stopping the others.
- ``state`` prints a cart's state now, after a version, or as of a time; ``history`` its
  events; ``forget`` deletes a user's keys (:mod:`riverbed.eventsourcing.reader`).
- ``project`` keeps a read model of the carts (:mod:`riverbed.cli.es_project`).
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from functools import partial
from typing import Any

from riverbed.cli import es_project
from riverbed.cli.arguments import (
    add_command,
    add_command_with_actions,
    add_connection_arguments,
    add_number,
    non_negative_int,
    positive_int,
)
from riverbed.cli.confluent import quiet_settings
from riverbed.cli.errors import CliError
from riverbed.cli.offset_reset import parse_datetime_ms
from riverbed.cli.output import notice
from riverbed.cli.stopping import StopSignals
from riverbed.eventsourcing import EventSourcingError, MessageError
from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.processor import CommandProcessor, ProcessorConfig
from riverbed.eventsourcing.reader import AggregateReader
from riverbed.eventsourcing.sender import CommandSender
from riverbed.eventsourcing.shop import AGGREGATE_TYPES

__all__ = ["add_parser"]

say = partial(notice, "riverbed es")
"""A line on stderr for ``riverbed es``: progress, or an input line it skipped."""


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "es",
        "event sourcing: the shop's carts (commands, state, history, forget, projections)",
        "Event sourcing on the log: commands decided into events, state derived by replay.",
    )
    run = add_command(
        actions,
        "run",
        "the command processor, until stopped (SIGTERM or Ctrl-C)",
        "Decide the commands of shop.carts.commands into events, results and offsets, one "
        "transaction a batch. Instances with the same --group share the partitions.",
    )
    run.add_argument("aggregate", choices=sorted(AGGREGATE_TYPES), help="the aggregate type")
    add_connection_arguments(run)
    run.add_argument("--group", default="riverbed-es-carts", help="consumer group id")
    run.add_argument(
        "--instance",
        default="1",
        help="this instance's name (transactional id GROUP-INSTANCE): its own per instance, "
        "the same on restart (default 1)",
    )
    add_number(run, "--partitions", positive_int, 3, "partitions of the topics it creates")
    add_number(run, "--snapshot-every", non_negative_int, 100,
               "write a cart's snapshot every N of its events (0: never)", metavar="N")  # fmt: skip
    run.set_defaults(run=_run)

    send = add_command(
        actions,
        "send",
        "send commands (JSON lines on stdin) and print their results",
        "Send each stdin line, a JSON command as DESIGN.md writes it, to shop.carts.commands "
        "and print each result as it arrives. Missing command_id, ts, expected_version and "
        "data are filled in (a new id, now, null, {}).",
    )
    send.add_argument("aggregate", choices=sorted(AGGREGATE_TYPES), help="the aggregate type")
    add_connection_arguments(send)
    add_number(send, "--answer-timeout-ms", positive_int, 30_000,
               "give up on commands with no result this long after the last one sent",
               metavar="MS")  # fmt: skip
    send.set_defaults(run=_send)
    state = add_command(
        actions,
        "state",
        "print a cart's state: now, after a version, or as of a time (time travel)",
        "Print the cart's state as JSON, by replaying its events (from its latest snapshot "
        "where one helps).",
    )
    state.add_argument("aggregate", choices=sorted(AGGREGATE_TYPES), help="the aggregate type")
    state.add_argument("aggregate_id", metavar="CART_ID", help="the cart")
    add_connection_arguments(state)
    when = state.add_mutually_exclusive_group()
    when.add_argument("--at-version", type=positive_int, metavar="N",
                      help="the state after the cart's first N events")  # fmt: skip
    when.add_argument("--at-time", type=_time_ms, metavar="TIME",
                      help="the state as of event time TIME (epoch ms or ISO-8601; UTC if no "
                      "zone)")  # fmt: skip
    state.add_argument("--no-snapshots", action="store_true",
                       help="replay from the first event, even where a snapshot helps")  # fmt: skip
    state.set_defaults(run=_state)
    history = add_command(
        actions,
        "history",
        "print a cart's events, one JSON line each (the audit trail)",
        "Print the cart's events in version order, personal fields decrypted where the "
        "user's key still exists (null where the user was forgotten).",
    )
    history.add_argument("aggregate", choices=sorted(AGGREGATE_TYPES), help="the aggregate type")
    history.add_argument("aggregate_id", metavar="CART_ID", help="the cart")
    add_connection_arguments(history)
    history.set_defaults(run=_history)
    forget = add_command(
        actions,
        "forget",
        "forget a user: delete their keys (crypto-shredding)",
        "Write a tombstone for the user's keys to shop.keys: from then on every reader, "
        "replay and backup sees null for the user's personal fields; compaction then removes "
        "the keys from the log for good. The events stay.",
    )
    forget.add_argument("user_id", metavar="USER_ID", help="the user")
    add_connection_arguments(forget)
    forget.set_defaults(run=_forget)
    es_project.add_parser(actions)


def _time_ms(text: str) -> int:
    """``--at-time``: epoch milliseconds, or an ISO-8601 time."""
    if text.strip().isdigit():
        return int(text)
    return parse_datetime_ms(text)


def _run(args: argparse.Namespace) -> int:
    config = ProcessorConfig(
        bootstrap=args.bootstrap,
        group_id=args.group,
        instance_id=args.instance,
        partitions=args.partitions,
        snapshot_every=args.snapshot_every,
        timeout_s=args.connect_timeout_ms / 1000,
    )
    processor = CommandProcessor(config, AGGREGATE_TYPES[args.aggregate], say=say)
    with StopSignals() as stop:
        try:
            processor.run(stopping=stop.requested)
        except EventSourcingError as e:
            raise CliError(str(e)) from None
    return 0


def _send(args: argparse.Namespace) -> int:
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line)
        lines.put(None)

    try:
        sender = CommandSender(
            AGGREGATE_TYPES[args.aggregate], args.bootstrap,
            timeout_s=args.connect_timeout_ms / 1000, extra=quiet_settings(),
        )  # fmt: skip
    except EventSourcingError as e:
        raise CliError(str(e)) from None
    threading.Thread(target=read, daemon=True).start()
    wrong, number, reading = 0, 0, True
    last_sent = time.monotonic()
    try:
        while reading or sender.pending:
            while True:
                try:
                    line = lines.get_nowait()
                except queue.Empty:
                    break
                if line is None:
                    reading = False
                    sender.flush()
                    break
                number += 1
                if not line.strip():
                    continue
                try:
                    document = json.loads(line)
                    if not isinstance(document, dict):
                        raise MessageError("a command must be a JSON object")
                    sender.send(document)
                except ValueError as e:
                    wrong += 1
                    say(f"line {number}: not JSON ({e})")
                    continue
                except MessageError as e:
                    wrong += 1
                    say(f"line {number}: {e}")
                    continue
                last_sent = time.monotonic()
            for result in sender.answers(0.05):
                print(json.dumps(result, separators=(",", ":")), flush=True)
            if sender.pending and time.monotonic() - last_sent > args.answer_timeout_ms / 1000:
                raise CliError(
                    f"no result for {len(sender.pending)} command(s) within "
                    f"{args.answer_timeout_ms} ms: is `riverbed es run carts` running?"
                )
    except EventSourcingError as e:
        raise CliError(str(e)) from None
    finally:
        sender.close()
    return 1 if wrong else 0


def _reader(
    args: argparse.Namespace, kind: AggregateType[Any, Any, Any]
) -> AggregateReader[Any, Any, Any]:
    return AggregateReader(
        kind, args.bootstrap, timeout_s=args.connect_timeout_ms / 1000, extra=quiet_settings()
    )


def _state(args: argparse.Namespace) -> int:
    try:
        with _reader(args, AGGREGATE_TYPES[args.aggregate]) as reader:
            cart = reader.state_of(
                args.aggregate_id, at_version=args.at_version, at_time=args.at_time,
                snapshots=not args.no_snapshots,
            )  # fmt: skip
    except EventSourcingError as e:
        raise CliError(str(e)) from None
    print(json.dumps(reader.kind.document(cart), separators=(",", ":")))
    return 0


def _history(args: argparse.Namespace) -> int:
    try:
        with _reader(args, AGGREGATE_TYPES[args.aggregate]) as reader:
            events = reader.events_of(args.aggregate_id)
    except EventSourcingError as e:
        raise CliError(str(e)) from None
    for event in events:
        print(json.dumps(reader.kind.format.document(event), separators=(",", ":")))
    return 0


def _forget(args: argparse.Namespace) -> int:
    try:
        # The shop's users have one key topic, shop.keys, the carts'.
        with _reader(args, AGGREGATE_TYPES["carts"]) as reader:
            held = reader.forget(args.user_id)
    except EventSourcingError as e:
        raise CliError(str(e)) from None
    print(json.dumps({"user_id": args.user_id, "keys_deleted": held}, separators=(",", ":")))
    return 0
