"""The command processor against a real broker: two instances sharing the commands topic,
a stream of conflicting commands for the same carts, a rebalance mid-stream."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from riverbed.eventsourcing.processor import CommandProcessor, ProcessorConfig, Topics
from riverbed.eventsourcing.shop.carts import CARTS, FORMAT, PERSONAL_FIELDS, TYPES
from riverbed.testing.topic_reader import read_to_end
from tests.support.brokers import BrokerProcess

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
            TOPICS, decider=CARTS, types=TYPES, format=FORMAT, personal=PERSONAL_FIELDS,
            say=self.lines.append,
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


def commands(count: int, carts: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    sent = []
    for n in range(count):
        cart = f"cart-{rng.randrange(carts)}"
        kind = rng.choices(["AddItem", "RemoveItem", "CheckOut"], weights=[10, 4, 1])[0]
        data: dict[str, Any] = {"product_id": f"p{rng.randrange(4)}", "quantity": 1}
        if kind == "CheckOut":
            data = {"shipping_address": f"{n} Long Road"}
        sent.append({
            "command_id": f"cmd-{n}", "type": kind, "cart_id": cart,
            "user_id": f"user-{cart}", "data": data, "ts": n,
            # a guess at the version: often right, often stale (conflicting writers)
            "expected_version": rng.choice([None, None, rng.randrange(4)]),
        })  # fmt: skip
    return sent


def send(bootstrap: str, documents: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for document in documents:
        producer.produce(
            TOPICS.commands, key=FORMAT.key(document["cart_id"]), value=json.dumps(document)
        )
    assert producer.flush(30) == 0


def test_two_processors_keep_versions_dense_and_answer_each_command_once(
    group_broker: BrokerProcess, processors: list[Running]
) -> None:
    bootstrap = group_broker.bootstrap
    sent = commands(1_500, carts=100, seed=7)
    processors.append(Running(bootstrap, "a"))
    wait_for_assignment(processors[0])
    send(bootstrap, sent[:700])
    processors.append(Running(bootstrap, "b"))  # a rebalance mid-stream
    wait_for_assignment(processors[1])
    send(bootstrap, sent[700:] + sent[:50])  # and 50 commands sent again
    deadline = time.monotonic() + 120
    while True:
        answered = read_to_end(bootstrap, TOPICS.results)
        if len({json.loads(m.key or b"{}")["command_id"] for m in answered}) == len(sent):
            break
        assert time.monotonic() < deadline, [p.lines for p in processors]
        time.sleep(0.5)
    for processor in processors:
        processor.finish()
    assert all(p.processor.counts.accepted > 0 for p in processors), [  # both took part
        (p.processor.counts, p.lines) for p in processors
    ]
    assert sum(p.processor.counts.duplicates for p in processors) >= 50
    events = [FORMAT.decode_event(m.value) for m in read_to_end(bootstrap, TOPICS.events)]
    results = [FORMAT.decode_result(m.value) for m in read_to_end(bootstrap, TOPICS.results)]
    versions: dict[str, list[int]] = defaultdict(list)
    for event in events:
        versions[event.aggregate_id].append(event.version)
    assert all(v == list(range(1, len(v) + 1)) for v in versions.values()), versions
    by_command = Counter(event.command_id for event in events)
    assert max(by_command.values()) == 1  # no command decided twice
    first: dict[str, Any] = {}
    for result in results:  # a re-sent command gets the same answer
        assert first.setdefault(result.command_id, result) == result
    accepted = {c for c, r in first.items() if r.accepted}
    assert accepted == set(by_command)  # every accepted command has its event, and only they
    assert {r.reason for r in first.values() if not r.accepted} >= {"version_conflict"}
    assert 0 < len(accepted) < len(sent)
    checked_out = [e for e in events if e.type == "CheckedOut"]
    assert checked_out and all("Long Road" not in json.dumps(e.data) for e in checked_out)
