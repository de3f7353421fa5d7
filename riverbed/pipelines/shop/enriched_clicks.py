"""The ``enriched_clicks`` pipeline (DESIGN.md): each click with its user's profile as it was
at the click's event time, from the ``shop.public.users`` changelog.

A stream-table join, as of each click's ``ts``: the latest change of the user (in
changelog order) with ``source.ts_ms <= ts``, a snapshot row counting as valid from the
beginning of time; a deleted or never-seen user gives nulls. The users table is kept as
local state fed by its changelog, versioned in changelog order, and a profile change that
arrives after the clicks it applies to corrects them: the click is written again, keyed by
``click_id``, so the last value per key is the answer over every change
(:mod:`riverbed.pipelines.operators.as_of_join`).

Retention: clicks and profile versions are kept for corrections until the watermark (2
minutes behind the latest click or change time) is :data:`RETENTION_MS` past them. A click
or a change that arrives later than that is still applied, and reported on
``enriched_clicks_late`` (the click + ``reason``, keyed by ``click_id``; or the change,
keyed by ``user_id`` and its position): such a click is not corrected afterwards, and its
profile may be wrong when the history it needs was already discarded (the reason says so);
such a change may leave older clicks uncorrected.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from riverbed.pipelines.operators.as_of_join import AsOfJoin, as_of_join
from riverbed.pipelines.shop.contract import CLICK, WATERMARK_DELAY

__all__ = ["LATE_TOPIC", "PROFILE_COLUMNS", "RETENTION_MS", "TOPIC", "build", "join_processor"]

TOPIC = "enriched_clicks"
LATE_TOPIC = "enriched_clicks_late"
CLICKS_TOPIC = "clicks"
USERS_TOPIC = "shop.public.users"
RETENTION_MS = 60 * 60_000
"""An hour: three times the latest straggler of the shop workload (``late_by_ms`` of 10
minutes, stragglers up to twice that late), so every click of the workload is joined
exactly and corrected by every late profile change within the hour."""
PROFILE_COLUMNS = ("name", "country", "tier")


def join_processor() -> AsOfJoin:
    """The pipeline's operator: clicks joined with their user's profile."""
    return AsOfJoin(
        id_field="click_id",
        ts_field="ts",
        columns=PROFILE_COLUMNS,
        topic=TOPIC,
        late_topic=LATE_TOPIC,
        retention_ms=RETENTION_MS,
    )


def build(source: DataFrame) -> DataFrame:
    """The pipeline's rows (``topic``, ``key``, ``value``) from the riverbed source."""
    return as_of_join(
        source,
        join_processor(),
        events_topic=CLICKS_TOPIC,
        event_schema=CLICK,
        changes_topic=USERS_TOPIC,
        key_column="user_id",
        delay=WATERMARK_DELAY,
    )
