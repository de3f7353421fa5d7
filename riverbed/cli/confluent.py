"""The tools' confluent-kafka clients: configs, creation, reachability and errors.

The tools (``topics``, ``produce``, ``consume``, ``groups``, ``workload``) are plain Kafka
clients built on confluent-kafka, so they work unchanged against a Kafka cluster. This
module keeps what they do with it in one place:

- ``create_client`` makes a client whose config has librdkafka's own log lines silenced
  (they would interleave with the tool's output) and its errors collected instead
  (``ErrorLog``); a config librdkafka rejects exits 2;
- ``require_topic`` checks that the topic (and partition) a tool names exists;
- ``wait_for_cluster`` asks for cluster metadata, bounded by the connect timeout, and turns
  an unreachable cluster into one ``CliError`` line instead of a hang;
- ``describe_kafka_error`` makes a ``KafkaError`` readable, and ``kafka_errors`` wraps a
  tool's ``run`` so that no ``KafkaException`` escapes as a traceback;
- ``connect_admin`` makes an AdminClient and checks the cluster answers; ``admin_result``
  and ``admin_error_code`` read one admin request's future.

The flags they read (``--bootstrap``, ``--connect-timeout-ms``) are ``arguments``'.
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException

# confluent_kafka.admin ships type hints but re-exports these names without declaring them
# (no __all__), so mypy --strict does not count them as exported.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ClusterMetadata,
    TopicMetadata,
)

from riverbed.cli.errors import CliError

__all__ = [
    "REQUEST_TIMEOUT_S",
    "ErrorLog",
    "admin_error_code",
    "admin_result",
    "connect_admin",
    "create_client",
    "describe_kafka_error",
    "kafka_errors",
    "require_topic",
    "wait_for_cluster",
]

# Kafka's default request.timeout.ms (30000): how long a tool waits for the answer to one
# request (an admin request, ListOffsets by time).
REQUEST_TIMEOUT_S = 30.0

# librdkafka's log lines go here; without a handler they are dropped (see _client_config).
_LIBRDKAFKA_LOG = logging.getLogger("riverbed.cli.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False


C = TypeVar("C")


def quiet_settings() -> dict[str, Any]:
    """librdkafka settings that send its log lines where the tools' go (nowhere): for the
    clients a tool makes through a library (riverbed.eventsourcing), which reports the
    errors it acts on itself."""
    return {"logger": _LIBRDKAFKA_LOG}


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


def _client_config(
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


def create_client(
    factory: Callable[[dict[str, Any]], C],
    args: argparse.Namespace,
    settings: dict[str, str] | None = None,
) -> tuple[C, ErrorLog]:
    """``factory`` (``Producer``, ``Consumer``, ``AdminClient``) for ``args.bootstrap`` with
    ``settings``, and the ``ErrorLog`` its errors go to; a config librdkafka rejects (a bad
    passthrough property) → exit 2."""
    errors = ErrorLog()
    try:
        return factory(_client_config(args, errors, settings)), errors
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
    admin, errors = create_client(AdminClient, args)
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
