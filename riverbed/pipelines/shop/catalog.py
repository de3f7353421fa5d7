"""The shop's pipelines, by name (:data:`PIPELINES`): what ``riverbed pipeline run NAME``
runs and ``riverbed pipeline list`` describes (contracts in DESIGN.md). Every time is event
time (``ts``, epoch ms), with a watermark 2 minutes behind the latest event time seen.
"""

from __future__ import annotations

from riverbed.pipelines.pipeline import Pipeline
from riverbed.pipelines.shop import (
    cart_removals,
    category_sales,
    enriched_clicks,
    fraud_alerts,
    page_views_per_minute,
    page_views_sliding,
    search_ctr,
    user_sessions,
)
from riverbed.pipelines.shop.contract import CART_EVENTS_TOPIC

__all__ = ["PIPELINES"]

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        Pipeline(
            name="page_views_per_minute",
            description="page views per page in tumbling 1-minute event-time windows "
            "(watermark 2 minutes), each window written once complete; every page view too "
            "late for its window goes to late_events with the reason",
            inputs=("page_views",),
            outputs=("page_views_per_minute", "late_events"),
            build=page_views_per_minute.build,
        ),
        Pipeline(
            name="user_sessions",
            description="sessions per user: a new session starts after 30 minutes or more "
            "without a page view; each session written once the watermark passes its end "
            "plus 30 minutes",
            inputs=("page_views",),
            outputs=("user_sessions",),
            build=user_sessions.build,
        ),
        Pipeline(
            name="page_views_sliding",
            description="page views per page in hopping 5-minute windows every minute (an "
            "example of the hopping-window operator); late page views go to "
            "page_views_sliding_late",
            inputs=("page_views",),
            outputs=("page_views_sliding", "page_views_sliding_late"),
            build=page_views_sliding.build,
        ),
        Pipeline(
            name="search_ctr",
            description="stream-stream join: searches and the clicks on them (0 to 10 "
            "minutes after the search); per query and 1-minute window of the search: "
            "searches, searches with at least one click, click-through rate",
            inputs=("searches", "clicks"),
            outputs=("search_ctr",),
            build=search_ctr.build,
        ),
        Pipeline(
            name="enriched_clicks",
            description="stream-table join: each click with the user's profile as it was at "
            "the click's event time, from the shop.public.users changelog; a late profile "
            "change corrects the clicks it applies to",
            inputs=("clicks", "shop.public.users"),
            outputs=("enriched_clicks", "enriched_clicks_late"),
            build=enriched_clicks.build,
        ),
        Pipeline(
            name="category_sales",
            description="table-table join kept up to date: per category, the orders, units "
            "and revenue of the current orders ⨝ products (orders not cancelled, current "
            "prices), from the two CDC changelogs; a category left with no order gets a "
            "tombstone",
            inputs=("shop.public.orders", "shop.public.products"),
            outputs=("category_sales",),
            build=category_sales.build,
        ),
        Pipeline(
            name="fraud_alerts",
            description="complex event processing: an approved payment preceded on its "
            "card, since the card's previous approved payment, by 3 or more declined "
            "payments in the 10 minutes before it (event-time order); payments too late to "
            "be put in order go to fraud_alerts_late",
            inputs=("payments",),
            outputs=("fraud_alerts", "fraud_alerts_late"),
            build=fraud_alerts.build,
        ),
        Pipeline(
            name="cart_removals",
            description="from the event-sourced carts: per product and tumbling 1-hour "
            "event-time window, how many times the product was removed from a cart before "
            "checkout (its ItemRemoved events), each window written once complete; removals "
            "too late for their window go to cart_removals_late",
            inputs=(CART_EVENTS_TOPIC,),
            outputs=("cart_removals", "cart_removals_late"),
            build=cart_removals.build,
        ),
    )
}
"""The shop's pipelines by name, in the order ``riverbed pipeline list`` shows them."""
