"""The shop's database writes — users, products, orders — as row operations, without I/O.

:func:`operations` is an endless iterator of :class:`Operation`, deterministic for a
:class:`~riverbed.workloads.shop.ShopConfig`, with ``at_ms`` (event time) never decreasing:

- first the initial load, at ``start_ms``: every user and product of the cast (the same
  ones the clickstream uses);
- then, as a Poisson process of ``oltp_rate`` operations per second of event time: orders
  placed (status ``pending``, ``created_at`` = the operation's time) and moving on
  (``pending`` → ``paid`` | ``cancelled``, ``paid`` → ``shipped`` | ``cancelled``,
  ``shipped`` → ``delivered``), a pending order's quantity changed, orders deleted; price
  changes (up or down by 5-30%), category changes, new and discontinued (deleted) products;
  sign-ups (new users ``u<users>``, ``u<users+1>``, ...), profile changes (tier, country,
  email, name) and deleted accounts.

Every order refers to a user and a product that exist when it is placed; later deletes do
not touch it (the tables have no foreign keys). The tables are DESIGN.md's, in
:data:`SCHEMAS`. Values are Python ints and strs; ``timestamptz`` columns are epoch ms
(:class:`~riverbed.workloads.database.ShopDatabase` writes them as timestamps).
"""

from __future__ import annotations

import enum
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from riverbed.workloads.cast import (
    CATEGORIES,
    COUNTRIES,
    TIERS,
    Product,
    User,
    make_email,
    make_product,
    make_user,
    weighted,
)
from riverbed.workloads.shop import ShopConfig

__all__ = ["ORDER_STATUSES", "PRIMARY_KEYS", "SCHEMAS", "OpKind", "Operation", "operations"]

SCHEMAS: dict[str, tuple[tuple[str, str], ...]] = {
    "users": (
        ("user_id", "text"), ("name", "text"), ("email", "text"), ("country", "text"),
        ("tier", "text"),
    ),
    "products": (
        ("product_id", "text"), ("title", "text"), ("category", "text"),
        ("price_cents", "bigint"),
    ),
    "orders": (
        ("order_id", "text"), ("user_id", "text"), ("product_id", "text"), ("quantity", "int"),
        ("status", "text"), ("created_at", "timestamptz"),
    ),
}  # fmt: skip
"""DESIGN.md's tables (schema ``public``): column names and types, the primary key first."""
PRIMARY_KEYS = {table: columns[0][0] for table, columns in SCHEMAS.items()}
ORDER_STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled")
_NEXT_STATUS: dict[str, tuple[tuple[str, int], ...]] = {
    "pending": (("paid", 85), ("cancelled", 15)),
    "paid": (("shipped", 90), ("cancelled", 10)),
    "shipped": (("delivered", 100),),
}


class OpKind(enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One row written: INSERT ``values`` = the whole row; UPDATE = the changed columns;
    DELETE = nothing. ``key`` is the primary key's value."""

    kind: OpKind
    table: str
    key: str
    values: dict[str, str | int]
    at_ms: int


T = TypeVar("T")


class _Bag(Generic[T]):
    """A set with a uniform random pick, all O(1)."""

    def __init__(self) -> None:
        self._items: list[T] = []
        self._index: dict[T, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T) -> None:
        self._index[item] = len(self._items)
        self._items.append(item)

    def remove(self, item: T) -> None:
        index = self._index.pop(item)
        last = self._items.pop()
        if index < len(self._items):
            self._items[index] = last
            self._index[last] = index

    def pick(self, rng: random.Random) -> T:
        return self._items[rng.randrange(len(self._items))]


def operations(config: ShopConfig) -> Iterator[Operation]:
    """The initial load, then changes at ``oltp_rate`` per second (none if it is 0)."""
    cast = config.cast()
    shop = _Shop(random.Random(f"{config.seed}/oltp"), len(cast.users), len(cast.products))
    for user in cast.users:
        yield shop.insert_user(user, config.start_ms)
    for product in cast.products:
        yield shop.insert_product(product, config.start_ms)
    if config.oltp_rate == 0:
        return
    changes: tuple[tuple[Callable[[int], Operation | None], int], ...] = (
        (shop.place_order, 30),
        (shop.advance_order, 30),
        (shop.change_quantity, 3),
        (shop.delete_order, 1),
        (shop.sign_up, 5),
        (shop.change_profile, 10),
        (shop.delete_user, 1),
        (shop.change_price, 12),
        (shop.change_category, 2),
        (shop.add_product, 2),
        (shop.discontinue_product, 1),
    )
    kinds = [change for change, _ in changes]
    cum_weights = list(itertools.accumulate(weight for _, weight in changes))
    elapsed = 0.0  # ms since the start
    per_ms = config.oltp_rate / 1000
    while True:
        elapsed += shop.rng.expovariate(per_ms)
        at_ms = config.start_ms + max(1, int(elapsed))
        change = shop.rng.choices(kinds, cum_weights=cum_weights)[0]
        # A change with nothing to change (no open order, no product left) places an order
        # or, with no user or product either, signs a user up.
        yield change(at_ms) or shop.place_order(at_ms) or shop.sign_up(at_ms)


class _Shop:
    """The database's state as far as the next operation needs it."""

    def __init__(self, rng: random.Random, users: int, products: int) -> None:
        self.rng = rng
        self.users: dict[str, dict[str, str | int]] = {}
        self.user_ids: _Bag[str] = _Bag()
        self.products: dict[str, dict[str, str | int]] = {}
        self.product_ids: _Bag[str] = _Bag()
        self.orders: dict[str, str] = {}  # order_id → status
        self.order_ids: _Bag[str] = _Bag()
        self.open_orders: _Bag[str] = _Bag()  # not delivered or cancelled yet
        self.pending_orders: _Bag[str] = _Bag()
        self.next_user = users
        self.next_product = products
        self.next_order = 0

    def insert_user(self, user: User, at_ms: int) -> Operation:
        row: dict[str, str | int] = {
            "user_id": user.user_id,
            "name": user.name,
            "email": user.email,
            "country": user.country,
            "tier": user.tier,
        }
        self.users[user.user_id] = row
        self.user_ids.add(user.user_id)
        return _insert("users", row, at_ms)

    def insert_product(self, product: Product, at_ms: int) -> Operation:
        row: dict[str, str | int] = {
            "product_id": product.product_id,
            "title": product.title,
            "category": product.category,
            "price_cents": product.price_cents,
        }
        self.products[product.product_id] = row
        self.product_ids.add(product.product_id)
        return _insert("products", row, at_ms)

    # -- orders ----------------------------------------------------------------------------

    def place_order(self, at_ms: int) -> Operation | None:
        if not self.user_ids or not self.product_ids:
            return None
        order_id = f"o{self.next_order}"
        self.next_order += 1
        row: dict[str, str | int] = {
            "order_id": order_id,
            "user_id": self.user_ids.pick(self.rng),
            "product_id": self.product_ids.pick(self.rng),
            "quantity": self.rng.choice((1, 1, 1, 1, 2, 2, 3, 5)),
            "status": "pending",
            "created_at": at_ms,
        }
        self.orders[order_id] = "pending"
        for bag in (self.order_ids, self.open_orders, self.pending_orders):
            bag.add(order_id)
        return _insert("orders", row, at_ms)

    def advance_order(self, at_ms: int) -> Operation | None:
        if not self.open_orders:
            return None
        order_id = self.open_orders.pick(self.rng)
        old = self.orders[order_id]
        new = weighted(self.rng, _NEXT_STATUS[old])
        self.orders[order_id] = new
        if old == "pending":
            self.pending_orders.remove(order_id)
        if new not in _NEXT_STATUS:
            self.open_orders.remove(order_id)
        return _update("orders", order_id, {"status": new}, at_ms)

    def change_quantity(self, at_ms: int) -> Operation | None:
        if not self.pending_orders:
            return None
        order_id = self.pending_orders.pick(self.rng)
        return _update("orders", order_id, {"quantity": self.rng.randint(1, 6)}, at_ms)

    def delete_order(self, at_ms: int) -> Operation | None:
        if not self.order_ids:
            return None
        order_id = self.order_ids.pick(self.rng)
        status = self.orders.pop(order_id)
        self.order_ids.remove(order_id)
        if status in _NEXT_STATUS:
            self.open_orders.remove(order_id)
        if status == "pending":
            self.pending_orders.remove(order_id)
        return _delete("orders", order_id, at_ms)

    # -- users -----------------------------------------------------------------------------

    def sign_up(self, at_ms: int) -> Operation:
        user = make_user(self.rng, self.next_user)
        self.next_user += 1
        return self.insert_user(user, at_ms)

    def change_profile(self, at_ms: int) -> Operation | None:
        if not self.user_ids:
            return None
        user_id = self.user_ids.pick(self.rng)
        row = self.users[user_id]
        what = self.rng.choices(("tier", "country", "email", "name"), weights=(5, 3, 2, 1))[0]
        changes: dict[str, str | int]
        if what == "tier":
            changes = {"tier": weighted(self.rng, tuple(t for t in TIERS if t[0] != row["tier"]))}
        elif what == "country":
            others = tuple(c for c in COUNTRIES if c[0] != row["country"])
            changes = {"country": weighted(self.rng, others)}
        else:
            first, last = str(row["name"]).split(" ", 1)
            if what == "name":  # a new last name, and the email that goes with it
                last = self.rng.choice(("Ito", "Weber", "Moreau", "Haddad", "Olsen", "Reyes"))
                changes = {"name": f"{first} {last}"}
            else:
                changes = {}
            changes["email"] = make_email(self.rng, first, last, int(user_id[1:]))
        row.update(changes)
        return _update("users", user_id, changes, at_ms)

    def delete_user(self, at_ms: int) -> Operation | None:
        if len(self.user_ids) <= 1:
            return None
        user_id = self.user_ids.pick(self.rng)
        del self.users[user_id]
        self.user_ids.remove(user_id)
        return _delete("users", user_id, at_ms)

    # -- products --------------------------------------------------------------------------

    def change_price(self, at_ms: int) -> Operation | None:
        if not self.product_ids:
            return None
        product_id = self.product_ids.pick(self.rng)
        row = self.products[product_id]
        factor = 1 + self.rng.choice((-1, 1)) * self.rng.uniform(0.05, 0.3)
        price = max(99, int(int(row["price_cents"]) * factor) // 100 * 100 + 99)
        row["price_cents"] = price
        return _update("products", product_id, {"price_cents": price}, at_ms)

    def change_category(self, at_ms: int) -> Operation | None:
        if not self.product_ids:
            return None
        product_id = self.product_ids.pick(self.rng)
        row = self.products[product_id]
        category = self.rng.choice(tuple(c for c in CATEGORIES if c != row["category"]))
        row["category"] = category
        return _update("products", product_id, {"category": category}, at_ms)

    def add_product(self, at_ms: int) -> Operation:
        product = make_product(self.rng, self.next_product)
        self.next_product += 1
        return self.insert_product(product, at_ms)

    def discontinue_product(self, at_ms: int) -> Operation | None:
        if len(self.product_ids) <= 1:
            return None
        product_id = self.product_ids.pick(self.rng)
        del self.products[product_id]
        self.product_ids.remove(product_id)
        return _delete("products", product_id, at_ms)


def _insert(table: str, row: dict[str, str | int], at_ms: int) -> Operation:
    key = str(row[PRIMARY_KEYS[table]])
    return Operation(kind=OpKind.INSERT, table=table, key=key, values=dict(row), at_ms=at_ms)


def _update(table: str, key: str, changes: dict[str, str | int], at_ms: int) -> Operation:
    return Operation(kind=OpKind.UPDATE, table=table, key=key, values=changes, at_ms=at_ms)


def _delete(table: str, key: str, at_ms: int) -> Operation:
    return Operation(kind=OpKind.DELETE, table=table, key=key, values={}, at_ms=at_ms)
