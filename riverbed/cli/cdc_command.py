"""``riverbed cdc run|status``: change data capture from PostgreSQL into topics.

``run`` captures the tables until SIGTERM or Ctrl-C (a clean stop: everything produced is
acknowledged and confirmed), log-based (a logical replication slot, the default) or
trigger-based (``--method trigger``). Its progress goes to stderr. ``status`` prints each
logical slot's lag. See :mod:`riverbed.cdc.capture` for what happens when.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from riverbed.cdc.capture import LogCaptureConfig, run_log_capture
from riverbed.cdc.config import SNAPSHOT_MODES
from riverbed.cdc.errors import CaptureSetupError, CdcError
from riverbed.cdc.metrics import CaptureMetrics
from riverbed.cdc.preflight import connect, parse_keys
from riverbed.cdc.status import slot_status
from riverbed.cdc.trigger import TriggerCaptureConfig, run_trigger_capture
from riverbed.cli.arguments import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    add_assignments,
    add_bootstrap_argument,
    add_command,
    add_command_with_actions,
    add_connect_timeout_argument,
    add_number,
    positive_int,
)
from riverbed.cli.errors import CliError
from riverbed.cli.metrics_endpoint import add_metrics_argument, serving
from riverbed.cli.output import print_table
from riverbed.cli.stopping import StopSignals

__all__ = ["add_parser"]

_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "cdc",
        "capture changes of PostgreSQL tables into topics (Debezium's format)",
        "Change data capture from PostgreSQL into topics PREFIX.SCHEMA.TABLE, in Debezium's "
        "envelope.",
    )

    capture = add_command(
        actions,
        "run",
        "capture tables until stopped (SIGTERM or Ctrl-C)",
        "Capture the tables' committed changes, in commit order, until SIGTERM or Ctrl-C. "
        "Restarted, it continues without losing a committed change.",
    )
    capture.add_argument("--dsn", required=True, help="PostgreSQL URL or key=value DSN")
    add_bootstrap_argument(capture, "broker(s) to produce to")
    capture.add_argument("--prefix", required=True, help="topic prefix: PREFIX.SCHEMA.TABLE")
    capture.add_argument(
        "--tables",
        required=True,
        metavar="S.T[,S.T...]",
        help="the tables to capture, comma-separated (schema defaults to public)",
    )
    capture.add_argument(
        "--method",
        choices=("log", "trigger"),
        default="log",
        help="log: a logical replication slot (default); trigger: an audit table filled by "
        "triggers, for databases without logical replication",
    )
    capture.add_argument(
        "--slot", help="replication slot name (default riverbed_PREFIX; log method)"
    )
    capture.add_argument("--publication", help="publication name (default: the slot's name)")
    capture.add_argument(
        "--snapshot",
        choices=SNAPSHOT_MODES,
        default="initial",
        help="initial: snapshot the tables when the capture starts for the first time "
        "(default); when_needed: also when the slot was lost; never: changes only",
    )
    add_assignments(
        capture,
        "--key",
        "key columns of a table without a primary key (repeatable)",
        metavar="S.T=COL[,COL...]",
    )
    add_number(
        capture,
        "--heartbeat-ms",
        positive_int,
        10_000,
        "how often an idle capture advances the slot",
        metavar="MS",
    )
    add_number(
        capture,
        "--poll-ms",
        positive_int,
        100,
        "how often the trigger method looks for new changes",
        metavar="MS",
    )
    add_number(
        capture, "--partitions", positive_int, 1, "partitions of the topics the capture creates"
    )
    capture.add_argument(
        "--drop-slot",
        action="store_true",
        help="on stop, drop the slot (log method) or the triggers and audit table (trigger "
        "method); the next run starts with a new snapshot",
    )
    add_connect_timeout_argument(
        capture, "give up when the database or the broker does not answer within this time"
    )
    add_metrics_argument(
        capture, "the capture's changes, snapshot progress and slot lag (bytes and seconds)"
    )
    capture.set_defaults(run=_run)

    status = add_command(
        actions,
        "status",
        "show each logical replication slot's lag behind the WAL",
        "Show each logical replication slot: active or not, confirmed LSN, lag in bytes and "
        "time, WAL status.",
    )
    status.add_argument("--dsn", required=True, help="PostgreSQL URL or key=value DSN")
    status.add_argument("--slot", help="only this slot")
    status.set_defaults(run=_status)


def _run(args: argparse.Namespace) -> int:
    tables = tuple(t.strip() for t in args.tables.split(",") if t.strip())
    if not tables:
        raise CliError("--tables names no table", exit_code=2)
    slot = args.slot or "riverbed_" + re.sub(r"[^a-z0-9_]", "_", args.prefix.lower())
    if not _SLOT_NAME.fullmatch(slot):
        raise CliError(
            f"invalid --slot {slot!r}: lower-case letters, digits and _ only, at most 63",
            exit_code=2,
        )
    timeout_s = args.connect_timeout_ms / 1000

    def say(line: str) -> None:
        print(f"riverbed cdc: {line}", file=sys.stderr, flush=True)

    metrics = CaptureMetrics()
    endpoint = serving(args.metrics, metrics.registry, say)
    with StopSignals() as stop:
        try:
            keys = parse_keys(args.key)
            if args.method == "trigger":
                run_trigger_capture(
                    TriggerCaptureConfig(
                        dsn=args.dsn,
                        bootstrap=args.bootstrap,
                        prefix=args.prefix,
                        tables=tables,
                        name=slot,
                        keys=keys,
                        snapshot=args.snapshot,
                        poll_ms=args.poll_ms,
                        drop=args.drop_slot,
                        partitions=args.partitions,
                        connect_timeout_s=timeout_s,
                    ),
                    say=say,
                    stopping=stop.requested,
                    metrics=metrics,
                )
            else:
                config = LogCaptureConfig(
                    dsn=args.dsn,
                    bootstrap=args.bootstrap,
                    prefix=args.prefix,
                    tables=tables,
                    slot=slot,
                    publication=args.publication or slot,
                    snapshot=args.snapshot,
                    keys=keys,
                    heartbeat_ms=args.heartbeat_ms,
                    drop_slot=args.drop_slot,
                    partitions=args.partitions,
                    connect_timeout_s=timeout_s,
                )
                run_log_capture(config, say=say, stopping=stop.requested, metrics=metrics)
        except CdcError as e:
            raise CliError(str(e)) from None
        finally:
            if endpoint is not None:
                endpoint.close()
        return 0


def _status(args: argparse.Namespace) -> int:
    try:
        connection = connect(args.dsn, timeout_s=DEFAULT_CONNECT_TIMEOUT_MS / 1000)
    except CaptureSetupError as e:
        raise CliError(str(e)) from None
    try:
        slots = slot_status(connection.cursor(), args.slot)
    finally:
        connection.close()
    if args.slot and not slots:
        raise CliError(f"no logical replication slot {args.slot!r}")
    print_table(
        (
            "SLOT",
            "DATABASE",
            "ACTIVE",
            "CONFIRMED_LSN",
            "WAL_LSN",
            "LAG_BYTES",
            "LAG_MS",
            "WAL_STATUS",
        ),
        (
            (
                s.slot,
                s.database,
                "yes" if s.active else "no",
                s.confirmed_lsn or "-",
                s.wal_lsn,
                "-" if s.lag_bytes is None else s.lag_bytes,
                "-" if s.lag_ms is None else f"{s.lag_ms:.0f}",
                s.wal_status or "-",
            )
            for s in slots
        ),
    )
    return 0
