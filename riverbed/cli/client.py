"""What every Kafka-client tool shares: the --bootstrap flag, client configs, reachability.

The tools (``topics``, ``produce``, ``consume``) are plain Kafka clients built on
confluent-kafka, so they work unchanged against a Kafka cluster. This module keeps the
parts they have in common in one place:

- ``add_connection_arguments`` adds ``--bootstrap`` and ``--connect-timeout-ms``, and
  ``add_action`` one action of a tool with several (``topics create``), with both;
- ``parse_assignments`` turns repeated ``KEY=VALUE`` flags into a dict (exit 2 on a bad one);
- ``client_config`` builds a librdkafka config with librdkafka's own log lines silenced
  (they would interleave with the tool's output) and its errors collected instead;
- ``require_topic`` checks that the topic (and partition) a tool names exists;
- ``wait_for_cluster`` asks for cluster metadata, bounded by the connect timeout, and turns
  an unreachable cluster into one ``CliError`` line instead of a hang;
- ``describe_kafka_error`` makes a ``KafkaError`` readable, and ``kafka_errors`` wraps a
  tool's ``run`` so that no ``KafkaException`` escapes as a traceback;
- ``connect_admin`` makes an AdminClient and checks the cluster answers; ``admin_result``
  and ``admin_error_code`` read one admin request's future.
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, TopicMetadata

from riverbed.cli.errors import CliError

__all__ = [
    "ADMIN_REQUEST_TIMEOUT_S",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CONNECT_TIMEOUT_MS",
    "ErrorLog",
    "add_action",
    "add_connection_arguments",
    "add_state_filter",
    "admin_error_code",
    "admin_result",
    "client_config",
    "connect_admin",
    "create_client",
    "describe_kafka_error",
    "kafka_errors",
    "non_negative_int",
    "parse_assignments",
    "positive_int",
    "require_topic",
    "wait_for_cluster",
]

# DESIGN.md, "Setup and commands": every tool defaults to the broker's default listener.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# How long a tool waits for the first metadata before saying no broker is reachable. Kafka's
# own tools retry forever; 10 s is long enough for a broker that is still starting up.
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
# Kafka's default request.timeout.ms (30000): how long one admin request may take.
ADMIN_REQUEST_TIMEOUT_S = 30.0

# librdkafka's log lines go here; without a handler they are dropped (see client_config).
_LIBRDKAFKA_LOG = logging.getLogger("riverbed.cli.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False


C = TypeVar("C")


class _Pollable(Protocol):
    def poll(self, timeout: float = ...) -> Any: ...

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> ClusterMetadata: ...


class ErrorLog:
    """The errors librdkafka reports through ``error_cb``, most recent last.

    librdkafka calls ``error_cb`` from ``poll()`` (or ``flush()``/``consume()``), on the
    calling thread; the tools use the latest one to explain a failure.
    """

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError) -> None:
        self.errors.append(error)
        del self.errors[:-20]  # keep the tail: only the latest errors explain anything

    def latest(self) -> KafkaError | None:
        return self.errors[-1] if self.errors else None

    def fatal(self) -> KafkaError | None:
        return next((e for e in reversed(self.errors) if e.fatal()), None)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap HOST:PORT`` and ``--connect-timeout-ms MS`` to one tool's parser."""
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--connect-timeout-ms",
        type=positive_int,
        default=DEFAULT_CONNECT_TIMEOUT_MS,
        metavar="MS",
        help="give up when no broker answers within this time "
        f"(default {DEFAULT_CONNECT_TIMEOUT_MS})",
    )


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


def add_action(
    actions: Any, name: str, run: Callable[[argparse.Namespace], int], help_text: str
) -> argparse.ArgumentParser:
    """Add action ``name`` to a tool's subparsers; ``run`` is wrapped with ``kafka_errors``."""
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=help_text, description=help_text[0].upper() + help_text[1:] + "."
    )
    add_connection_arguments(parser)
    parser.set_defaults(run=kafka_errors(run))
    return parser


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


def parse_assignments(assignments: Iterable[str], *, flag: str) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` → ``{"a": "1", "b": "x=y"}``; a malformed one is a usage error."""
    result: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects KEY=VALUE, got {assignment!r}", exit_code=2)
        result[key.strip()] = value
    return result


def client_config(
    args: argparse.Namespace, errors: ErrorLog, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """A librdkafka config for ``args.bootstrap``; ``extra`` (user passthrough) wins."""
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "client.id": f"riverbed-{args.command}",
        "error_cb": errors,
        "logger": _LIBRDKAFKA_LOG,
    }
    config.update(extra or {})
    return config


def create_client(factory: Callable[[dict[str, Any]], C], config: dict[str, Any]) -> C:
    """``factory(config)``; a config librdkafka rejects (a bad passthrough property) → exit 2."""
    try:
        return factory(config)
    except (KafkaException, ValueError, TypeError) as e:
        raise CliError(
            f"invalid client configuration: {describe_kafka_error(e)}", exit_code=2
        ) from None


def wait_for_cluster(
    client: _Pollable, args: argparse.Namespace, errors: ErrorLog, *, topic: str | None = None
) -> ClusterMetadata:
    """Cluster metadata (of ``topic`` only, if given), or a one-line ``CliError``.

    Bounded by ``--connect-timeout-ms``: librdkafka would otherwise keep reconnecting forever.
    """
    timeout_s = args.connect_timeout_ms / 1000
    started = time.monotonic()
    try:
        if topic is None:
            return client.list_topics(timeout=timeout_s)
        return client.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as e:
        client.poll(0)  # serve error_cb, which says why (e.g. "Connection refused")
        cause = describe_kafka_error(errors.latest() or e)
        if time.monotonic() - started < timeout_s * 0.9:
            # It failed before the timeout: a broker answered, then failed the request.
            raise CliError(f"cannot get metadata from {args.bootstrap}: {cause}") from None
        raise CliError(
            f"no broker reachable at {args.bootstrap} within {timeout_s:g} s: {cause}"
        ) from None
    except ValueError as e:  # librdkafka rejected the config, e.g. an unknown property
        raise CliError(str(e), exit_code=2) from None


def require_topic(
    client: _Pollable,
    args: argparse.Namespace,
    errors: ErrorLog,
    *,
    partition: int | None = None,
) -> TopicMetadata:
    """Metadata of ``args.topic``, which must exist (with ``partition``, if given).

    A producer's metadata request may make the broker auto-create the topic
    (auto.create.topics.enable); the new topic reports LEADER_NOT_AVAILABLE until it is ready.
    """
    metadata = wait_for_cluster(client, args, errors, topic=args.topic)
    topic = metadata.topics.get(args.topic)
    code = topic.error.code() if topic is not None and topic.error is not None else None
    if topic is None or code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise CliError(f"topic {args.topic!r} does not exist")
    if code is not None and code != KafkaError.LEADER_NOT_AVAILABLE:
        raise CliError(f"topic {args.topic!r}: {describe_kafka_error(topic.error)}")
    if partition is not None and topic.partitions and partition not in topic.partitions:
        raise CliError(
            f"topic {args.topic!r} has no partition {partition} (it has {len(topic.partitions)})"
        )
    return topic


def kafka_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a tool's ``run``: a Kafka error it did not expect still ends as one line, exit 1."""

    @functools.wraps(run)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except KafkaException as e:
            raise CliError(describe_kafka_error(e)) from None

    return wrapper


def describe_kafka_error(error: KafkaError | KafkaException | object) -> str:
    """One readable line for a librdkafka error: its reason, and its code name if different."""
    if isinstance(error, KafkaException):
        error = error.args[0] if error.args else str(error)
    if not isinstance(error, KafkaError):
        return str(error)
    reason = error.str() or error.name()
    if error.name().lower().lstrip("_") in reason.lower().replace(" ", "_"):
        return reason
    return f"{reason} ({error.name()})"


def connect_admin(args: argparse.Namespace) -> tuple[AdminClient, ClusterMetadata]:
    """An AdminClient for ``args.bootstrap`` and the cluster's metadata (or a ``CliError``)."""
    errors = ErrorLog()
    admin = create_client(AdminClient, client_config(args, errors))
    return admin, wait_for_cluster(admin, args, errors)


def admin_result(future: Future[Any], what: str) -> Any:
    """The result of one admin request; its failure as ``CliError("<what>: <reason>")``."""
    try:
        return future.result()
    except KafkaException as e:
        raise CliError(f"{what}: {describe_kafka_error(e)}") from None


def admin_error_code(future: Future[Any]) -> int | None:
    """The Kafka error code an admin future failed with (waiting for it), or None on success."""
    exception = future.exception()
    if exception is None:
        return None
    if isinstance(exception, KafkaException) and isinstance(exception.args[0], KafkaError):
        code: int = exception.args[0].code()
        return code
    return KafkaError.UNKNOWN
