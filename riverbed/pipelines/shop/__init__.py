"""The shop's pipelines (DESIGN.md, "Pipelines (output contract)"), one module each, named
after the pipeline: :mod:`~riverbed.pipelines.shop.page_views_per_minute`,
:mod:`~riverbed.pipelines.shop.page_views_sliding`,
:mod:`~riverbed.pipelines.shop.user_sessions`, :mod:`~riverbed.pipelines.shop.search_ctr`,
:mod:`~riverbed.pipelines.shop.enriched_clicks`,
:mod:`~riverbed.pipelines.shop.category_sales`,
:mod:`~riverbed.pipelines.shop.fraud_alerts` and
:mod:`~riverbed.pipelines.shop.cart_removals` (over the event-sourced carts), each with a
``build(source)`` that turns the riverbed source into rows for the sink. They are built from
:mod:`riverbed.pipelines.operators`; what DESIGN.md fixes for all of them (the watermark
delay, the event schemas) is in :mod:`~riverbed.pipelines.shop.contract`.
:data:`PIPELINES` (:mod:`~riverbed.pipelines.shop.catalog`) has them by name.
"""

from riverbed.pipelines.shop.catalog import PIPELINES

__all__ = ["PIPELINES"]
