"""riverbed.testing.references where the contract sentence alone leaves a doubt: what the
pipelines do decides (riverbed.pipelines.shop)."""

from __future__ import annotations

from typing import Any

from riverbed.testing.references import approvals, fraud_alerts, profile_as_of

MINUTE = 60_000


def payment(n: int, status: str, ts: int, card: str = "c1") -> dict[str, Any]:
    return {"payment_id": f"p{n:02d}", "card_id": card, "status": status, "ts": ts}


def test_a_payment_of_another_status_neither_counts_nor_separates_declines_from_the_approval() -> (
    None
):
    """fraud_alerts leaves such a payment out before matching (``payments``), so the
    declines before it and the approval after it still make an alert."""
    history = [
        payment(1, "declined", 0),
        payment(2, "declined", MINUTE),
        payment(3, "pending", 2 * MINUTE),
        payment(4, "declined", 3 * MINUTE),
        payment(5, "refunded", 4 * MINUTE),
        payment(6, "approved", 5 * MINUTE),
    ]
    assert fraud_alerts(history) == [
        {
            "card_id": "c1",
            "payment_id": "p06",
            "declined_count": 3,
            "first_declined_ts": 0,
            "approved_ts": 5 * MINUTE,
        }
    ]
    assert [a.payment["payment_id"] for a in approvals(history)] == ["p06"]


def test_declines_count_since_the_previous_approval_within_ten_minutes_in_ts_then_id_order() -> (
    None
):
    history = [
        payment(1, "declined", 0),
        payment(2, "approved", MINUTE),  # resets
        payment(3, "declined", 2 * MINUTE),
        payment(4, "declined", 3 * MINUTE),
        payment(9, "declined", 12 * MINUTE),  # after p08 at the same ts: not before it
        payment(7, "declined", 12 * MINUTE),
        payment(8, "approved", 12 * MINUTE),
        payment(5, "declined", 1, card="c2"),
    ]
    assert fraud_alerts(history) == [
        {
            "card_id": "c1",
            "payment_id": "p08",
            "declined_count": 3,
            "first_declined_ts": 2 * MINUTE,  # exactly 10 minutes before: it counts
            "approved_ts": 12 * MINUTE,
        }
    ]
    assert [len(a.declines) for a in approvals(history)] == [1, 3]


def test_the_profile_is_the_last_version_in_changelog_order_at_or_before_the_time() -> None:
    snapshot, update, skewed = {"tier": "a"}, {"tier": "b"}, {"tier": "c"}
    versions = [(None, snapshot), (1_000, update), (900, skewed), (2_000, None)]
    assert profile_as_of(versions, 0) == snapshot  # a snapshot row: from the beginning
    assert profile_as_of(versions, 899) == snapshot
    assert profile_as_of(versions, 900) == skewed  # the last change with ts_ms <= 900
    assert profile_as_of(versions, 1_000) == skewed  # later in the changelog, clock behind
    assert profile_as_of(versions, 2_000) is None  # deleted
    assert profile_as_of([(1_000, update)], 999) is None  # never seen then
