"""The shop workload played back: events into topics, operations into PostgreSQL, paced.

:func:`run_shop` runs once per ``riverbed workload shop``, on the calling thread:

1. creates the topics that are missing (``page_views``, ``searches``, ``clicks``,
   ``payments``, and with a ``cart_rate`` ``shop.carts.commands``; ``PlaybackConfig.
   partitions`` each, the broker's other defaults) and, with a DSN, the tables that are
   missing (``CREATE TABLE IF NOT EXISTS public.users`` ..., DESIGN.md's schemas);
2. with a DSN, applies the initial load (the cast's users and products), in one
   transaction, before the first event;
3. sends the events in arrival order with an idempotent ``acks=all`` producer (JSON keys and
   values, partitioned by murmur2 of the key as Kafka's Java clients do), at most ``rate``
   per second of wall time; before each event it applies the operations whose event time the
   stream has reached, in transactions of at most :data:`MAX_BATCH` operations committed at
   least every :data:`COMMIT_INTERVAL_S`, and sends the cart commands whose ``at_ms`` it has
   reached (:mod:`riverbed.workloads.cart_commands`; same producer, so a cart's commands
   stay in order in its partition);
4. stops after ``events`` events, or when ``stopping()`` says so, then commits what is left
   and waits for every event to be acknowledged.

The database side is :class:`~riverbed.workloads.database.ShopDatabase`. A failed delivery,
a broker that stops answering or a database error ends the run with
:class:`~riverbed.workloads.WorkloadError`; what was committed and acknowledged before stays.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.workloads import ConfigError, WorkloadError
from riverbed.workloads.cart_commands import (
    COMMAND_PARTITIONS,
    COMMANDS_TOPIC,
    CartCommand,
    Intent,
    commands,
)
from riverbed.workloads.database import ShopDatabase
from riverbed.workloads.oltp import Operation, OpKind, operations
from riverbed.workloads.shop import TOPICS, ShopConfig, events

__all__ = [
    "COMMIT_INTERVAL_S",
    "MAX_BATCH",
    "PlaybackConfig",
    "Summary",
    "format_ts",
    "run_shop",
]

_LOG = logging.getLogger("riverbed.workloads.librdkafka")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False

MAX_BATCH = 500
"""Operations per transaction at most (the initial load is one transaction)."""
COMMIT_INTERVAL_S = 0.1
"""Due operations wait at most this long for their commit: rows keep up with the events,
and a run as fast as possible still commits only ~10 times a second."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaybackConfig:
    bootstrap: str
    dsn: str | None = None
    events: int = 100_000
    """Events to send; 0: until ``stopping()``."""
    rate: float = 0.0
    """Events per second of wall time at most; 0: as fast as possible."""
    partitions: int = 1
    """Partitions of the topics created (Kafka's num.partitions default)."""
    connect_timeout_s: float = 10.0
    delivery_timeout_ms: int = 30_000
    """How long an event may wait for its acknowledgement (librdkafka message.timeout.ms)."""


@dataclass(slots=True, kw_only=True)
class Summary:
    """What one run did."""

    per_topic: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOPICS, 0))
    stragglers: int = 0
    operations: dict[OpKind, int] = field(default_factory=lambda: dict.fromkeys(OpKind, 0))
    commands: dict[Intent, int] = field(default_factory=lambda: dict.fromkeys(Intent, 0))
    """Cart commands sent, by what they were meant to be."""
    carts: int = 0
    """Carts that got a command."""
    first_ts: int | None = None
    last_ts: int | None = None
    """The smallest and largest event time sent."""
    elapsed_s: float = 0.0

    @property
    def events(self) -> int:
        return sum(self.per_topic.values())


def run_shop(
    shop: ShopConfig,
    playback: PlaybackConfig,
    *,
    stopping: Callable[[], bool] = lambda: False,
    say: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
) -> Summary:
    """Produce the workload (and write the database, with a DSN); see the module docstring.

    ``say`` gets one line once the topics (and tables) are ready and the events start, and
    one more when it created the carts' commands topic (with :data:`COMMAND_PARTITIONS`,
    whatever ``playback.partitions`` says: the command processor's events, results and
    snapshots topics must have as many, and it makes them with 3 unless told otherwise).
    """
    if playback.events < 0:
        raise ConfigError(f"events must be at least 0, not {playback.events}")
    if not playback.rate >= 0:
        raise ConfigError(f"rate must be a number >= 0, not {playback.rate}")
    if playback.partitions < 1:
        raise ConfigError(f"partitions must be at least 1, not {playback.partitions}")
    producer = _EventProducer(playback)
    database = (
        ShopDatabase.connect(playback.dsn, timeout_s=playback.connect_timeout_s)
        if playback.dsn
        else None
    )
    try:
        created = producer.ensure_topics(TOPICS, partitions=playback.partitions)
        if shop.cart_rate > 0:  # as many partitions as `riverbed es run carts` makes
            created += producer.ensure_topics([COMMANDS_TOPIC], partitions=COMMAND_PARTITIONS)
        if database is not None:
            database.create_tables()
        say(
            f"producing the shop workload to {playback.bootstrap}"
            + (" and writing its tables" if database is not None else "")
            + f", event time from {format_ts(shop.start_ms)}"
        )
        if COMMANDS_TOPIC in created:
            say(
                f"created {COMMANDS_TOPIC} with {COMMAND_PARTITIONS} partitions, as "
                f"`riverbed es run carts` makes its topics"
            )
        return _run(shop, playback, producer, database, stopping, clock)
    finally:
        if database is not None:
            database.close()


def _run(
    shop: ShopConfig,
    playback: PlaybackConfig,
    producer: _EventProducer,
    database: ShopDatabase | None,
    stopping: Callable[[], bool],
    clock: Callable[[], float],
) -> Summary:
    summary = Summary()
    writes = _Writes(database, operations(shop), summary, clock) if database else None
    carts = _Commands(commands(shop), producer, summary) if shop.cart_rate > 0 else None
    if writes is not None:
        writes.due(shop.start_ms)
        writes.commit()  # the initial load, before the first event
    started = clock()
    progress = -1
    stream = events(shop)
    while not playback.events or summary.events < playback.events:
        if stopping() or not _pace(
            producer, playback.rate, started, summary.events, stopping, clock
        ):
            break
        event = next(stream)
        progress = max(progress, event.ts)
        if writes is not None:
            writes.due(progress)
        if carts is not None:
            carts.due(progress)
        producer.send(event.topic, event.key, event.value)
        summary.per_topic[event.topic] += 1
        summary.stragglers += event.straggler
        if summary.first_ts is None or event.ts < summary.first_ts:
            summary.first_ts = event.ts
        summary.last_ts = progress
    if writes is not None:
        writes.commit()
    producer.finish()
    summary.elapsed_s = clock() - started
    return summary


def format_ts(ms: int) -> str:
    """An event time as ``2026-01-01T00:00:00Z`` (UTC, to the second)."""
    moment = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pace(
    producer: _EventProducer,
    rate: float,
    started: float,
    sent: int,
    stopping: Callable[[], bool],
    clock: Callable[[], float],
) -> bool:
    """Wait until event number ``sent`` is due; False if ``stopping()`` came first."""
    if rate <= 0:
        return True
    due = started + sent / rate
    while (ahead := due - clock()) > 0.001:
        producer.wait(min(ahead, 0.1))  # serves delivery reports while it waits
        if stopping():
            return False
    return True


class _Writes:
    """The operations not yet applied, and when to commit them."""

    def __init__(
        self,
        database: ShopDatabase,
        stream: Iterator[Operation],
        summary: Summary,
        clock: Callable[[], float],
    ) -> None:
        self.database = database
        self.stream = stream
        self.next = next(stream)
        self.pending: list[Operation] = []
        self.summary = summary
        self.clock = clock
        self.committed_at = clock()

    def due(self, progress: int) -> None:
        """Take the operations up to event time ``progress``; commit when it is time."""
        while self.next.at_ms <= progress:
            self.pending.append(self.next)
            self.next = next(self.stream)
        if len(self.pending) >= MAX_BATCH or (
            self.pending and self.clock() - self.committed_at >= COMMIT_INTERVAL_S
        ):
            self.commit()

    def commit(self) -> None:
        if self.pending:
            self.database.apply(self.pending)
            for operation in self.pending:
                self.summary.operations[operation.kind] += 1
            self.pending = []
        self.committed_at = self.clock()


class _Commands:
    """The cart commands not yet sent."""

    def __init__(
        self, stream: Iterator[CartCommand], producer: _EventProducer, summary: Summary
    ) -> None:
        self.stream = stream
        self.next = next(stream)
        self.producer = producer
        self.summary = summary

    def due(self, progress: int) -> None:
        """Send the commands up to event time ``progress``."""
        while self.next.at_ms <= progress:
            command = self.next
            self.producer.send(COMMANDS_TOPIC, command.key, command.value)
            self.summary.commands[command.intent] += 1
            self.summary.carts += command.opens_cart
            self.next = next(self.stream)


def _json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


class _EventProducer:
    """An idempotent, ``acks=all`` producer of the events, and the topics it writes."""

    def __init__(self, playback: PlaybackConfig) -> None:
        self._config = playback
        self._errors: list[KafkaError] = []
        self._failure: str | None = None
        base: dict[str, Any] = {
            "bootstrap.servers": playback.bootstrap,
            "client.id": "riverbed-workload",
            "logger": _LOG,
            "error_cb": self._errors.append,
        }
        try:
            self._admin = AdminClient(base)
            self._producer = Producer(
                {
                    **base,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "partitioner": "murmur2_random",  # Kafka's Java clients' default
                    "message.timeout.ms": playback.delivery_timeout_ms,
                    "delivery.report.only.error": True,
                    "on_delivery": self._delivered,
                }
            )
        except (KafkaException, ValueError) as e:
            raise ConfigError(f"invalid client configuration: {e}") from None

    def ensure_topics(self, topics: Sequence[str], *, partitions: int) -> list[str]:
        """Create the topics that are missing and wait until they have leaders; the topics
        it created."""
        timeout_s = self._config.connect_timeout_s
        metadata = self._metadata(timeout_s)
        missing = [t for t in topics if t not in metadata.topics or metadata.topics[t].error]
        if missing:
            futures = self._admin.create_topics(
                [NewTopic(t, num_partitions=partitions) for t in missing],
                request_timeout=timeout_s,
            )
            for topic, future in futures.items():
                try:
                    future.result()
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise WorkloadError(
                            f"cannot create topic {topic}: {e.args[0].str()}"
                        ) from None
        deadline = time.monotonic() + timeout_s
        while True:
            metadata = self._metadata(timeout_s)
            waiting = [t for t in topics if t not in metadata.topics or metadata.topics[t].error]
            if not waiting:
                return missing
            if time.monotonic() > deadline:
                raise WorkloadError(f"topics not ready within {timeout_s:g} s: {waiting}")
            time.sleep(0.05)

    def _metadata(self, timeout_s: float) -> Any:
        try:
            return self._admin.list_topics(timeout=timeout_s)
        except KafkaException as e:
            cause = self._errors[-1].str() if self._errors else str(e)
            raise WorkloadError(
                f"no broker reachable at {self._config.bootstrap} within {timeout_s:g} s: {cause}"
            ) from None

    def send(self, topic: str, key: dict[str, str], value: Mapping[str, Any]) -> None:
        key_bytes, value_bytes = _json(key), _json(value)
        while True:
            try:
                self._producer.produce(topic, key=key_bytes, value=value_bytes)
                break
            except BufferError:  # the local queue is full: let acknowledgements drain it
                self.wait(0.1)
        self._producer.poll(0)
        self._check()

    def wait(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)
        self._check()

    def finish(self) -> None:
        """Wait for every event's acknowledgement (up to the delivery timeout)."""
        left = self._producer.flush(self._config.delivery_timeout_ms / 1000)
        self._check()
        if left:
            raise WorkloadError(f"{left} events not acknowledged in time")

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None and self._failure is None:
            self._failure = error.str()

    def _check(self) -> None:
        fatal = next((e for e in self._errors if e.fatal()), None)
        if fatal is not None:
            raise WorkloadError(f"the producer failed: {fatal.str()}")
        if self._failure is not None:
            raise WorkloadError(f"an event was not delivered: {self._failure}")
