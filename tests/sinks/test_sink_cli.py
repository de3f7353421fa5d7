"""``riverbed sink run`` following a CDC topic, end to end: real PostgreSQL, capture, broker,
Redis, Tantivy and DuckDB; the three sinks (DuckDB's with its two decoder processes, the
topic having 3 partitions) killed with -9 again and again while the workload runs (inserts,
updates, key changes, TOASTed values left unchanged, deletes, a column added); ``riverbed
sink verify`` says the cache agrees while the writes go on, and then that every store
agrees, and says so no longer when the cache is tampered with; stores emptied and rebuilt
with ``--from-beginning`` agree again. Bad input: one line, exit 1."""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import redis
from confluent_kafka import Consumer, TopicPartition

from riverbed.testing.postgres import PostgresCluster, database
from tests.support.brokers import BrokerProcess
from tests.support.capture import Capture
from tests.support.cli import failed, ok, run_riverbed
from tests.support.sinks import (
    PRODUCTS,
    ProductWriter,
    create_products,
    run_sink,
    start_sink,
    verify,
)


def test_the_stores_follow_cdc_through_kill_9_and_verify_agrees(
    postgres: PostgresCluster, broker_process: BrokerProcess, redis_url: str, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    stores = {
        "redis": ("--redis", redis_url),
        "search": ("--index", str(tmp_path / "index")),
        "duckdb": ("--database", str(tmp_path / "shop.duckdb")),
    }
    verify_all = ("--redis", redis_url, "--index", str(tmp_path / "index"),
                  "--duckdb", str(tmp_path / "shop.duckdb"))  # fmt: skip
    with database(postgres) as dsn:
        create_products(dsn, 200, seed=1)
        capture = Capture.start(
            tmp_path, "--dsn", dsn, "--bootstrap", bootstrap, "--prefix", "shop",
            "--tables", "public.products", "--heartbeat-ms", "200", "--partitions", "3",
        )  # fmt: skip
        try:
            capture.wait_for("streaming from slot")
            writer = ProductWriter(dsn, seed=2)
            writer.start()
            rng = random.Random(3)
            for _ in range(4):
                sinks = [start_sink(tmp_path, kind, bootstrap, *o) for kind, o in stores.items()]
                try:
                    for sink in sinks:
                        sink.wait_for("following")
                    assert "2 decoder processes" in sinks[2].log()
                    time.sleep(rng.uniform(0.3, 1.2))
                finally:
                    for sink in sinks:
                        sink.process.kill()
                        sink.process.wait(30)
            live = start_sink(tmp_path, "redis", bootstrap, *stores["redis"])
            try:  # with writes going on, verify judges what was committed before it began
                live.wait_for("following")
                during = verify(dsn, *stores["redis"], timeout_s=30)
                assert "all stores agree" in ok(during), during.stdout
            finally:
                live.process.kill()
                live.process.wait(30)
            writer.finish()
            assert writer.transactions > 40, "the column was added midway"

            cache = start_sink(tmp_path, "redis", bootstrap, *stores["redis"])
            try:
                cache.wait_for("following")
                caught_up = verify(dsn, *stores["redis"])  # the capture has sent it all too
                assert "all stores agree" in ok(caught_up), caught_up.stdout
                for kind in ("search", "duckdb"):  # DuckDB: read once its sink has stopped
                    ok(run_sink(kind, bootstrap, *stores[kind], "--until-caught-up"))
                agreed = verify(dsn, *verify_all)
                assert ok(agreed).count("0 missing, 0 extra, 0 different") == 3, agreed.stdout
                assert "all stores agree" in agreed.stdout
            finally:
                assert cache.stop() == 0, cache.log()
            assert "stopped: " in cache.log()

            client = redis.Redis.from_url(redis_url, decode_responses=True)
            try:
                tampered = sorted(client.scan_iter("products:*"))[0]
                client.hset(tampered, "title", "not what the database says")
                drifted = verify(dsn, *stores["redis"], timeout_s=2)
                assert drifted.returncode == 1, (drifted.stdout, drifted.stderr)
                assert "1 different" in drifted.stdout, drifted.stdout
                assert tampered.removeprefix("products:") in drifted.stdout
                assert "the stores do not agree" in drifted.stdout

                client.flushall()
                shutil.rmtree(tmp_path / "index")
                for name in ("shop.duckdb", "shop.duckdb.wal"):
                    (tmp_path / name).unlink(missing_ok=True)
                for kind, options in stores.items():
                    ok(run_sink(kind, bootstrap, *options, "--from-beginning",
                                "--until-caught-up"))  # fmt: skip
                assert "all stores agree" in ok(verify(dsn, *verify_all))
            finally:
                client.close()
        finally:
            capture.stop()


def test_a_changelog_is_served_from_redis_and_the_group_shows_the_sinks_position(
    broker_process: BrokerProcess, redis_url: str
) -> None:
    bootstrap = broker_process.bootstrap
    ok(run_riverbed("topics", "create", "--topic", "totals", "--partitions", "2",
                    "--config", "cleanup.policy=compact", "--bootstrap", bootstrap))  # fmt: skip
    lines = "".join(f'{{"k":{n % 5}}}|{{"k":{n % 5},"n":{n}}}\n' for n in range(20))
    ok(run_riverbed("produce", "--topic", "totals", "--key-separator", "|",
                    "--bootstrap", bootstrap, stdin=lines))  # fmt: skip
    ok(run_riverbed("sink", "run", "redis", "--topics", "totals", "--redis", redis_url,
                    "--until-caught-up", "--bootstrap", bootstrap))  # fmt: skip
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert {k: json.loads(client.get(k)) for k in client.scan_iter("totals:*")} == {
            f'totals:{{"k":{k}}}': {"k": k, "n": 15 + k} for k in range(5)
        }
    finally:
        client.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "riverbed-sink-redis"})
    try:
        wanted = [TopicPartition("totals", p) for p in range(2)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=30)}
        ends = {p: consumer.get_watermark_offsets(TopicPartition("totals", p))[1] for p in range(2)}
    finally:
        consumer.close()
    assert committed == ends and sum(ends.values()) == 20


def test_a_topic_that_is_not_a_changelog_stops_the_sink_before_anything(
    broker_process: BrokerProcess, redis_url: str
) -> None:
    bootstrap = broker_process.bootstrap
    ok(run_riverbed("topics", "create", "--topic", "page_views", "--bootstrap", bootstrap))
    result = run_riverbed("sink", "run", "redis", "--bootstrap", bootstrap, "--topics",
                          "page_views", "--redis", redis_url)  # fmt: skip
    assert failed(result).strip().splitlines() == [
        "riverbed sink: page_views is not a changelog (cleanup.policy=delete): a sink follows "
        "compacted topics, such as CDC topics and riverbed's changelogs"
    ]
    missing = run_riverbed("sink", "run", "redis", "--bootstrap", bootstrap, "--topics",
                           "nope", "--redis", redis_url)  # fmt: skip
    assert failed(missing).strip() == f"riverbed sink: no topic 'nope' at {bootstrap}"


def test_an_unreachable_redis_is_one_line_and_exit_1(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    ok(run_riverbed("topics", "create", "--topic", PRODUCTS, "--bootstrap", bootstrap,
                    "--config", "cleanup.policy=compact"))  # fmt: skip
    result = run_riverbed("sink", "run", "redis", "--bootstrap", bootstrap, "--topics",
                          PRODUCTS, "--redis", "redis://127.0.0.1:1/0")  # fmt: skip
    lines = failed(result).strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("riverbed sink: no Redis at redis://127.0.0.1:1/0: ")
