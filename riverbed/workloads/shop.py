"""The shop's clickstream: page views, searches, clicks and payments, generated without I/O.

:func:`events` is an endless iterator of :class:`Event`, in *arrival order* (the order a
producer sends them), deterministic for a :class:`ShopConfig`. Each event is one record of
DESIGN.md's input contract: ``topic``, ``key`` (the JSON object of the key field) and
``value`` (exactly the topic's fields; ``ts`` is the event time in epoch ms).

How the stream is made (every time below is event time):

- **Rate.** A clock ticks as a Poisson process of ``event_rate`` events per second; at each
  tick one open session acts. Card-testing payments (below) come on top.
- **Sessions.** About ``event_rate`` x 15 s sessions are open at once, so a shopper acts
  about every 15 s (a typical time on a page); a session makes a few to a few dozen
  actions, then its user is away for 30 minutes and a second or more (an hour on average),
  so session windows with a 30-minute gap separate one visit from the next. When every
  shopper is busy or away, the clock waits for the next one to come back: the rate is then
  below ``event_rate``. About 300 x ``event_rate`` users sustain the rate
  (:func:`sustainable_rate`); the first hour, when everybody arrives fresh, runs at
  ``event_rate`` with fewer.
- **Actions.** A session lands on a page, then views pages (Zipf-like popularity), searches
  (a product noun of the category it is interested in), clicks results of its own searches
  (0 to 3 clicks per search, none for about 45%, each within 10 minutes of the search) and
  pays with one of its user's cards (4% declined).
- **Card testing** (``fraud_fraction`` per tick): a fraudster's account tries a shopper's
  card: 3 to 6 small declined payments seconds apart, then a large approved one (a fraud
  alert); or near misses: only 2 declines; 3 declines whose first lies more than 10 minutes
  before the approval; declines and no approval at all.
- **Arrival.** Each event arrives after a random delay below ``disorder_ms`` (mostly short):
  no event arrives after one more than ``disorder_ms`` younger. A ``late_fraction`` of the
  events are stragglers instead: each arrives only once an event at least ``late_by_ms``
  (up to twice that) younger has arrived — far behind a 2-minute watermark.

IDs: ``pv-N`` (page views), ``s-N`` (searches), ``cl-N`` (clicks), ``pay-N`` (payments),
numbered from 0 as the events are made (card testing's when it is planned); users, products
and cards come from :mod:`riverbed.workloads.cast`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from riverbed.workloads import ConfigError
from riverbed.workloads.cast import CATEGORIES, Cast, Product, User, shopper_count

__all__ = [
    "CLICK_WINDOW_MS",
    "DEFAULT_START_MS",
    "FRAUD_WINDOW_MS",
    "KEY_FIELDS",
    "SESSION_GAP_MS",
    "TOPICS",
    "VALUE_FIELDS",
    "Event",
    "ShopConfig",
    "events",
    "sustainable_rate",
]

DEFAULT_START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z, DESIGN.md's example window (``riverbed workload`` starts now)."""
SESSION_GAP_MS = 30 * 60_000
"""DESIGN.md, ``user_sessions``: 30 minutes without an event end a session."""
CLICK_WINDOW_MS = 10 * 60_000
"""DESIGN.md, ``search_ctr``: a click counts for a search up to 10 minutes after it."""
FRAUD_WINDOW_MS = 10 * 60_000
"""DESIGN.md, ``fraud_alerts``: declines within the 10 minutes before an approval."""
MEAN_THINK_MS = 15_000
"""How long a shopper takes between two actions, on average (a typical time on a page)."""
MEAN_AWAY_MS = 30 * 60_000
"""How much longer than the session gap a user stays away between visits, on average."""
MEAN_ACTIONS = 13.2
"""Events per session on average (of the log-normal in ``_open_sessions``, measured)."""

TOPICS = ("page_views", "searches", "clicks", "payments")
KEY_FIELDS: dict[str, str] = {
    "page_views": "user_id",
    "searches": "user_id",
    "clicks": "user_id",
    "payments": "card_id",
}
VALUE_FIELDS: dict[str, tuple[str, ...]] = {
    "page_views": ("event_id", "user_id", "page", "ts"),
    "searches": ("search_id", "user_id", "query", "ts"),
    "clicks": ("click_id", "search_id", "user_id", "product_id", "ts"),
    "payments": ("payment_id", "card_id", "user_id", "amount_cents", "status", "ts"),
}

# What a session does next (the first action is always a page view). Clicks are decided
# per search (CLICKS_PER_SEARCH) and come before these when one is pending, CLICK_EAGERNESS
# of the time.
SEARCH_SHARE = 0.2
PAYMENT_SHARE = 0.05
DECLINE_SHARE = 0.04
CLICKS_PER_SEARCH = ((0, 1, 2, 3), (45, 35, 14, 6))
CLICK_EAGERNESS = 0.6


@dataclass(frozen=True, slots=True, kw_only=True)
class ShopConfig:
    """What the shop workload looks like; the same config always gives the same data."""

    seed: int = 0
    users: int = 10_000
    """Registered users at the start (the last 1% are fraudsters'); at least 2."""
    products: int = 500
    pages: int = 50
    """Distinct pages viewed (at most 14 + ``products``)."""
    start_ms: int = DEFAULT_START_MS
    """Event time of the stream's start (epoch ms)."""
    event_rate: float = 20.0
    """Events per second of event time (an upper bound when there are too few users)."""
    disorder_ms: int = 30_000
    """The most an event arrives after a younger one (stragglers aside)."""
    late_fraction: float = 0.01
    late_by_ms: int = 10 * 60_000
    """A straggler arrives after an event at least this much (and at most twice) younger."""
    fraud_fraction: float = 0.001
    """The chance, per tick, that a fraudster starts testing a card."""
    oltp_rate: float = 2.0
    """Database operations per second of event time, after the initial load (see oltp)."""
    cart_rate: float = 0.0
    """Carts opened per second of event time (see cart_commands); 0: no cart commands."""
    cart_conflict_fraction: float = 0.05
    """The share of the carts' accepted commands that a second client races (the same
    command, its own id, the same ``expected_version``)."""
    cart_invalid_fraction: float = 0.05
    """The chance, before each command of a cart and after its last, of a command the cart
    must refuse."""
    cart_resend_fraction: float = 0.05
    """The share of cart commands sent again with the same ``command_id`` (a client's
    retry)."""

    def __post_init__(self) -> None:
        _at_least("users", self.users, 2)
        _at_least("products", self.products, 1)
        _at_least("pages", self.pages, 1)
        _at_least("start_ms", self.start_ms, 0)
        _at_least("disorder_ms", self.disorder_ms, 0)
        _at_least("late_by_ms", self.late_by_ms, 0)
        if not (math.isfinite(self.event_rate) and self.event_rate > 0):
            raise ConfigError(f"event_rate must be a positive number, not {self.event_rate}")
        if not (math.isfinite(self.oltp_rate) and self.oltp_rate >= 0):
            raise ConfigError(f"oltp_rate must be a number >= 0, not {self.oltp_rate}")
        # Stragglers wait for younger on-time events: some must be on time.
        if not 0 <= self.late_fraction <= 0.5:
            raise ConfigError(f"late_fraction must be within [0, 0.5], not {self.late_fraction}")
        if not 0 <= self.fraud_fraction <= 1:
            raise ConfigError(f"fraud_fraction must be within [0, 1], not {self.fraud_fraction}")
        if not (math.isfinite(self.cart_rate) and self.cart_rate >= 0):
            raise ConfigError(f"cart_rate must be a number >= 0, not {self.cart_rate}")
        for name in ("cart_conflict_fraction", "cart_invalid_fraction", "cart_resend_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be within [0, 1], not {getattr(self, name)}")

    def cast(self) -> Cast:
        return Cast.build(
            seed=self.seed, users=self.users, products=self.products, pages=self.pages
        )


def sustainable_rate(config: ShopConfig) -> float:
    """Events per second of event time the users keep up in the long run (then ``event_rate``
    is reached only when it is lower): each shopper makes a visit of ``MEAN_ACTIONS`` events
    about every hour (30 minutes away at least, 30 more on average, and the visit itself)."""
    visit_ms = MEAN_ACTIONS * MEAN_THINK_MS
    cycle_ms = SESSION_GAP_MS + 1000 + MEAN_AWAY_MS + visit_ms
    return shopper_count(config.users) * MEAN_ACTIONS * 1000 / cycle_ms


def _at_least(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, not {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One record: ``key`` and ``value`` are the JSON objects of DESIGN.md's contract.

    ``straggler`` is not part of the record: it says the generator delayed this event far
    beyond ``disorder_ms`` on purpose.
    """

    topic: str
    key: dict[str, str]
    value: dict[str, str | int]
    straggler: bool = False

    @property
    def ts(self) -> int:
        ts = self.value["ts"]
        assert isinstance(ts, int)
        return ts


def events(config: ShopConfig) -> Iterator[Event]:
    """The clickstream in arrival order, endless: take what you need (``itertools.islice``).

    Runs lazily, a few microseconds per event; memory grows with the events waiting to
    arrive (``event_rate`` x ``disorder_ms`` plus the stragglers) and the users.
    """
    rng = random.Random(f"{config.seed}/arrival")
    on_time: list[tuple[int, int, Event]] = []  # (arrival, sequence, event)
    late: list[tuple[int, int, Event]] = []  # (arrives once progress reaches, sequence, event)
    progress = -1  # the event time of the youngest event that arrived on time
    for sequence, event in enumerate(_Clickstream(config).timeline()):
        now = event.ts
        # Every later event has ts >= now and arrives at ts or later: these come first.
        while on_time and on_time[0][0] <= now:
            ready = heapq.heappop(on_time)[2]
            progress = max(progress, ready.ts)
            yield ready
            while late and late[0][0] <= progress:
                yield heapq.heappop(late)[2]
        if rng.random() < config.late_fraction:
            release = now + config.late_by_ms + int(rng.random() * config.late_by_ms)
            heapq.heappush(late, (release, sequence, replace(event, straggler=True)))
        else:
            delay = int(rng.random() ** 2 * config.disorder_ms)  # most delays are short
            heapq.heappush(on_time, (now + delay, sequence, event))


@dataclass(slots=True, kw_only=True)
class _Session:
    number: int  # the user's index in the cast
    user: User
    actions_left: int
    interest: str  # the category the shopper came for
    pending_clicks: list[tuple[str, int, Product]] = field(default_factory=list)
    started: bool = False


class _Clickstream:
    """The simulation: open sessions, users away, scripted payments; events in ts order."""

    def __init__(self, config: ShopConfig) -> None:
        self.config = config
        self.rng = random.Random(f"{config.seed}/clickstream")
        self.cast = config.cast()
        self.by_noun: dict[str, list[Product]] = {}
        for product in self.cast.products:
            self.by_noun.setdefault(product.noun, []).append(product)
        self.ids = {topic: itertools.count() for topic in TOPICS}
        self.target_sessions = max(1, round(config.event_rate * MEAN_THINK_MS / 1000))
        self.open: list[_Session] = []
        # Shoppers not in a session: (back at ts, random tie-break, index in cast.users).
        self.away = [(config.start_ms, self.rng.random(), n) for n in range(self.cast.shoppers)]
        heapq.heapify(self.away)
        self.scheduled: list[tuple[int, int, Event]] = []  # card testing: (ts, sequence, event)
        self.scheduled_sequence = itertools.count()

    def timeline(self) -> Iterator[Event]:
        start = self.config.start_ms
        elapsed = 0.0  # ms since the start: the same draws give the same offsets, any start
        per_ms = self.config.event_rate / 1000
        while True:
            elapsed += self.rng.expovariate(per_ms)
            ts = self._open_sessions(start + int(elapsed))
            elapsed = max(elapsed, ts - start)
            while self.scheduled and self.scheduled[0][0] <= ts:
                yield heapq.heappop(self.scheduled)[2]
            yield self._act(ts)
            if self.rng.random() < self.config.fraud_fraction:
                self._test_a_card(ts)

    def _open_sessions(self, ts: int) -> int:
        """Open sessions up to the target with users who are back; the tick, maybe later."""
        if not self.open and self.away[0][0] > ts:
            ts = self.away[0][0]  # everybody is away: nothing happens until one comes back
        while len(self.open) < self.target_sessions and self.away and self.away[0][0] <= ts:
            number = heapq.heappop(self.away)[2]
            actions = min(200, max(1, int(self.rng.lognormvariate(2.3, 0.8))))  # MEAN_ACTIONS
            interest = self.rng.choice(tuple(CATEGORIES))
            self.open.append(
                _Session(
                    number=number,
                    user=self.cast.users[number],
                    actions_left=actions,
                    interest=interest,
                )
            )
        return ts

    def _act(self, ts: int) -> Event:
        index = self.rng.randrange(len(self.open))
        session = self.open[index]
        session.actions_left -= 1
        if session.actions_left <= 0:  # the visit ends: away for 30 minutes and more
            self.open[index] = self.open[-1]
            self.open.pop()
            back = ts + SESSION_GAP_MS + 1000 + int(self.rng.expovariate(1 / MEAN_AWAY_MS))
            heapq.heappush(self.away, (back, self.rng.random(), session.number))
        if not session.started:
            session.started = True
            landing = "/" if self.rng.random() < 0.5 else self._page()
            return self._page_view(session.user, landing, ts)
        while session.pending_clicks and self.rng.random() < CLICK_EAGERNESS:
            search_id, search_ts, product = session.pending_clicks.pop(0)
            if ts - search_ts <= CLICK_WINDOW_MS:
                return self._event(
                    "clicks",
                    "click_id",
                    search_id=search_id,
                    user_id=session.user.user_id,
                    product_id=product.product_id,
                    ts=ts,
                )
        draw = self.rng.random()
        if draw < SEARCH_SHARE:
            return self._search(session, ts)
        if draw < SEARCH_SHARE + PAYMENT_SHARE:
            declined = self.rng.random() < DECLINE_SHARE
            product = self.rng.choice(self.cast.products)
            amount = product.price_cents * self.rng.choice((1, 1, 1, 2, 3))
            card = self.rng.choice(session.user.cards)
            return self._payment(card, session.user, amount, declined=declined, ts=ts)
        return self._page_view(session.user, self._page(), ts)

    def _page(self) -> str:
        return self.rng.choices(self.cast.pages, cum_weights=self.cast.page_weights)[0]

    def _page_view(self, user: User, page: str, ts: int) -> Event:
        return self._event("page_views", "event_id", user_id=user.user_id, page=page, ts=ts)

    def _search(self, session: _Session, ts: int) -> Event:
        category = (
            session.interest if self.rng.random() < 0.7 else self.rng.choice(tuple(CATEGORIES))
        )
        noun = self.rng.choice(CATEGORIES[category])
        query = noun if self.rng.random() < 0.7 else f"{self.rng.choice(('cheap', 'best'))} {noun}"
        user_id = session.user.user_id
        event = self._event("searches", "search_id", user_id=user_id, query=query, ts=ts)
        search_id = str(event.value["search_id"])
        matches = self.by_noun.get(noun) or self.cast.products
        for _ in range(self.rng.choices(*CLICKS_PER_SEARCH)[0]):
            session.pending_clicks.append((search_id, ts, self.rng.choice(matches)))
        return event

    def _payment(self, card: str, user: User, amount: int, *, declined: bool, ts: int) -> Event:
        return self._event(
            "payments",
            "payment_id",
            card_id=card,
            user_id=user.user_id,
            amount_cents=amount,
            status="declined" if declined else "approved",
            ts=ts,
        )

    def _event(self, topic: str, id_field: str, **fields: str | int) -> Event:
        prefix = {"page_views": "pv", "searches": "s", "clicks": "cl", "payments": "pay"}[topic]
        value: dict[str, str | int] = {id_field: f"{prefix}-{next(self.ids[topic])}", **fields}
        key_field = KEY_FIELDS[topic]
        return Event(topic=topic, key={key_field: str(value[key_field])}, value=value)

    def _test_a_card(self, now: int) -> None:
        """Schedule a fraudster's payments on a shopper's card, starting seconds from now."""
        rng = self.rng
        victim = self.cast.users[rng.randrange(self.cast.shoppers)]
        card = rng.choice(victim.cards)
        fraudster = self.cast.users[rng.randrange(self.cast.shoppers, len(self.cast.users))]
        kind = rng.choices(("alert", "two", "slow", "no approval"), weights=(50, 15, 15, 20))[0]
        t = now + rng.randint(1_000, 60_000)
        declines = [t]
        if kind == "slow":  # the first decline falls just outside the window of the approval
            t += FRAUD_WINDOW_MS + rng.randint(5_000, 60_000)
            declines.append(t)
        count = {"two": 2, "slow": 3}.get(kind) or rng.randint(3, 6)
        while len(declines) < count:
            t += rng.randint(2_000, 60_000)  # at most 6 declines: all within 5 minutes
            declines.append(t)
        scheduled = [
            self._payment(card, fraudster, rng.randint(100, 999), declined=True, ts=at)
            for at in declines
        ]
        if kind != "no approval":
            approved_at = t + rng.randint(2_000, 60_000)
            amount = rng.randint(200, 2000) * 100 - 1
            scheduled.append(self._payment(card, fraudster, amount, declined=False, ts=approved_at))
        for event in scheduled:
            heapq.heappush(self.scheduled, (event.ts, next(self.scheduled_sequence), event))
