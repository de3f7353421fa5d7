"""The records of ``__consumer_offsets``: how committed offsets and groups are stored.

Kafka's binary schemas for this topic are not in kio, so riverbed uses its own encoding:
UTF-8 JSON, compact (no spaces) and with a fixed key order so that the same identity always
gives the same key bytes (compaction, issue 5, keeps the last record per key).

Offset commit (one record per committed partition)::

    key   {"v":0,"type":"offset","group":G,"topic":T,"partition":P}
    value {"offset":O,"leader_epoch":E,"metadata":M,"commit_timestamp":MS}

Group metadata (written when a generation completes, and when a group is created by a
standalone commit; read back so an empty group is still listed after a restart)::

    key   {"v":0,"type":"group","group":G}
    value {"protocol_type":PT,"generation":N,"protocol":NAME|null,"state_timestamp":MS,...}

A record with a null value is a tombstone: the offset was deleted or expired, or the group
was deleted. ``metadata`` is the client's string as committed (null stays null);
``leader_epoch`` -1 means none. Times are epoch milliseconds. Fields unknown to a reader
are ignored, so later versions may add some.

Which partition holds a group: ``abs(java_hash(group_id)) % partitions``, Kafka's
``GroupCoordinator.partitionFor``
(:func:`riverbed.broker.internal_topics.partition_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from riverbed.broker.internal_topics import decode_json_object, encode_json

__all__ = [
    "GroupKey",
    "OffsetKey",
    "OffsetValue",
    "decode_group_value",
    "decode_key",
    "decode_offset_value",
    "encode_group_value",
    "encode_key",
    "encode_offset_value",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetKey:
    """The key of a group's committed offset of one partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetValue:
    """One committed offset, as OffsetCommit gave it and OffsetFetch returns it."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupKey:
    """The key of a group's metadata record."""

    group: str


KEY_VERSION = 0
"""The ``v`` of every key this module writes."""


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return encode_json(
            {
                "v": KEY_VERSION,
                "type": "offset",
                "group": key.group,
                "topic": key.topic,
                "partition": key.partition,
            }
        )
    return encode_json({"v": KEY_VERSION, "type": "group", "group": key.group})


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key, or None for a record this version does not know (it is skipped)."""
    document = decode_json_object(data, what="key")
    kind = document.get("type")
    if kind == "offset":
        return OffsetKey(
            group=str(document["group"]),
            topic=str(document["topic"]),
            partition=int(document["partition"]),
        )
    if kind == "group":
        return GroupKey(group=str(document["group"]))
    return None


def encode_offset_value(value: OffsetValue) -> bytes:
    return encode_json(
        {
            "offset": value.offset,
            "leader_epoch": value.leader_epoch,
            "metadata": value.metadata,
            "commit_timestamp": value.commit_timestamp_ms,
        }
    )


def decode_offset_value(data: bytes) -> OffsetValue:
    document = decode_json_object(data, what="offset value")
    metadata = document.get("metadata", "")
    return OffsetValue(
        offset=int(document["offset"]),
        leader_epoch=int(document.get("leader_epoch", -1)),
        metadata=None if metadata is None else str(metadata),
        commit_timestamp_ms=int(document.get("commit_timestamp", -1)),
    )


def encode_group_value(value: dict[str, Any]) -> bytes:
    return encode_json(value)


def decode_group_value(data: bytes) -> dict[str, Any]:
    return decode_json_object(data, what="group value")
