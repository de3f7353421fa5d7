"""The carts the shop workload drives (:mod:`riverbed.workloads.cart_commands`): what each
generated command must be answered, checked against the answers a command processor (or the
carts' pure partition, the reference) gave."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from riverbed.eventsourcing import Result
from riverbed.workloads.cart_commands import CartCommand, Intent, Mistake

REASONS = {
    Mistake.ZERO_QUANTITY: "invalid_command",
    Mistake.MISSING_ITEM: "no_such_item",
    Mistake.UNKNOWN_TYPE: "invalid_command",
    Mistake.EMPTY_CHECKOUT: "empty_cart",
    Mistake.AFTER_CHECKOUT: "checked_out",
}
"""The reason the carts (riverbed.eventsourcing.shop.carts) give for each mistake."""


def check_answers(sent: Sequence[CartCommand], answers: Sequence[Result]) -> None:
    """Every record ``sent`` has one answer in ``answers`` (every result written), as its
    intent says: a shopper's command accepted (at the version after the expected one), a
    racing pair one accepted and one ``version_conflict``, a mistake rejected with its
    reason, a re-sent command id answered again as the first time."""
    by_id: dict[str, list[Result]] = defaultdict(list)
    for answer in answers:
        by_id[answer.command_id].append(answer)
    sends = Counter(command.command_id for command in sent)
    assert {c: len(results) for c, results in by_id.items()} == dict(sends)
    races: dict[tuple[str, int], list[Result]] = defaultdict(list)
    for command in sent:
        first, *again = by_id[command.command_id]
        assert all(result == first for result in again), (first, again)
        expected_version = command.value["expected_version"]
        outcome = (first.status, first.reason)
        if command.intent is Intent.PLAIN:
            assert outcome == ("accepted", None), (command, first)
            assert expected_version is None or first.version == expected_version + 1
        elif command.intent is Intent.RIVAL:
            assert outcome == ("rejected", "version_conflict"), (command, first)
        elif command.intent is Intent.INVALID:
            assert command.mistake is not None
            assert outcome == ("rejected", REASONS[command.mistake]), (command, first)
        if command.intent in (Intent.PLAIN, Intent.RIVAL) and expected_version is not None:
            races[(command.cart_id, expected_version)].append(first)
    rivals = [c for c in sent if c.intent is Intent.RIVAL]
    for rival in rivals:  # each racing pair: one accepted, one version_conflict
        pair = races[(rival.cart_id, rival.value["expected_version"])]
        assert sorted((r.status, r.reason or "") for r in pair) == [
            ("accepted", ""),
            ("rejected", "version_conflict"),
        ], pair
