"""The carts' projections under test: ``riverbed es project carts`` as a child process, the
read models it makes (a changelog topic, a PostgreSQL table) read back as state documents
by cart, and the states the carts' events replay to."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2

from riverbed.eventsourcing import Event, replay
from riverbed.eventsourcing.shop.carts import CART_TYPE
from riverbed.testing.topic_reader import last_values, read_to_end
from tests.support.cli import ChildProcess

Model = dict[str, dict[str, Any]]
"""State documents by cart id."""


def project(tmp_path: Path, bootstrap: str, *args: str) -> ChildProcess:
    """``riverbed es project carts --bootstrap BOOTSTRAP ARGS`` as a child process."""
    log = tmp_path / f"project-{time.monotonic_ns()}.log"
    return ChildProcess.spawn(log, "es", "project", "carts", "--bootstrap", bootstrap, *args)


def replayed(events: list[Event]) -> Model:
    """Each cart's state document, by replaying its events (in log order)."""
    by_cart: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        by_cart[event.aggregate_id].append(event)
    kind = CART_TYPE
    return {
        cart: kind.document(replay(kind.decider, kind.types, kind.initial(cart), cart_events))
        for cart, cart_events in sorted(by_cart.items())
    }


def topic_model(bootstrap: str, topic: str) -> Model:
    """The changelog's last value per cart, read_committed."""
    records = read_to_end(bootstrap, topic)
    table = last_values((r.key, r.value) for r in records)
    documents = [json.loads(v) for v in table.values()]
    return {d["cart_id"]: d for d in sorted(documents, key=lambda d: d["cart_id"])}


def topic_versions(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Each cart's versions in the changelog, in log order, read_committed."""
    versions: dict[str, list[int]] = defaultdict(list)
    for record in read_to_end(bootstrap, topic):
        document = json.loads(record.value or b"null")
        versions[document["cart_id"]].append(document["version"])
    return dict(versions)


def table_model(dsn: str, table: str) -> Model:
    """The table's rows as state documents (none if there is no table yet)."""
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
            if not (cursor.fetchone() or (False,))[0]:
                return {}
            cursor.execute(
                f"SELECT cart_id, user_id, version, items, checked_out FROM {table} "
                "ORDER BY cart_id"
            )
            names = ("cart_id", "user_id", "version", "items", "checked_out")
            return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}
    finally:
        connection.close()


def wait_for_model(
    read: Callable[[], Model], expected: Model, why: Callable[[], Any], timeout_s: float = 60
) -> None:
    """Until ``read()`` is ``expected`` (``why()`` explains a timeout)."""
    deadline = time.monotonic() + timeout_s
    while (model := read()) != expected:
        differ = sorted(
            k for k in expected.keys() | model.keys() if model.get(k) != expected.get(k)
        )
        assert time.monotonic() < deadline, (f"{len(differ)} carts differ: {differ[:5]}", why())
        time.sleep(0.3)
