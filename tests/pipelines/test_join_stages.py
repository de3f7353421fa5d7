"""Aggregates over a join (riverbed.pipelines.operators.join_stages), against brute force
over the true tables of a fake capture."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.pipelines.operators.changelog import RowState, parse_change
from riverbed.pipelines.operators.join_stages import (
    Contribution,
    GroupContribution,
    GroupState,
    JoinKeyState,
    LeftRow,
    left_state,
    left_state_obj,
)
from riverbed.pipelines.operators.join_stages import route_left as route
from riverbed.pipelines.operators.json_rows import Row, json_text, loads, state_text
from riverbed.pipelines.shop.category_sales import CATEGORY_SALES
from tests.support.fake_capture import FakeCapture, Record


def test_route_left_retracts_under_the_old_join_key() -> None:
    orders = FakeCapture("order_id", [0])  # REPLICA IDENTITY DEFAULT: no before for an update
    state = RowState()
    o1 = {"order_id": "o1", "product_id": "p1", "quantity": 2, "status": "new", "note": "x"}
    created = orders.insert(o1)
    assert route(state, [parse_change(*created[0])], CATEGORY_SALES) == [
        LeftRow(join_key="p1", left_key='{"order_id":"o1"}', row={"quantity": 2, "status": "new"})
    ]
    assert route(state, [parse_change(*created[0])], CATEGORY_SALES) == []  # a replay
    moved = orders.update("o1", o1 | {"product_id": "p2"})
    assert route(state, [parse_change(*moved[0])], CATEGORY_SALES) == [
        LeftRow(join_key="p1", left_key='{"order_id":"o1"}', row=None),
        LeftRow(join_key="p2", left_key='{"order_id":"o1"}', row={"quantity": 2, "status": "new"}),
    ]
    noted = orders.update("o1", o1 | {"product_id": "p2", "note": "y"})  # not a column used
    assert route(state, [parse_change(*noted[0])], CATEGORY_SALES) == []
    deleted = [parse_change(*record) for record in orders.delete("o1")]
    assert deleted[0].before == {"order_id": "o1"}  # only the key: routed by the state
    assert route(state, deleted, CATEGORY_SALES) == [
        LeftRow(join_key="p2", left_key='{"order_id":"o1"}', row=None)
    ]
    null = orders.insert(o1 | {"product_id": None})
    assert route(state, [parse_change(*null[0])], CATEGORY_SALES) == []  # joins nothing


def test_the_left_state_keeps_only_the_columns_routed_and_reads_the_whole_row_form() -> None:
    orders = FakeCapture("order_id", [0])
    o1 = {"order_id": "o1", "product_id": "p1", "quantity": 2, "status": "new", "note": "x"}
    state = RowState()
    route(state, [parse_change(*orders.insert(o1)[0])], CATEGORY_SALES)
    assert state.position is not None
    obj = left_state_obj(state, CATEGORY_SALES)
    assert obj == [2, ["p1", 2, "new"], *state.position, False]  # join column, then measured
    assert not state_text(obj).startswith(" ")  # written by orjson
    assert not state_text(state.as_json()).startswith(" ")  # the position too (a list)
    again = left_state(loads(state_text(obj)), CATEGORY_SALES)
    assert again.position == state.position and not again.skipped_delete
    assert again.row == {"product_id": "p1", "quantity": 2, "status": "new"}
    # a state kept before (the whole row, RowState.as_json) is read as it was
    old = left_state(json.loads(RowState.from_obj(state.as_json()).to_json()), CATEGORY_SALES)
    assert old.row == o1 and old.position == state.position
    unchanged = orders.update("o1", o1 | {"note": "y"})  # a column stage 0 does not keep
    assert route(old, [parse_change(*unchanged[0])], CATEGORY_SALES) == []
    assert route(again, [parse_change(*unchanged[0])], CATEGORY_SALES) == []
    # a replay is still ignored after the round trip; a deleted row keeps its position
    assert route(again, [parse_change(*unchanged[0])], CATEGORY_SALES) == []
    deleted = [parse_change(*record) for record in orders.delete("o1")]
    route(again, deleted[:1], CATEGORY_SALES)
    gone = left_state(loads(state_text(left_state_obj(again, CATEGORY_SALES))), CATEGORY_SALES)
    assert gone.row is None and gone.position == deleted[0].position
    assert left_state(None, CATEGORY_SALES) == RowState()
    with pytest.raises(ValueError, match="two keys"):
        route(RowState(), [deleted[0], parse_change(*orders.insert(o1 | {"order_id": "o2"})[0])],
              CATEGORY_SALES)  # fmt: skip


def contribution(rows: int, units: int, revenue: int) -> Contribution:
    return Contribution(rows, (units, revenue))


def test_a_join_key_contributes_to_the_group_of_its_product() -> None:
    products = FakeCapture("product_id", [0])
    state = JoinKeyState()
    toy = {"product_id": "p1", "title": "ball", "category": "toys", "price_cents": 250}
    left = [
        LeftRow(join_key="p1", left_key="o1", row={"quantity": 2, "status": "new"}),
        LeftRow(join_key="p1", left_key="o2", row={"quantity": 3, "status": "cancelled"}),
    ]
    assert state.apply("p1", CATEGORY_SALES, left=left) == []  # no product yet
    created = parse_change(*products.insert(toy)[0])
    assert state.apply("p1", CATEGORY_SALES, right=[created]) == [
        GroupContribution(group="toys", join_key="p1", contribution=contribution(1, 2, 500))
    ]
    moved = parse_change(*products.update("p1", toy | {"category": "games", "price_cents": 300})[0])
    assert state.apply("p1", CATEGORY_SALES, right=[moved]) == [
        GroupContribution(group="toys", join_key="p1", contribution=contribution(0, 0, 0)),
        GroupContribution(group="games", join_key="p1", contribution=contribution(1, 2, 600)),
    ]
    cancelled = LeftRow(join_key="p1", left_key="o1", row={"quantity": 2, "status": "cancelled"})
    assert state.apply("p1", CATEGORY_SALES, left=[cancelled]) == [
        GroupContribution(group="games", join_key="p1", contribution=contribution(0, 0, 0))
    ]
    restored = JoinKeyState.from_json(state.to_json())
    assert restored == state


def test_a_group_with_no_row_left_is_a_tombstone() -> None:
    group = GroupState()
    rows = [
        GroupContribution(group="toys", join_key="p1", contribution=contribution(2, 3, 30)),
        GroupContribution(group="toys", join_key="p2", contribution=contribution(1, 1, 5)),
    ]
    assert group.apply(rows)
    assert group.total == contribution(3, 4, 35)
    assert CATEGORY_SALES.output("toys", group.total) == {
        "category": "toys", "orders": 3, "units": 4, "revenue_cents": 35
    }  # fmt: skip
    assert not group.apply(rows[:1])  # the same again
    zero = contribution(0, 0, 0)
    assert group.apply([GroupContribution(group="toys", join_key="p1", contribution=zero)])
    assert GroupState.from_json(group.to_json()).contributions == {"p2": contribution(1, 1, 5)}
    assert group.apply([GroupContribution(group="toys", join_key="p2", contribution=zero)])
    assert group.total is None
    assert CATEGORY_SALES.output("toys", group.total) is None
    assert GroupState.from_json(group.to_json()).contributions == {}


class SalesPipeline:
    """The three operators as Spark runs them: each called once per key and batch, its
    state a JSON string between batches, its output rows reaching the next stage in any
    order; ``output`` is category_sales as a reader of the topic sees it."""

    def __init__(self, shuffled: random.Random) -> None:
        self.shuffled = shuffled
        self.routes: dict[str, str] = {}
        self.joins: dict[str, str] = {}
        self.groups: dict[str, str] = {}
        self.output: dict[str, Row] = {}

    def run(self, orders: list[Record], products: list[Record]) -> None:
        by_order = defaultdict(list)
        for record in orders:
            change = parse_change(*record)
            by_order[json_text(change.key)].append(change)
        left: dict[str, list[LeftRow]] = defaultdict(list)
        for name, changes in by_order.items():
            stored = self.routes.get(name)
            route_state = left_state(None if stored is None else loads(stored), CATEGORY_SALES)
            for row in route(route_state, changes, CATEGORY_SALES, name=name):
                left[json_text(row.join_key)].append(row)
            self.routes[name] = state_text(left_state_obj(route_state, CATEGORY_SALES))
        right = defaultdict(list)
        for record in products:
            change = parse_change(*record)
            right[json_text(CATEGORY_SALES.right_key(change.key))].append(change)
        by_group: dict[str, list[GroupContribution]] = defaultdict(list)
        for name in left.keys() | right.keys():
            join_state = JoinKeyState.from_json(self.joins.get(name, JoinKeyState().to_json()))
            rows = self.shuffle(left[name])
            for row in join_state.apply(
                json.loads(name), CATEGORY_SALES, right=right[name], left=rows
            ):
                by_group[json_text(row.group)].append(row)
            self.joins[name] = join_state.to_json()
        for name, contributions in by_group.items():
            group_state = GroupState.from_json(self.groups.get(name, "[]"))
            if group_state.apply(self.shuffle(contributions)):
                value = CATEGORY_SALES.output(json.loads(name), group_state.total)
                assert value != self.output.get(name)  # no empty updates, no lone tombstones
                if value is None:
                    del self.output[name]
                else:
                    self.output[name] = value
            self.groups[name] = group_state.to_json()

    def shuffle(self, rows: list[Any]) -> list[Any]:
        self.shuffled.shuffle(rows)
        return rows


def category_sales(orders: dict[Any, Row], products: dict[Any, Row]) -> dict[str, Row]:
    """Brute force, from the true tables."""
    totals: dict[str, Row] = {}
    for order in orders.values():
        product = products.get(order["product_id"])
        if product is None or order["status"] == "cancelled":
            continue
        category = product["category"]
        zero = {"category": category, "orders": 0, "units": 0, "revenue_cents": 0}
        total = totals.setdefault(json_text(category), zero)
        total["orders"] += 1
        total["units"] += order["quantity"]
        total["revenue_cents"] += order["quantity"] * product["price_cents"]
    return totals


PRODUCT_IDS = ["p1", "p2", "p3", "p4"]
CATEGORIES = ["toys", "books", None]
PRICES = [0, 1, 250, 2**40]
STATUSES = ["new", "paid", "cancelled", None]


def product_change(data: st.DataObject, products: FakeCapture) -> list[Record]:
    pid = data.draw(st.sampled_from(PRODUCT_IDS))
    fields = {
        "product_id": pid,
        "title": data.draw(st.sampled_from(["ball", "kite"])),
        "category": data.draw(st.sampled_from(CATEGORIES)),
        "price_cents": data.draw(st.sampled_from(PRICES)),
    }
    if pid not in products.rows:
        return products.insert(fields)
    action = data.draw(st.sampled_from(["update", "delete", "rekey"]))
    if action == "delete":
        return products.delete(pid)
    absent = [p for p in PRODUCT_IDS if p not in products.rows]
    if action == "rekey" and absent:
        fields["product_id"] = data.draw(st.sampled_from(absent))
    return products.update(pid, fields)


def order_change(data: st.DataObject, orders: FakeCapture) -> list[Record]:
    oid = data.draw(st.sampled_from(["o1", "o2", "o3", "o4", "o5"]))
    fields = {
        "order_id": oid,
        "user_id": "u1",
        "product_id": data.draw(st.sampled_from([*PRODUCT_IDS, None])),
        "quantity": data.draw(st.sampled_from([0, 1, 3, 2**31 - 1])),
        "status": data.draw(st.sampled_from(STATUSES)),
        "created_at": "2026-01-01T12:00:00.000000Z",
    }
    if oid not in orders.rows:
        return orders.insert(fields)
    action = data.draw(st.sampled_from(["update", "update", "delete", "rekey"]))
    if action == "delete":
        return orders.delete(oid)
    if action == "update":  # change some of the columns only
        kept = data.draw(st.sets(st.sampled_from(["product_id", "quantity", "status"])))
        fields |= {name: orders.rows[oid][name] for name in kept}
    elif action == "rekey":
        fields["order_id"] = oid + "x"
    return orders.update(oid, fields)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), full=st.booleans(), snapshot=st.booleans(), steps=st.integers(1, 20))
def test_category_sales_after_every_batch_equal_the_totals_of_the_true_tables(
    data: st.DataObject, full: bool, snapshot: bool, steps: int
) -> None:
    clock = [0]
    orders = FakeCapture("order_id", clock, full=full)
    products = FakeCapture("product_id", clock, full=not full)
    pipeline = SalesPipeline(data.draw(st.randoms(use_true_random=False)))
    if snapshot:
        products.rows = {"p1": {"product_id": "p1", "category": "toys", "price_cents": 5}}
        orders.rows = {"o1": {"order_id": "o1", "product_id": "p1", "quantity": 2, "status": None}}
        pipeline.run(orders.snapshot(), products.snapshot())
        assert pipeline.output == category_sales(orders.rows, products.rows)
    for _ in range(steps):
        batch: dict[str, list[Record]] = {"orders": [], "products": []}
        for _ in range(data.draw(st.integers(1, 3))):
            what = data.draw(st.sampled_from(["order", "order", "product", "replay"]))
            if what == "order":
                batch["orders"] += order_change(data, orders)
            elif what == "product":
                batch["products"] += product_change(data, products)
            else:
                table, capture = data.draw(
                    st.sampled_from([("orders", orders), ("products", products)])
                )
                if capture.units:
                    batch[table] += data.draw(st.sampled_from(capture.units))
        pipeline.run(batch["orders"], batch["products"])
        assert pipeline.output == category_sales(orders.rows, products.rows)
