"""The ``fraud_alerts`` pipeline (DESIGN.md): an approved payment on a card preceded, since
the card's previous approved payment, by 3 or more declined payments within the 10 minutes
(event time) before it.

As a CEP pattern (:data:`FRAUD`): ``declined`` at least 3 times, then ``approved``, with
strict contiguity (no other payment of the card in between: an approved payment in between
starts over) and within 10 minutes from the first decline to the approval, inclusive. The
matcher takes the earliest first decline within the 10 minutes, so ``declined_count``
counts every decline since the previous approval that is at most 10 minutes older than
the approval. Event-time order is ``(ts, payment_id)``: of two payments with the same
``ts`` the one with the smaller ``payment_id`` comes first.

The operator is :class:`riverbed.pipelines.operators.pattern_matches.PatternMatches`, keyed by
``card_id``, watermark 2 minutes, with early matches: an alert is written by the
micro-batch that reads its approval, from the card's payments read so far in event-time
order. A payment read later can change it (a decline that arrived out of order makes the
count higher: the alert is written again) or undo it (an approval that arrived out of
order in between: a tombstone). Once the watermark has passed the approval, the alert is
that of every payment up to it, and written again only if it differs. So
``fraud_alerts`` is a changelog whose last value per ``{card_id, payment_id}`` is the
contract's alert, as DESIGN.md says readers take every output; with payments in order, each
alert is written once. A payment that arrives below the watermark is too late to be put in
order: it goes to ``fraud_alerts_late``, keyed ``{payment_id}``, with a ``reason``.
Records that are not payments (not a JSON object; no ``card_id``, ``payment_id`` or
``ts``; a ``status`` other than ``approved`` or ``declined``) are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from riverbed.pipelines.operators.cep import Contiguity, Match, Pattern, Step, at_least
from riverbed.pipelines.operators.inputs import json_events, with_event_time
from riverbed.pipelines.operators.pattern_matches import PatternMatches, match_pattern
from riverbed.pipelines.shop.contract import MINUTE_MS, PAYMENT, WATERMARK_DELAY

__all__ = ["FRAUD", "alert", "alerts_processor", "build", "payments"]

APPROVED, DECLINED = "approved", "declined"
TEN_MINUTES_MS = 10 * MINUTE_MS  # DESIGN.md: "within the 10 minutes (event time) before it"
MIN_DECLINES = 3  # DESIGN.md: "3 or more declined payments"
HELD_FIELDS = ("card_id", "payment_id", "status", "ts")
"""What :data:`FRAUD` and :func:`alert` read of a payment: all a card's state holds of one."""


def _declined(payment: Mapping[str, Any]) -> bool:
    return bool(payment["status"] == DECLINED)


def _approved(payment: Mapping[str, Any]) -> bool:
    return bool(payment["status"] == APPROVED)


FRAUD = Pattern(
    steps=(
        Step(name="declined", condition=_declined, quantifier=at_least(MIN_DECLINES)),
        Step(name="approved", condition=_approved),
    ),
    contiguity=Contiguity.STRICT,
    within_ms=TEN_MINUTES_MS,
)


def alert(match: Match) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``fraud_alerts`` record (key, value) of a match of :data:`FRAUD`."""
    declined, (approved,) = match["declined"], match["approved"]
    key = {"card_id": approved["card_id"], "payment_id": approved["payment_id"]}
    value = {
        **key,
        "declined_count": len(declined),
        "first_declined_ts": declined[0]["ts"],
        "approved_ts": approved["ts"],
    }
    return key, value


def payments(source: DataFrame) -> DataFrame:
    """The valid payments of the source (module docstring)."""
    parsed = json_events(source, "payments", PAYMENT)
    return parsed.where(
        F.col("card_id").isNotNull()
        & F.col("payment_id").isNotNull()
        & F.col("ts").isNotNull()
        & F.col("status").isin(APPROVED, DECLINED)
    )


def alerts_processor() -> PatternMatches:
    """The stateful processor of ``fraud_alerts``: :data:`FRAUD` per card."""
    return PatternMatches(
        pattern=FRAUD,
        key_field="card_id",
        tiebreak_field="payment_id",
        topic="fraud_alerts",
        result=alert,
        late_topic="fraud_alerts_late",
        late_key_fields=["payment_id"],
        held_fields=HELD_FIELDS,
        early=True,
    )


def build(source: DataFrame) -> DataFrame:
    """``fraud_alerts`` from a source subscribed to ``payments``."""
    events = with_event_time(payments(source), WATERMARK_DELAY)
    return match_pattern(events, alerts_processor(), event_fields=PAYMENT.fieldNames())
