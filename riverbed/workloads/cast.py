"""The shop's cast: users (with their payment cards), products and pages, made from a seed.

Both generators build the same :class:`Cast` from the same settings, so the clickstream's
``user_id``/``product_id``/``card_id`` are the rows the OLTP generator inserts first. The
cast is made with its own random stream (``"<seed>/catalog"``): nothing else drawn from
the seed changes it.

IDs: users ``u0``, ``u1``, ...; products ``p0``, ...; a user's cards ``c<n>`` and, for about
one user in five, a second one ``c<n>-2``. The last 1% of the users (at least one) are
fraudsters' accounts: they never browse, they only test stolen cards (see
:mod:`riverbed.workloads.shop`).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "COUNTRIES",
    "TIERS",
    "Cast",
    "Product",
    "User",
    "make_product",
    "make_user",
    "shopper_count",
]

CATEGORIES: dict[str, tuple[str, ...]] = {
    "books": ("novel", "cookbook", "atlas", "comic", "biography"),
    "electronics": ("laptop", "headphones", "phone", "monitor", "charger"),
    "home": ("lamp", "rug", "pillow", "vase", "clock"),
    "kitchen": ("kettle", "pan", "knife", "blender", "mug"),
    "sports": ("running shoes", "yoga mat", "bike helmet", "tennis racket", "water bottle"),
    "toys": ("puzzle", "robot", "doll", "kite", "board game"),
    "garden": ("hose", "shovel", "planter", "seeds", "gloves"),
    "beauty": ("shampoo", "perfume", "lipstick", "face cream", "hair brush"),
}
"""Each category and the nouns of its products (and of the searches for them)."""

ADJECTIVES = ("red", "classic", "compact", "deluxe", "eco", "vintage", "smart", "soft", "mini")

# Weights: roughly the share of a European-American web shop's customers.
COUNTRIES: tuple[tuple[str, int], ...] = (
    ("US", 30), ("DE", 12), ("GB", 10), ("FR", 9), ("IN", 8), ("CA", 7), ("BR", 7),
    ("JP", 6), ("NL", 5), ("ES", 5), ("IT", 4), ("PL", 3),
)  # fmt: skip
TIERS: tuple[tuple[str, int], ...] = (("bronze", 70), ("silver", 22), ("gold", 8))

FIRST_NAMES = (
    "Ada", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas",
    "Kira", "Liam", "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara",
)  # fmt: skip
LAST_NAMES = (
    "Smith", "Müller", "Martin", "Rossi", "Kowalski", "Tanaka", "Silva", "Jansen", "García",
    "Dubois", "Novak", "Patel", "Larsen", "Cohen", "Okafor", "Kim", "Nguyen", "Berg",
)  # fmt: skip

STATIC_PAGES = ("/", "/deals", "/cart", "/checkout", "/account", "/help")

SECOND_CARD_SHARE = 0.2
FRAUDSTER_SHARE = 0.01
PAGE_POPULARITY_EXPONENT = 0.9
"""Page popularity is Zipf-like: the page of rank r is viewed in proportion to 1/r^0.9."""


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    """A row of ``users`` plus the cards the user pays with."""

    user_id: str
    name: str
    email: str
    country: str
    tier: str
    cards: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Product:
    """A row of ``products``; ``noun`` is what a search for it asks for."""

    product_id: str
    title: str
    category: str
    noun: str
    price_cents: int


def shopper_count(users: int) -> int:
    """How many of ``users`` browse and buy (the others are fraudsters' accounts)."""
    return users - max(1, int(users * FRAUDSTER_SHARE))


def make_user(rng: random.Random, number: int) -> User:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    cards = (f"c{number}", f"c{number}-2") if rng.random() < SECOND_CARD_SHARE else (f"c{number}",)
    return User(
        user_id=f"u{number}",
        name=f"{first} {last}",
        email=make_email(rng, first, last, number),
        country=weighted(rng, COUNTRIES),
        tier=weighted(rng, TIERS),
        cards=cards,
    )


def make_email(rng: random.Random, first: str, last: str, number: int) -> str:
    domain = rng.choice(("example.com", "example.org", "example.net"))
    return f"{first}.{last}{number}@{domain}".lower()


def make_product(rng: random.Random, number: int) -> Product:
    category = rng.choice(tuple(CATEGORIES))
    noun = rng.choice(CATEGORIES[category])
    # Prices: log-normal, median about 20 dollars, ending in 99 cents.
    price_cents = int(rng.lognormvariate(7.6, 0.9)) // 100 * 100 + 99
    return Product(
        product_id=f"p{number}",
        title=f"{rng.choice(ADJECTIVES)} {noun}".title(),
        category=category,
        noun=noun,
        price_cents=price_cents,
    )


def weighted(rng: random.Random, choices: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Cast:
    """Everything the shop has when the workload starts."""

    users: tuple[User, ...]
    shoppers: int
    """``users[:shoppers]`` browse and buy; the rest are fraudsters' accounts."""
    products: tuple[Product, ...]
    pages: tuple[str, ...]
    page_weights: tuple[float, ...]
    """Cumulative weights of ``pages``, for ``random.choices(cum_weights=...)``."""

    @classmethod
    def build(cls, *, seed: int, users: int, products: int, pages: int) -> Cast:
        """``users`` >= 2 (one shopper, one fraudster), ``products`` >= 1, ``pages`` >= 1."""
        rng = random.Random(f"{seed}/catalog")  # "catalog": renamed, the data would change
        all_users = tuple(make_user(rng, n) for n in range(users))
        all_products = tuple(make_product(rng, n) for n in range(products))
        candidates = (
            STATIC_PAGES
            + tuple(f"/category/{c}" for c in CATEGORIES)
            + tuple(f"/product/{p.product_id}" for p in all_products)
        )
        chosen = candidates[:pages]
        weights = [1 / (rank + 1) ** PAGE_POPULARITY_EXPONENT for rank in range(len(chosen))]
        return cls(
            users=all_users,
            shoppers=shopper_count(users),
            products=all_products,
            pages=chosen,
            page_weights=tuple(itertools.accumulate(weights)),
        )
