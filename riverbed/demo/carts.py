"""The demo's event-sourcing section: the shop's carts on the log.

A command processor runs on a thread of this process (as ``riverbed es run carts`` would);
commands go in through :class:`~riverbed.eventsourcing.sender.CommandSender` (as ``riverbed
es send``), accepted and refused; then one cart's history, its state at an earlier version
(time travel by replay), and a user forgotten: the address gone from a replay while the
events stay.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from riverbed.demo.console import KAFKA_LOG
from riverbed.eventsourcing.processor import CommandProcessor, ProcessorConfig
from riverbed.eventsourcing.reader import AggregateReader
from riverbed.eventsourcing.sender import CommandSender
from riverbed.eventsourcing.shop.carts import CART_TYPE, FORMAT

__all__ = ["run"]

USER = "ann"
CART = "cart-ann-1"
ADDRESS = "12 Harbour Street, Portsmouth"


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
    config = ProcessorConfig(
        bootstrap=bootstrap, group_id="demo-carts", extra={"logger": KAFKA_LOG}
    )
    processor = CommandProcessor(config, CART_TYPE, say=lines.append)
    thread = threading.Thread(target=processor.run, kwargs={"stopping": stop.is_set})
    thread.start()
    try:
        _commands(bootstrap)
        _read_back(bootstrap)
    finally:
        stop.set()
        thread.join(60)
    print(f"command processor: {lines[-1] if lines else 'no report'}")


def _commands(bootstrap: str) -> None:
    sender = CommandSender(CART_TYPE, bootstrap, extra={"logger": KAFKA_LOG})
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
    reader = AggregateReader(CART_TYPE, bootstrap, extra={"logger": KAFKA_LOG})
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
