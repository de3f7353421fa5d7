"""The driver's client: which partitions a query reads and where they begin and end.

One :class:`OffsetClient` per reader object on the driver, created on first use and closed by
``stop()``; it is never pickled (Spark pickles readers to ship them to executors). It wraps a
confluent-kafka ``AdminClient``:

- end offsets: one ListOffsets request for all partitions (``AdminClient.list_offsets`` groups
  them per leader) with the query's isolation level, so under read_committed "latest" is the
  last stable offset. About 0.5 ms against a local broker, measured, so Spark's polling of
  ``latestOffset`` every ~10 ms on an idle stream costs the broker little;
- the partition list (a Metadata request) at most every :data:`METADATA_MAX_AGE_S`, and at
  once when an offset request fails because a partition went away.

Failed requests are retried ``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs``
apart, as Spark's Kafka source does; then :class:`~riverbed.spark.errors.SourceError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from riverbed.spark.errors import SourceError, SourceOptionError
from riverbed.spark.source.offsets import EARLIEST, LATEST, OffsetMap, Partition
from riverbed.spark.source.options import (
    Bound,
    OffsetsPerPartition,
    Position,
    SourceOptions,
    TimestampForAll,
    TimestampPerPartition,
    TimestampStrategy,
)

__all__ = [
    "LIBRDKAFKA_LOG",
    "METADATA_MAX_AGE_S",
    "OffsetClient",
    "admin_config",
    "consumer_config",
]

T = TypeVar("T")

LIBRDKAFKA_LOG = logging.getLogger("riverbed.spark.librdkafka")
"""librdkafka's log of the source's clients, on the driver and the executors. Python shows
its warnings and errors (on an executor, in the worker's stderr, which Spark copies to the
driver's) and, unless logging is configured otherwise, drops the rest: without a logger,
librdkafka prints every line itself, "Purging 1 unserved events from background queue" at
each admin client's end among them."""

METADATA_MAX_AGE_S = 1.0
"""How old the cached partition list may be. Spark asks for the latest offsets about every
10 ms when a stream is idle; topics and partitions change rarely, so one Metadata request a
second finds a new partition (or a new topic matching ``subscribePattern``) within a second
while sparing the broker 99 of 100 requests. Kafka's own consumer refreshes every 5 min."""

REQUEST_TIMEOUT_S = 30.0
"""Per request; librdkafka's ``socket.timeout.ms`` default is 60 s, Spark's offset fetches
retry sooner."""

CONSUMER_ONLY = frozenset(
    {
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.protocol.type",
        "group.remote.assignor",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "coordinator.query.interval.ms",
        "max.poll.interval.ms",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.wait.max.ms",
        "fetch.queue.backoff.ms",
        "fetch.message.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.max.bytes",
        "fetch.min.bytes",
        "fetch.error.backoff.ms",
        "isolation.level",
        "enable.partition.eof",
        "check.crcs",
        "auto.offset.reset",
        "consume.callback.max.messages",
    }
)
"""librdkafka's consumer-only properties (CONFIGURATION.md, column C): an admin client would
log a warning for each, so they go to the executors' consumers only."""


CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": "10"}
"""Defaults of the tasks' consumers, which ``kafka.*`` options override. librdkafka stops
fetching for ``fetch.queue.backoff.ms`` (1000 ms by default) once ``queued.min.messages``
are queued; the broker refills that queue in ~20 ms and a task drains it in a few, so with
the default a task idled most of each second (BENCHMARKS.md, consume: 0.29M -> 1.7M msg/s)."""


def admin_config(client_config: Mapping[str, str]) -> dict[str, str | int | float | bool]:
    return {k: v for k, v in client_config.items() if k not in CONSUMER_ONLY}


def consumer_config(client_config: Mapping[str, str]) -> dict[str, str]:
    """A consumer that reads assigned partitions only: no group, no commits, an event at the
    end of a partition, and an error (not a silent reset) at an offset out of range."""
    return {
        **CONSUMER_DEFAULTS,
        **client_config,
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "enable.partition.eof": "true",
        "auto.offset.reset": "error",
    }


def _kafka_error(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args:
        return str(exc.args[0])
    return f"{type(exc).__name__}: {exc}"


class OffsetClient:
    """Partitions and offsets for the driver side of one query (see the module docstring)."""

    def __init__(
        self,
        options: SourceOptions,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._options = options
        self._clock = clock
        self._sleep = sleep
        settings: dict[str, Any] = {**admin_config(options.client_config), "logger": LIBRDKAFKA_LOG}
        try:
            self._admin = AdminClient(settings)
        except KafkaException as e:
            raise SourceOptionError(
                f"a 'kafka.*' option was refused by the client: {_kafka_error(e)}"
            ) from None
        except (TypeError, ValueError) as e:
            raise SourceOptionError(f"a 'kafka.*' option was refused by the client: {e}") from None
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if options.isolation_committed
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._topics: dict[str, int] = {}
        self._topics_at: float | None = None

    def close(self) -> None:
        """Nothing to flush: the admin client's threads end when it is collected."""
        self._topics_at = None

    # -- partitions ----------------------------------------------------------------------

    def topics(self, *, refresh: bool = False) -> dict[str, int]:
        """Every topic of the cluster and its partition count (cached, see the module)."""
        now = self._clock()
        fresh = self._topics_at is not None and now - self._topics_at < METADATA_MAX_AGE_S
        if refresh or not fresh:
            metadata = self._retry(
                "list topics", lambda: self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
            )
            self._topics = {
                name: len(topic.partitions)
                for name, topic in metadata.topics.items()
                if topic.error is None
            }
            self._topics_at = now
        return self._topics

    def partitions(self, *, refresh: bool = False) -> list[Partition]:
        """The partitions the query's subscription selects now, sorted."""
        return self._options.subscription.select(self.topics(refresh=refresh))

    # -- offsets -------------------------------------------------------------------------

    def earliest(self, partitions: Iterable[Partition]) -> OffsetMap:
        return self._list({p: OffsetSpec.earliest() for p in partitions})  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[Partition]) -> OffsetMap:
        return self._list({p: OffsetSpec.latest() for p in partitions})  # type: ignore[no-untyped-call]

    def for_timestamps(self, timestamps_ms: Mapping[Partition, int]) -> dict[Partition, int | None]:
        """The first offset with a timestamp at or after each one; None where there is none
        (below the last stable offset under read_committed)."""
        found = self._list({p: OffsetSpec.for_timestamp(ts) for p, ts in timestamps_ms.items()})
        return {p: (offset if offset >= 0 else None) for p, offset in found.items()}

    def latest_of_subscription(self) -> OffsetMap:
        """End offsets of every partition subscribed now; a partition that vanished between
        the cached metadata and the request is dropped after a metadata refresh."""
        try:
            return self.latest(self.partitions())
        except SourceError:
            return self.latest(self.partitions(refresh=True))

    def resolve(
        self, position: Position, partitions: list[Partition], *, starting: bool
    ) -> OffsetMap:
        """Where each partition starts (or, for a batch read, ends) for an option's position.

        Timestamps without a matching offset: ``startingOffsetsByTimestampStrategy`` for a
        start (``error`` raises, ``latest`` takes the end), the end of the partition for an end.
        """
        which = "starting" if starting else "ending"
        if isinstance(position, Bound):
            if position is Bound.EARLIEST:
                return self.earliest(partitions)
            return self.latest(partitions)
        if isinstance(position, OffsetsPerPartition):
            _listed(f"{which}Offsets", position.offsets, partitions)
            special = {p: o for p, o in position.offsets.items() if o in (EARLIEST, LATEST)}
            earliest = self.earliest(p for p, o in special.items() if o == EARLIEST)
            latest = self.latest(p for p, o in special.items() if o == LATEST)
            return {**position.offsets, **earliest, **latest}
        if isinstance(position, TimestampForAll):
            stamps = {p: position.timestamp_ms for p in partitions}
            name = f"{which}Timestamp"
        else:
            assert isinstance(position, TimestampPerPartition)
            stamps = position.timestamps_ms
            name = f"{which}OffsetsByTimestamp"
            _listed(name, stamps, partitions)
        found = self.for_timestamps(stamps)
        unmatched = [p for p, offset in found.items() if offset is None]
        if unmatched and starting and self._options.timestamp_strategy is TimestampStrategy.ERROR:
            topic, partition = unmatched[0]
            raise SourceError(
                f"no record of topic {topic!r} partition {partition} has a timestamp at or"
                f" after {stamps[unmatched[0]]} ({name}); set"
                " startingOffsetsByTimestampStrategy=latest to start at the end instead"
            )
        latest_offsets = self.latest(unmatched)
        return {p: (latest_offsets[p] if o is None else o) for p, o in found.items()}

    def _list(self, specs: Mapping[Partition, Any]) -> OffsetMap:
        if not specs:
            return {}

        def request() -> OffsetMap:
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=self._isolation,
                request_timeout=REQUEST_TIMEOUT_S,
            )
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

        return self._retry("list offsets", request)

    def _retry(self, what: str, action: Callable[[], T]) -> T:
        attempts = self._options.fetch_retries + 1
        for attempt in range(attempts):
            try:
                return action()
            except KafkaException as e:
                if attempt + 1 == attempts:
                    raise SourceError(
                        f"could not {what} (bootstrap servers"
                        f" {self._options.client_config['bootstrap.servers']}) after"
                        f" {attempts} attempts: {_kafka_error(e)}"
                    ) from None
                self._sleep(self._options.fetch_retry_interval_ms / 1000)
        raise AssertionError("unreachable")


def _listed(name: str, wanted: Mapping[Partition, int], partitions: list[Partition]) -> None:
    """Spark's rule: JSON offsets or timestamps name every partition of the subscription."""
    missing = sorted(set(partitions) - wanted.keys())
    unknown = sorted(wanted.keys() - set(partitions))
    if missing or unknown:
        problems = []
        if missing:
            problems.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if unknown:
            problems.append("not subscribed or absent " + ", ".join(f"{t}-{p}" for t, p in unknown))
        raise SourceOptionError(
            f"option {name!r} must list every partition read ({'; '.join(problems)});"
            " use -2 for earliest and -1 for latest"
        )
