"""Events the pipeline tests generate, independently of riverbed.workloads: page views in
bursts per user, and an arrival order with bounded disorder."""

from __future__ import annotations

import random
from typing import Any

MINUTE = 60_000
BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PAGES = ["/home", "/search", "/cart", "/product/1", "/product/2"]


def page_views(
    seed: int, *, users: int, start: int, hours: float, prefix: str
) -> list[dict[str, Any]]:
    """Page views in event-time order: each user browses in bursts (a few views a minute
    apart) separated by 20-90 minutes, so some gaps are below and some above 30 minutes."""
    rng = random.Random(seed)
    events = []
    end = start + int(hours * 60 * MINUTE)
    for u in range(users):
        t = start + rng.randrange(0, 20 * MINUTE)
        while t < end:
            for _ in range(rng.randint(1, 6)):
                events.append({"user_id": f"u{u}", "page": rng.choice(PAGES), "ts": t})
                t += rng.randrange(1_000, 3 * MINUTE)
            t += rng.choice([20, 29, 30, 31, 45, 90]) * MINUTE + rng.randrange(
                0, 2
            ) * rng.randrange(0, MINUTE)
    events.sort(key=lambda e: e["ts"])
    for i, event in enumerate(events):
        event["event_id"] = f"{prefix}{i}"
    return [
        {"event_id": e["event_id"], "user_id": e["user_id"], "page": e["page"], "ts": e["ts"]}
        for e in events
    ]


def disordered(events: list[dict[str, Any]], seed: int, max_ms: int) -> list[dict[str, Any]]:
    """Arrival order: each event delayed by up to ``max_ms`` (bounded disorder)."""
    rng = random.Random(seed)
    return sorted(events, key=lambda e: e["ts"] + rng.randrange(0, max_ms))
