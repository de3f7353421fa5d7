"""The DuckDB store on real database files: the contract's tables (a table per topic, the
row's columns with inferred types, upserts by primary key), deletes, key changes, truncates,
new columns, widened types, TOAST placeholders, several changes to a key in one batch,
positions, a batch that is not committed leaving nothing behind, files it cannot open, and
a property: any batching of a sequence of changes gives the table applying them one by one
gives."""

from __future__ import annotations

import datetime
import itertools
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.sinks.changes import UNAVAILABLE_VALUE, Change, SinkError, change_of
from riverbed.sinks.duckdb_store import POSITIONS_TABLE, DuckDBStore, open_read_only
from tests.support.sinks import cdc_change, changelog_entry, opened

USERS = "shop.public.users"
UTC = datetime.UTC


def cdc(op: str, key: dict[str, Any], after: dict[str, Any] | None = None) -> Change:
    """A Debezium change of ``shop.public.users``, as riverbed's capture writes it."""
    return cdc_change(USERS, op, key, after)


entry = changelog_entry


TRUNCATE = change_of(
    USERS, b"{}", orjson.dumps({"before": None, "after": None, "op": "t", "source": {}}), cdc=True
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "derived.duckdb"


@pytest.fixture
def store(path: Path) -> Iterator[DuckDBStore]:
    yield from opened(DuckDBStore(path))


def types(path: Path, table: str) -> dict[str, str]:
    """Column -> type, as another DuckDB client sees the file (the store closed)."""
    with duckdb.connect(str(path), read_only=True) as connection:
        described = connection.execute(f'DESCRIBE "{table}"').fetchall()
    return {name: kind for name, kind, *_ in described}


def test_rows_are_upserted_by_primary_key_and_deletes_remove_them(
    store: DuckDBStore, path: Path
) -> None:
    ann = {"user_id": "u1", "name": "Ann", "age": 41, "vip": True, "score": 0.5, "note": None}
    bob = {"user_id": "u2", "name": "Bob", "age": 7, "vip": False, "score": 1.0, "note": "x"}
    store.apply([cdc("r", {"user_id": "u1"}, ann), cdc("c", {"user_id": "u2"}, bob)])
    store.commit({(USERS, 0): 2})
    store.apply([cdc("u", {"user_id": "u1"}, {"user_id": "u1", "name": "Anne", "age": 42})])
    store.apply([cdc("d", {"user_id": "u2"}), entry(USERS, {"user_id": "u2"}, None)])
    store.commit({(USERS, 0): 5})
    assert store.rows("users") == {
        "u1": {"user_id": "u1", "name": "Anne", "age": 42, "vip": None, "score": None,
               "note": None},
    }  # fmt: skip
    assert store.positions() == {(USERS, 0): 5}
    store.close()
    assert types(path, "users") == {
        "user_id": "VARCHAR", "name": "VARCHAR", "age": "BIGINT", "vip": "BOOLEAN",
        "score": "DOUBLE", "note": "VARCHAR",
    }  # fmt: skip


def test_a_key_change_deletes_the_old_key_and_creates_the_new_one(store: DuckDBStore) -> None:
    store.apply([cdc("c", {"id": 1}, {"id": 1, "name": "a"})])
    store.commit({})
    store.apply([cdc("d", {"id": 1}), cdc("c", {"id": 2}, {"id": 2, "name": "a"})])
    store.commit({})
    assert store.rows("users") == {"2": {"id": 2, "name": "a"}}


def test_timestamps_and_decimals_come_back_exactly(store: DuckDBStore, path: Path) -> None:
    row = {
        "id": 1, "at": "2026-01-01T12:00:00.123456Z", "day": "2024-02-29T23:59:59Z",
        "price": "12.50", "rate": "-0.0000000001", "big": "1234567890123456789012345678.5",
    }  # fmt: skip
    store.apply([cdc("c", {"id": 1}, row)])
    store.commit({})
    assert store.rows("users")["1"] == {
        "id": 1,
        "at": datetime.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
        "day": datetime.datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC),
        "price": Decimal("12.50"),
        "rate": Decimal("-0.0000000001"),
        "big": Decimal("1234567890123456789012345678.5"),
    }
    store.close()
    assert types(path, "users") == {
        "id": "BIGINT", "at": "TIMESTAMP WITH TIME ZONE", "day": "TIMESTAMP WITH TIME ZONE",
        "price": "DECIMAL(38,2)", "rate": "DECIMAL(38,10)", "big": "DECIMAL(38,1)",
    }  # fmt: skip


def test_a_new_column_is_added_and_the_older_rows_have_it_null(
    store: DuckDBStore, path: Path
) -> None:
    store.apply([cdc("c", {"id": 1}, {"id": 1, "name": "a"})])
    store.commit({})
    store.apply([cdc("c", {"id": 2}, {"id": 2, "name": "b", "color": "red", "at": None})])
    store.commit({})
    assert store.rows("users") == {
        "1": {"id": 1, "name": "a", "color": None, "at": None},
        "2": {"id": 2, "name": "b", "color": "red", "at": None},
    }
    store.apply([cdc("u", {"id": 1}, {"id": 1, "name": "a", "at": "2026-03-01T00:00:00.5Z"})])
    store.commit({})
    store.close()
    # ``at`` was first seen null: it is VARCHAR until its first value gives it its type.
    assert types(path, "users")["at"] == "TIMESTAMP WITH TIME ZONE"


def test_a_value_that_does_not_fit_widens_its_column_to_text_as_the_capture_wrote_it(
    store: DuckDBStore, path: Path
) -> None:
    first = {"id": 1, "at": "2026-01-01T12:00:00.250000Z", "price": "12.50", "n": 3, "ok": True}
    store.apply([cdc("c", {"id": 1}, first)])
    store.commit({})
    odd = {"id": 2, "at": "soon", "price": "abc", "n": "many", "ok": "yes"}
    store.apply([cdc("c", {"id": 2}, odd)])
    store.commit({})
    assert store.rows("users") == {
        "1": {"id": 1, "at": "2026-01-01T12:00:00.250000Z", "price": "12.50", "n": "3",
              "ok": "true"},
        "2": odd,
    }  # fmt: skip
    store.close()
    assert set(types(path, "users").values()) == {"BIGINT", "VARCHAR"}


def test_a_decimal_column_grows_its_scale_for_a_finer_value(store: DuckDBStore, path: Path) -> None:
    store.apply([cdc("c", {"id": 1}, {"id": 1, "x": "1.5"})])
    store.commit({})
    store.apply(
        [cdc("c", {"id": 2}, {"id": 2, "x": "2.125"}), cdc("c", {"id": 3}, {"id": 3, "x": "7"})]
    )
    store.commit({})
    assert {k: r["x"] for k, r in store.rows("users").items()} == {
        "1": Decimal("1.5"), "2": Decimal("2.125"), "3": Decimal(7),
    }  # fmt: skip
    store.close()
    assert types(path, "users")["x"] == "DECIMAL(38,3)"


def test_a_primary_key_column_that_must_widen_rebuilds_its_table(
    store: DuckDBStore, path: Path
) -> None:
    store.apply([cdc("c", {"id": 1}, {"id": 1, "name": "a"})])
    store.commit({})
    store.apply([cdc("c", {"id": "x-2"}, {"id": "x-2", "name": "b"}), cdc("d", {"id": 1})])
    store.apply([cdc("c", {"id": "x-2"}, {"id": "x-2", "name": "c"})])
    store.commit({})
    assert store.rows("users") == {"x-2": {"id": "x-2", "name": "c"}}
    store.close()
    with duckdb.connect(str(path), read_only=True) as connection:
        (key,) = connection.execute(
            "SELECT constraint_column_names FROM duckdb_constraints() "
            "WHERE table_name = 'users' AND constraint_type = 'PRIMARY KEY'"
        ).fetchone() or (None,)
    assert key == ["id"]
    assert types(path, "users")["id"] == "VARCHAR"


def test_an_unchanged_toast_value_keeps_the_value_the_store_has(store: DuckDBStore) -> None:
    store.apply([cdc("c", {"id": 1}, {"id": 1, "bio": "long", "n": 1})])
    store.commit({})
    toasted = {"id": 1, "bio": UNAVAILABLE_VALUE, "n": 2}
    new_row = {"id": 2, "bio": UNAVAILABLE_VALUE, "n": 1}
    store.apply([cdc("u", {"id": 1}, toasted), cdc("c", {"id": 2}, new_row)])
    store.commit({})
    assert store.rows("users") == {"1": {"id": 1, "bio": "long", "n": 2},
                                   "2": {"id": 2, "bio": None, "n": 1}}  # fmt: skip


def test_within_one_batch_the_last_change_to_a_key_wins(store: DuckDBStore) -> None:
    store.apply([cdc("c", {"id": k}, {"id": k, "bio": f"old {k}", "n": 0}) for k in (1, 2, 3, 4)])
    store.commit({})
    store.apply([
        cdc("u", {"id": 1}, {"id": 1, "bio": "one", "n": 1}),
        cdc("u", {"id": 1}, {"id": 1, "bio": UNAVAILABLE_VALUE, "n": 2}),  # keeps "one"
        cdc("d", {"id": 2}),
        cdc("c", {"id": 2}, {"id": 2, "bio": UNAVAILABLE_VALUE, "n": 3}),  # a new row: bio NULL
        cdc("u", {"id": 3}, {"id": 3, "bio": UNAVAILABLE_VALUE, "n": 4}),
        cdc("u", {"id": 3}, {"id": 3, "bio": UNAVAILABLE_VALUE, "n": 5}),  # keeps "old 3"
        cdc("c", {"id": 5}, {"id": 5, "bio": "five", "n": 6}),
        cdc("d", {"id": 5}),
        cdc("d", {"id": 4}),
        cdc("c", {"id": 4}, {"id": 4, "n": 7}),
    ])  # fmt: skip
    store.commit({})
    assert store.rows("users") == {
        "1": {"id": 1, "bio": "one", "n": 2},
        "2": {"id": 2, "bio": None, "n": 3},
        "3": {"id": 3, "bio": "old 3", "n": 5},
        "4": {"id": 4, "bio": None, "n": 7},
    }


def test_a_truncate_empties_the_table_only(store: DuckDBStore) -> None:
    store.apply([cdc("c", {"id": i}, {"id": i}) for i in range(5)])
    store.apply([entry("totals", {"k": 1}, {"n": 3})])
    store.commit({})
    store.apply([cdc("c", {"id": 9}, {"id": 9}), TRUNCATE, cdc("c", {"id": 7}, {"id": 7})])
    store.apply([change_of("shop.public.orders", b"{}", TRUNCATE_VALUE, cdc=True)])  # no table
    store.commit({})
    assert store.rows("users") == {"7": {"id": 7}}
    assert store.rows("totals") == {"1": {"k": 1, "n": 3}}
    assert store.rows("orders") == {}


TRUNCATE_VALUE = orjson.dumps({"before": None, "after": None, "op": "t", "source": {}})


def test_changelog_rows_are_keyed_by_every_field_of_their_key(
    store: DuckDBStore, path: Path
) -> None:
    topic = "shop.sales_per_window"
    a = {"window_start": "2026-01-01T12:00:00.000000Z", "product_id": "p1"}
    b = {"window_start": "2026-01-01T12:01:00.000000Z", "product_id": "p1"}
    store.apply([entry(topic, a, {"units": 3, "revenue": "30.00", "tags": ["x"]}),
                 entry(topic, b, {"units": 1, "revenue": "10.00", "tags": []}),
                 entry(topic, a, {"units": 4, "revenue": "40.00", "tags": ["x", "y"]}),
                 entry("shop.sales_per_window", b, None),
                 entry(topic, {"product_id": "p2", "window_start": a["window_start"]},
                       {"units": 2, "revenue": "20.00", "tags": None})])  # fmt: skip
    store.commit({})
    rows = store.rows("sales_per_window")
    assert rows == {
        "2026-01-01T12:00:00.000000Z:p1": {
            "window_start": datetime.datetime(2026, 1, 1, 12, tzinfo=UTC), "product_id": "p1",
            "units": 4, "revenue": Decimal("40.00"), "tags": '["x","y"]',
        },
        "2026-01-01T12:00:00.000000Z:p2": {
            "window_start": datetime.datetime(2026, 1, 1, 12, tzinfo=UTC), "product_id": "p2",
            "units": 2, "revenue": Decimal("20.00"), "tags": None,
        },
    }  # fmt: skip
    store.close()
    assert types(path, "sales_per_window")["tags"] == "JSON"


def test_positions_survive_a_reopen_and_a_batch_without_its_commit_leaves_nothing(
    path: Path,
) -> None:
    store = DuckDBStore(path)
    store.open()
    assert store.positions() == {}
    store.apply([cdc("c", {"id": 1}, {"id": 1, "name": "a"})])
    store.commit({(USERS, 0): 1, (USERS, 1): 7})
    store.apply([
        cdc("u", {"id": 1}, {"id": 1, "name": "b", "more": 1}), cdc("d", {"id": 1}),
        cdc("c", {"id": 2}, {"id": 2, "name": "c"}), entry("t2", {"k": 1}, {"v": 1}),
    ])  # fmt: skip
    store.close()  # the process dies here: no commit
    again = DuckDBStore(path)
    again.open()
    try:
        assert again.positions() == {(USERS, 0): 1, (USERS, 1): 7}
        assert again.rows("users") == {"1": {"id": 1, "name": "a"}}
        assert again.rows("t2") == {}
        again.apply([cdc("c", {"id": 3}, {"id": 3, "name": "d", "more": 2})])
        again.commit({(USERS, 0): 2})
        assert again.positions() == {(USERS, 0): 2, (USERS, 1): 7}
    finally:
        again.close()
    reader = open_read_only(path)
    try:
        assert reader.positions() == {(USERS, 0): 2, (USERS, 1): 7}
        assert set(reader.rows("users")) == {"1", "3"}
        with pytest.raises(SinkError, match="open read-only"):
            reader.apply([cdc("d", {"id": 1})])
    finally:
        reader.close()


def test_a_failed_batch_is_rolled_back_whole(store: DuckDBStore) -> None:
    store.apply([cdc("c", {"id": 1}, {"id": 1, "name": "a"})])
    store.commit({(USERS, 0): 1})
    bad = [cdc("c", {"id": 2}, {"id": 2, "name": "b", "added": 1}), cdc("d", {"id": 1}),
           entry(USERS, {"id": 3, "other": 1}, {"name": "c"})]  # fmt: skip
    with pytest.raises(SinkError, match=r"a key with fields \(id, other\) for table users"):
        store.apply(bad)
    with pytest.raises(SinkError, match="cannot write the table"):
        store.apply([entry(f"x.{POSITIONS_TABLE}", {"k": 1}, {"v": 1})])
    store.apply([cdc("c", {"id": 4}, {"id": 4, "name": "d"})])
    store.commit({(USERS, 0): 9})
    assert store.rows("users") == {"1": {"id": 1, "name": "a"}, "4": {"id": 4, "name": "d"}}
    assert store.positions() == {(USERS, 0): 9}


def test_files_it_cannot_open_are_one_clear_error(tmp_path: Path) -> None:
    def error_of(path: Path, *, read_only: bool = False) -> str:
        with pytest.raises(SinkError) as raised:
            DuckDBStore(path, read_only=read_only).open()
        message = str(raised.value)
        assert "\n" not in message
        assert message.startswith(f"cannot open the DuckDB database {path}: ")
        return message

    assert "No such file or directory" in error_of(tmp_path / "nowhere" / "db.duckdb")
    (tmp_path / "file").write_text("")
    assert "Not a directory" in error_of(tmp_path / "file" / "db.duckdb")
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    assert error_of(tmp_path / "notes.txt").endswith("not a DuckDB database file")
    (tmp_path / "empty.duckdb").write_bytes(b"")
    assert error_of(tmp_path / "empty.duckdb").endswith("not a DuckDB database file")
    lite = sqlite3.connect(tmp_path / "lite.db")
    lite.execute("CREATE TABLE t (a)")
    lite.commit()
    lite.close()
    assert error_of(tmp_path / "lite.db").endswith("not a DuckDB database file")
    assert "database does not exist" in error_of(tmp_path / "new.duckdb", read_only=True)
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root: chmod stops nothing; the regular file above did
        assert not (tmp_path / "file").is_dir()
    else:
        assert "Permission denied" in error_of(locked / "db.duckdb")


def test_a_database_another_process_writes_is_one_clear_error(path: Path) -> None:
    script = (
        "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
        "sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline() == "open\n"
            for read_only in (False, True):
                with pytest.raises(
                    SinkError, match=r"^cannot open the DuckDB database .*lock"
                ) as e:
                    DuckDBStore(path, read_only=read_only).open()
                assert "\n" not in str(e.value) and "See also" not in str(e.value)
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
    store = DuckDBStore(path)
    store.open()  # the lock went with its process
    store.close()


# -- any batching of a sequence of changes gives the table one-by-one application gives -----

_ROWS = st.fixed_dictionaries(
    {
        "a": st.none() | st.integers(-3, 3),
        "b": st.none() | st.sampled_from(["x", "", "y z"]),
        "c": st.none() | st.sampled_from(["1.50", "-0.25", "3.00"]),
    }
)
_CHANGES = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.integers(0, 3), _ROWS, st.booleans()),
        st.tuples(st.just("delete"), st.integers(0, 3)),
        st.tuples(st.just("truncate")),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=_CHANGES, cuts=st.lists(st.integers(0, 25), max_size=5))
def test_any_batching_gives_the_table_of_one_change_at_a_time(
    changes: list[tuple[Any, ...]], cuts: list[int]
) -> None:
    model: dict[int, dict[str, Any]] = {}
    stream: list[Change] = []
    for change in changes:
        if change[0] == "truncate":
            model.clear()
            stream.append(TRUNCATE)
        elif change[0] == "delete":
            model.pop(change[1], None)
            stream.append(cdc("d", {"id": change[1]}))
        else:
            _, key, row, toasted = change
            row = {"id": key, **row}
            if toasted:  # column b did not come: the row keeps its b (a new row: NULL)
                model[key] = {**row, "b": model.get(key, {}).get("b")}
                row["b"] = UNAVAILABLE_VALUE
            else:
                model[key] = row
            stream.append(cdc("u", {"id": key}, row))
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    with tempfile.TemporaryDirectory() as directory:
        store = DuckDBStore(Path(directory) / "p.duckdb")
        store.open()
        try:
            for n, (start, end) in enumerate(itertools.pairwise(bounds)):
                store.apply(stream[start:end])
                store.commit({(USERS, 0): end} if n % 2 else {})
            found = store.rows("users")
        finally:
            store.close()
    expected = {
        str(k): {
            "id": k,
            "a": r["a"],
            "b": r["b"],
            "c": None if r["c"] is None else Decimal(r["c"]),
        }
        for k, r in model.items()
    }
    assert {k: {c: found[k].get(c) for c in ("id", "a", "b", "c")} for k in found} == expected
