"""The configuration of a topic's logs: Kafka's topic-level settings, typed (Kafka's LogConfig).

A :class:`TopicConfig` holds the effective value of every topic-level setting. Each of its
fields states everything about one setting, once: its Kafka name (the field's name with
dots, ``segment_bytes`` is ``segment.bytes``), the broker-level name that sets its default
(``log.segment.bytes``), Kafka's default value, the parser that turns the property string
into the typed value (InvalidConfigError on a bad one) and a one-line doc.
:data:`TOPIC_CONFIGS` lists them by Kafka name, for the broker's config handling.

Retention is enforced by :mod:`riverbed.log.retention`, compaction by
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
from typing import Any, TypeVar

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


_T = TypeVar("_T")


def _setting(default: _T, *, broker_name: str, parse: Callable[[str], _T], doc: str) -> _T:
    """A field of :class:`TopicConfig`: its default, and what :data:`TOPIC_CONFIGS` says."""
    metadata = {"broker_name": broker_name, "parse": parse, "doc": doc}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
    """The effective configuration of a topic's partition logs (Kafka's LogConfig), one
    field per topic-level setting (see the module docstring). Defaults are Kafka's."""

    segment_bytes: int = _setting(
        SEGMENT_BYTES,
        broker_name="log.segment.bytes",
        parse=_int_parser(minimum=MIN_SEGMENT_BYTES, maximum=2**31 - 1),  # an int in Kafka
        doc="Roll the active segment when it reaches this size.",
    )
    segment_ms: int = _setting(
        SEGMENT_MS,
        broker_name="log.roll.ms",
        parse=_int_parser(minimum=1),
        doc="Roll the active segment when it is this old (by the broker clock).",
    )
    segment_index_bytes: int = _setting(
        SEGMENT_INDEX_BYTES,
        broker_name="log.index.size.max.bytes",
        parse=_int_parser(minimum=MIN_SEGMENT_INDEX_BYTES),
        doc="Roll the active segment when its offset index reaches this size.",
    )
    index_interval_bytes: int = _setting(
        INDEX_INTERVAL_BYTES,
        broker_name="log.index.interval.bytes",
        parse=_int_parser(minimum=0),
        doc="Add an offset-index entry after this many bytes of batches.",
    )
    max_message_bytes: int = _setting(
        MAX_MESSAGE_BYTES,
        broker_name="message.max.bytes",
        parse=_int_parser(minimum=0),
        doc="Largest record batch accepted.",
    )
    message_timestamp_type: TimestampType = _setting(  # noqa: RUF009 - a dataclasses.field
        TimestampType.CREATE_TIME,
        broker_name="log.message.timestamp.type",
        parse=_parse_timestamp_type,
        doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
    )
    cleanup_policy: str = _setting(
        "delete",
        broker_name="log.cleanup.policy",
        parse=_choice_parser(_CLEANUP_POLICIES),
        doc="delete (retention), compact (the cleaner) or both.",
    )
    retention_ms: int = _setting(
        RETENTION_MS,
        broker_name="log.retention.ms",
        parse=_int_parser(minimum=-1),
        doc="Delete segments whose newest record is older than this (-1: never).",
    )
    retention_bytes: int = _setting(
        RETENTION_BYTES,
        broker_name="log.retention.bytes",
        parse=_int_parser(minimum=-1),
        doc="Delete the oldest segments while the log is larger than this (-1: no limit).",
    )
    compression_type: str = _setting(
        "producer",
        broker_name="compression.type",
        parse=_choice_parser(_COMPRESSION_TYPES),
        doc="producer keeps the producer's codec (the only value the log implements yet).",
    )
    delete_retention_ms: int = _setting(
        DELETE_RETENTION_MS,
        broker_name="log.cleaner.delete.retention.ms",
        parse=_int_parser(minimum=0),
        doc="How long a compacted topic keeps tombstones and transaction markers after "
        "they are first compacted.",
    )
    min_cleanable_dirty_ratio: float = _setting(
        MIN_CLEANABLE_DIRTY_RATIO,
        broker_name="log.cleaner.min.cleanable.ratio",
        parse=_ratio_parser,
        doc="Compact a log once this share of it is not yet compacted.",
    )
    min_compaction_lag_ms: int = _setting(
        0,
        broker_name="log.cleaner.min.compaction.lag.ms",
        parse=_int_parser(minimum=0),
        doc="Records younger than this are never compacted.",
    )
    max_compaction_lag_ms: int = _setting(
        LONG_MAX,
        broker_name="log.cleaner.max.compaction.lag.ms",
        parse=_int_parser(minimum=1),
        doc="Records older than this are compacted whatever the dirty ratio.",
    )
    file_delete_delay_ms: int = _setting(
        FILE_DELETE_DELAY_MS,
        broker_name="log.segment.delete.delay.ms",
        parse=_int_parser(minimum=0),
        doc="How long a deleted segment's files are kept before removal.",
    )
    message_timestamp_before_max_ms: int = _setting(
        LONG_MAX,
        broker_name="log.message.timestamp.before.max.ms",
        parse=_int_parser(minimum=0),
        doc="Largest allowed age of a CreateTime timestamp (not enforced yet).",
    )
    message_timestamp_after_max_ms: int = _setting(
        TIMESTAMP_AFTER_MAX_MS,
        broker_name="log.message.timestamp.after.max.ms",
        parse=_int_parser(minimum=0),
        doc="Largest allowed lead of a CreateTime timestamp (not enforced yet).",
    )
    flush_messages: int = _setting(
        LONG_MAX,
        broker_name="log.flush.interval.messages",
        parse=_int_parser(minimum=1),
        doc="fsync after this many records (acks=all is fsynced anyway; not enforced yet).",
    )
    flush_ms: int = _setting(
        LONG_MAX,
        broker_name="log.flush.interval.ms",
        parse=_int_parser(minimum=0),
        doc="fsync after this long (acks=all is fsynced anyway; not enforced yet).",
    )
    min_insync_replicas: int = _setting(
        1,
        broker_name="min.insync.replicas",
        parse=_int_parser(minimum=1, maximum=1),
        doc="One broker, one replica: always 1.",
    )
    unclean_leader_election_enable: bool = _setting(
        False,
        broker_name="unclean.leader.election.enable",
        parse=_bool_parser,
        doc="Carried for tools that set it; one broker has no other replica to elect.",
    )

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


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigDef:
    """One topic-level setting, as a :class:`TopicConfig` field declares it."""

    field: str
    """The TopicConfig field that holds its value."""
    broker_name: str
    parse: Callable[[str], Any]
    doc: str


TOPIC_CONFIGS: Mapping[str, ConfigDef] = {
    setting.name.replace("_", "."): ConfigDef(
        field=setting.name,
        broker_name=setting.metadata["broker_name"],
        parse=setting.metadata["parse"],
        doc=setting.metadata["doc"],
    )
    for setting in dataclasses.fields(TopicConfig)
}
"""Every topic-level setting by its Kafka name (``segment.bytes``), in TopicConfig's order."""
