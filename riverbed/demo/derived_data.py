"""The demo's derived-data section: dual writes against the log (DDIA's case for CDC).

1. A database of its own on the demo's PostgreSQL cluster gets ``products`` and
   ``orders``; ``riverbed cdc`` captures them into ``dual.public.products`` and
   ``dual.public.orders``; three sinks follow those topics (as ``riverbed sink run``
   does): a Redis cache (database 1 of a private ``redis-server``), a Tantivy index and a
   DuckDB file.
2. **Dual writes**: two application threads update the same products' prices at about the
   same time (two requests for one product), each committing to PostgreSQL and then writing
   the new price into the cache (database 0), as applications do. Between the commit and
   the cache write a thread may be overtaken by the other: the cache then keeps the older
   price, for good.
3. The same updates reach the other cache through the log. The demo counts the products
   whose cached price is wrong each way, and runs ``riverbed sink verify``.
4. The search index answers a query for a product renamed meanwhile; DuckDB answers an
   analytics query over the orders, equal to the same query on PostgreSQL.
5. Changelogs are inputs too: the carts' state (``shop.carts.state``, the event-sourcing
   section's projection) is served from Redis and the ``category_sales`` pipeline's output
   from DuckDB.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg2
import redis

from riverbed.cdc.capture import LogCaptureConfig
from riverbed.demo.console import KAFKA_LOG
from riverbed.demo.shop_cdc import capturing
from riverbed.sinks.duckdb_store import DuckDBStore
from riverbed.sinks.redis_store import RedisStore
from riverbed.sinks.runner import SinkConfig, SinkCounts, run_sink
from riverbed.sinks.search_store import SearchStore, search
from riverbed.sinks.store import Store
from riverbed.testing.postgres import PostgresCluster, database
from riverbed.testing.redis import RedisServer

__all__ = ["run"]

PRODUCTS, ORDERS = "dual.public.products", "dual.public.orders"
HOT = 10
"""Products both application threads update."""
UPDATES = 400
"""Price updates per application thread."""
ORDERS_SQL = (
    "SELECT product_id, count(*) AS orders, sum(quantity) AS units FROM orders "
    "GROUP BY product_id ORDER BY product_id"
)


def run(cluster: PostgresCluster, bootstrap: str, data_dir: Path) -> None:
    """The section (module docstring); ``data_dir`` gets the index and the DuckDB file."""
    data_dir.mkdir(parents=True, exist_ok=True)
    server = RedisServer.start()
    print(f"redis-server {server.url} (db 0: the application's cache, db 1: the log's)")
    try:
        with database(cluster) as dsn:
            _create_tables(dsn)
            capture = LogCaptureConfig(
                dsn=dsn, bootstrap=bootstrap, prefix="dual",
                tables=("public.products", "public.orders"), slot="riverbed_demo_dual",
                publication="riverbed_demo_dual", drop_slot=True, heartbeat_ms=500,
            )  # fmt: skip
            with capturing(capture), _sinks(bootstrap, server, data_dir) as stop_duckdb:
                print(f"riverbed cdc -> {PRODUCTS}, {ORDERS} -> redis, search, duckdb sinks")
                moved = _dual_writes(dsn, server)
                print(f"two application threads made {moved:,} price updates of {HOT} products")
                _wait_until(lambda: _caught_up(dsn, server), 30)
                _count_wrong(dsn, server)
                _verify(dsn, "public.products,public.orders", f"redis://127.0.0.1:{server.port}/1")
                _verify(dsn, "public.products", f"redis://127.0.0.1:{server.port}/0", timeout_s=2)
                _search_renamed(dsn, data_dir / "index")
                stop_duckdb()
                _verify(dsn, "public.products,public.orders", str(data_dir / "shop.duckdb"))
                _analytics(dsn, data_dir / "shop.duckdb")
        _changelogs(bootstrap, server, data_dir / "shop.duckdb")
    finally:
        server.stop()


def _create_tables(dsn: str) -> None:
    connection = psycopg2.connect(dsn)
    with connection, connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE products (product_id text PRIMARY KEY, title text, price_cents bigint)"
        )
        cursor.execute(
            "CREATE TABLE orders (order_id bigint PRIMARY KEY, product_id text, quantity int, "
            "created_at timestamptz DEFAULT now())"
        )
        for n in range(HOT):
            cursor.execute(
                "INSERT INTO products VALUES (%s, %s, %s)",
                (f"p{n}", f"walking shoe model {n}", 1_000 + n),
            )
    connection.close()


@contextmanager
def _sinks(bootstrap: str, server: RedisServer, data_dir: Path) -> Iterator[Callable[[], None]]:
    """The three sinks on threads; yields a function that stops the DuckDB one (DuckDB lets
    one process open a file it writes: verify and the query read it after)."""
    stores: dict[str, tuple[Store, tuple[str, ...]]] = {
        "redis": (RedisStore(f"redis://127.0.0.1:{server.port}/1"), (PRODUCTS, ORDERS)),
        "search": (SearchStore(data_dir / "index"), (PRODUCTS,)),
        "duckdb": (DuckDBStore(data_dir / "shop.duckdb"), (PRODUCTS, ORDERS)),
    }
    stops = {kind: threading.Event() for kind in stores}
    threads: dict[str, threading.Thread] = {}
    for kind, (store, topics) in stores.items():
        config = SinkConfig(
            bootstrap=bootstrap, topics=topics, group_id=f"demo-{kind}",
            settings={"logger": KAFKA_LOG},
        )  # fmt: skip
        threads[kind] = threading.Thread(
            target=run_sink,
            args=(config, store),
            kwargs={"stopping": stops[kind].is_set, "say": lambda line: None},
            daemon=True,
        )
    for thread in threads.values():
        thread.start()

    def stop_duckdb() -> None:
        """Stop the DuckDB sink, then let it finish what the topics hold (it resumes from
        the positions in its file) and stop."""
        stops["duckdb"].set()
        threads["duckdb"].join(30)
        _catch_up(bootstrap, (PRODUCTS, ORDERS), DuckDBStore(data_dir / "shop.duckdb"))

    try:
        yield stop_duckdb
    finally:
        for kind, thread in threads.items():
            stops[kind].set()
            thread.join(30)


def _dual_writes(dsn: str, server: RedisServer) -> int:
    """Two application threads: commit a price to PostgreSQL, then write it to the cache
    (db 0); now and then an order. The moves between the two writes are where it goes
    wrong. Returns the updates made."""
    cache = redis.Redis(port=server.port, db=0, decode_responses=True)
    for n in range(HOT):  # the application's initial load, as the sink lays rows out
        cache.hset(f"products:p{n}", mapping={"product_id": f"p{n}",
                   "title": f"walking shoe model {n}", "price_cents": str(1_000 + n)})  # fmt: skip
    cache.close()
    order_ids = iter(range(1, 1_000_000))
    lock = threading.Lock()
    together = threading.Barrier(2)  # each update: two requests for one product at once

    def application(seed: int) -> None:
        rng = random.Random(seed)
        hot = random.Random(0)  # both threads: the same product at about the same time
        connection = psycopg2.connect(dsn)
        client = redis.Redis(port=server.port, db=0, decode_responses=True)
        try:
            for _ in range(UPDATES):
                product = f"p{hot.randrange(HOT)}"
                price = rng.randrange(500, 5_000)
                together.wait()
                with connection, connection.cursor() as cursor:
                    cursor.execute(
                        "UPDATE products SET price_cents = %s WHERE product_id = %s",
                        (price, product),
                    )
                    if rng.random() < 0.1:
                        with lock:
                            order_id = next(order_ids)
                        cursor.execute(
                            "INSERT INTO orders (order_id, product_id, quantity) "
                            "VALUES (%s, %s, %s)",
                            (order_id, product, rng.randint(1, 3)),
                        )
                time.sleep(rng.uniform(0, 0.005))  # the application's own work meanwhile
                client.hset(f"products:{product}", "price_cents", str(price))
        finally:
            client.close()
            connection.close()

    threads = [threading.Thread(target=application, args=(seed,)) for seed in (1, 2)]
    # (a thread that fails breaks the barrier, and the other one with it)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 2 * UPDATES


def _caught_up(dsn: str, server: RedisServer) -> bool:
    """Whether the log's cache holds every price and order PostgreSQL does."""
    client = redis.Redis(port=server.port, db=1)
    try:
        orders = sum(1 for _ in client.scan_iter("orders:*"))
    finally:
        client.close()
    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM orders")
        expected = cursor.fetchall()[0][0]
    finally:
        connection.close()
    return orders == expected and _cache_prices(server, 1) == _database_prices(dsn)


def _database_prices(dsn: str) -> dict[str, str]:
    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT product_id, price_cents FROM products")
        return {product: str(price) for product, price in cursor.fetchall()}
    finally:
        connection.close()


def _cache_prices(server: RedisServer, db: int) -> dict[str, str]:
    client = redis.Redis(port=server.port, db=db, decode_responses=True)
    try:
        return {
            key.removeprefix("products:"): str(client.hget(key, "price_cents"))
            for key in client.scan_iter("products:*")
        }
    finally:
        client.close()


def _count_wrong(dsn: str, server: RedisServer) -> None:
    truth = _database_prices(dsn)
    for label, db in (("dual writes (the application)", 0), ("the log (riverbed sink)", 1)):
        cached = _cache_prices(server, db)
        wrong = sorted(p for p in truth if cached.get(p) != truth[p])
        example = (
            f"; e.g. {wrong[0]}: cache {cached.get(wrong[0])}, database {truth[wrong[0]]}"
            if wrong
            else ""
        )
        print(f"  {label}: {len(wrong)} of {len(truth)} cached prices wrong{example}")


def _verify(dsn: str, tables: str, store: str, *, timeout_s: int = 20) -> None:
    """``riverbed sink verify`` of one store (a Redis URL or a DuckDB file), as a user runs
    it, its output shown."""
    option = "--redis" if store.startswith("redis://") else "--duckdb"
    arguments = ["sink", "verify", "--dsn", dsn, "--tables", tables, option, store,
                 "--timeout-s", str(timeout_s)]  # fmt: skip
    print(f"$ riverbed {' '.join(arguments).replace(dsn, '...')}")
    result = subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", *arguments],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    for line in (result.stdout + result.stderr).strip().splitlines():
        print(f"  {line}")
    print(f"  (exit {result.returncode})")


def _search_renamed(dsn: str, index: Path) -> None:
    connection = psycopg2.connect(dsn)
    with connection, connection.cursor() as cursor:
        cursor.execute("UPDATE products SET title = 'trail running shoe' WHERE product_id = 'p3'")
    connection.close()
    _wait_until(lambda: [h.id for h in search(index, "trail")] == ["p3"], 20)
    hits = search(index, "title:running", limit=3)
    print("search 'title:running' while titles change: "
          + ", ".join(f"{h.id} {h.row['title']!r} ({h.score:.2f})" for h in hits))  # fmt: skip
    old = [h.id for h in search(index, "model AND 3")]
    print(f"search 'model AND 3' (p3's old title): {', '.join(old) or 'nothing'}")


def _analytics(dsn: str, database_file: Path) -> None:
    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(ORDERS_SQL)
        expected = [(p, int(n), int(u)) for p, n, u in cursor.fetchall()]
    finally:
        connection.close()
    with duckdb.connect(str(database_file), read_only=True) as analytics:
        found = [(p, int(n), int(u)) for p, n, u in analytics.execute(ORDERS_SQL).fetchall()]
    print(f"DuckDB: {ORDERS_SQL}")
    for product, orders, units in found[:3]:
        print(f"  {product}: {orders} orders, {units} units")
    print(f"  ... equal to the same query on PostgreSQL: {found == expected}")


def _changelogs(bootstrap: str, server: RedisServer, database_file: Path) -> None:
    """riverbed changelogs as inputs: the carts' state into Redis, a pipeline's output into
    DuckDB, each sink run until caught up."""
    url = f"redis://127.0.0.1:{server.port}/2"
    for topics, store in ((("shop.carts.state",), RedisStore(url)),
                          (("category_sales",), DuckDBStore(database_file))):  # fmt: skip
        counts = _catch_up(bootstrap, topics, store)
        print(f"{topics[0]} -> {store.name}: {counts.describe()}")
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        key = next(iter(sorted(client.scan_iter("shop.carts.state:*"))), None)
        if key is not None:
            print(f"  GET {key}: {client.get(key)!s}")
    finally:
        client.close()
    with duckdb.connect(str(database_file), read_only=True) as analytics:
        rows = analytics.execute(
            "SELECT category, orders, revenue_cents FROM category_sales "
            "ORDER BY revenue_cents DESC LIMIT 3"
        ).fetchall()
    print("  DuckDB: SELECT category, orders, revenue_cents FROM category_sales ... LIMIT 3")
    for row in rows:
        print(f"    {orjson.dumps(list(row), default=str).decode()}")


def _catch_up(bootstrap: str, topics: tuple[str, ...], store: Store) -> SinkCounts:
    """A sink of ``topics`` into ``store`` until it has applied them to their ends."""
    config = SinkConfig(bootstrap=bootstrap, topics=topics, group_id="demo-catch-up",
                        until_caught_up=True, settings={"logger": KAFKA_LOG})  # fmt: skip
    return run_sink(config, store, stopping=lambda: False, say=lambda line: None)


def _wait_until(done: Callable[[], Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: the derived stores did not catch up within {timeout_s} s")
        time.sleep(0.1)
