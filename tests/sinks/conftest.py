"""Fixtures of the sink tests: one private ``redis-server`` for the session, emptied before
each test that asks for ``redis_url``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from riverbed.testing.redis import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return redis_server.url
