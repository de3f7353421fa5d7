"""The topics of one event-sourced aggregate type (DESIGN.md, "Event sourcing"), and
creating them as the contract wants them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.eventsourcing.errors import EventSourcingError

__all__ = ["Topics", "TopicsError", "ensure_topics"]


class TopicsError(EventSourcingError):
    """No broker, a topic that cannot be created, or topics whose partitions do not match."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Topics:
    """Commands in; events (the source of truth), results, snapshots and subjects' keys out.
    Commands, events, results and snapshots have the same partition count."""

    commands: str
    events: str
    results: str
    snapshots: str
    keys: str


def ensure_topics(
    settings: Mapping[str, Any], topics: Topics, *, partitions: int, timeout_s: float
) -> int:
    """Create those of ``topics`` that are missing (events kept forever; snapshots and keys
    compacted; keys in one partition) and return the partition count of the commands topic,
    which the events, results and snapshots topics must share. ``settings`` are librdkafka's
    (``bootstrap.servers``, security, ...)."""
    admin = AdminClient(dict(settings))
    bootstrap = settings.get("bootstrap.servers")
    try:
        existing = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as e:
        raise TopicsError(f"no broker at {bootstrap}: {e.args[0].str()}") from None
    forever = {"retention.ms": "-1"}
    # Keys: well above the time a key-set repair takes (shredding.py); snapshots: so that a
    # reader that found a snapshot's offset still finds the snapshot a while.
    compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"}
    wanted = {
        topics.commands: (partitions, {}),
        topics.events: (partitions, forever),
        topics.results: (partitions, {}),
        topics.snapshots: (partitions, compacted),
        topics.keys: (1, compacted),
    }
    missing = [
        NewTopic(name, num_partitions=n, replication_factor=1, config=config)
        for name, (n, config) in wanted.items()
        if name not in existing
    ]
    for name, future in (admin.create_topics(missing) if missing else {}).items():
        try:
            future.result(timeout_s)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicsError(f"cannot create {name}: {e.args[0].str()}") from None
    counts = {
        name: len(meta.partitions)
        for name, meta in admin.list_topics(timeout=timeout_s).topics.items()
        if name in wanted
    }
    aligned = (topics.commands, topics.events, topics.results, topics.snapshots)
    if len({counts.get(name) for name in aligned}) != 1:
        raise TopicsError(
            "the commands, events, results and snapshots topics must have the same partition "
            "count: " + ", ".join(f"{name} {counts.get(name)}" for name in aligned)
        )
    return counts[topics.commands]
