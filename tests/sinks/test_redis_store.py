"""The Redis store against a real redis-server: the contract's layout (hashes for CDC rows,
strings for changelogs), deletes, truncates, TOAST placeholders, positions, and a batch
that is not committed leaving nothing behind."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from riverbed.sinks.changes import UNAVAILABLE_VALUE, Change, SinkError, change_of
from riverbed.sinks.redis_store import POSITIONS_KEY, RedisStore
from tests.support.sinks import cdc_change, changelog_entry, opened

USERS = "shop.public.users"


def cdc(op: str, key: dict[str, Any], after: dict[str, Any] | None = None) -> Change:
    return cdc_change(USERS, op, key, after)


entry = changelog_entry


@pytest.fixture
def client(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def store(redis_url: str) -> Any:
    yield from opened(RedisStore(redis_url))


def test_cdc_rows_are_hashes_of_their_columns_and_deletes_remove_them(
    store: RedisStore, client: Any
) -> None:
    ann = {"user_id": "u1", "name": "Ann", "age": 41, "vip": True, "note": None}
    store.apply([cdc("c", {"user_id": "u1"}, ann), cdc("r", {"user_id": "u2"}, {"user_id": "u2"})])
    store.commit({(USERS, 0): 2})
    assert client.hgetall("users:u1") == {"user_id": "u1", "name": "Ann", "age": "41",
                                          "vip": "true"}  # fmt: skip
    store.apply([cdc("u", {"user_id": "u1"}, {**ann, "name": "Anne", "age": None})])
    store.apply([cdc("d", {"user_id": "u2"}), entry(USERS, {"user_id": "u2"}, None)])
    store.commit({(USERS, 0): 5})
    assert client.hgetall("users:u1") == {"user_id": "u1", "name": "Anne", "vip": "true"}
    assert not client.exists("users:u2")
    assert store.positions() == {(USERS, 0): 5}


def test_a_composite_key_joins_its_values_with_colons(store: RedisStore, client: Any) -> None:
    key = {"order_id": 7, "line": "a"}
    store.apply([cdc("c", key, {**key, "qty": 2})])
    store.commit({})
    assert client.hgetall("users:7:a") == {"order_id": "7", "line": "a", "qty": "2"}


def test_an_unchanged_toast_value_keeps_the_value_the_store_has(
    store: RedisStore, client: Any
) -> None:
    store.apply([cdc("c", {"user_id": "u1"}, {"user_id": "u1", "bio": "long", "n": 1})])
    store.commit({})
    toasted = {"user_id": "u1", "bio": UNAVAILABLE_VALUE, "n": 2}
    store.apply([cdc("u", {"user_id": "u1"}, toasted)])
    store.commit({})
    assert client.hgetall("users:u1") == {"user_id": "u1", "bio": "long", "n": "2"}


def test_a_truncate_empties_the_table_only(store: RedisStore, client: Any) -> None:
    store.apply([cdc("c", {"user_id": f"u{i}"}, {"user_id": f"u{i}"}) for i in range(5)])
    store.apply([entry("totals", {"k": 1}, {"k": 1, "n": 3})])
    store.commit({})
    truncate = {"before": None, "after": None, "op": "t", "ts_ms": 1, "source": {}}
    store.apply([change_of(USERS, b"{}", orjson.dumps(truncate), cdc=False)])
    store.commit({})
    assert client.keys("users:*") == []
    assert orjson.loads(client.get('totals:{"k":1}')) == {"k": 1, "n": 3}


def test_a_truncate_removes_the_rows_its_own_batch_wrote_before_it(
    store: RedisStore, client: Any
) -> None:
    store.apply([cdc("c", {"user_id": "u1"}, {"user_id": "u1"})])
    store.commit({})
    truncate = {"before": None, "after": None, "op": "t", "ts_ms": 1, "source": {}}
    store.apply([cdc("c", {"user_id": "u2"}, {"user_id": "u2"}),
                 change_of(USERS, b"{}", orjson.dumps(truncate), cdc=False),
                 cdc("c", {"user_id": "u3"}, {"user_id": "u3"})])  # fmt: skip
    store.commit({})
    assert client.keys("users:*") == ["users:u3"]
    assert store.rows("users") == {"u3": {"user_id": "u3"}}


def test_a_restarted_server_gets_the_batch_script_again(store: RedisStore, client: Any) -> None:
    store.apply([cdc("c", {"user_id": "u1"}, {"user_id": "u1"})])
    store.commit({})
    client.script_flush()  # as a restarted server has no scripts
    store.apply([cdc("c", {"user_id": "u2"}, {"user_id": "u2", "n": 2})])
    store.commit({(USERS, 3): 12_345_678_901_234_567})
    assert client.hgetall("users:u2") == {"user_id": "u2", "n": "2"}
    assert store.positions() == {(USERS, 3): 12_345_678_901_234_567}


def test_changelog_entries_are_strings_of_the_value_and_a_tombstone_removes_them(
    store: RedisStore, client: Any
) -> None:
    key = {"window_start": 60_000, "page": "/a"}
    store.apply([entry("page_views_per_minute", key, {**key, "views": 3})])
    store.commit({})
    name = "page_views_per_minute:" + orjson.dumps(key).decode()
    assert orjson.loads(client.get(name)) == {**key, "views": 3}
    store.apply([entry("page_views_per_minute", key, None)])
    store.commit({})
    assert not client.exists(name)


def test_a_batch_without_its_commit_leaves_nothing(redis_url: str, client: Any) -> None:
    store = RedisStore(redis_url)
    store.open()
    store.apply([cdc("c", {"user_id": "u1"}, {"user_id": "u1"})])
    store.commit({(USERS, 0): 1})
    store.apply([cdc("c", {"user_id": "u9"}, {"user_id": "u9"})])
    store.close()  # the process dies here: no EXEC
    assert not client.exists("users:u9")
    assert client.hgetall(POSITIONS_KEY) == {f"{USERS}/0": "1"}
    again = RedisStore(redis_url)
    again.open()
    try:
        assert again.positions() == {(USERS, 0): 1}
    finally:
        again.close()


def test_an_unreachable_or_malformed_redis_is_one_clear_error() -> None:
    with pytest.raises(SinkError, match=r"^no Redis at redis://127\.0\.0\.1:1/0: "):
        RedisStore("redis://127.0.0.1:1/0", timeout_s=1).open()
    with pytest.raises(SinkError, match="not a Redis URL"):
        RedisStore("http://example/0").open()
