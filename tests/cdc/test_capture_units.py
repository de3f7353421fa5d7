"""The small pure parts of riverbed.cdc.capture: LSN text and the ``--key`` flags."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.cdc.capture import format_lsn, parse_lsn
from riverbed.cdc.errors import CaptureSetupError
from riverbed.cdc.preflight import parse_keys

LSNS = st.integers(0, (1 << 64) - 1)


@pytest.mark.parametrize(
    ("text", "lsn"),
    [
        ("16/B374D848", 0x16_B374_D848),
        ("0/0", 0),
        ("0/1", 1),
        ("1/0", 1 << 32),
        ("0/FFFFFFFF", 0xFFFF_FFFF),
        ("FFFFFFFF/FFFFFFFF", (1 << 64) - 1),
    ],
)
def test_lsn_text_both_ways(text: str, lsn: int) -> None:
    assert parse_lsn(text) == lsn
    assert format_lsn(lsn) == text


def test_lowercase_and_zero_padded_lsns_parse() -> None:
    assert parse_lsn("16/b374d848") == 0x16_B374_D848
    assert parse_lsn("00000016/0B374D84") == 0x16_0B37_4D84


@settings(max_examples=300)
@given(lsn=LSNS)
def test_every_lsn_round_trips(lsn: int) -> None:
    text = format_lsn(lsn)
    assert parse_lsn(text) == lsn
    high, low = text.split("/")
    assert high == high.upper() and low == low.upper()
    assert (high == "0" or not high.startswith("0")) and (low == "0" or not low.startswith("0"))


@settings(max_examples=50, deadline=None)
@given(lsn=LSNS)
def test_lsns_are_written_and_read_as_postgresql_does(sql: Any, lsn: int) -> None:
    sql.execute("SELECT ('0/0'::pg_lsn + %s::numeric)::text", (lsn,))
    (text,) = sql.fetchone()
    assert format_lsn(lsn) == text
    sql.execute("SELECT (%s::pg_lsn - '0/0'::pg_lsn)::text", (text,))
    (difference,) = sql.fetchone()
    assert parse_lsn(text) == int(difference)


def test_the_server_s_current_lsn_parses(sql: Any) -> None:
    sql.execute("SELECT pg_current_wal_lsn()::text, pg_current_wal_lsn() - '0/0'::pg_lsn")
    text, number = sql.fetchone()
    assert parse_lsn(text) == int(number) > 0


def test_key_flags() -> None:
    assert parse_keys([]) == {}
    assert parse_keys(["shop.orders=id"]) == {"shop.orders": ("id",)}
    assert parse_keys(["shop.lines=order_id,line"]) == {"shop.lines": ("order_id", "line")}
    # A table without a schema is in public; spaces around the names are dropped.
    assert parse_keys(["items=sku"]) == {"public.items": ("sku",)}
    assert parse_keys([" shop.lines = order_id , line "]) == {"shop.lines": ("order_id", "line")}
    assert parse_keys(["a.t=x", "b.t=y,z"]) == {"a.t": ("x",), "b.t": ("y", "z")}


@pytest.mark.parametrize(
    "spec",
    ["shop.orders", "shop.orders=", "=id", " =id", "shop.orders= , ", "shop.orders=,", ""],
)
def test_bad_key_flags_are_setup_errors(spec: str) -> None:
    with pytest.raises(CaptureSetupError, match=r"--key expects schema\.table=col1,col2") as caught:
        parse_keys(["ok.table=id", spec])
    assert repr(spec) in str(caught.value)


@pytest.mark.parametrize("spec", ["a.b.c=x", "shop.=id", ".orders=id"])
def test_key_flags_with_malformed_table_names_are_setup_errors(spec: str) -> None:
    # --table rejects these names (catalog.parse_table_name), and inspect_tables looks keys up
    # by "schema.table": a --key for them would be silently ignored.
    with pytest.raises(CaptureSetupError):
        parse_keys([spec])
