"""The command processor against a real broker: two instances sharing the commands topic,
a stream of conflicting commands for the same carts, a rebalance mid-stream."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator

import pytest

from riverbed.eventsourcing.processor import CommandProcessor, ProcessorConfig
from riverbed.eventsourcing.shop.carts import CART_TYPE
from riverbed.eventsourcing.topics import Topics
from tests.support.brokers import BrokerProcess
from tests.support.carts import check_the_log, commands, send, wait_for_answers

TOPICS = Topics(
    commands="t.carts.commands", events="t.carts.events", results="t.carts.results",
    snapshots="t.carts.snapshots", keys="t.keys",
)  # fmt: skip


class Running:
    """A processor in a thread of this process."""

    def __init__(self, bootstrap: str, instance: str) -> None:
        self.stop = threading.Event()
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self.processor = CommandProcessor(
            ProcessorConfig(bootstrap=bootstrap, group_id="carts", instance_id=instance),
            dataclasses.replace(CART_TYPE, topics=TOPICS), say=self.lines.append,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.processor.run(stopping=self.stop.is_set)
        except BaseException as e:  # reported by finish()
            self.error = e

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, (self.error, self.lines)


@pytest.fixture
def processors(group_broker: BrokerProcess) -> Iterator[list[Running]]:
    running: list[Running] = []
    yield running
    for processor in running:
        processor.stop.set()
    for processor in running:
        processor.thread.join(60)


def wait_for_assignment(running: Running) -> None:
    deadline = time.monotonic() + 60
    while not any(line.startswith("assigned") and "[]" not in line for line in running.lines):
        assert time.monotonic() < deadline, running.lines
        time.sleep(0.05)


def test_two_processors_keep_versions_dense_and_answer_each_command_once(
    group_broker: BrokerProcess, processors: list[Running]
) -> None:
    bootstrap = group_broker.bootstrap
    sent = commands(1_500, carts=100, seed=7)
    processors.append(Running(bootstrap, "a"))
    wait_for_assignment(processors[0])
    send(bootstrap, TOPICS, sent[:700])
    processors.append(Running(bootstrap, "b"))  # a rebalance mid-stream
    wait_for_assignment(processors[1])
    send(bootstrap, TOPICS, sent[700:] + sent[:50])  # and 50 commands sent again
    wait_for_answers(bootstrap, TOPICS, len(sent), lambda: [p.lines for p in processors])
    for processor in processors:
        processor.finish()
    assert all(p.processor.counts.accepted > 0 for p in processors), [  # both took part
        (p.processor.counts, p.lines) for p in processors
    ]
    assert sum(p.processor.counts.duplicates for p in processors) >= 50
    events, _ = check_the_log(bootstrap, TOPICS, sent)
    checked_out = [e for e in events if e.type == "CheckedOut"]
    assert checked_out and all("Long Road" not in json.dumps(e.data) for e in checked_out)
