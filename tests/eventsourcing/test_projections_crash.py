"""``riverbed es project carts`` into a changelog topic and into PostgreSQL, both killed with
-9 again and again while ``riverbed es run carts`` turns a stream of commands into events,
and restarted: each final model is each cart's replay and what a rebuild makes, and the
changelog read read_committed holds no cart's version twice or out of order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.eventsourcing.shop.carts import TOPICS
from riverbed.testing.postgres import PostgresCluster, database
from tests.support.brokers import BrokerProcess
from tests.support.carts import check_the_log, commands, send, wait_for_answers
from tests.support.cli import ChildProcess, ok, run_riverbed
from tests.support.projections import (
    project,
    replayed,
    table_model,
    topic_model,
    topic_versions,
    wait_for_model,
)

KILLS = 4


@pytest.fixture
def dsn(postgres: PostgresCluster) -> Iterator[str]:
    with database(postgres) as url:
        yield url


def test_killed_9_mid_stream_and_restarted_each_model_equals_a_rebuild(
    group_broker: BrokerProcess, dsn: str, tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap
    processor = ChildProcess.spawn(tmp_path / "es.log", "es", "run", "carts",
                                   "--bootstrap", bootstrap)  # fmt: skip
    processor.wait_for("assigned .* partitions \\[0, 1, 2\\]")
    # One event a transaction: a runner catching up is nearly always inside one when killed
    # (a transaction left open on purpose is test_projections.py's).
    targets = (("--to", "topic"), ("--to", "postgres", "--dsn", dsn))

    def start_all() -> list[ChildProcess]:
        return [project(tmp_path, bootstrap, *t, "--max-batch", "1") for t in targets]

    projections = start_all()
    sent = commands(3_000, carts=150, seed=5)
    chunks = [sent[i : i + 100] for i in range(0, len(sent), 100)]
    sender = threading.Thread(
        target=lambda: [(send(bootstrap, TOPICS, c), time.sleep(0.2)) for c in chunks]
    )
    sender.start()
    killed: list[str] = []
    try:
        for _ in range(KILLS):
            for projection in projections:
                projection.wait_for("projecting shop.carts.events")
            time.sleep(0.6)
            for projection in projections:
                projection.process.kill()
                projection.process.wait(30)
                killed.append(projection.log())
            projections = start_all()
        sender.join(60)
        wait_for_answers(bootstrap, TOPICS, len(sent), processor.log)
        events, _ = check_the_log(bootstrap, TOPICS, sent)
        expected = replayed(events)

        def logs() -> list[str]:
            return [p.log() for p in projections]

        for projection in projections:
            projection.wait_for("caught up with shop.carts.events")

        wait_for_model(lambda: topic_model(bootstrap, "shop.carts.state"), expected, logs)
        wait_for_model(lambda: table_model(dsn, "carts"), expected, logs)
        for projection in projections:
            assert projection.stop() == 0, projection.log()
            assert "Traceback" not in projection.log()
    finally:
        for child in (*projections, processor):
            child.process.kill()
            child.process.wait(30)
    # The killed ones were folding, and their successors went on from the model they left.
    assert all("projecting shop.carts.events" in log for log in killed)
    assert sum(" 0 carts restored" not in log for log in killed) >= KILLS
    versions = topic_versions(bootstrap, "shop.carts.state")
    assert all(v == sorted(set(v)) for v in versions.values()), versions
    for target, model in (
        (("--to", "topic", "--topic", "t.carts.rebuilt"),
         lambda: topic_model(bootstrap, "t.carts.rebuilt")),
        (("--to", "postgres", "--dsn", dsn, "--table", "carts_rebuilt"),
         lambda: table_model(dsn, "carts_rebuilt")),
    ):  # fmt: skip
        ok(run_riverbed("es", "project", "carts", "--bootstrap", bootstrap, *target,
                        "--rebuild", "--until-caught-up"))  # fmt: skip
        assert model() == expected
