"""``riverbed es project carts`` against a real broker, ``riverbed es run carts`` and a real
PostgreSQL: the live models (a changelog topic, a table) are each cart's replay, and a
rebuild gives the same; restarted, a projection goes on from its position; a rebuild in
place makes the model anew; what it says when it cannot start."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from riverbed.broker import Broker
from riverbed.eventsourcing import Event
from riverbed.eventsourcing.shop.carts import FORMAT, TOPICS
from riverbed.testing.postgres import PostgresCluster, database
from riverbed.testing.topic_reader import READ_UNCOMMITTED, read_to_end
from tests.support.brokers import GROUPS_FAST, running_broker
from tests.support.carts import commands, send, wait_for_answers
from tests.support.cli import ChildProcess, failed, ok, run_riverbed
from tests.support.ports import free_port
from tests.support.projections import (
    project,
    replayed,
    table_model,
    topic_model,
    topic_versions,
    wait_for_model,
)

LIVE_TOPIC = "shop.carts.state"
LIVE_TABLE = "carts"


@dataclass
class Shop:
    bootstrap: str
    dsn: str
    tmp_path: Path
    live: list[ChildProcess]
    """The projections into LIVE_TOPIC and LIVE_TABLE, started before the first command."""
    sent: int = 0

    def events(self) -> list[Event]:
        return [FORMAT.decode_event(r.value) for r in read_to_end(self.bootstrap, TOPICS.events)]

    def logs(self) -> list[str]:
        return [p.log() for p in self.live]

    def run(self, *args: str) -> str:
        """``riverbed es project carts ... --until-caught-up`` to its end: its stderr."""
        result = run_riverbed(
            "es", "project", "carts", "--bootstrap", self.bootstrap, *args, "--until-caught-up"
        )
        ok(result)
        return result.stderr

    def command(self, count: int, seed: int) -> None:
        """``count`` more commands (ids of their own), once all are answered."""
        sent = commands(count, carts=60, seed=seed)
        for document in sent:
            document["command_id"] += f"-{seed}"
        send(self.bootstrap, TOPICS, sent)
        self.sent += count
        wait_for_answers(self.bootstrap, TOPICS, self.sent, self.logs)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresCluster) -> Iterator[Shop]:
    tmp_path = tmp_path_factory.mktemp("projections")
    with database(postgres) as dsn:
        for broker in running_broker(tmp_path, *GROUPS_FAST):
            bootstrap = broker.bootstrap
            processor = ChildProcess.spawn(tmp_path / "es.log", "es", "run", "carts",
                                           "--bootstrap", bootstrap)  # fmt: skip
            live: list[ChildProcess] = []
            try:
                processor.wait_for("assigned .* partitions \\[0, 1, 2\\]")  # topics made
                live += [
                    project(tmp_path, bootstrap, "--to", "topic"),
                    project(tmp_path, bootstrap, "--to", "postgres", "--dsn", dsn),
                ]
                for projection in live:
                    projection.wait_for("projecting shop.carts.events")
                shop = Shop(bootstrap=bootstrap, dsn=dsn, tmp_path=tmp_path, live=live)
                for seed in range(3):  # three rounds, each folded live before the next
                    shop.command(400, seed=seed)
                    expected = replayed(shop.events())
                    wait_for_model(partial(topic_model, bootstrap, LIVE_TOPIC), expected, shop.logs)
                    wait_for_model(partial(table_model, dsn, LIVE_TABLE), expected, shop.logs)
                yield shop
                for projection in live:
                    assert projection.stop() == 0, projection.log()
                    assert "Traceback" not in projection.log()
                assert processor.stop() == 0, processor.log()
            finally:
                for child in (processor, *live):
                    child.process.kill()
                    child.process.wait(30)


def cleanup_policy(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return str(admin.describe_configs([resource])[resource].result(30)["cleanup.policy"].value)


def test_the_live_changelog_is_each_carts_replay_and_a_rebuild_gives_the_same(
    shop: Shop,
) -> None:
    expected = replayed(shop.events())
    assert len(expected) > 50
    wait_for_model(lambda: topic_model(shop.bootstrap, LIVE_TOPIC), expected, shop.logs)
    versions = topic_versions(shop.bootstrap, LIVE_TOPIC)
    assert all(v == sorted(set(v)) for v in versions.values()), versions  # only increasing
    assert max(len(v) for v in versions.values()) > 1  # folded batch by batch, live
    said = shop.run("--to", "topic", "--topic", "t.carts.rebuilt", "--rebuild")
    assert "cleared topic t.carts.rebuilt" in said
    assert topic_model(shop.bootstrap, "t.carts.rebuilt") == expected
    for topic in (LIVE_TOPIC, "t.carts.rebuilt"):  # made by the projection, compacted
        assert cleanup_policy(shop.bootstrap, topic) == "compact"


def test_the_live_table_is_each_carts_replay_and_a_rebuild_gives_the_same(shop: Shop) -> None:
    events = read_to_end(shop.bootstrap, TOPICS.events)
    expected = replayed([FORMAT.decode_event(r.value) for r in events])
    wait_for_model(lambda: table_model(shop.dsn, LIVE_TABLE), expected, shop.logs)
    with psycopg2.connect(shop.dsn) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT partition, next_offset FROM riverbed_projection_positions "
            "WHERE projection = 'carts' AND topic = 'shop.carts.events'"
        )
        positions = dict(cursor.fetchall())
    assert positions == {p: max(r.offset for r in events if r.partition == p) + 1
                         for p in range(3)}  # fmt: skip
    shop.run("--to", "postgres", "--dsn", shop.dsn, "--table", "carts_rebuilt", "--rebuild")
    assert table_model(shop.dsn, "carts_rebuilt") == expected


def test_restarted_a_projection_folds_only_the_events_after_its_position(shop: Shop) -> None:
    topic = ("--to", "topic", "--topic", "t.carts.restarted")
    table = ("--to", "postgres", "--dsn", shop.dsn, "--table", "carts_restarted")
    for args in (topic, table):
        shop.run(*args)
    before = len(shop.events())
    shop.command(150, seed=10)
    events = shop.events()
    new = len(events) - before
    assert new > 0
    for args in (topic, table):
        said = shop.run(*args)
        assert f"{len(replayed(events[:before]))} carts restored" in said, said
        assert f"caught up with shop.carts.events: {new} events folded" in said, said
    expected = replayed(events)
    assert topic_model(shop.bootstrap, "t.carts.restarted") == expected
    assert table_model(shop.dsn, "carts_restarted") == expected


def test_a_rebuild_in_place_makes_the_model_anew(shop: Shop) -> None:
    """The model holds a cart no event makes (written by hand): a rebuild drops it."""
    shop.run("--to", "postgres", "--dsn", shop.dsn, "--table", "carts_anew")
    with psycopg2.connect(shop.dsn) as connection, connection.cursor() as cursor:
        cursor.execute("INSERT INTO carts_anew VALUES ('stray', 'u', 1, '{}', false)")
    said = shop.run("--to", "postgres", "--dsn", shop.dsn, "--table", "carts_anew", "--rebuild")
    assert "cleared table carts_anew" in said
    expected = replayed(shop.events())
    assert table_model(shop.dsn, "carts_anew") == expected
    shop.run("--to", "topic", "--topic", "t.carts.anew")
    said = shop.run("--to", "topic", "--topic", "t.carts.anew", "--rebuild")
    assert f"{len(expected)} carts" in said.splitlines()[-1]
    versions = topic_versions(shop.bootstrap, "t.carts.anew")
    assert {cart: v[-1] for cart, v in versions.items()} == {
        cart: d["version"] for cart, d in expected.items()
    }
    assert all(len(v) == 1 for v in versions.values())  # the old records went with the topic
    assert cleanup_policy(shop.bootstrap, "t.carts.anew") == "compact"


def test_a_second_runner_of_a_table_waits_for_the_first_then_says_so(shop: Shop) -> None:
    result = run_riverbed(
        "es", "project", "carts", "--bootstrap", shop.bootstrap, "--to", "postgres",
        "--dsn", shop.dsn, "--connect-timeout-ms", "1000",
    )  # fmt: skip
    assert "another runner holds the projection into carts" in failed(result)


def test_what_it_says_when_it_cannot_start(shop: Shop, tmp_path: Path) -> None:
    project_ = ("es", "project", "carts")
    nobody = f"127.0.0.1:{free_port()}"
    no_broker = run_riverbed(*project_, "--bootstrap", nobody, "--to", "topic",
                             "--connect-timeout-ms", "1000")  # fmt: skip
    assert f"riverbed es: no broker at {nobody}" in failed(no_broker)
    at = ("--bootstrap", shop.bootstrap, "--to", "postgres")
    bad_dsn = run_riverbed(*project_, *at, "--dsn", "nonsense=1")
    assert "invalid DSN: invalid connection option" in failed(bad_dsn)
    no_database = run_riverbed(*project_, *at, "--dsn", "postgresql://postgres@127.0.0.1:1/x")
    assert "cannot connect to the database" in failed(no_database)
    assert "--to postgres needs --dsn" in failed(run_riverbed(*project_, *at), code=2)
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as empty:
        bootstrap = empty.bootstrap_servers
        no_topic = run_riverbed(*project_, "--bootstrap", bootstrap, "--to", "topic")
        assert f"no topic shop.carts.events at {bootstrap}" in failed(no_topic)


def test_a_predecessors_open_transaction_is_aborted_and_never_seen(shop: Shop) -> None:
    """A runner killed mid-transaction, made on purpose: a transaction of the model's
    transactional id holding a wrong state and a rewound position, left open. The next
    runner aborts it before it reads anything: neither is ever seen read_committed."""
    topic = "t.carts.zombie"
    shop.run("--to", "topic", "--topic", topic)
    group = f"riverbed-es-project-{topic}"
    zombie = Producer({"bootstrap.servers": shop.bootstrap, "transactional.id": group})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    wrong = {"cart_id": "cart-1", "user_id": "x", "version": 999, "items": {}, "checked_out": True}
    zombie.produce(topic, key=FORMAT.key("cart-1"), value=json.dumps(wrong))
    metadata = Consumer({"bootstrap.servers": shop.bootstrap, "group.id": group})
    rewound = [TopicPartition(TOPICS.events, p, 0) for p in range(3)]
    zombie.send_offsets_to_transaction(rewound, metadata.consumer_group_metadata(), 30)
    assert zombie.flush(30) == 0
    metadata.close()
    said = shop.run("--to", "topic", "--topic", topic)  # while the zombie's transaction is open
    assert "caught up with shop.carts.events: 0 events folded" in said, said
    expected = replayed(shop.events())
    assert topic_model(shop.bootstrap, topic) == expected
    everything = read_to_end(shop.bootstrap, topic, isolation=READ_UNCOMMITTED)
    assert json.dumps(wrong).encode() in {r.value for r in everything}  # written, aborted
