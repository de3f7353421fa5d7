"""What each shop pipeline must output, in plain Python (no Spark): the references the
tests, the benchmarks and ``make demo`` check the pipelines against, one per pipeline.

Each function is DESIGN.md's rule for its pipeline ("Pipelines (output contract)"),
written from the contract sentence and not from the pipeline's code. Inputs are the events
as DESIGN.md's input topics carry them (JSON objects as dicts; for ``enriched_clicks`` a
user's versions, for ``category_sales`` the final tables); outputs are the value records
of the output topic, one per key, in no particular order unless a function says so. The
tests compare them with the changelog the pipeline wrote (its last value per key).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Approval",
    "approvals",
    "cart_removals",
    "category_sales",
    "enriched_click",
    "fraud_alerts",
    "page_views_per_minute",
    "profile_as_of",
    "search_ctr",
    "user_sessions",
]

Row = dict[str, Any]

MINUTE_MS = 60_000  # DESIGN.md: 1-minute windows
SESSION_GAP_MS = 30 * MINUTE_MS  # user_sessions: "30 minutes or more pass between two events"
CLICK_WINDOW_MS = 10 * MINUTE_MS  # search_ctr: "0 <= click.ts - search.ts <= 10 min"
FRAUD_WINDOW_MS = 10 * MINUTE_MS  # fraud_alerts: "within the 10 minutes (event time) before it"
MIN_DECLINES = 3  # fraud_alerts: "3 or more declined payments"
PROFILE = ("name", "country", "tier")  # enriched_clicks: "click fields + name, country, tier"
APPROVED, DECLINED = "approved", "declined"
HOUR_MS = 60 * MINUTE_MS  # cart_removals: "1-hour tumbling event-time window"
ITEM_REMOVED = "ItemRemoved"  # cart_removals: "count ItemRemoved events"


def page_views_per_minute(page_views: Iterable[Mapping[str, Any]]) -> list[Row]:
    """DESIGN.md, ``page_views_per_minute``: "tumbling 1-minute event-time windows"; per
    window ``[window_start, window_end)`` and page, the views whose ``ts`` falls in it (all
    of ``page_views``: which events come too late is the test's to say)."""
    counts = Counter((e["ts"] - e["ts"] % MINUTE_MS, e["page"]) for e in page_views)
    return [
        {"window_start": start, "window_end": start + MINUTE_MS, "page": page, "views": n}
        for (start, page), n in counts.items()
    ]


def user_sessions(
    page_views: Iterable[Mapping[str, Any]], *, gap_ms: int = SESSION_GAP_MS
) -> list[Row]:
    """DESIGN.md, ``user_sessions``: "session windows per user: a new session starts when 30
    minutes or more pass between two of the user's events; ``session_end`` = the ts of its
    last event"."""
    by_user: dict[str, list[int]] = {}
    for event in page_views:
        by_user.setdefault(event["user_id"], []).append(event["ts"])
    sessions = []
    for user, times in by_user.items():
        times.sort()
        start = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] - times[i - 1] >= gap_ms:
                sessions.append(
                    {
                        "user_id": user,
                        "session_start": times[start],
                        "session_end": times[i - 1],
                        "page_views": i - start,
                    }
                )
                start = i
    return sessions


def search_ctr(
    searches: Iterable[Mapping[str, Any]], clicks: Iterable[Mapping[str, Any]]
) -> list[Row]:
    """DESIGN.md, ``search_ctr``: "a click counts for a search when ``0 <= click.ts -
    search.ts <= 10 min``; per query and 1-minute window of the search": every search
    counts in ``searches``, a search with at least one such click in ``clicked_searches``
    (a click of a search that never came counts nowhere)."""
    click_times: dict[str, list[int]] = {}
    for click in clicks:
        click_times.setdefault(click["search_id"], []).append(click["ts"])
    totals: dict[tuple[int, str], list[int]] = {}
    for search in searches:
        window = (search["ts"] - search["ts"] % MINUTE_MS, search["query"])
        clicked = any(
            0 <= ts - search["ts"] <= CLICK_WINDOW_MS
            for ts in click_times.get(search["search_id"], ())
        )
        total = totals.setdefault(window, [0, 0])
        total[0] += 1
        total[1] += clicked
    return [
        {"window_start": start, "query": query, "searches": n, "clicked_searches": c, "ctr": c / n}
        for (start, query), (n, c) in totals.items()
    ]


def profile_as_of(versions: Sequence[tuple[int | None, Row | None]], ts: int) -> Row | None:
    """DESIGN.md, ``enriched_clicks``: the user's row as it was at ``ts``, "the latest change
    with ``source.ts_ms <= click.ts``, a snapshot row counting as valid from the beginning of
    time"; ``versions`` are the user's changes in changelog order (snapshot rows first, then
    commit order), each ``(source.ts_ms, or None for a snapshot row; the row after it, or
    None for a delete)``. "Latest" is the last in changelog order, not the greatest
    ``ts_ms``: a commit whose clock is behind the one before still replaces it. None: a
    deleted or never-seen user."""
    for at_ms, row in reversed(versions):
        if at_ms is None or at_ms <= ts:
            return row
    return None


def enriched_click(
    click: Mapping[str, Any], versions: Sequence[tuple[int | None, Row | None]]
) -> Row:
    """DESIGN.md, ``enriched_clicks``: the click's fields and the user's ``name, country,
    tier`` as of the click's ``ts`` (:func:`profile_as_of` over the user's ``versions``),
    nulls if the user was deleted or never seen."""
    row = profile_as_of(versions, click["ts"]) or {}
    return {**click, **{field: row.get(field) for field in PROFILE}}


def category_sales(
    orders: Iterable[Mapping[str, Any]], products: Mapping[Any, Mapping[str, Any]]
) -> list[Row]:
    """DESIGN.md, ``category_sales``: from the current tables (``orders``' rows, ``products``
    by ``product_id``), "the current ``orders ⨝ products`` (inner, on ``product_id``) ...
    orders whose status is not ``cancelled``; revenue = quantity x the product's current
    price", per category; a category with no such order has no row (its tombstone)."""
    totals: dict[str, Row] = {}
    for order in orders:
        product = products.get(order["product_id"])
        if product is None or order["status"] == "cancelled":
            continue
        category = product["category"]
        total = totals.setdefault(
            category, {"category": category, "orders": 0, "units": 0, "revenue_cents": 0}
        )
        total["orders"] += 1
        total["units"] += order["quantity"]
        total["revenue_cents"] += order["quantity"] * product["price_cents"]
    return list(totals.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    """An approved payment and the card's declines since its previous approved payment."""

    payment: Mapping[str, Any]
    declines: list[int]
    """The ``ts`` of every decline since the card's previous approval, in event-time order."""
    recent: list[int]
    """Those within the 10 minutes before the approval: an alert if 3 or more."""

    @property
    def alert(self) -> Row | None:
        """The ``fraud_alerts`` value of this approval, or None if it is no alert."""
        if len(self.recent) < MIN_DECLINES:
            return None
        return {
            "card_id": self.payment["card_id"],
            "payment_id": self.payment["payment_id"],
            "declined_count": len(self.recent),
            "first_declined_ts": self.recent[0],
            "approved_ts": self.payment["ts"],
        }


def approvals(payments: Iterable[Mapping[str, Any]]) -> Iterator[Approval]:
    """Every approved payment, card by card (in the order cards first appear) and in
    event-time order, with the declines DESIGN.md's fraud rule looks at (:func:`fraud_alerts`).

    Event-time order is ``(ts, payment_id)``. A payment whose ``status`` is neither
    ``approved`` nor ``declined`` is not a payment the rule speaks of: the pipeline leaves
    it out before matching (riverbed.pipelines.shop.fraud_alerts), so it neither counts
    nor separates declines from their approval."""
    by_card: dict[str, list[Mapping[str, Any]]] = {}
    for payment in payments:
        if payment["status"] in (APPROVED, DECLINED):
            by_card.setdefault(payment["card_id"], []).append(payment)
    for history in by_card.values():
        declines: list[int] = []
        for payment in sorted(history, key=lambda p: (p["ts"], p["payment_id"])):
            if payment["status"] == DECLINED:
                declines.append(payment["ts"])
                continue
            recent = [ts for ts in declines if payment["ts"] - ts <= FRAUD_WINDOW_MS]
            yield Approval(payment=payment, declines=declines, recent=recent)
            declines = []


def fraud_alerts(payments: Iterable[Mapping[str, Any]]) -> list[Row]:
    """DESIGN.md, ``fraud_alerts``: "an approved payment on a card preceded, since that
    card's previous approved payment, by 3 or more declined payments within the 10 minutes
    (event time) before it; ``declined_count`` counts those declines". "Before" is in
    ``(ts, payment_id)`` order; "within the 10 minutes before it" is at most 10 minutes
    older, the boundary included; payments of another status are left out
    (:func:`approvals`). In :func:`approvals`' order."""
    return [a.alert for a in approvals(payments) if a.alert is not None]


def cart_removals(cart_events: Iterable[Mapping[str, Any]]) -> list[Row]:
    """``cart_removals``: "count ``ItemRemoved`` events per (product_id, 1-hour window of the
    ``ItemRemoved`` event's ``ts``)"; ``cart_events`` are ``shop.carts.events``' values
    (DESIGN.md, "Event sourcing"), of every type: the other types count nowhere. All of
    them: which events come too late is the test's to say."""
    counts = Counter(
        (e["ts"] - e["ts"] % HOUR_MS, e["data"]["product_id"])
        for e in cart_events
        if e["type"] == ITEM_REMOVED
    )
    return [
        {"window_start": start, "window_end": start + HOUR_MS, "product_id": product, "removals": n}
        for (start, product), n in counts.items()
    ]
