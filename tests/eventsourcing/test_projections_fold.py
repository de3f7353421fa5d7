"""The projections' pure parts: the fold (positions, repeats, gaps, upcasting), a fold
stopped anywhere and restored from what it committed equals one that never stopped (and
each cart's replay), state documents read back, the PostgreSQL model's columns."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from typing import Any

import pytest

from riverbed.eventsourcing import Event, MessageError, Upcasters, replay
from riverbed.eventsourcing.projection_postgres import columns_of
from riverbed.eventsourcing.projections import (
    ProjectionError,
    ProjectionFold,
    Restored,
)
from riverbed.eventsourcing.shop.carts import CART_TYPE, FORMAT, TYPES

PARTITIONS = 3


def event(cart: str, version: int, type_: str = "ItemAdded", **data: Any) -> Event:
    data = data or {"product_id": f"p{version % 3}", "quantity": version}
    return Event(
        event_id=f"{cart}:{version}", aggregate_id=cart, user_id=f"user-{cart}", version=version,
        type=type_, data=data, command_id=f"cmd-{cart}-{version}", ts=version, schema=1,
    )  # fmt: skip


def value(e: Event) -> bytes:
    return FORMAT.encode_event(e)[1]


def log(seed: int, carts: int = 20, events: int = 400) -> list[tuple[int, int, bytes]]:
    """A events topic's records (partition, offset, value): each cart's events in version
    order in its partition, carts interleaved, some checked out."""
    rng = random.Random(seed)
    versions: dict[str, int] = defaultdict(int)
    offsets = [0] * PARTITIONS
    records = []
    for _ in range(events):
        cart = f"cart-{rng.randrange(carts)}"
        versions[cart] += 1
        version = versions[cart]
        if version > 1 and rng.random() < 0.2:
            e = event(cart, version, "ItemRemoved", product_id=f"p{(version - 1) % 3}")
        else:
            e = event(cart, version)
        partition = int(cart.split("-")[1]) % PARTITIONS
        records.append((partition, offsets[partition], value(e)))
        offsets[partition] += 1
    return records


def replayed(records: list[tuple[int, int, bytes]]) -> dict[str, dict[str, Any]]:
    """Each cart's state document, by replaying its events."""
    by_cart: dict[str, list[Event]] = defaultdict(list)
    for _, _, raw in records:
        e = FORMAT.decode_event(raw)
        by_cart[e.aggregate_id].append(e)
    return {
        cart: CART_TYPE.document(
            replay(CART_TYPE.decider, CART_TYPE.types, CART_TYPE.initial(cart), events)
        )
        for cart, events in sorted(by_cart.items())
    }


def test_a_fold_gives_each_cart_its_replay_and_the_position_after_the_last_record() -> None:
    records = log(seed=1)
    fold = ProjectionFold(kind=CART_TYPE)
    for partition, offset, raw in records:
        fold.apply(partition, offset, raw)
    assert fold.documents() == replayed(records)
    ends = {p: max(o for q, o, _ in records if q == p) + 1 for p in range(PARTITIONS)}
    assert fold.positions == ends
    batch = fold.take()
    assert batch is not None and batch.events == len(records)
    assert [a.aggregate_id for a in batch.aggregates] == sorted(fold.aggregates)
    assert fold.take() is None  # nothing since


def test_a_batch_holds_each_changed_cart_once_as_it_is_after_the_batch() -> None:
    fold = ProjectionFold(kind=CART_TYPE)
    fold.apply(0, 0, value(event("a", 1)))
    fold.apply(0, 1, value(event("b", 1)))
    fold.take()
    fold.apply(0, 2, value(event("a", 2)))
    fold.apply(0, 3, value(event("a", 3)))
    batch = fold.take()
    assert batch is not None
    assert [(a.aggregate_id, a.version) for a in batch.aggregates] == [("a", 3)]
    assert batch.positions == {0: 4} and batch.events == 2


@pytest.mark.parametrize("seed", range(5))
def test_stopped_anywhere_and_restored_from_its_last_commit_equals_a_rebuild(seed: int) -> None:
    """A runner killed mid-batch loses what it folded since its last commit; restored from
    that commit's documents and position, and fed the log again from the start (offsets
    before the position are passed over), it ends where a rebuild does."""
    records = log(seed=seed)
    rng = random.Random(seed)
    committed = Restored(aggregates={}, positions={})
    fold = ProjectionFold.restored(CART_TYPE, committed)
    stop_at = sorted(rng.sample(range(len(records)), 4))
    for n, (partition, offset, raw) in enumerate(records):
        fold.apply(partition, offset, raw)
        if rng.random() < 0.1:  # a commit: the model as a store would read it back
            batch = fold.take()
            assert batch is not None
            documents = {a.aggregate_id: CART_TYPE.document(a) for a in batch.aggregates}
            aggregates = {**committed.aggregates}
            aggregates.update({k: CART_TYPE.aggregate_of(d) for k, d in documents.items()})
            committed = Restored(aggregates=aggregates, positions=batch.positions)
        if stop_at and n == stop_at[0]:  # killed: restart from the committed model
            stop_at.pop(0)
            fold = ProjectionFold.restored(CART_TYPE, committed)
            for p, o, r in records[: n + 1]:
                fold.apply(p, o, r)
    rebuilt = ProjectionFold(kind=CART_TYPE)
    for partition, offset, raw in records:
        rebuilt.apply(partition, offset, raw)
    assert fold.documents() == rebuilt.documents() == replayed(records)
    assert fold.positions == rebuilt.positions


def test_an_event_the_model_already_has_is_a_repeat_and_changes_nothing() -> None:
    """After a rebuild killed between resetting the position and emptying the model."""
    fold = ProjectionFold(kind=CART_TYPE)
    for offset, version in enumerate([1, 2]):
        fold.apply(0, offset, value(event("a", version)))
    before = fold.documents()
    fold.take()
    again = ProjectionFold.restored(
        CART_TYPE, Restored(aggregates=fold.aggregates, positions={0: 0})
    )
    for offset, version in enumerate([1, 2]):
        again.apply(0, offset, value(event("a", version)))
    again.apply(0, 2, value(event("a", 3)))
    assert again.repeats == 2
    batch = again.take()
    assert batch is not None and [a.version for a in batch.aggregates] == [3]
    assert again.documents()["a"]["version"] == 3 and before["a"]["version"] == 2


def test_records_before_the_position_are_passed_over() -> None:
    fold = ProjectionFold.restored(CART_TYPE, Restored(aggregates={}, positions={0: 5}))
    fold.apply(0, 4, value(event("a", 1)))
    assert fold.take() is None and fold.aggregates == {}
    fold.apply(0, 5, value(event("a", 1)))
    assert fold.positions == {0: 6}


def test_a_version_gap_or_a_record_that_is_no_event_stops_the_fold_naming_where() -> None:
    fold = ProjectionFold(kind=CART_TYPE)
    fold.apply(1, 0, value(event("a", 1)))
    with pytest.raises(ProjectionError, match=r"shop\.carts\.events/1@1: .*version 3 after 1"):
        fold.apply(1, 1, value(event("a", 3)))
    with pytest.raises(ProjectionError, match=r"shop\.carts\.events/2@7: .*not JSON"):
        fold.apply(2, 7, b"{nope")
    with pytest.raises(ProjectionError, match=r"shop\.carts\.events/2@8: .*tombstone"):
        fold.apply(2, 8, None)


def test_old_events_are_upcast_before_they_are_folded() -> None:
    def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        return {"product_id": data.pop("sku"), "quantity": 1, **data}

    upcasters = Upcasters(current={"ItemAdded": 2}, steps={("ItemAdded", 1): v1_to_v2})
    kind = dataclasses.replace(CART_TYPE, types=dataclasses.replace(TYPES, upcasters=upcasters))
    fold = ProjectionFold(kind=kind)
    fold.apply(0, 0, value(event("a", 1, sku="p7")))  # stored at schema 1
    fold.apply(0, 1, value(dataclasses.replace(event("a", 2), schema=2)))
    assert fold.documents()["a"]["items"] == {"p7": 1, "p2": 2}


def test_a_state_document_reads_back_as_its_aggregate() -> None:
    fold = ProjectionFold(kind=CART_TYPE)
    fold.apply(0, 0, value(event("a", 1)))
    fold.apply(0, 1, value(event("a", 2, "CheckedOut", shipping_address="x")))
    aggregate = fold.aggregates["a"]
    document = CART_TYPE.document(aggregate)
    assert document == {"cart_id": "a", "user_id": "user-a", "version": 2,
                        "items": {"p1": 1}, "checked_out": True}  # fmt: skip
    assert CART_TYPE.aggregate_of(document) == aggregate
    with pytest.raises(MessageError):
        CART_TYPE.aggregate_of({**document, "items": {"p1": 0}})
    with pytest.raises(MessageError):
        CART_TYPE.aggregate_of({**document, "version": -1})


def test_the_postgres_model_has_a_column_per_field_of_the_state_document() -> None:
    assert columns_of(CART_TYPE) == [
        ("cart_id", "text PRIMARY KEY"),
        ("user_id", "text"),
        ("version", "integer"),
        ("items", "jsonb"),
        ("checked_out", "boolean"),
    ]
