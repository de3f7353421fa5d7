"""``riverbed workload shop``: the shop workload — events into topics, writes into PostgreSQL.

Produces DESIGN.md's shop events (``page_views``, ``searches``, ``clicks``, ``payments``:
out of order, with late stragglers, sessions, card-testing bursts) to the broker and, with
``--dsn``, writes the shop's tables (``users``, ``products``, ``orders``) interleaved with
them by event time. Same ``--seed`` and ``--start-ms``, same data. It stops after
``--events`` events, or at SIGTERM or Ctrl-C (cleanly: everything sent is acknowledged,
everything due is committed), and prints one summary line on stdout. See
:mod:`riverbed.workloads.shop` for what the data looks like, :mod:`riverbed.workloads.playback`
for how it is written.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from riverbed.cli.client import (
    add_connection_arguments,
    connect_admin,
    kafka_errors,
    non_negative_int,
    positive_int,
)
from riverbed.cli.errors import CliError
from riverbed.workloads import ConfigError, WorkloadError
from riverbed.workloads.oltp import OpKind
from riverbed.workloads.playback import PlaybackConfig, Summary, format_ts, run_shop
from riverbed.workloads.shop import ShopConfig, sustainable_rate

__all__ = ["add_parser"]

DEFAULTS = ShopConfig()
DEFAULT_EVENTS = 100_000
DEFAULT_RATE = 1000.0
"""Events per second of wall time: 100,000 events take 100 s, a stream to watch."""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "workload",
        help="generate workloads (the shop: events into topics, writes into PostgreSQL)",
        description="Generate workloads for the pipelines and CDC.",
    )
    workloads = parser.add_subparsers(dest="workload", metavar="WORKLOAD", required=True)
    shop = workloads.add_parser(
        "shop",
        help="the shop: page views, searches, clicks, payments; users, products, orders",
        description="Produce the shop's events (page_views, searches, clicks, payments: out "
        "of order, some very late) and, with --dsn, write its tables (users, products, "
        "orders) in PostgreSQL, until --events events or SIGTERM/Ctrl-C.",
    )
    add_connection_arguments(shop)
    shop.add_argument("--dsn", help="PostgreSQL URL or key=value DSN: also write the tables")
    shop.add_argument(
        "--seed",
        type=int,
        default=DEFAULTS.seed,
        metavar="N",
        help="the same seed, the same data (default 0)",
    )
    shop.add_argument(
        "--events",
        type=non_negative_int,
        default=DEFAULT_EVENTS,
        metavar="N",
        help=f"events to produce; 0: until stopped (default {DEFAULT_EVENTS})",
    )
    shop.add_argument(
        "--rate",
        type=_non_negative_float,
        default=DEFAULT_RATE,
        metavar="N",
        help=f"events per second of wall time at most; 0: as fast as possible "
        f"(default {DEFAULT_RATE:g})",
    )
    shop.add_argument(
        "--event-rate",
        type=_positive_float,
        default=DEFAULTS.event_rate,
        metavar="N",
        help=f"events per second of event time (default {DEFAULTS.event_rate:g}; needs "
        f"about 300 users per event per second; equal to --rate, event time keeps pace "
        f"with the clock)",
    )
    shop.add_argument(
        "--start-ms",
        type=non_negative_int,
        metavar="MS",
        help="event time of the first event, epoch ms (default: now)",
    )
    _int_flag(shop, "--disorder-ms", DEFAULTS.disorder_ms, "most an event arrives out of order")
    shop.add_argument(
        "--late-fraction",
        type=_fraction(0.5),
        default=DEFAULTS.late_fraction,
        metavar="F",
        help=f"share of events that are late stragglers, at most 0.5 "
        f"(default {DEFAULTS.late_fraction:g})",
    )
    _int_flag(shop, "--late-by-ms", DEFAULTS.late_by_ms, "how late (at least) a straggler is")
    shop.add_argument(
        "--fraud-fraction",
        type=_fraction(1.0),
        default=DEFAULTS.fraud_fraction,
        metavar="F",
        help=f"chance per event that a card-testing burst starts "
        f"(default {DEFAULTS.fraud_fraction:g})",
    )
    shop.add_argument(
        "--users",
        type=_int_at_least(2),
        default=DEFAULTS.users,
        metavar="N",
        help=f"registered users at the start (default {DEFAULTS.users})",
    )
    for flag, default, what in (
        ("--products", DEFAULTS.products, "products at the start"),
        ("--pages", DEFAULTS.pages, "distinct pages"),
    ):
        shop.add_argument(
            flag,
            type=positive_int,
            default=default,
            metavar="N",
            help=f"{what} (default {default})",
        )
    shop.add_argument(
        "--oltp-rate",
        type=_non_negative_float,
        default=DEFAULTS.oltp_rate,
        metavar="N",
        help=f"database operations per second of event time, after the initial load "
        f"(default {DEFAULTS.oltp_rate:g}; with --dsn)",
    )
    shop.add_argument(
        "--partitions",
        type=positive_int,
        default=1,
        metavar="N",
        help="partitions of the topics it creates (default 1)",
    )
    shop.set_defaults(run=kafka_errors(_run_shop))


def _int_flag(parser: argparse.ArgumentParser, flag: str, default: int, what: str) -> None:
    parser.add_argument(
        flag,
        type=non_negative_int,
        default=default,
        metavar="MS",
        help=f"{what} (default {default})",
    )


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
    with _Stop() as stop:
        try:
            summary = run_shop(shop, playback, stopping=stop.requested, say=_say)
        except ConfigError as e:
            raise CliError(str(e), exit_code=2) from None
        except WorkloadError as e:
            raise CliError(str(e)) from None
    print(_describe(summary, database=args.dsn is not None), flush=True)
    return 0


def _describe(summary: Summary, *, database: bool) -> str:
    """The summary line: events per topic, stragglers, event time, operations, rate."""
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
    rate = summary.events / summary.elapsed_s if summary.elapsed_s > 0 else 0.0
    return line + f", in {summary.elapsed_s:.1f} s ({rate:.0f} events/s)"


def _say(line: str) -> None:
    print(f"riverbed workload: {line}", file=sys.stderr, flush=True)


class _Stop:
    """SIGTERM and SIGINT ask the workload to stop cleanly (the old handlers come back)."""

    def __init__(self) -> None:
        self._requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True

    def requested(self) -> bool:
        return self._requested


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
