"""The carts' command processor under test: a stream of conflicting commands, sending them
as Kafka's Java clients partition, waiting for every answer, and the contract's checks."""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from riverbed.eventsourcing import Event, Result
from riverbed.eventsourcing.shop.carts import FORMAT
from riverbed.eventsourcing.topics import Topics
from riverbed.testing.topic_reader import read_to_end


def commands(count: int, carts: int, seed: int) -> list[dict[str, Any]]:
    """Commands for ``carts`` carts, with stale ``expected_version`` guesses among them."""
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


def send(bootstrap: str, topics: Topics, documents: list[dict[str, Any]]) -> None:
    """Produce ``documents`` to the commands topic, partitioned by murmur2 of the key."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for document in documents:
        producer.produce(
            topics.commands, key=FORMAT.key(document["cart_id"]), value=json.dumps(document)
        )
    assert producer.flush(30) == 0


def wait_for_answers(
    bootstrap: str, topics: Topics, count: int, why: Callable[[], Any], timeout_s: float = 120
) -> None:
    """Until ``count`` distinct command ids have a result (``why()`` explains a timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answered = read_to_end(bootstrap, topics.results)
        if len({json.loads(m.key or b"{}")["command_id"] for m in answered}) >= count:
            return
        assert time.monotonic() < deadline, why()
        time.sleep(0.5)


def check_the_log(
    bootstrap: str, topics: Topics, sent: list[dict[str, Any]]
) -> tuple[list[Event], dict[str, Result]]:
    """The contract's guarantees over the events and results topics: per cart, versions
    1, 2, 3 ... in log order; no command decided twice; every command answered, a re-sent
    one the same way; exactly the accepted commands have events. The events, and each
    command's result."""
    events = [FORMAT.decode_event(m.value) for m in read_to_end(bootstrap, topics.events)]
    results = [FORMAT.decode_result(m.value) for m in read_to_end(bootstrap, topics.results)]
    versions: dict[str, list[int]] = defaultdict(list)
    for event in events:
        versions[event.aggregate_id].append(event.version)
    assert all(v == list(range(1, len(v) + 1)) for v in versions.values()), versions
    by_command = Counter(event.command_id for event in events)
    assert max(by_command.values()) == 1, by_command.most_common(3)  # none decided twice
    first: dict[str, Result] = {}
    for result in results:  # a re-sent command gets the same answer
        assert first.setdefault(result.command_id, result) == result
    assert set(first) == {d["command_id"] for d in sent}  # every command answered
    accepted = {c for c, r in first.items() if r.accepted}
    assert accepted == set(by_command)  # the accepted commands have events, only they
    assert {r.reason for r in first.values() if not r.accepted} >= {"version_conflict"}
    assert 0 < len(accepted) < len(sent)
    return events, first
