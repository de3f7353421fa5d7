"""``riverbed broker``: run a broker in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from riverbed.broker.config import (
    DEFAULT_LISTEN,
    BrokerConfig,
    ConfigError,
    parse_assignments,
    parse_properties,
)
from riverbed.cli.arguments import add_assignments, add_command
from riverbed.cli.errors import CliError

log = logging.getLogger("riverbed.broker")


def add_parser(commands: Any) -> None:
    parser = add_command(
        commands,
        "broker",
        "run a broker in the foreground",
        "Run a riverbed broker until SIGINT or SIGTERM (exit code 0 after a clean shutdown). "
        "Settings use Kafka's broker names, e.g. --set num.partitions=4.",
    )
    parser.add_argument("--data-dir", required=True, type=Path, help="where the logs are kept")
    parser.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help=f"address to listen on (default {DEFAULT_LISTEN}; port 0 picks a free port)",
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="a Kafka-style server.properties file"
    )
    add_assignments(parser, "--set", "a broker setting, overriding --config (repeatable)")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.set_defaults(run=run)


def load_config(args: argparse.Namespace) -> BrokerConfig:
    properties: dict[str, str] = {}
    try:
        if args.config is not None:
            try:
                text = args.config.read_text()
            except OSError as e:
                raise CliError(f"cannot read --config {args.config}: {e.strerror}") from None
            properties.update(parse_properties(text.splitlines(), source=str(args.config)))
        properties.update(parse_assignments(args.set))
        listen = args.listen
        if listen is None and "listeners" not in properties:
            listen = DEFAULT_LISTEN
        config, unknown = BrokerConfig.build(
            data_dir=args.data_dir, properties=properties, listen=listen
        )
    except ConfigError as e:
        raise CliError(str(e), exit_code=2) from None
    for name in unknown:
        log.warning("ignoring unknown setting %r", name)
    return config


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = load_config(args)
    return asyncio.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    from riverbed.broker.server import BrokerServer  # here, so the other tools never load it

    server = BrokerServer(config)
    try:
        await server.start()
    except ConfigError as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"cannot listen on {config.listen}: {e.strerror or e}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # One line on stdout, for scripts and tests that start the broker on port 0.
    print(f"riverbed broker listening on {server.state.advertised}", flush=True)
    if server.metrics_server is not None:
        print(f"riverbed broker metrics on {server.metrics_server.url}", flush=True)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    return 0
