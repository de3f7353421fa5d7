"""The options of the ``riverbed`` source: Spark's Kafka source options, parsed and checked.

Names and meanings are those of ``format("kafka")`` (case-insensitive, as in Spark); an
option Spark's Kafka source does not know is ignored, as Spark does, and every ``kafka.*``
option goes to the confluent-kafka (librdkafka) client with the prefix removed.

Where to read:

- ``subscribe`` (comma-separated topics), ``subscribePattern`` (a regular expression that must
  match a whole topic name: Python's ``re.fullmatch``, which agrees with Java's regex for the
  usual patterns such as ``clicks-.*``; internal topics never match) or ``assign``
  (``{"topicA":[0,1]}``): exactly one.
- ``startingOffsets``: ``earliest``, ``latest`` or ``{"topicA":{"0":23,"1":-1}}`` with -2 for
  earliest and -1 for latest; every partition must be listed. Default ``latest`` for a stream,
  ``earliest`` for a batch read. It applies to a new query only: a restarted one resumes from
  its checkpoint. Partitions that appear later (the topic grew, a new topic matches the
  pattern) are read from their first offset.
- ``startingTimestamp`` (ms, every partition) beats ``startingOffsetsByTimestamp``
  (``{"topicA":{"0":1700000000000}}``), which beats ``startingOffsets``: the first offset whose
  timestamp is at or after it. When there is none, ``startingOffsetsByTimestampStrategy``
  decides: ``error`` (the default) fails, ``latest`` starts at the end.
- Batch reads only: ``endingOffsets`` (``latest``, the default, or JSON with -1),
  ``endingTimestamp``, ``endingOffsetsByTimestamp`` (no match: the end of the partition).

How much per micro-batch: ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay`` (default ``15m``), see :mod:`riverbed.spark.source.admission`;
``minPartitions`` and ``maxRecordsPerPartition`` split large offset ranges into more Spark
tasks. Without either, a task reads one partition's range, as Spark's Kafka source does,
but a micro-batch of at most 10,000 records in all is read in at most two tasks
(:func:`~riverbed.spark.source.offsets.pack_ranges`): a task has a fixed cost of tens of
milliseconds, most of a small batch's read.

Other: ``failOnDataLoss`` (default ``true``), ``includeHeaders`` (default ``false``),
``groupIdPrefix``, ``kafkaConsumer.pollTimeoutMs`` (default 120000: how long a task waits
for the broker without progress), ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``
(3 / 10 ms, for the driver's offset requests).

``kafka.isolation.level`` defaults to **read_committed**, unlike Spark's Kafka source
(``read_uncommitted``): riverbed's sink writes with transactions, and a query that saw the
records of aborted or still open transactions would not be exactly-once. A read_committed
source reads up to the partition's last stable offset.
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from riverbed.spark.errors import SourceOptionError
from riverbed.spark.source.offsets import (
    EARLIEST,
    LATEST,
    OffsetMap,
    Partition,
    parse_offsets_option,
)

__all__ = [
    "Assign",
    "Bound",
    "OffsetsPerPartition",
    "Position",
    "SourceOptions",
    "Subscribe",
    "SubscribePattern",
    "Subscription",
    "TimestampForAll",
    "TimestampPerPartition",
    "TimestampStrategy",
    "parse_source_options",
]

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Kafka's internal topics, never matched by ``subscribePattern`` (exclude.internal.topics)."""

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
"""Spark's Kafka source: ``maxTriggerDelay`` 15m."""
DEFAULT_POLL_TIMEOUT_MS = 120_000
"""Spark's ``kafkaConsumer.pollTimeoutMs`` default (``spark.network.timeout``, 120s)."""
DEFAULT_FETCH_RETRIES = 3
DEFAULT_FETCH_RETRY_INTERVAL_MS = 10
"""Spark's ``fetchOffset.numRetries`` and ``fetchOffset.retryIntervalMs``."""

REFUSED_KAFKA_OPTIONS = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source does not commit offsets; Spark's checkpoint has them",
    "enable.partition.eof": "the source needs end-of-partition events and sets it",
    "key.deserializer": "keys are bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are bytes; deserialize them with DataFrame operations",
    "interceptor.classes": "the source does not support interceptors",
}
"""Client settings the source controls (Spark refuses the same ones)."""

_DURATION = re.compile(r"(-?\d+)\s*([a-z]+)?")
_DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_DURATION_MS["d"] = 24 * _DURATION_MS["h"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    topics: frozenset[str]

    def select(self, topics: Mapping[str, int]) -> list[Partition]:
        """The partitions read, given the broker's topics and their partition counts."""
        return [(t, p) for t in sorted(self.topics & topics.keys()) for p in range(topics[t])]


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscribePattern:
    pattern: re.Pattern[str]

    def select(self, topics: Mapping[str, int]) -> list[Partition]:
        matching = [t for t in topics if t not in INTERNAL_TOPICS and self.pattern.fullmatch(t)]
        return [(t, p) for t in sorted(matching) for p in range(topics[t])]


@dataclass(frozen=True, slots=True, kw_only=True)
class Assign:
    partitions: frozenset[Partition]

    def select(self, topics: Mapping[str, int]) -> list[Partition]:
        """The assigned partitions that exist."""
        return sorted((t, p) for t, p in self.partitions if p < topics.get(t, 0))


Subscription = Subscribe | SubscribePattern | Assign


class Bound(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsPerPartition:
    """Offsets from JSON; -2 (earliest) and -1 (latest) are resolved against the broker."""

    offsets: OffsetMap


@dataclass(frozen=True, slots=True, kw_only=True)
class TimestampForAll:
    timestamp_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TimestampPerPartition:
    timestamps_ms: OffsetMap


Position = Bound | OffsetsPerPartition | TimestampForAll | TimestampPerPartition


class TimestampStrategy(enum.Enum):
    """``startingOffsetsByTimestampStrategy``: when no offset has a late enough timestamp."""

    ERROR = "error"
    LATEST = "latest"


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """Every option of one query, checked. ``client_config`` is librdkafka's configuration
    (``kafka.*`` without the prefix, plus the source's defaults)."""

    subscription: Subscription
    starting: Position
    ending: Position
    timestamp_strategy: TimestampStrategy
    client_config: dict[str, str]
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_retries: int = DEFAULT_FETCH_RETRIES
    fetch_retry_interval_ms: int = DEFAULT_FETCH_RETRY_INTERVAL_MS

    @property
    def isolation_committed(self) -> bool:
        return self.client_config.get("isolation.level", "") != "read_uncommitted"


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise SourceOptionError(f"option {name!r} must be 'true' or 'false', got {text!r}")
    return text.strip().lower() == "true"


def _positive(options: Mapping[str, str], name: str, *, allow_zero: bool = False) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise SourceOptionError(f"option {name!r} must be {kind} integer, got {text!r}")
    return value


def _duration_ms(name: str, text: str) -> int:
    """Spark's ``JavaUtils.timeStringAsMs``: ``15m``, ``30s``, ``500ms``, ``1h``; no unit: ms."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or (match.group(2) or "ms") not in _DURATION_MS or int(match.group(1)) < 0:
        raise SourceOptionError(
            f"option {name!r} must be a duration such as '15m', '30s' or '500ms', got {text!r}"
        )
    return int(int(match.group(1)) * _DURATION_MS[match.group(2) or "ms"])


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in options]
    if len(given) != 1:
        how = "One of" if not given else f"Only one of ({', '.join(given)} were given)"
        raise SourceOptionError(
            f"{how} the options 'subscribe', 'subscribePattern' and 'assign' must be specified"
        )
    text = options[given[0].lower()]
    if given[0] == "subscribe":
        topics = frozenset(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise SourceOptionError(f"option 'subscribe' lists no topic: {text!r}")
        return Subscribe(topics=topics)
    if given[0] == "subscribePattern":
        if not text.strip():
            raise SourceOptionError("option 'subscribePattern' is empty")
        try:
            return SubscribePattern(pattern=re.compile(text.strip()))
        except re.error as e:
            raise SourceOptionError(f"option 'subscribePattern' {text!r}: {e}") from None
    return Assign(partitions=_assignment(text))


def _assignment(text: str) -> frozenset[Partition]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not value:
        raise SourceOptionError(f"option 'assign': expected JSON such as {example}, got {text!r}")
    partitions: set[Partition] = set()
    for topic, numbers in value.items():
        if not isinstance(numbers, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers
        ):
            raise SourceOptionError(
                f"option 'assign': expected JSON such as {example}, got {text!r}"
            )
        partitions.update((topic, n) for n in numbers)
    return frozenset(partitions)


def _offsets(options: Mapping[str, str], name: str) -> OffsetMap:
    try:
        return parse_offsets_option(name, options[name.lower()])
    except ValueError as e:
        raise SourceOptionError(str(e)) from None


def _timestamp(options: Mapping[str, str], name: str) -> int:
    text = options[name.lower()].strip()
    if not text.isdigit():
        raise SourceOptionError(f"option {name!r} must be a timestamp in ms, got {text!r}")
    return int(text)


def _position(options: Mapping[str, str], *, starting: bool, streaming: bool) -> Position:
    """``starting``/``ending`` position with Spark's precedence; batch/stream rules applied."""
    which = "starting" if starting else "ending"
    timestamp, by_timestamp, offsets = (
        f"{which}Timestamp",
        f"{which}OffsetsByTimestamp",
        f"{which}Offsets",
    )
    if not starting and streaming:
        for name in (timestamp, by_timestamp, offsets):
            if name.lower() in options:
                raise SourceOptionError(f"option {name!r} is for batch queries, not streams")
    if timestamp.lower() in options:
        return TimestampForAll(timestamp_ms=_timestamp(options, timestamp))
    if by_timestamp.lower() in options:
        stamps = _offsets(options, by_timestamp)
        if any(ts < 0 for ts in stamps.values()):
            raise SourceOptionError(f"option {by_timestamp!r} takes timestamps in ms (>= 0)")
        return TimestampPerPartition(timestamps_ms=stamps)
    default = Bound.LATEST if streaming or not starting else Bound.EARLIEST
    text = options.get(offsets.lower())
    if text is None:
        return default
    refused = LATEST if starting else EARLIEST
    refused_name = "latest" if starting else "earliest"
    if text.strip().lower() in ("earliest", "latest"):
        bound = Bound(text.strip().lower())
        if not streaming and bound.value == refused_name:
            raise SourceOptionError(
                f"option {offsets!r} can't be {refused_name!r} for batch queries"
            )
        return bound
    parsed = _offsets(options, offsets)
    for (topic, partition), offset in parsed.items():
        if offset < EARLIEST or (not streaming and offset == refused):
            raise SourceOptionError(
                f"option {offsets!r}: offset {offset} of {topic}-{partition} is not allowed"
                f" (offsets >= 0, -2 earliest{', -1 latest' if refused != LATEST else ''})"
            )
    return OffsetsPerPartition(offsets=parsed)


def _client_config(options: Mapping[str, str], *, streaming: bool) -> dict[str, str]:
    config = {
        name[len("kafka.") :]: value for name, value in options.items() if name[:6] == "kafka."
    }
    if "bootstrap.servers" not in config or not config["bootstrap.servers"].strip():
        raise SourceOptionError("option 'kafka.bootstrap.servers' must be specified")
    for name, reason in REFUSED_KAFKA_OPTIONS.items():
        if name in config:
            raise SourceOptionError(f"option 'kafka.{name}' is not supported: {reason}")
    level = config.setdefault("isolation.level", "read_committed")
    if level not in ("read_committed", "read_uncommitted"):
        raise SourceOptionError(
            f"option 'kafka.isolation.level' must be read_committed or read_uncommitted,"
            f" got {level!r}"
        )
    if "group.id" not in config:
        # Spark's groupIdPrefix defaults; no group ever joins or commits, the id only names
        # the client in the broker's logs.
        prefix = options.get("groupidprefix") or (
            "spark-kafka-source" if streaming else "spark-kafka-relation"
        )
        config["group.id"] = f"{prefix}-{uuid.uuid4()}"
    return config


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check ``options`` (Spark's, any case) for a stream or a batch read.

    Raises :class:`SourceOptionError` naming the option at fault.
    """
    lowered = {name.lower(): str(value) for name, value in options.items()}
    strategy_text = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_text not in ("error", "latest"):
        raise SourceOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest',"
            f" got {strategy_text!r}"
        )
    delay_text = lowered.get("maxtriggerdelay")
    return SourceOptions(
        subscription=_subscription(lowered),
        starting=_position(lowered, starting=True, streaming=streaming),
        ending=_position(lowered, starting=False, streaming=streaming),
        timestamp_strategy=TimestampStrategy(strategy_text),
        client_config=_client_config(lowered, streaming=streaming),
        fail_on_data_loss=_bool(lowered, "failOnDataLoss", True),
        include_headers=_bool(lowered, "includeHeaders", False),
        max_offsets_per_trigger=_positive(lowered, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive(lowered, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=(
            DEFAULT_MAX_TRIGGER_DELAY_MS
            if delay_text is None
            else _duration_ms("maxTriggerDelay", delay_text)
        ),
        min_partitions=_positive(lowered, "minPartitions"),
        max_records_per_partition=_positive(lowered, "maxRecordsPerPartition"),
        poll_timeout_ms=_positive(lowered, "kafkaConsumer.pollTimeoutMs")
        or DEFAULT_POLL_TIMEOUT_MS,
        fetch_retries=(
            DEFAULT_FETCH_RETRIES
            if (retries := _positive(lowered, "fetchOffset.numRetries", allow_zero=True)) is None
            else retries
        ),
        fetch_retry_interval_ms=(
            DEFAULT_FETCH_RETRY_INTERVAL_MS
            if (interval := _positive(lowered, "fetchOffset.retryIntervalMs", allow_zero=True))
            is None
            else interval
        ),
    )
