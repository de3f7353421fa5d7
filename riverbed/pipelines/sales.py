"""The ``category_sales`` pipeline (DESIGN.md): per category, the orders, units and revenue
of the current ``orders ⨝ products`` (inner, on ``product_id``; orders not cancelled;
revenue = quantity * the product's current price), kept up to date from the CDC changelogs
``shop.public.orders`` and ``shop.public.products``. Written to ``category_sales``, keyed
``{"category": ...}``; a category left with no such order gets a tombstone.

The join and the aggregate are :data:`riverbed.pipelines.joins.CATEGORY_SALES` run by
:func:`riverbed.pipelines.join_operators.join_aggregate`: three stateful operators grouped
by ``order_id``, ``product_id`` and ``category``, no event time (a change applies whenever
it arrives; nothing is late). A category's row is written once per micro-batch in which its
totals changed: the topic is a changelog whose last value per category is the result for
the changes read so far.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from riverbed.pipelines.inputs import changes
from riverbed.pipelines.join_operators import join_aggregate
from riverbed.pipelines.joins import CATEGORY_SALES

__all__ = ["ORDERS", "PRODUCTS", "TOPIC", "build"]

ORDERS = "shop.public.orders"
PRODUCTS = "shop.public.products"
TOPIC = "category_sales"


def build(source: DataFrame) -> DataFrame:
    """The ``category_sales`` rows for the riverbed sink, from the source's two CDC topics."""
    return join_aggregate(
        changes(source, ORDERS, "order_id"),
        changes(source, PRODUCTS, "product_id"),
        CATEGORY_SALES,
        left_key_column="order_id",
        right_key_column="product_id",
        topic=TOPIC,
    )
