"""The cache: a Redis store (DESIGN.md, "Derived data").

- A CDC row is a hash at ``TABLE:PK`` (the primary-key values joined with ``:``); its fields
  are the row's columns, strings as they are and other values as their JSON text; a SQL
  NULL is a missing field. A row replaces the whole hash, except when a column's value did
  not come with the change (an unchanged TOAST value): then only the columns that came are
  set, and the field keeps the value it has.
- A changelog ``T``'s entry is a string at ``T:KEY`` (the key's JSON) holding the value's
  JSON.
- A delete or tombstone deletes the key; a truncate deletes every ``TABLE:*`` key.

A batch and the positions go in one ``MULTI``/``EXEC`` (the positions in the hash
:data:`POSITIONS_KEY`, field ``topic/partition``), so Redis holds both or neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson
import redis

from riverbed.sinks.changes import Change, SinkError
from riverbed.sinks.store import Positions, TopicPartition

__all__ = ["DEFAULT_URL", "POSITIONS_KEY", "RedisStore", "field_text"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
POSITIONS_KEY = "riverbed:sink:positions"


def field_text(value: Any) -> str:
    """A column's value as a hash field: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


class RedisStore:
    """See the module docstring."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout_s: float = 10.0) -> None:
        self.name = url
        self._url = url
        self._timeout_s = timeout_s
        self._client: redis.Redis | None = None
        self._pipeline: Any = None

    def open(self) -> None:
        try:
            client = redis.Redis.from_url(
                self._url, socket_timeout=self._timeout_s,
                socket_connect_timeout=self._timeout_s, decode_responses=True,
            )  # fmt: skip
        except ValueError as e:
            raise SinkError(f"not a Redis URL: {self._url} ({e})") from None
        try:
            client.ping()
        except redis.RedisError as e:
            client.close()
            raise SinkError(f"no Redis at {self._url}: {e}") from None
        self._client = client

    def positions(self) -> dict[TopicPartition, int]:
        stored = self._call(lambda c: c.hgetall(POSITIONS_KEY))
        found: dict[TopicPartition, int] = {}
        for name, offset in stored.items():
            topic, _, partition = name.rpartition("/")
            found[(topic, int(partition))] = int(offset)
        return found

    def apply(self, changes: Sequence[Change]) -> None:
        client = self._require()
        if self._pipeline is None:
            self._pipeline = client.pipeline(transaction=True)
        pipe = self._pipeline
        for change in changes:
            if change.truncate:
                for key in self._call(lambda c, ch=change: list(c.scan_iter(f"{ch.collection}:*"))):
                    pipe.delete(key)
                continue
            key = f"{change.collection}:{change.row_id}"
            row = change.row
            if row is None:
                pipe.delete(key)
            elif not change.cdc:
                pipe.set(key, orjson.dumps(row).decode())
            else:
                fields = {name: field_text(v) for name, v in row.items() if v is not None}
                if not change.unavailable:
                    pipe.delete(key)
                else:
                    nulls = [name for name, v in row.items() if v is None]
                    if nulls:
                        pipe.hdel(key, *nulls)
                if fields:
                    pipe.hset(key, mapping=fields)

    def commit(self, positions: Positions) -> None:
        client = self._require()
        pipe = self._pipeline if self._pipeline is not None else client.pipeline(transaction=True)
        self._pipeline = None
        if positions:
            pipe.hset(POSITIONS_KEY, mapping={f"{t}/{p}": o for (t, p), o in positions.items()})
        try:
            pipe.execute()
        except redis.RedisError as e:
            raise SinkError(f"Redis at {self._url}: {e}") from None

    def close(self) -> None:
        self._pipeline = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def rows(self, table: str) -> dict[str, dict[str, str]]:
        """Every row of a CDC table: row id -> its fields."""
        client = self._require()
        found: dict[str, dict[str, str]] = {}
        prefix = f"{table}:"
        for key in client.scan_iter(f"{table}:*", count=1000):
            found[key[len(prefix) :]] = cast(dict[str, str], client.hgetall(key))
        return found

    def _require(self) -> redis.Redis:
        if self._client is None:
            raise SinkError("the Redis store is not open")
        return self._client

    def _call(self, call: Any) -> Any:
        try:
            return call(self._require())
        except redis.RedisError as e:
            raise SinkError(f"Redis at {self._url}: {e}") from None
