"""What ``riverbed groups reset-offsets`` computes, without a broker: pure functions and values.

- ``parse_topic_spec`` reads ``--topic T`` or ``--topic T:0,2`` (Kafka's syntax);
- ``parse_datetime_ms`` reads ``--to-datetime``: ISO-8601 with ``Z`` or a ``±HH:MM`` offset;
  a time without a zone is taken as UTC (Kafka's tool takes it as the JVM's local zone, which
  makes the same command mean different things on different machines);
- ``plan_offsets`` turns a ``ResetTarget`` and what the broker said (committed offsets, each
  partition's earliest and latest offsets, the offsets found by timestamp) into the new
  committed offset of every partition, clamped to ``[earliest, latest]`` as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import datetime
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from riverbed.cli.errors import CliError

__all__ = [
    "Bounds",
    "ResetTarget",
    "Strategy",
    "TopicSpec",
    "parse_datetime_ms",
    "parse_topic_spec",
    "plan_offsets",
]

Partition = tuple[str, int]  # (topic, partition)


class Strategy(enum.Enum):
    """Where ``reset-offsets`` moves a partition's committed offset (one flag each)."""

    EARLIEST = "--to-earliest"
    LATEST = "--to-latest"
    OFFSET = "--to-offset"
    DATETIME = "--to-datetime"
    SHIFT = "--shift-by"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetTarget:
    """A strategy and its number: the offset, the epoch milliseconds, or the shift."""

    strategy: Strategy
    value: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """``--topic T`` (``partitions`` None: all of them) or ``--topic T:0,1``."""

    topic: str
    partitions: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """A partition's log start offset and log end offset (high watermark)."""

    earliest: int
    latest: int

    def clamp(self, offset: int) -> int:
        return max(self.earliest, min(self.latest, offset))


def parse_topic_spec(text: str) -> TopicSpec:
    """argparse ``type=`` for ``--topic``: ``T`` or ``T:P,P..``."""
    topic, sep, listed = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P..., got {text!r}")
    if not sep:
        return TopicSpec(topic=topic)
    try:
        partitions = tuple(sorted({int(p) for p in listed.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected TOPIC:P,P... with partition numbers, got {text!r}"
        ) from None
    if any(p < 0 for p in partitions):
        raise argparse.ArgumentTypeError(f"partitions must not be negative: {text!r}")
    return TopicSpec(topic=topic, partitions=partitions)


def parse_datetime_ms(text: str) -> int:
    """argparse ``type=`` for ``--to-datetime``: ISO-8601 → epoch milliseconds (naive = UTC)."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO-8601 time such as 2026-01-01T00:00:00Z, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise argparse.ArgumentTypeError(f"must not be before 1970: {text!r}")
    return millis


def plan_offsets(
    target: ResetTarget,
    partitions: Iterable[Partition],
    *,
    committed: Mapping[Partition, int],
    bounds: Mapping[Partition, Bounds],
    by_time: Mapping[Partition, int] | None = None,
) -> dict[Partition, int]:
    """The new offset of each partition, always within its ``bounds``.

    ``by_time`` holds, for ``--to-datetime``, the offset of the first record at or after the
    time, or -1 where there is none (the new offset is then the log end, as in Kafka's tool).
    ``--shift-by`` needs a committed offset to shift; a partition without one is an error,
    as in Kafka's tool.
    """
    plan: dict[Partition, int] = {}
    for tp in sorted(partitions):
        limits = bounds[tp]
        match target.strategy:
            case Strategy.EARLIEST:
                offset = limits.earliest
            case Strategy.LATEST:
                offset = limits.latest
            case Strategy.OFFSET:
                offset = target.value
            case Strategy.DATETIME:
                found = (by_time or {}).get(tp, -1)
                offset = found if found >= 0 else limits.latest
            case Strategy.SHIFT:
                if tp not in committed:
                    raise CliError(
                        f"cannot shift {tp[0]}:{tp[1]}: the group has no committed offset there"
                    )
                offset = committed[tp] + target.value
        plan[tp] = limits.clamp(offset)
    return plan
