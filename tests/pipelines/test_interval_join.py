"""The generic interval-join operator (riverbed.pipelines.operators.interval_join.IntervalJoin)
through PySpark's TwsTester: the caller's columns and callbacks, rows left out, duplicates,
expiry. The join logic itself is tested in test_intervals; the operator as search_ctr uses
it, in a real Spark session, in test_search_ctr."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester
from pyspark.sql.types import StringType, StructField, StructType

from riverbed.pipelines.operators.interval_join import LEFT, RIGHT, SIDE, Combine, IntervalJoin
from riverbed.pipelines.operators.intervals import Joined, JoinInterval, LeftRow
from tests.support.keyed_states import slot_entries

OUT = StructType(
    [
        StructField("id", StringType(), False),
        StructField("what", StringType(), False),
        StructField("detail", StringType(), True),
    ]
)
BUCKET = 7  # the tester groups by what it is given


def on_left(left: LeftRow) -> list[tuple[Any, ...]]:
    return [(left.id, "left", left.fields["query"])]


def on_join(pair: Joined) -> list[tuple[Any, ...]]:
    return [(pair.left.id, "joined", f"{pair.right.fields['product']} first={pair.first}")]


def join_tester(combine: Combine | None = None) -> TwsTester:
    join = IntervalJoin(
        condition=JoinInterval(lower_ms=0, upper_ms=100),
        key_field="user",
        left_id_field="search_id",
        left_fields=["query"],
        right_fields=["product"],
        on_left=on_left,
        on_join=on_join,
        output_schema=OUT,
        combine=combine,
        expiry_resolution_ms=1,
    )
    # Pipelines drop the watermarked column, so Spark drops no row: neither does this.
    return TwsTester(join, timeMode="EventTime", eventTimeExtractor=lambda row: 1 << 62)


def left(user: str | None, search_id: str | None, ts: int | None, query: str | None) -> Any:
    return {"user": user, SIDE: LEFT, "ts": ts, "search_id": search_id, "query": query,
            "product": None}  # fmt: skip


def right(user: str | None, ts: int | None, product: str | None) -> Any:
    return {"user": user, SIDE: RIGHT, "ts": ts, "search_id": None, "query": None,
            "product": product}  # fmt: skip


def rows(t: TwsTester, *records: Any) -> list[tuple[Any, ...]]:
    got = t.testInPandas(BUCKET, pd.DataFrame(list(records)))
    return [] if got.empty else list(got.itertuples(index=False, name=None))


def test_the_callers_columns_and_callbacks() -> None:
    t = join_tester()
    assert rows(
        t,
        left("u1", "s1", 1_000, "kite"),
        left("u1", "s1", 1_010, "kite"),  # a duplicate of s1 while it is held
        left("u1", "s2", 1_000, None),  # no query: left out
        left("u1", None, 1_000, "ball"),  # no id: left out
        left(None, "s9", 1_000, "ball"),  # no key: left out
        right("u1", 1_050, "p1"),
        right("u1", None, "p9"),  # no time: left out
    ) == [("s1", "left", "kite"), ("s1", "joined", "p1 first=True")]
    assert rows(
        t,
        right("u1", 1_100, "p2"),  # the bound, included
        right("u1", 1_101, "p3"),  # past it
        right("u1", 1_060, None),  # no product: left out
    ) == [("s1", "joined", "p2 first=False")]
    # The right side first, then its left row, in another batch.
    assert rows(t, right("u2", 2_050, "p4")) == []
    assert rows(t, left("u2", "s3", 2_000, "ball")) == [
        ("s3", "left", "ball"),
        ("s3", "joined", "p4 first=True"),
    ]


def test_rows_expire_with_the_watermark() -> None:
    t = join_tester()
    rows(t, left("u1", "s1", 1_000, "kite"), right("u1", 900, "p0"))
    assert len(slot_entries(t.peekMapState("joins", BUCKET))) == 1
    # s1 can get no on-time right row once the watermark is past 1100, nor p0 a left row
    # past 900: the key's state goes, and the timer writes nothing.
    assert t.setWatermark(1_101).empty
    assert slot_entries(t.peekMapState("joins", BUCKET)) == {}
    # A left row with s1's id is new again, and the late p1 has nothing to join.
    assert rows(t, left("u1", "s1", 1_200, "kite"), right("u1", 1_050, "p1")) == [
        ("s1", "left", "kite")
    ]


def test_combine_gets_the_rows_of_each_call() -> None:
    calls: list[list[tuple[Any, ...]]] = []

    def combine(out: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        calls.append(out)
        return [(out[0][0], "combined", str(len(out)))]

    t = join_tester(combine)
    assert rows(t, left("u1", "s1", 1_000, "kite"), right("u1", 1_050, "p1")) == [
        ("s1", "combined", "2")
    ]
    assert calls == [[("s1", "left", "kite"), ("s1", "joined", "p1 first=True")]]
    assert rows(t, right("u1", 1_060, None)) == []  # no output rows: combine is not called
    assert len(calls) == 1
