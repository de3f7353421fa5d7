"""The shop's event-sourced carts as shoppers use them: commands, generated without I/O.

:func:`commands` is an endless iterator of :class:`CartCommand` in *sending order* (``at_ms``
never decreases), deterministic for a :class:`~riverbed.workloads.shop.ShopConfig`. Each is
one record of the topic ``shop.carts.commands`` as DESIGN.md ("Event sourcing") writes it:
key ``{"cart_id"}``, value ``{"command_id", "type", "cart_id", "user_id",
"expected_version", "data", "ts"}``; ``ts`` is event time on the clickstream's clock.

How the commands are made (every time below is event time):

- **Carts.** Carts open as a Poisson process of ``cart_rate`` per second, each a session of
  one shopper of the cast (never a fraudster's account) about ``MEAN_THINK_MS`` between
  commands: ``AddItem`` (mostly from one category, quantity 1 to 4), now and then
  ``RemoveItem`` of a line the cart holds, then ``CheckOut`` to the shopper's address
  (:data:`CHECKOUT_SHARE` of the carts) or nothing more (abandoned).
- **Versions.** The generator is the carts' only sender, so it knows each cart's version
  and lines: :data:`VERSIONED_SHARE` of the commands carry the version the cart is at as
  ``expected_version``, the others ``null``. A shopper's own commands are all accepted.
- **Races** (``cart_conflict_fraction`` of the shopper's commands): a second client sends
  the same command under its own id with the same ``expected_version``, within a second of
  the first. Exactly one of the two is accepted (the first in the partition); the other
  gets ``version_conflict``. Both would change the cart alike, so the cart is the same
  whichever wins.
- **Mistakes** (``cart_invalid_fraction``, drawn before each of a cart's commands and once
  after its last): ``AddItem`` of quantity 0, ``RemoveItem`` of a product not in the cart,
  an unknown type, ``CheckOut`` of an empty cart, and, after a check-out, one more command
  (:class:`Mistake`). The cart refuses them; they change nothing.
- **Retries** (``cart_resend_fraction`` of the shoppers' commands and of the mistakes): the
  same record again, same ``command_id`` and ``ts``, sent 1 to 30 s later (a client that saw
  no answer in time). The processor answers it with its first result and adds no event.

IDs: carts ``cart-RUN-N`` and commands ``cmd-RUN-N``, numbered from 0 as they are made;
``RUN`` is eight hex digits drawn from the seed *and* ``start_ms``, so two runs (practically)
never share a cart or a command id (a cart of an earlier run is at a version this run cannot
know), while the same run sent again is answered entirely from the first (every command id
is decided).
Nothing here imports the carts' code: the records are the contract's JSON.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from riverbed.workloads.cast import CATEGORIES, Product, User
from riverbed.workloads.shop import MEAN_THINK_MS, ShopConfig

__all__ = [
    "CHECKOUT_SHARE",
    "COMMANDS_TOPIC",
    "COMMAND_PARTITIONS",
    "VALUE_FIELDS",
    "VERSIONED_SHARE",
    "CartCommand",
    "Intent",
    "Mistake",
    "commands",
]

COMMANDS_TOPIC = "shop.carts.commands"
COMMAND_PARTITIONS = 3
"""The commands topic's partitions when the workload creates it: as many as ``riverbed es
run carts`` gives the topics it creates by default (they must match)."""
VALUE_FIELDS = ("command_id", "type", "cart_id", "user_id", "expected_version", "data", "ts")
"""DESIGN.md's command fields, in its order."""

CHECKOUT_SHARE = 0.75
"""Carts checked out; the rest are abandoned. Real shops lose more (the Baymard Institute's
average is about 70% abandoned): here most check out, so check-outs are common in the data."""
VERSIONED_SHARE = 0.9
"""Commands that carry ``expected_version`` (a client that read the cart first)."""
MEAN_ADDS = 3.0
"""``AddItem`` commands a cart gets on average (at least 1, at most 20)."""
REMOVE_SHARE = 0.15
"""The chance, at each step of a cart that holds a line and has items still to add, that the
step removes a line instead."""
QUANTITIES = ((1, 2, 3, 4), (75, 15, 7, 3))
INTEREST_SHARE = 0.7
"""Items from the category the shopper came for; the others from anywhere."""
MIN_THINK_MS = 2_000
"""The least time between two commands of a cart ..."""
RIVAL_WITHIN_MS = 1_000
"""... and a race's rival comes within this of the first: before the cart's next command."""
RETRY_AFTER_MS = (1_000, 30_000)
"""A retry comes this long after the command (a client's request timeout)."""
UNKNOWN_TYPES: tuple[tuple[str, dict[str, str]], ...] = (
    ("ApplyCoupon", {"code": "SAVE10"}),
    ("EmptyCart", {}),
    ("SetQuantity", {}),
)

STREETS = ("Main Street", "Station Road", "Park Avenue", "Mill Lane", "Church Street",
           "High Street", "Garden Row", "Harbour Road", "Orchard Way", "Bridge Street")  # fmt: skip
CITIES = {
    "US": "Springfield", "DE": "Leipzig", "GB": "Bristol", "FR": "Lyon", "IN": "Pune",
    "CA": "Halifax", "BR": "Recife", "JP": "Sendai", "NL": "Utrecht", "ES": "Valencia",
    "IT": "Turin", "PL": "Gdansk",
}  # fmt: skip
"""A city for each of the cast's countries (the shipping addresses)."""


class Intent(enum.Enum):
    """What the generator meant a command to be (not part of the record)."""

    PLAIN = "plain"
    """A shopper's command: the cart accepts it."""
    RIVAL = "rival"
    """The same command as the one before it in the cart, from a second client, with the
    same ``expected_version``: it loses (``version_conflict``)."""
    INVALID = "invalid"
    """A command the cart refuses (:attr:`CartCommand.mistake` says which)."""
    RESEND = "resend"
    """An earlier record again, same ``command_id``: answered as the first time."""


class Mistake(enum.Enum):
    """The invalid commands."""

    ZERO_QUANTITY = "zero_quantity"
    """``AddItem`` with quantity 0."""
    MISSING_ITEM = "missing_item"
    """``RemoveItem`` of a product the cart does not hold."""
    UNKNOWN_TYPE = "unknown_type"
    """A type carts do not have (``ApplyCoupon``, ...)."""
    EMPTY_CHECKOUT = "empty_checkout"
    """``CheckOut`` of a cart with no item."""
    AFTER_CHECKOUT = "after_checkout"
    """A well-formed ``AddItem`` to a cart already checked out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CartCommand:
    """One record of ``shop.carts.commands``: ``key`` and ``value`` are the contract's JSON
    objects. ``at_ms`` (when it is sent), ``intent``, ``mistake`` and ``opens_cart`` (the
    first command sent for its cart) are not part of the record."""

    at_ms: int
    key: dict[str, str]
    value: dict[str, Any]
    intent: Intent
    mistake: Mistake | None = None
    opens_cart: bool = False

    @property
    def command_id(self) -> str:
        return str(self.value["command_id"])

    @property
    def cart_id(self) -> str:
        return self.key["cart_id"]


def commands(config: ShopConfig) -> Iterator[CartCommand]:
    """The carts' commands in sending order, endless (none if ``cart_rate`` is 0).

    Runs lazily, a few microseconds per command; memory holds the open carts' planned
    commands (``cart_rate`` x a few minutes of them).
    """
    if config.cart_rate > 0:
        yield from _Carts(config).stream()


@dataclass(slots=True, kw_only=True)
class _Cart:
    """What the generator knows of a cart: what the processor will know, command by command."""

    cart_id: str
    user: User
    version: int = 0
    lines: dict[str, int] = field(default_factory=dict)
    checked_out: bool = False
    opened: bool = False
    """Whether a command of the cart was made."""


class _Carts:
    """The simulation: carts opened in time, each planned whole, sent in time order."""

    def __init__(self, config: ShopConfig) -> None:
        self.config = config
        self.rng = random.Random(f"{config.seed}/carts")
        run = random.Random(f"{config.seed}/{config.start_ms}/carts-run").getrandbits(32)
        self.run = f"{run:08x}"
        self.cast = config.cast()
        self.by_category: dict[str, list[Product]] = {}
        for product in self.cast.products:
            self.by_category.setdefault(product.category, []).append(product)
        self.cart_numbers = itertools.count()
        self.command_numbers = itertools.count()
        self.planned: list[tuple[int, int, CartCommand]] = []  # (at_ms, sequence, command)
        self.sequence = itertools.count()

    def stream(self) -> Iterator[CartCommand]:
        elapsed = 0.0  # ms since the start: the same draws give the same offsets, any start
        per_ms = self.config.cart_rate / 1000
        while True:
            elapsed += self.rng.expovariate(per_ms)
            opens = self.config.start_ms + int(elapsed)
            # Every command planned from now on is at ``opens`` or later.
            while self.planned and self.planned[0][0] < opens:
                yield heapq.heappop(self.planned)[2]
            self._plan(opens)

    def _plan(self, at: int) -> None:
        """One cart's session, from ``at`` on."""
        rng = self.rng
        user = self.cast.users[rng.randrange(self.cast.shoppers)]
        cart = _Cart(cart_id=f"cart-{self.run}-{next(self.cart_numbers)}", user=user)
        interest = rng.choice(tuple(CATEGORIES))
        checks_out = rng.random() < CHECKOUT_SHARE
        adds = min(20, 1 + round(rng.expovariate(1 / (MEAN_ADDS - 1))))
        while True:
            if rng.random() < self.config.cart_invalid_fraction:
                self._mistake(cart, at)
                at += self._think()
            if adds == 0 and checks_out and not cart.lines:
                adds = 1  # emptied by removals: one more item before the check-out
            if adds > 0:
                if cart.lines and rng.random() < REMOVE_SHARE:
                    product_id = rng.choice(sorted(cart.lines))
                    self._plain(cart, at, "RemoveItem", {"product_id": product_id})
                else:
                    quantity = rng.choices(*QUANTITIES)[0]
                    product_id = self._product(interest).product_id
                    data = {"product_id": product_id, "quantity": quantity}
                    self._plain(cart, at, "AddItem", data)
                    adds -= 1
            elif checks_out:
                self._plain(cart, at, "CheckOut", {"shipping_address": self._address(user)})
            else:
                break  # abandoned
            at += self._think()
            if cart.checked_out:
                if rng.random() < self.config.cart_invalid_fraction:
                    self._mistake(cart, at)
                break

    def _plain(self, cart: _Cart, at: int, kind: str, data: dict[str, Any]) -> None:
        """A shopper's command (maybe raced, maybe retried); the cart after it."""
        raced = self.rng.random() < self.config.cart_conflict_fraction
        command = self._command(cart, at, kind, data, Intent.PLAIN, versioned=raced)
        if raced:
            rival_at = at + self.rng.randint(0, RIVAL_WITHIN_MS)
            value = {**command.value, "command_id": self._command_id(), "ts": rival_at}
            self._send(replace(command, at_ms=rival_at, value=value, intent=Intent.RIVAL,
                               opens_cart=False))  # fmt: skip
        cart.version += 1
        product_id = data.get("product_id", "")
        if kind == "AddItem":
            cart.lines[product_id] = cart.lines.get(product_id, 0) + data["quantity"]
        elif kind == "RemoveItem":
            del cart.lines[product_id]
        else:
            cart.checked_out = True

    def _mistake(self, cart: _Cart, at: int) -> None:
        """A command the cart refuses: which ones fit depends on the cart."""
        rng = self.rng
        absent = [p for p in self.cast.products if p.product_id not in cart.lines]
        if cart.checked_out:
            mistake = Mistake.AFTER_CHECKOUT
        else:
            fitting = [Mistake.ZERO_QUANTITY, Mistake.UNKNOWN_TYPE]
            fitting += [Mistake.MISSING_ITEM] if absent else []
            fitting += [] if cart.lines else [Mistake.EMPTY_CHECKOUT]
            mistake = rng.choice(fitting)
        product_id = rng.choice(self.cast.products).product_id
        kind, data = "AddItem", dict[str, Any](product_id=product_id, quantity=1)
        if mistake is Mistake.ZERO_QUANTITY:
            data["quantity"] = 0
        elif mistake is Mistake.MISSING_ITEM:
            kind, data = "RemoveItem", {"product_id": rng.choice(absent).product_id}
        elif mistake is Mistake.UNKNOWN_TYPE:
            kind, unknown_data = rng.choice(UNKNOWN_TYPES)
            data = dict(unknown_data)
        elif mistake is Mistake.EMPTY_CHECKOUT:
            kind, data = "CheckOut", {"shipping_address": self._address(cart.user)}
        self._command(cart, at, kind, data, Intent.INVALID, mistake=mistake)

    def _command(
        self,
        cart: _Cart,
        at: int,
        kind: str,
        data: dict[str, Any],
        intent: Intent,
        *,
        versioned: bool = False,
        mistake: Mistake | None = None,
    ) -> CartCommand:
        """Send a command made now (and maybe its retry later); the command."""
        versioned = versioned or self.rng.random() < VERSIONED_SHARE
        value = {
            "command_id": self._command_id(),
            "type": kind,
            "cart_id": cart.cart_id,
            "user_id": cart.user.user_id,
            "expected_version": cart.version if versioned else None,
            "data": data,
            "ts": at,
        }
        command = CartCommand(
            at_ms=at,
            key={"cart_id": cart.cart_id},
            value=value,
            intent=intent,
            mistake=mistake,
            opens_cart=not cart.opened,
        )
        cart.opened = True
        self._send(command)
        if self.rng.random() < self.config.cart_resend_fraction:
            retry_at = at + self.rng.randint(*RETRY_AFTER_MS)
            self._send(replace(command, at_ms=retry_at, intent=Intent.RESEND, mistake=None,
                               opens_cart=False))  # fmt: skip
        return command

    def _send(self, command: CartCommand) -> None:
        heapq.heappush(self.planned, (command.at_ms, next(self.sequence), command))

    def _command_id(self) -> str:
        return f"cmd-{self.run}-{next(self.command_numbers)}"

    def _think(self) -> int:
        return max(MIN_THINK_MS, int(self.rng.expovariate(1 / MEAN_THINK_MS)))

    def _product(self, interest: str) -> Product:
        if self.rng.random() < INTEREST_SHARE and interest in self.by_category:
            return self.rng.choice(self.by_category[interest])
        return self.rng.choice(self.cast.products)

    def _address(self, user: User) -> str:
        """The user's shipping address: the same for each of the user's carts."""
        rng = random.Random(f"{self.config.seed}/address/{user.user_id}")
        street = rng.choice(STREETS)
        return f"{rng.randint(1, 250)} {street}, {CITIES[user.country]}, {user.country}"
