"""Pure logic of the sinks: a record read as a change (CDC envelope, changelog entry,
tombstones, TOAST placeholders, records that are not changes), and the comparison behind
``riverbed sink verify``."""

from __future__ import annotations

import datetime
import decimal

import orjson
import pytest

from riverbed.sinks.changes import UNAVAILABLE_VALUE, NotAChangelog, change_of
from riverbed.sinks.verify import Watch, comparable, compare

TOPIC = "shop.public.orders"


def envelope(op: str, after: dict[str, object] | None) -> bytes:
    return orjson.dumps({"before": None, "after": after, "op": op, "source": {}, "ts_ms": 1})


def test_a_cdc_change_is_its_row_under_the_table_and_the_key_values() -> None:
    key = orjson.dumps({"order_id": 7, "line": "a"})
    row = {"order_id": 7, "line": "a", "note": UNAVAILABLE_VALUE, "qty": 2}
    change = change_of(TOPIC, key, envelope("u", row), cdc=False)
    assert (change.collection, change.row_id, change.cdc) == ("orders", "7:a", True)
    assert change.row == {"order_id": 7, "line": "a", "qty": 2}
    assert change.unavailable == ("note",)
    deleted = change_of(TOPIC, key, envelope("d", None), cdc=False)
    assert (deleted.row, deleted.row_id) == (None, "7:a")
    truncated = change_of(TOPIC, b"{}", envelope("t", None), cdc=False)
    assert truncated.truncate and truncated.collection == "orders"


def test_a_tombstone_is_read_by_what_is_known_of_its_topic() -> None:
    key = orjson.dumps({"order_id": 7})
    as_cdc = change_of(TOPIC, key, None, cdc=True)
    assert (as_cdc.collection, as_cdc.row_id, as_cdc.row) == ("orders", "7", None)
    as_changelog = change_of(TOPIC, key, None, cdc=False)
    assert (as_changelog.collection, as_changelog.row_id) == (TOPIC, '{"order_id":7}')


def test_a_changelog_entry_is_its_value_under_the_topic_and_the_key_text() -> None:
    change = change_of("totals", b'{"k": 1}', b'{"k": 1, "n": 2}', cdc=False)
    assert (change.collection, change.row_id, change.row, change.cdc) == (
        "totals", '{"k": 1}', {"k": 1, "n": 2}, False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"{}", "without a key"),
        (b"u1", b"{}", "key is not JSON"),
        (b"[1]", b"{}", "key is not a JSON object"),
        (b"{}", b"[1, 2]", "value is not a JSON object"),
        (b"{}", envelope("x", None), "op 'x'"),
    ],
)
def test_a_record_that_is_not_a_change_is_named(
    key: bytes | None, value: bytes, message: str
) -> None:
    with pytest.raises(NotAChangelog, match=message):
        change_of(TOPIC, key, value, cdc=False)


def test_values_compare_as_numbers_and_instants_whatever_their_form() -> None:
    when = datetime.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)
    assert comparable("2026-01-01T12:00:00.123456Z") == comparable(when)
    assert comparable("12.50") == comparable(decimal.Decimal("12.5000000000"))
    assert comparable(3) == comparable(3.0)
    assert comparable("12.50") != comparable("12.51")
    assert comparable("text") == "text" and comparable(True) is True


def test_compare_names_missing_extra_and_different_rows_and_ignores_nulls() -> None:
    expected = {"1": {"a": 1, "b": None}, "2": {"a": 2}, "3": {"a": 3}}
    found = {"1": {"a": 1}, "3": {"a": 4}, "9": {"a": 9}}
    kinds = {row_id: d.kind for row_id, d in compare(expected, found).items()}
    assert kinds == {"2": "missing", "3": "different", "9": "extra"}


def test_a_watch_judges_the_first_looks_differences_whose_source_stood_still() -> None:
    watch = Watch()
    watch.look({"1": {"a": 1}, "2": {"a": 1}}, {}, comparable)
    watch.look({"1": {"a": 1}, "2": {"a": 2}, "3": {"a": 3}}, {}, comparable)
    assert [d.row_id for d in watch.persisting()] == ["1"]
    assert watch.in_flight() == 2  # "2" changed, "3" came after the first look
    watch.look({"1": {"a": 1}, "2": {"a": 2}}, {"1": {"a": 1}, "2": {"a": 2}}, comparable)
    assert watch.persisting() == [] and watch.in_flight() == 0
