"""The demo's event-sourcing section: the shop's carts on the log.

A command processor and a projection into the compacted topic ``shop.carts.state`` run on
threads of this process (as ``riverbed es run carts`` and ``riverbed es project carts --to
topic`` would); commands go in through :class:`~riverbed.eventsourcing.sender.CommandSender`
(as ``riverbed es send``), accepted and refused; then one cart's history, its state at an
earlier version (time travel by replay), a user forgotten (the address gone from a replay
while the events stay), and the projection rebuilt from the first event, equal to the live
one.
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from riverbed.demo.console import KAFKA_LOG
from riverbed.eventsourcing.processor import CommandProcessor, ProcessorConfig
from riverbed.eventsourcing.projection_changelog import ChangelogStore
from riverbed.eventsourcing.projection_runner import Progress, ProjectionConfig, ProjectionRunner
from riverbed.eventsourcing.reader import AggregateReader
from riverbed.eventsourcing.sender import CommandSender
from riverbed.eventsourcing.shop.carts import CART_TYPE, FORMAT
from riverbed.eventsourcing.topics import ensure_topics
from riverbed.testing.topic_reader import count_to_end, last_values, read_to_end

__all__ = ["run"]

USER = "ann"
CART = "cart-ann-1"
ADDRESS = "12 Harbour Street, Portsmouth"
MANY = 1_000


def _command(type_: str, data: dict[str, Any], ts: int, **more: Any) -> dict[str, Any]:
    return {"type": type_, "cart_id": CART, "user_id": USER, "data": data, "ts": ts, **more}


COMMANDS = [
    _command("AddItem", {"product_id": "kettle", "quantity": 1}, 1_000, command_id="cmd-1"),
    _command("AddItem", {"product_id": "mug", "quantity": 4}, 2_000, expected_version=1),
    _command("AddItem", {"product_id": "teapot", "quantity": 1}, 3_000, expected_version=1),
    _command("RemoveItem", {"product_id": "spoon"}, 4_000),
    _command("AddItem", {"product_id": "kettle", "quantity": 1}, 1_000, command_id="cmd-1"),
    _command("RemoveItem", {"product_id": "kettle"}, 5_000, expected_version=2),
    _command("CheckOut", {"shipping_address": ADDRESS}, 6_000),
    _command("AddItem", {"product_id": "tray", "quantity": 1}, 7_000),
]
"""Accepted, a conflict (two clients both expecting version 1), an item not in the cart, a
client's retry of ``cmd-1``, and a command after the check-out."""

NOTES = [
    "",
    "right",
    "another client got there first",
    "no spoon in the cart",
    "cmd-1 re-sent: the same answer, no second event",
    "",
    "",
    "a checked-out cart takes nothing more",
]


def run(bootstrap: str) -> None:
    """The section (see the module docstring)."""
    stop = threading.Event()
    lines: list[str] = []
    config = ProcessorConfig(bootstrap=bootstrap, group_id="demo-carts", extra=QUIET)
    processor = CommandProcessor(config, CART_TYPE, say=lines.append)
    # The topics first (the processor would make them too, on its thread): the sender wants them.
    settings = {"bootstrap.servers": bootstrap, **QUIET}
    ensure_topics(settings, CART_TYPE.topics, partitions=config.partitions, timeout_s=30)
    thread = threading.Thread(target=processor.run, kwargs={"stopping": stop.is_set})
    thread.start()
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="demo-projection") as pool:
            try:
                _commands(bootstrap)
                live = pool.submit(_projection(bootstrap, []).run, stopping=stop.is_set)
                _many_carts(bootstrap)
                _read_back(bootstrap)
                _wait_for_all_events(bootstrap)
            finally:
                stop.set()
        _rebuilt(bootstrap, live.result())
    finally:
        stop.set()
        thread.join(60)
    print(f"command processor: {lines[-1] if lines else 'no report'}")


QUIET = {"logger": KAFKA_LOG}
STATE_TOPIC = "shop.carts.state"


def _projection(bootstrap: str, lines: list[str]) -> ProjectionRunner[Any, Any, Any]:
    store = ChangelogStore(CART_TYPE, bootstrap=bootstrap, topic=STATE_TOPIC, extra=QUIET)
    config = ProjectionConfig(bootstrap=bootstrap, extra=QUIET)
    return ProjectionRunner(config, CART_TYPE, store, say=lines.append)


def _many_carts(bootstrap: str) -> None:
    """Commands for 100 more carts (some refused), to give the projection something to do."""
    rng = random.Random(3)
    sender = CommandSender(CART_TYPE, bootstrap, extra=QUIET)
    try:
        for n in range(MANY):
            cart = f"cart-{rng.randrange(100)}"
            kind = rng.choice(["AddItem", "AddItem", "AddItem", "RemoveItem", "CheckOut"])
            data: dict[str, Any] = {"product_id": f"p{rng.randrange(5)}", "quantity": 1}
            if kind == "CheckOut":
                data = {"shipping_address": f"{n} Long Road"}
            sender.send({"type": kind, "cart_id": cart, "user_id": f"user-{cart}",
                         "data": data, "ts": 10_000 + n})  # fmt: skip
        sender.flush()
        answered = 0
        deadline = time.monotonic() + 60
        while sender.pending and time.monotonic() < deadline:
            answered += len(sender.answers(0.05))
        print(f"\n{answered:,} more commands for 100 carts answered, projected meanwhile")
    finally:
        sender.close()


def _model(bootstrap: str) -> dict[bytes | None, bytes | None]:
    return last_values((r.key, r.value) for r in read_to_end(bootstrap, STATE_TOPIC))


def _wait_for_all_events(bootstrap: str) -> None:
    """Until the live projection has folded every event (its carts' versions add up to the
    events topic's count; 30 s at most)."""
    events = count_to_end(bootstrap, CART_TYPE.topics.events)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(json.loads(v or b"{}")["version"] for v in _model(bootstrap).values()) == events:
            return
        time.sleep(0.1)


def _rebuilt(bootstrap: str, live: Progress) -> None:
    before = _model(bootstrap)
    print(f"\nprojection {STATE_TOPIC} (live, a compacted topic): {len(before)} carts from "
          f"{live.events:,} events, each batch with its position in one transaction")  # fmt: skip
    rebuilt = _projection(bootstrap, []).run(
        stopping=lambda: False, rebuild=True, until_caught_up=True
    )
    after = _model(bootstrap)
    print(f"  rebuilt from scratch (a new, empty topic, from offset 0): {len(after)} carts "
          f"from {rebuilt.events:,} events")  # fmt: skip
    print(f"  the rebuild equals the live projection: {after == before}")


def _commands(bootstrap: str) -> None:
    sender = CommandSender(CART_TYPE, bootstrap, extra=QUIET)
    try:
        print("commands for one cart, one at a time, and the processor's answers:")
        for command, note in zip(COMMANDS, NOTES, strict=True):
            sender.send(command)
            sender.flush()
            answers: list[dict[str, Any]] = []
            while not answers:
                answers = sender.answers(0.02)
            answer = answers[0]
            outcome = answer["status"] + (f" ({answer['reason']})" if "reason" in answer else "")
            expected = command.get("expected_version")
            shown = command["type"] + ("" if expected is None else f" expecting v{expected}")
            print(f"  {shown:24} -> {outcome}, v{answer['version']}"
                  + (f"   # {note}" if note else ""))  # fmt: skip
    finally:
        sender.close()


def _read_back(bootstrap: str) -> None:
    with AggregateReader(CART_TYPE, bootstrap, extra=QUIET) as reader:
        _show(reader)


def _show(reader: AggregateReader[Any, Any, Any]) -> None:
    print(f"\nhistory of {CART} (the events topic, the address decrypted with {USER}'s key):")
    for event in reader.events_of(CART):
        print(f"  v{event.version} {event.type:12} {json.dumps(event.data)}")
    now, then = reader.state_of(CART), reader.state_of(CART, at_version=2)
    print(f"state now:          {json.dumps(CART_TYPE.document(now))}")
    print(f"state at version 2: {json.dumps(CART_TYPE.document(then))}   (time travel)")
    print(f"\nforget {USER}: {reader.forget(USER)} key deleted (a tombstone in shop.keys)")
    replayed = reader.events_of(CART)
    checked_out = replayed[-1]
    raw = FORMAT.document(checked_out)
    print(
        f"  a replay now reads: v{checked_out.version} {checked_out.type} {json.dumps(raw['data'])}"
    )
    gone = checked_out.data.get("shipping_address") is None
    kept = [e.version for e in replayed] == list(range(1, now.version + 1))
    print(f"  address gone from every read: {gone}; the events all still there: {kept}")
