"""``riverbed workload shop``: the shop workload — events into topics, writes into PostgreSQL.

Produces DESIGN.md's shop events (``page_views``, ``searches``, ``clicks``, ``payments``:
out of order, with late stragglers, sessions, card-testing bursts) and the commands of the
event-sourced carts (``shop.carts.commands``, ``--cart-rate``: shoppers' sessions with racing
clients, invalid commands and retries) to the broker and, with ``--dsn``, writes the shop's
tables (``users``, ``products``, ``orders``), all interleaved by event time. Same ``--seed``
and ``--start-ms``, same data. It stops after ``--events`` events, or at SIGTERM or Ctrl-C
(cleanly: everything sent is acknowledged, everything due is committed), and prints one
summary line on stdout. See :mod:`riverbed.workloads.shop` for what the data looks like,
:mod:`riverbed.workloads.cart_commands` for the carts, :mod:`riverbed.workloads.playback` for
how it is written.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from riverbed.cli.arguments import (
    add_command,
    add_command_with_actions,
    add_connection_arguments,
    add_number,
    non_negative_int,
    positive_int,
)
from riverbed.cli.confluent import connect_admin, kafka_errors
from riverbed.cli.errors import CliError
from riverbed.cli.stopping import StopSignals
from riverbed.workloads import ConfigError, WorkloadError
from riverbed.workloads.cart_commands import Intent
from riverbed.workloads.oltp import OpKind
from riverbed.workloads.playback import PlaybackConfig, Summary, format_ts, run_shop
from riverbed.workloads.shop import ShopConfig, sustainable_rate

__all__ = ["add_parser"]

DEFAULTS = ShopConfig()
DEFAULT_EVENTS = 100_000
DEFAULT_RATE = 1000.0
"""Events per second of wall time: 100,000 events take 100 s, a stream to watch."""
DEFAULT_CART_RATE = 0.2
"""A cart every 5 s of event time: about one command a second beside the default 20 events
(one of them a payment); the library's default is none (ShopConfig.cart_rate)."""


def add_parser(commands: Any) -> None:
    workloads = add_command_with_actions(
        commands,
        "workload",
        "generate workloads (the shop: events into topics, writes into PostgreSQL)",
        "Generate workloads for the pipelines and CDC.",
        dest="workload",
    )
    shop = add_command(
        workloads,
        "shop",
        "the shop: page views, searches, clicks, payments; cart commands; users, products, orders",
        "Produce the shop's events (page_views, searches, clicks, payments: out of order, some "
        "very late) and its carts' commands (shop.carts.commands), and, with --dsn, write its "
        "tables (users, products, orders) in PostgreSQL, until --events events or "
        "SIGTERM/Ctrl-C.",
    )
    add_connection_arguments(shop)
    shop.add_argument("--dsn", help="PostgreSQL URL or key=value DSN: also write the tables")
    add_number(shop, "--seed", int, DEFAULTS.seed, "the same seed, the same data")
    add_number(
        shop, "--events", non_negative_int, DEFAULT_EVENTS, "events to produce; 0: until stopped"
    )
    add_number(
        shop,
        "--rate",
        _non_negative_float,
        DEFAULT_RATE,
        "events per second of wall time at most; 0: as fast as possible",
    )
    add_number(
        shop,
        "--event-rate",
        _positive_float,
        DEFAULTS.event_rate,
        "events per second of event time",
        note="needs about 300 users per event per second; equal to --rate, event time keeps "
        "pace with the clock",
    )
    shop.add_argument(
        "--start-ms",
        type=non_negative_int,
        metavar="MS",
        help="event time of the first event, epoch ms (default: now)",
    )
    add_number(
        shop,
        "--disorder-ms",
        non_negative_int,
        DEFAULTS.disorder_ms,
        "most an event arrives out of order",
        metavar="MS",
    )
    add_number(
        shop,
        "--late-fraction",
        _fraction(0.5),
        DEFAULTS.late_fraction,
        "share of events that are late stragglers, at most 0.5",
        metavar="F",
    )
    add_number(
        shop,
        "--late-by-ms",
        non_negative_int,
        DEFAULTS.late_by_ms,
        "how late (at least) a straggler is",
        metavar="MS",
    )
    add_number(
        shop,
        "--fraud-fraction",
        _fraction(1.0),
        DEFAULTS.fraud_fraction,
        "chance per event that a card-testing burst starts",
        metavar="F",
    )
    add_number(shop, "--users", _int_at_least(2), DEFAULTS.users, "registered users at the start")
    add_number(shop, "--products", positive_int, DEFAULTS.products, "products at the start")
    add_number(shop, "--pages", positive_int, DEFAULTS.pages, "distinct pages")
    add_number(
        shop,
        "--oltp-rate",
        _non_negative_float,
        DEFAULTS.oltp_rate,
        "database operations per second of event time, after the initial load",
        note="with --dsn",
    )
    add_number(
        shop,
        "--cart-rate",
        _non_negative_float,
        DEFAULT_CART_RATE,
        "carts opened per second of event time, their commands to shop.carts.commands; 0: none",
    )
    add_number(
        shop,
        "--cart-conflict-fraction",
        _fraction(1.0),
        DEFAULTS.cart_conflict_fraction,
        "share of the carts' accepted commands a second client races with the same "
        "expected_version (one gets version_conflict)",
        metavar="F",
    )
    add_number(
        shop,
        "--cart-invalid-fraction",
        _fraction(1.0),
        DEFAULTS.cart_invalid_fraction,
        "chance, before each command of a cart and after its last, of one the cart refuses",
        metavar="F",
    )
    add_number(
        shop,
        "--cart-resend-fraction",
        _fraction(1.0),
        DEFAULTS.cart_resend_fraction,
        "share of cart commands sent again with the same command_id (a client's retry)",
        metavar="F",
    )
    add_number(
        shop,
        "--partitions",
        positive_int,
        1,
        "partitions of the topics it creates",
        note="riverbed es run carts needs as many in shop.carts.commands",
    )
    shop.set_defaults(run=kafka_errors(_run_shop))


def _run_shop(args: argparse.Namespace) -> int:
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    try:
        shop = ShopConfig(
            seed=args.seed,
            users=args.users,
            products=args.products,
            pages=args.pages,
            start_ms=start_ms,
            event_rate=args.event_rate,
            disorder_ms=args.disorder_ms,
            late_fraction=args.late_fraction,
            late_by_ms=args.late_by_ms,
            fraud_fraction=args.fraud_fraction,
            oltp_rate=args.oltp_rate,
            cart_rate=args.cart_rate,
            cart_conflict_fraction=args.cart_conflict_fraction,
            cart_invalid_fraction=args.cart_invalid_fraction,
            cart_resend_fraction=args.cart_resend_fraction,
        )
    except ConfigError as e:
        raise CliError(str(e), exit_code=2) from None
    playback = PlaybackConfig(
        bootstrap=args.bootstrap,
        dsn=args.dsn,
        events=args.events,
        rate=args.rate,
        partitions=args.partitions,
        connect_timeout_s=args.connect_timeout_ms / 1000,
    )
    connect_admin(args)  # an unreachable broker: one clear line, before anything else
    sustainable = sustainable_rate(shop)
    if sustainable < shop.event_rate:
        _say(
            f"note: {shop.users} users keep up about {sustainable:.2g} events per second of "
            f"event time, not {shop.event_rate:g} (--event-rate): after the first hour, event "
            f"time runs slower (about 300 users per event/s)"
        )
    with StopSignals() as stop:
        try:
            summary = run_shop(shop, playback, stopping=stop.requested, say=_say)
        except ConfigError as e:
            raise CliError(str(e), exit_code=2) from None
        except WorkloadError as e:
            raise CliError(str(e)) from None
    print(_describe(summary, database=args.dsn is not None, carts=shop.cart_rate > 0), flush=True)
    return 0


def _describe(summary: Summary, *, database: bool, carts: bool) -> str:
    """The summary line: events per topic, stragglers, event time, operations, cart
    commands, rate."""
    topics = ", ".join(f"{topic} {count}" for topic, count in summary.per_topic.items())
    line = f"riverbed workload: {summary.events} events ({topics}; "
    line += f"{summary.stragglers} late stragglers)"
    if summary.first_ts is not None and summary.last_ts is not None:
        line += f", event time {format_ts(summary.first_ts)} to {format_ts(summary.last_ts)}"
    if database:
        ops = summary.operations
        line += (
            f", {sum(ops.values())} database operations ({ops[OpKind.INSERT]} inserts, "
            f"{ops[OpKind.UPDATE]} updates, {ops[OpKind.DELETE]} deletes)"
        )
    if carts:
        sent = summary.commands
        line += (
            f", {sum(sent.values())} cart commands for {summary.carts} carts "
            f"({sent[Intent.RIVAL]} racing, {sent[Intent.INVALID]} invalid, "
            f"{sent[Intent.RESEND]} re-sent)"
        )
    rate = summary.events / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    return line + f", in {summary.elapsed_s:.1f} s ({rate:.0f} events/s)"


def _say(line: str) -> None:
    print(f"riverbed workload: {line}", file=sys.stderr, flush=True)


def _non_negative_float(text: str) -> float:
    return _float_in(text, 0.0, math.inf, "a number >= 0")


def _positive_float(text: str) -> float:
    value = _float_in(text, 0.0, math.inf, "a number > 0")
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0: {text!r}")
    return value


def _fraction(maximum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        return _float_in(text, 0.0, maximum, f"a number from 0 to {maximum:g}")

    return parse


def _float_in(text: str, low: float, high: float, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise argparse.ArgumentTypeError(f"must be {what}: {text!r}")
    return value


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = non_negative_int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
        return value

    return parse
