"""Per-topic log configuration: the values, their Kafka names, defaults and parsers.

:data:`TOPIC_CONFIGS` maps each topic-level name (``segment.bytes``) to the broker-level
name that sets its default (``log.segment.bytes``), Kafka's default value, a parser that
turns the property string into the typed value (InvalidConfigError on a bad one) and a
one-line doc. Retention is enforced by :mod:`riverbed.log.retention`, compaction by
:mod:`riverbed.log.cleaner`. Carried but not enforced (so that tools which set them are not
refused): the replication settings of a one-broker cluster, ``flush.messages`` /
``flush.ms`` (acks=all is fsynced before it is answered anyway),
``message.timestamp.before/after.max.ms``, and codecs other than ``producer`` for
``compression.type``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.log.batch import TimestampType
from riverbed.log.errors import InvalidConfigError

DAY_MS = 24 * 60 * 60 * 1000
SEGMENT_BYTES = 1024 * 1024 * 1024
"""log.segment.bytes default: 1 GiB."""
SEGMENT_MS = 7 * DAY_MS
"""log.roll.hours default: 168 hours."""
SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
"""log.index.size.max.bytes default: 10 MiB."""
INDEX_INTERVAL_BYTES = 4096
"""log.index.interval.bytes default."""
MAX_MESSAGE_BYTES = 1048588
"""message.max.bytes default: 1 MiB + Kafka's 12-byte LOG_OVERHEAD."""
RETENTION_MS = 7 * DAY_MS
"""log.retention.hours default: 168 hours."""
RETENTION_BYTES = -1
"""log.retention.bytes default: unlimited."""
MIN_SEGMENT_BYTES = 14
"""Kafka 3.x's lower bound on segment.bytes (LegacyRecord.RECORD_OVERHEAD_V0); kept so tests
can roll segments after every batch."""
MIN_SEGMENT_INDEX_BYTES = 8
"""One offset-index entry."""

LONG_MAX = 2**63 - 1
DELETE_RETENTION_MS = DAY_MS
"""log.cleaner.delete.retention.ms default: 1 day."""
FILE_DELETE_DELAY_MS = 60_000
"""log.segment.delete.delay.ms default."""
MIN_CLEANABLE_DIRTY_RATIO = 0.5
"""log.cleaner.min.cleanable.ratio default."""
TIMESTAMP_AFTER_MAX_MS = 3_600_000
"""log.message.timestamp.after.max.ms default since Kafka 4.0: 1 hour."""

_CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact"})
_COMPRESSION_TYPES = frozenset({"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"})
_TIMESTAMP_TYPES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}


def _int_parser(*, minimum: int, maximum: int = 2**63 - 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidConfigError(f"{text!r} is not an integer") from None
        if not minimum <= value <= maximum:
            raise InvalidConfigError(f"{value} is outside [{minimum}, {maximum}]")
        return value

    return parse


def _choice_parser(choices: frozenset[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().replace(" ", "")
        if value not in choices:
            raise InvalidConfigError(f"{text!r} is not one of {sorted(choices)}")
        return value

    return parse


def _ratio_parser(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InvalidConfigError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidConfigError(f"{value} is outside [0, 1]")
    return value


def _bool_parser(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{text!r} is not true or false")
    return value == "true"


def _parse_timestamp_type(text: str) -> TimestampType:
    try:
        return _TIMESTAMP_TYPES[text.strip()]
    except KeyError:
        raise InvalidConfigError(f"{text!r} is not CreateTime or LogAppendTime") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigDef:
    """One row of TOPIC_CONFIGS."""

    field: str
    broker_name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str


TOPIC_CONFIGS: Mapping[str, ConfigDef] = {
    "segment.bytes": ConfigDef(
        field="segment_bytes",
        broker_name="log.segment.bytes",
        default=SEGMENT_BYTES,
        parse=_int_parser(minimum=MIN_SEGMENT_BYTES, maximum=2**31 - 1),  # an int in Kafka
        doc="Roll the active segment when it reaches this size.",
    ),
    "segment.ms": ConfigDef(
        field="segment_ms",
        broker_name="log.roll.ms",
        default=SEGMENT_MS,
        parse=_int_parser(minimum=1),
        doc="Roll the active segment when it is this old (by the broker clock).",
    ),
    "segment.index.bytes": ConfigDef(
        field="segment_index_bytes",
        broker_name="log.index.size.max.bytes",
        default=SEGMENT_INDEX_BYTES,
        parse=_int_parser(minimum=MIN_SEGMENT_INDEX_BYTES),
        doc="Roll the active segment when its offset index reaches this size.",
    ),
    "index.interval.bytes": ConfigDef(
        field="index_interval_bytes",
        broker_name="log.index.interval.bytes",
        default=INDEX_INTERVAL_BYTES,
        parse=_int_parser(minimum=0),
        doc="Add an offset-index entry after this many bytes of batches.",
    ),
    "max.message.bytes": ConfigDef(
        field="max_message_bytes",
        broker_name="message.max.bytes",
        default=MAX_MESSAGE_BYTES,
        parse=_int_parser(minimum=0),
        doc="Largest record batch accepted.",
    ),
    "message.timestamp.type": ConfigDef(
        field="message_timestamp_type",
        broker_name="log.message.timestamp.type",
        default=TimestampType.CREATE_TIME,
        parse=_parse_timestamp_type,
        doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
    ),
    "cleanup.policy": ConfigDef(
        field="cleanup_policy",
        broker_name="log.cleanup.policy",
        default="delete",
        parse=_choice_parser(_CLEANUP_POLICIES),
        doc="delete (retention), compact (the cleaner) or both.",
    ),
    "retention.ms": ConfigDef(
        field="retention_ms",
        broker_name="log.retention.ms",
        default=RETENTION_MS,
        parse=_int_parser(minimum=-1),
        doc="Delete segments whose newest record is older than this (-1: never).",
    ),
    "retention.bytes": ConfigDef(
        field="retention_bytes",
        broker_name="log.retention.bytes",
        default=RETENTION_BYTES,
        parse=_int_parser(minimum=-1),
        doc="Delete the oldest segments while the log is larger than this (-1: no limit).",
    ),
    "compression.type": ConfigDef(
        field="compression_type",
        broker_name="compression.type",
        default="producer",
        parse=_choice_parser(_COMPRESSION_TYPES),
        doc="producer keeps the producer's codec (the only value the log implements yet).",
    ),
    "delete.retention.ms": ConfigDef(
        field="delete_retention_ms",
        broker_name="log.cleaner.delete.retention.ms",
        default=DELETE_RETENTION_MS,
        parse=_int_parser(minimum=0),
        doc="How long a compacted topic keeps tombstones and transaction markers after "
        "they are first compacted.",
    ),
    "min.cleanable.dirty.ratio": ConfigDef(
        field="min_cleanable_dirty_ratio",
        broker_name="log.cleaner.min.cleanable.ratio",
        default=MIN_CLEANABLE_DIRTY_RATIO,
        parse=_ratio_parser,
        doc="Compact a log once this share of it is not yet compacted.",
    ),
    "min.compaction.lag.ms": ConfigDef(
        field="min_compaction_lag_ms",
        broker_name="log.cleaner.min.compaction.lag.ms",
        default=0,
        parse=_int_parser(minimum=0),
        doc="Records younger than this are never compacted.",
    ),
    "max.compaction.lag.ms": ConfigDef(
        field="max_compaction_lag_ms",
        broker_name="log.cleaner.max.compaction.lag.ms",
        default=LONG_MAX,
        parse=_int_parser(minimum=1),
        doc="Records older than this are compacted whatever the dirty ratio.",
    ),
    "file.delete.delay.ms": ConfigDef(
        field="file_delete_delay_ms",
        broker_name="log.segment.delete.delay.ms",
        default=FILE_DELETE_DELAY_MS,
        parse=_int_parser(minimum=0),
        doc="How long a deleted segment's files are kept before removal.",
    ),
    "message.timestamp.before.max.ms": ConfigDef(
        field="message_timestamp_before_max_ms",
        broker_name="log.message.timestamp.before.max.ms",
        default=LONG_MAX,
        parse=_int_parser(minimum=0),
        doc="Largest allowed age of a CreateTime timestamp (not enforced yet).",
    ),
    "message.timestamp.after.max.ms": ConfigDef(
        field="message_timestamp_after_max_ms",
        broker_name="log.message.timestamp.after.max.ms",
        default=TIMESTAMP_AFTER_MAX_MS,
        parse=_int_parser(minimum=0),
        doc="Largest allowed lead of a CreateTime timestamp (not enforced yet).",
    ),
    "flush.messages": ConfigDef(
        field="flush_messages",
        broker_name="log.flush.interval.messages",
        default=LONG_MAX,
        parse=_int_parser(minimum=1),
        doc="fsync after this many records (acks=all is fsynced anyway; not enforced yet).",
    ),
    "flush.ms": ConfigDef(
        field="flush_ms",
        broker_name="log.flush.interval.ms",
        default=LONG_MAX,
        parse=_int_parser(minimum=0),
        doc="fsync after this long (acks=all is fsynced anyway; not enforced yet).",
    ),
    "min.insync.replicas": ConfigDef(
        field="min_insync_replicas",
        broker_name="min.insync.replicas",
        default=1,
        parse=_int_parser(minimum=1, maximum=1),
        doc="One broker, one replica: always 1.",
    ),
    "unclean.leader.election.enable": ConfigDef(
        field="unclean_leader_election_enable",
        broker_name="unclean.leader.election.enable",
        default=False,
        parse=_bool_parser,
        doc="Carried for tools that set it; one broker has no other replica to elect.",
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
    """The effective configuration of one partition's log. Defaults are Kafka's."""

    segment_bytes: int = SEGMENT_BYTES
    segment_ms: int = SEGMENT_MS
    segment_index_bytes: int = SEGMENT_INDEX_BYTES
    index_interval_bytes: int = INDEX_INTERVAL_BYTES
    max_message_bytes: int = MAX_MESSAGE_BYTES
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    cleanup_policy: str = "delete"
    retention_ms: int = RETENTION_MS
    retention_bytes: int = RETENTION_BYTES
    compression_type: str = "producer"
    delete_retention_ms: int = DELETE_RETENTION_MS
    min_cleanable_dirty_ratio: float = MIN_CLEANABLE_DIRTY_RATIO
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = FILE_DELETE_DELAY_MS
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = TIMESTAMP_AFTER_MAX_MS
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_properties(cls, overrides: Mapping[str, str], *, base: TopicConfig) -> TopicConfig:
        """``base`` with topic-level properties applied; InvalidConfigError for an unknown
        name or a bad value."""
        changes: dict[str, Any] = {}
        for name, text in overrides.items():
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise InvalidConfigError(f"unknown topic config {name!r}")
            try:
                changes[definition.field] = definition.parse(text)
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{name}: {exc}") from None
        return dataclasses.replace(base, **changes)

    @property
    def compacted(self) -> bool:
        """cleanup.policy includes compact."""
        return "compact" in self.cleanup_policy.split(",")

    def to_properties(self) -> dict[str, str]:
        """Every topic-level name with its value as a property string."""
        properties: dict[str, str] = {}
        for name, definition in TOPIC_CONFIGS.items():
            value = getattr(self, definition.field)
            if isinstance(value, TimestampType):
                value = next(k for k, v in _TIMESTAMP_TYPES.items() if v is value)
            elif isinstance(value, bool):
                value = "true" if value else "false"  # Kafka's spelling
            properties[name] = str(value)
        return properties
