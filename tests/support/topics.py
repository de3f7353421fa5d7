"""Topics as the tests write and read them: JSON events and (key, value) records produced in
order; records read back to the end (with riverbed.testing.topic_reader) as JSON, and the table
a changelog of them describes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from riverbed.testing.topic_reader import last_values, read_to_end

Row = dict[str, Any]


def produce_events(
    bootstrap: str, topic: str, events: Sequence[Mapping[str, Any]], key_field: str = "user_id"
) -> None:
    """Produce JSON events, keyed ``{key_field: ...}`` (the topic's key in DESIGN.md)."""
    produce_records(
        bootstrap,
        topic,
        [(json.dumps({key_field: e[key_field]}).encode(), json.dumps(e).encode()) for e in events],
    )


def produce_records(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> None:
    """Produce (key, value) records as they are, in order (a None value is a tombstone)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for key, value in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


@dataclass(frozen=True, slots=True, kw_only=True)
class JsonRecord:
    """A record whose key and value are JSON objects (the value None: a tombstone)."""

    key: Row
    value: Row | None


def read_json(bootstrap: str, topic: str) -> list[JsonRecord]:
    """Every record of ``topic`` (all partitions; none if it does not exist yet),
    read_committed, its key and value parsed as JSON."""
    return [
        JsonRecord(
            key=json.loads(r.key or b"null"),
            value=None if r.value is None else json.loads(r.value),
        )
        for r in read_to_end(bootstrap, topic, timeout_s=30)
    ]


def changelog(records: Iterable[JsonRecord]) -> dict[str, Row]:
    """The last value per key (keys as JSON text with sorted fields, as :func:`keyed`)."""
    return last_values((json.dumps(r.key, sort_keys=True), r.value) for r in records)


def keyed(rows: Iterable[Row], *key_fields: str) -> dict[str, Row]:
    """``rows`` (a reference's output) keyed as :func:`changelog` keys the topic's records
    whose key holds ``key_fields``."""
    return {json.dumps({f: row[f] for f in key_fields}, sort_keys=True): row for row in rows}


def partition_offset_values(
    bootstrap: str, topic: str, partitions: int
) -> list[tuple[int, int, bytes | None]]:
    """Every (partition, offset, value) of the topic, read to the end."""
    return [
        (r.partition, r.offset, r.value)
        for r in read_to_end(bootstrap, topic, partitions=partitions)
    ]
