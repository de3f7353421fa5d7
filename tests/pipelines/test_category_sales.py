"""category_sales in a real Spark session against a real broker, checked against a
plain-Python reference computed from the final tables.

The input is made by :class:`SimulatedShop`, written here independently of the pipeline: the
two PostgreSQL tables (``public.products``, ``public.orders``) and, for every change, the
records riverbed's log-based capture writes (riverbed/cdc/changes.py and envelope.py, with
REPLICA IDENTITY DEFAULT): an initial snapshot as op ``r``; then per transaction, in commit
order, op ``c``/``u``/``d`` with ``before`` null for an update and only the key for a
delete, each delete followed by a tombstone, and a key change as a delete of the old key
(and its tombstone) and a create of the new one; ``source.lsn`` the change's WAL position,
``source.commitLsn`` the commit's, ``source.ts_ms`` the commit time. Records go to topics of
3 partitions chosen by Kafka's murmur2 of the key, as the capture does.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from riverbed.cdc.changes import SnapshotRecords
from riverbed.cdc.envelope import Source, change_event
from riverbed.cdc.preflight import TableInfo
from riverbed.testing.references import category_sales
from tests.support.brokers import BrokerProcess, create_topic
from tests.support.events import BASE
from tests.support.pipelines import PipelineProcess
from tests.support.topics import JsonRecord, changelog, keyed, read_json

ORDERS, PRODUCTS = "shop.public.orders", "shop.public.products"
KEYS = {"orders": "order_id", "products": "product_id"}
TOPICS = {"orders": ORDERS, "products": PRODUCTS}
CATEGORIES = ["books", "garden", "music", "toys", "kitchen"]
STATUSES = ["pending", "paid", "shipped", "delivered"]  # and "cancelled"
PARTITIONS = 3

Row = dict[str, Any]
Message = tuple[str, bytes, bytes | None]  # topic, key, value (None: a tombstone)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class Transaction:
    """One database transaction: its changes are applied to the tables at once (the rows it
    touches stay locked until it commits, so another transaction never touches them) and
    captured, in order, when it commits."""

    def __init__(self, shop: SimulatedShop) -> None:
        self.shop = shop
        self.xid = shop.next_xid()
        self.changes: list[tuple[str, str, Row | None, Row | None, Row, int]] = []

    def _change(self, table: str, op: str, before: Row | None, after: Row | None, key: Row) -> None:
        self.changes.append((table, op, before, after, key, self.shop.advance_wal()))

    def insert(self, table: str, row: Row) -> None:
        key = {KEYS[table]: row[KEYS[table]]}
        assert row[KEYS[table]] not in self.shop.tables[table]
        self.shop.tables[table][row[KEYS[table]]] = dict(row)
        self._change(table, "c", None, dict(row), key)

    def update(self, table: str, key_value: str, **columns: Any) -> None:
        row = self.shop.tables[table][key_value]
        row.update(columns)
        self._change(table, "u", None, dict(row), {KEYS[table]: key_value})

    def delete(self, table: str, key_value: str) -> None:
        del self.shop.tables[table][key_value]
        key = {KEYS[table]: key_value}
        self._change(table, "d", dict(key), None, key)

    def change_key(self, table: str, old: str, new: str) -> None:
        """``UPDATE ... SET pk = new``: pgoutput sends the old key, the capture a delete of
        the old key and a create of the new one."""
        row = self.shop.tables[table].pop(old)
        row[KEYS[table]] = new
        self.shop.tables[table][new] = row
        old_key, lsn = {KEYS[table]: old}, self.shop.advance_wal()
        self.changes.append((table, "d", dict(old_key), None, old_key, lsn))
        self.changes.append((table, "c", None, dict(row), {KEYS[table]: new}, lsn))

    def commit(self) -> None:
        shop = self.shop
        commit_lsn, commit_ms = shop.advance_wal(), shop.tick()
        for table, op, before, after, key, lsn in self.changes:
            source = {
                "version": "riverbed",
                "connector": "postgresql",
                "name": "shop",
                "ts_ms": commit_ms,
                "snapshot": "false",
                "db": "shop",
                "schema": "public",
                "table": table,
                "txId": self.xid,
                "lsn": lsn,
                "commitLsn": commit_lsn,
            }
            envelope = {
                "before": before,
                "after": after,
                "source": source,
                "op": op,
                "ts_ms": commit_ms + shop.rng.randrange(1, 50),
            }
            shop.pending.append((TOPICS[table], _json(key), _json(envelope)))
            if op == "d":
                shop.pending.append((TOPICS[table], _json(key), None))
        shop.commits.append(len(shop.pending))


class SimulatedShop:
    """The tables ``products`` and ``orders`` and the capture's records of their changes
    (module docstring), not yet produced in ``pending``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tables: dict[str, dict[str, Row]] = {"products": {}, "orders": {}}
        self.pending: list[Message] = []
        self.commits: list[int] = []  # the end of each transaction's records in pending
        self.wal_lsn = 0x1_6B3_7480
        self.xid = 740
        self.clock_ms = BASE
        self.next_order = 0
        self.next_product = 0

    def advance_wal(self) -> int:
        self.wal_lsn += self.rng.randrange(40, 400)
        return self.wal_lsn

    def next_xid(self) -> int:
        self.xid += 1
        return self.xid

    def tick(self) -> int:
        self.clock_ms += self.rng.randrange(1, 2_000)
        return self.clock_ms

    def snapshot(self) -> None:
        """The capture's initial snapshot of both tables (op ``r``, at the slot's consistent
        point, the last row marked ``"last"``)."""
        point, xid, now = self.advance_wal(), self.next_xid(), self.tick()
        rows = [(t, row) for t in ("products", "orders") for row in self.tables[t].values()]
        for i, (table, row) in enumerate(rows):
            source = {
                "version": "riverbed",
                "connector": "postgresql",
                "name": "shop",
                "ts_ms": now,
                "snapshot": "last" if i == len(rows) - 1 else "true",
                "db": "shop",
                "schema": "public",
                "table": table,
                "txId": xid,
                "lsn": point,
                "commitLsn": point,
            }
            envelope = {"before": None, "after": row, "source": source, "op": "r", "ts_ms": now}
            key = {KEYS[table]: row[KEYS[table]]}
            self.pending.append((TOPICS[table], _json(key), _json(envelope)))
        self.commits.append(len(self.pending))

    def take(self) -> list[Message]:
        pending, self.pending, self.commits = self.pending, [], []
        return pending

    def redeliver(self, transactions: int) -> None:
        """Capture the last ``transactions`` transactions' records again, as the capture does
        when it was killed before it could record that the broker had them."""
        if len(self.commits) > transactions:
            start = self.commits[-transactions - 1]
            self.pending.extend(self.pending[start:])

    # -- rows ------------------------------------------------------------------------------

    def new_product(self, category: str | None = None) -> Row:
        self.next_product += 1
        return {
            "product_id": f"p{self.next_product}",
            "title": f"product {self.next_product}",
            "category": category or self.rng.choice(CATEGORIES),
            "price_cents": self.rng.randrange(1, 200) * 100 + 99,
        }

    def new_order(self, product_id: str) -> Row:
        self.next_order += 1
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.clock_ms / 1000))
        return {
            "order_id": f"o{self.next_order}",
            "user_id": f"u{self.rng.randrange(50)}",
            "product_id": product_id,
            "quantity": self.rng.choice([1, 1, 1, 2, 2, 3, 5]),
            "status": "pending",
            "created_at": f"{created}.{self.rng.randrange(10**6):06d}Z",
        }

    def _pick(self, table: str, locked: set[str]) -> str | None:
        free = sorted(set(self.tables[table]) - locked)
        return self.rng.choice(free) if free else None

    def random_change(self, tx: Transaction, locked: set[str]) -> None:
        """One random change, of a row no other open transaction holds (``locked``); the
        rows it touches are added to ``locked``."""
        rng, products, orders = self.rng, self.tables["products"], self.tables["orders"]
        kind = rng.choices(
            ["place", "status", "cancel", "uncancel", "quantity", "move", "delete_order",
             "rekey_order", "price", "category", "new_product", "delete_product", "revive"],
            weights=[20, 10, 5, 4, 5, 4, 3, 1, 8, 3, 2, 2, 1],
        )[0]  # fmt: skip
        order = self._pick("orders", locked)
        product = self._pick("products", locked)
        if kind == "place" or order is None or product is None:
            ids = sorted(products) or ["p-none"]
            row = self.new_order(rng.choice(ids))
            tx.insert("orders", row)
            locked.add(row["order_id"])
            return
        locked.update((order, product))
        if kind == "status":
            tx.update("orders", order, status=rng.choice(STATUSES))
        elif kind == "cancel":
            tx.update("orders", order, status="cancelled")
        elif kind == "uncancel":
            cancelled = [o for o, r in sorted(orders.items()) if r["status"] == "cancelled"]
            cancelled = [o for o in cancelled if o not in locked or o == order]
            if cancelled:
                locked.add(chosen := rng.choice(cancelled))
                tx.update("orders", chosen, status=rng.choice(STATUSES))
        elif kind == "quantity":
            tx.update("orders", order, quantity=rng.randint(1, 9))
        elif kind == "move":  # the order now points at another product (maybe a deleted one)
            target = rng.choice([*sorted(products), f"p{self.next_product + 1}"])
            tx.update("orders", order, product_id=target)
        elif kind == "delete_order":
            tx.delete("orders", order)
        elif kind == "rekey_order":
            self.next_order += 1
            locked.add(f"o{self.next_order}")
            tx.change_key("orders", order, f"o{self.next_order}")
        elif kind == "price":
            tx.update("products", product, price_cents=rng.randrange(1, 300) * 100 + 99)
        elif kind == "category":
            tx.update("products", product, category=rng.choice(CATEGORIES))
        elif kind == "new_product":
            row = self.new_product()
            locked.add(row["product_id"])
            tx.insert("products", row)
        elif kind == "delete_product":
            tx.delete("products", product)
        elif kind == "revive":  # a deleted product's id comes back (its orders join again)
            referenced = {r["product_id"] for r in orders.values()} - set(products) - locked
            if referenced:
                row = {**self.new_product(), "product_id": min(referenced)}
                locked.add(row["product_id"])
                tx.insert("products", row)

    def run(self, transactions: int) -> None:
        """Random transactions of 1-4 changes; now and then two at once, the one begun first
        committed last (its change LSNs below the other's commit LSN)."""
        done = 0
        while done < transactions:
            if self.rng.random() < 0.2:
                first, second, locked = Transaction(self), Transaction(self), set[str]()
                for _ in range(self.rng.randint(1, 3)):
                    self.random_change(first, locked)
                    self.random_change(second, locked)
                second.commit()
                first.commit()
                done += 2
            else:
                tx, locked = Transaction(self), set[str]()
                for _ in range(self.rng.randint(1, 4)):
                    self.random_change(tx, locked)
                tx.commit()
                done += 1

    def do(self, change: Callable[[Transaction], None]) -> None:
        tx = Transaction(self)
        change(tx)
        tx.commit()


def delete_category(shop: SimulatedShop, category: str) -> None:
    """Delete every product of ``category``, one transaction each."""
    for product_id, row in sorted(shop.tables["products"].items()):
        if row["category"] == category:
            shop.do(lambda tx, p=product_id: tx.delete("products", p))


def expected_sales(tables: dict[str, dict[str, Row]]) -> dict[str, dict[str, Any]]:
    """category_sales of the final tables (riverbed.testing.references), keyed as the
    changelog is."""
    return keyed(category_sales(tables["orders"].values(), tables["products"]), "category")


def produce(bootstrap: str, messages: list[Message]) -> None:
    """In order, each to the partition Kafka's default partitioner picks (murmur2 of the key),
    as the capture does."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": "murmur2",
        }
    )
    for topic, key, value in messages:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


def wait_for(
    bootstrap: str, expected: dict[str, dict[str, Any]], timeout_s: float
) -> list[JsonRecord]:
    deadline = time.monotonic() + timeout_s
    results = read_json(bootstrap, "category_sales")
    while changelog(results) != expected and time.monotonic() < deadline:
        time.sleep(1)
        results = read_json(bootstrap, "category_sales")
    return results


def test_category_sales_follows_both_tables_across_a_kill(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    for topic in (ORDERS, PRODUCTS):
        create_topic(bootstrap, topic, partitions=PARTITIONS)
    shop = SimulatedShop(7)
    products = [shop.new_product(c) for c in CATEGORIES for _ in range(3)]
    shop.tables["products"] = {p["product_id"]: p for p in products}
    for i in range(60):
        order = shop.new_order(products[i % len(products)]["product_id"])
        shop.tables["orders"][order["order_id"]] = order
    shop.snapshot()
    shop.run(150)
    initial = expected_sales(shop.tables)
    assert json.dumps({"category": "music"}) in initial
    produce(bootstrap, shop.take())

    checkpoint = tmp_path / "checkpoint"
    pipeline = PipelineProcess.start(tmp_path, "category_sales", bootstrap, checkpoint)
    pipeline.wait_caught_up()
    assert changelog(wait_for(bootstrap, expected_sales(shop.tables), 30)) == expected_sales(
        shop.tables
    )

    # More changes and a redelivered tail; kill -9 as soon as Spark has planned the batch
    # that reads them (its offsets are logged), before it can commit it.
    shop.run(100)
    shop.redeliver(5)
    produce(bootstrap, shop.take())
    deadline = time.monotonic() + 60
    while not (checkpoint / "offsets" / "1").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pipeline.kill()

    # While the pipeline is down: more random changes, the music products go (its row must
    # end as a tombstone), and a redelivered tail.
    shop.run(150)
    delete_category(shop, "music")
    shop.redeliver(3)
    produce(bootstrap, shop.take())

    pipeline = PipelineProcess.start(tmp_path, "category_sales", bootstrap, checkpoint)
    pipeline.wait_caught_up()
    expected = expected_sales(shop.tables)
    results = wait_for(bootstrap, expected, 60)
    assert pipeline.stop() == 0, pipeline.log()

    assert json.dumps({"category": "music"}) not in expected
    assert changelog(results) == expected
    for record in results:  # exactly the contract's fields
        assert set(record.key) == {"category"}
        if record.value is not None:
            assert set(record.value) == {"category", "orders", "units", "revenue_cents"}
            assert record.value["category"] == record.key["category"]
            assert record.value["orders"] > 0
    # A row is written only when the category's totals change: the same value twice in a
    # row would be a batch written twice (across the kill).
    last: dict[str, Any] = {}
    for record in results:
        name = json.dumps(record.key, sort_keys=True)
        assert name not in last or last[name] != record.value, record
        last[name] = record.value
    music_records = [r.value for r in results if r.key == {"category": "music"}]
    assert music_records[0] is not None and music_records[-1] is None  # the tombstone


def test_the_simulated_capture_writes_riverbed_s_format() -> None:
    """The records of :class:`SimulatedShop` are byte for byte what riverbed's capture
    builds (riverbed.cdc.envelope.change_event, riverbed.cdc.changes.SnapshotRecords)."""
    shop = SimulatedShop(3)
    product = shop.new_product("books")
    shop.tables["products"][product["product_id"]] = product
    shop.snapshot()
    shop.do(lambda tx: tx.insert("orders", shop.new_order(product["product_id"])))
    shop.do(lambda tx: tx.update("orders", "o1", status="cancelled"))
    shop.do(lambda tx: tx.change_key("orders", "o1", "o9"))
    shop.do(lambda tx: tx.delete("products", product["product_id"]))
    records = shop.take()
    assert [r[2] is None for r in records] == [False] * 4 + [True, False, False, True]

    snapshot = json.loads(records[0][2] or b"")
    encoder = SnapshotRecords(
        prefix="shop",
        db="shop",
        table=TableInfo(
            schema="public", table="products", key_columns=("product_id",), replica_identity="d"
        ),
        lsn=snapshot["source"]["lsn"],
        tx_id=snapshot["source"]["txId"],
    )
    expected = encoder.record(product, last=True, now_ms=snapshot["ts_ms"])
    assert (PRODUCTS, expected.key, expected.value) == records[0]
    for topic, _, value in records[1:]:
        if value is None:
            continue
        event = json.loads(value)
        source = event["source"]
        rebuilt = change_event(
            op=event["op"],
            before=event["before"],
            after=event["after"],
            source=Source(
                name="shop",
                db="shop",
                schema="public",
                table=topic.rsplit(".", 1)[1],
                tx_id=source["txId"],
                lsn=source["lsn"],
                commit_lsn=source["commitLsn"],
                commit_ts_ms=source["ts_ms"],
            ),
            ts_ms=event["ts_ms"],
        )
        assert _json(rebuilt) == value
    ops = [(json.loads(k), v and json.loads(v)["op"]) for _, k, v in records[1:]]
    assert ops == [
        ({"order_id": "o1"}, "c"),
        ({"order_id": "o1"}, "u"),
        ({"order_id": "o1"}, "d"),
        ({"order_id": "o1"}, None),
        ({"order_id": "o9"}, "c"),
        ({"product_id": "p1"}, "d"),
        ({"product_id": "p1"}, None),
    ]
    update, delete = json.loads(records[2][2] or b""), json.loads(records[6][2] or b"")
    assert update["before"] is None  # REPLICA IDENTITY DEFAULT
    assert delete["before"] == {"product_id": "p1"}  # the key only
