"""The ``category_sales`` pipeline (DESIGN.md): per category, the orders, units and revenue
of the current ``orders ⨝ products`` (inner, on ``product_id``; orders not cancelled;
revenue = quantity * the product's current price), kept up to date from the CDC changelogs
``shop.public.orders`` and ``shop.public.products``. Written to ``category_sales``, keyed
``{"category": ...}``; a category left with no such order gets a tombstone.

The join and the aggregate are :data:`CATEGORY_SALES` run by
:func:`riverbed.pipelines.operators.changelog_join.join_aggregate`: three stateful operators
grouped by ``order_id``, ``product_id`` and ``category``, no event time (a change applies
whenever it arrives; nothing is late). A category's row is written once per micro-batch in
which its totals changed: the topic is a changelog whose last value per category is the
result for the changes read so far.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from riverbed.pipelines.operators.changelog_join import join_aggregate
from riverbed.pipelines.operators.inputs import changes
from riverbed.pipelines.operators.join_stages import JoinSpec
from riverbed.pipelines.operators.json_rows import Json, Row

__all__ = ["CATEGORY_SALES", "ORDERS", "PRODUCTS", "TOPIC", "build"]

ORDERS = "shop.public.orders"
PRODUCTS = "shop.public.products"
TOPIC = "category_sales"


def _integer(value: Json) -> int:
    """An integer column; null (or, not possible with the shop's types, a non-integer)
    counts as 0, as SQL's sum() leaves nulls out."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _sales(order: Row, product: Row) -> tuple[int, ...] | None:
    if order.get("status") == "cancelled":  # a null status is not "cancelled"
        return None
    quantity = _integer(order.get("quantity"))
    return quantity, quantity * _integer(product.get("price_cents"))


CATEGORY_SALES = JoinSpec(
    join_column="product_id",
    right_key=lambda key: key.get("product_id"),
    group=lambda product: product.get("category"),
    measures=_sales,
    left_columns=("quantity", "status"),
    group_field="category",
    count_field="orders",
    sum_fields=("units", "revenue_cents"),
)
"""``category_sales`` (DESIGN.md): orders ⨝ products on product_id, not cancelled."""


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
