"""What the demo prints around its sections, and where its clients' library lines go.

Every section starts with a ``== title`` line and ends with how long it took. Every
confluent-kafka client of the demo is made with :func:`kafka_config`, so librdkafka's own
log lines go to the logger :data:`KAFKA_LOG` instead of straight to stderr.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, TopicPartition

__all__ = ["KAFKA_LOG", "kafka_config", "section", "tail_consumer"]

KAFKA_LOG = logging.getLogger("riverbed.demo.librdkafka")
"""librdkafka's log of the demo's clients. With no logging configured, Python prints its
warnings and errors (a broker that cannot be reached, a refused setting) to stderr and drops
the rest (e.g. "Purging 1 unserved events from background queue", an INFO line)."""


def kafka_config(bootstrap: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A confluent-kafka client configuration: ``bootstrap``, librdkafka's ``settings``, and
    :data:`KAFKA_LOG` as its logger."""
    return {"bootstrap.servers": bootstrap, "logger": KAFKA_LOG, **(settings or {})}


def tail_consumer(bootstrap: str, topics: Iterable[str], *, group: str) -> Consumer:
    """A read_committed consumer of partition 0 of each of ``topics`` (the pipelines' output
    topics have one), from the beginning; ``group`` names it and commits nothing."""
    consumer = Consumer(
        kafka_config(
            bootstrap,
            {"group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed"},
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0) for topic in topics])
    return consumer


@contextmanager
def section(title: str) -> Iterator[None]:
    """Print ``title`` as a section's header, and how long the section took at its end."""
    print(f"\n== {title}", flush=True)
    started = time.perf_counter()
    yield
    print(f"(section took {time.perf_counter() - started:.1f} s)", flush=True)
