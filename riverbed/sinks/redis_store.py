"""The cache: a Redis store (DESIGN.md, "Derived data").

- A CDC row is a hash at ``TABLE:PK`` (the primary-key values joined with ``:``); its fields
  are the row's columns, strings as they are and other values as their JSON text; a SQL
  NULL is a missing field. A row replaces the whole hash, except when a column's value did
  not come with the change (an unchanged TOAST value): then only the columns that came are
  set, and the field keeps the value it has.
- A changelog ``T``'s entry is a string at ``T:KEY`` (the key's JSON) holding the value's
  JSON.
- A delete or tombstone deletes the key; a truncate deletes every ``TABLE:*`` key.

A batch and the positions go to Redis as one Lua script call (:data:`_APPLY`, the batch as
one JSON argument, the positions in the hash :data:`POSITIONS_KEY`, field
``topic/partition``): Redis runs a script atomically, as it runs a ``MULTI``/``EXEC`` block,
so it holds both or neither, and a truncate sees the rows the batch wrote before it. One
call a batch instead of two commands a change: redis-py packing commands and parsing their
replies in Python took more than half of the sink's time.
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
_APPLY = """
local ops = cjson.decode(ARGV[1])
for _, op in ipairs(ops) do
  local kind, key = op[1], op[2]
  if kind == 'h' then
    if op[3] == 1 then redis.call('DEL', key) elseif #op[5] > 0 then
      redis.call('HDEL', key, unpack(op[5])) end
    if #op[4] > 0 then redis.call('HSET', key, unpack(op[4])) end
  elseif kind == 'd' then redis.call('DEL', key)
  elseif kind == 's' then redis.call('SET', key, op[3])
  elseif kind == 't' then
    local cursor = '0'
    repeat
      local found = redis.call('SCAN', cursor, 'MATCH', key .. '*', 'COUNT', 1000)
      cursor = found[1]
      for _, name in ipairs(found[2]) do redis.call('DEL', name) end
    until cursor == '0'
  elseif kind == 'p' then redis.call('HSET', key, unpack(op[3])) end
end
return #ops
"""
"""A batch applied in one script, in order, the positions last: Redis runs a script as it
runs a ``MULTI``/``EXEC`` block, whole, with nothing in between."""


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
        self._ops: list[tuple[Any, ...]] = []
        self._sha: str | None = None

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
        ops = self._ops
        for change in changes:
            if change.truncate:
                ops.append(("t", f"{change.collection}:"))
                continue
            key = f"{change.collection}:{change.row_id}"
            row = change.row
            if row is None:
                ops.append(("d", key))
            elif not change.cdc:
                ops.append(("s", key, orjson.dumps(row).decode()))
            else:
                fields: list[str] = []
                nulls: list[str] = []
                for name, value in row.items():
                    if value is None:
                        nulls.append(name)
                    else:
                        fields += (name, field_text(value))
                ops.append(("h", key, 0 if change.unavailable else 1, fields, nulls))

    def commit(self, positions: Positions) -> None:
        client = self._require()
        ops, self._ops = self._ops, []
        if positions:
            mapped: list[Any] = []
            for (topic, partition), offset in positions.items():
                mapped += (f"{topic}/{partition}", str(offset))
            ops.append(("p", POSITIONS_KEY, mapped))
        if not ops:
            return
        try:
            client.evalsha(self._script_sha(client), 0, orjson.dumps(ops))
        except redis.RedisError as e:
            raise SinkError(f"Redis at {self._url}: {e}") from None

    def _script_sha(self, client: redis.Redis) -> str:
        """The batch script's SHA1, loaded into the server once per connection (a restarted
        server forgets it: ``NOSCRIPT``, so it is loaded again)."""
        if self._sha is None or not client.script_exists(self._sha)[0]:
            self._sha = str(client.script_load(_APPLY))
        return self._sha

    def close(self) -> None:
        self._ops = []
        if self._client is not None:
            self._client.close()
            self._client = None

    def rows(self, table: str) -> dict[str, dict[str, str]]:
        """Every row of a CDC table: row id -> its fields (for ``riverbed sink verify``)."""
        client = self._require()
        keys = list(client.scan_iter(f"{table}:*", count=1000))
        pipe = client.pipeline(transaction=False)  # one round trip, not one a row
        for key in keys:
            pipe.hgetall(key)
        prefix = len(table) + 1
        return {key[prefix:]: cast(dict[str, str], row)
                for key, row in zip(keys, pipe.execute(), strict=True)}  # fmt: skip

    def _require(self) -> redis.Redis:
        if self._client is None:
            raise SinkError("the Redis store is not open")
        return self._client

    def _call(self, call: Any) -> Any:
        try:
            return call(self._require())
        except redis.RedisError as e:
            raise SinkError(f"Redis at {self._url}: {e}") from None
