"""``riverbed es send|state|history|forget`` against a real broker and ``riverbed es run``:
results as they arrive, time travel (with and without snapshots), the audit trail, and a
forgotten user's address gone from every read while the events stay."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.eventsourcing.reader import AggregateReader
from riverbed.eventsourcing.shop.carts import CART_TYPE, TOPICS
from riverbed.testing.topic_reader import read_to_end
from tests.support.brokers import GROUPS_FAST, BrokerProcess, running_broker
from tests.support.cli import ChildProcess, failed, ok, run_riverbed

SNAPSHOT_EVERY = 4


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker and ``riverbed es run carts`` (a snapshot every 4 events of a cart)."""
    tmp_path = tmp_path_factory.mktemp("es")
    for broker in running_broker(tmp_path, *GROUPS_FAST):
        processor = ChildProcess.spawn(
            tmp_path / "es.log", "es", "run", "carts", "--bootstrap", broker.bootstrap,
            "--snapshot-every", str(SNAPSHOT_EVERY),
        )  # fmt: skip
        try:
            processor.wait_for("assigned .* partitions \\[0, 1, 2\\]")
            yield broker.bootstrap
            assert processor.stop() == 0, processor.log()
            assert "Traceback" not in processor.log()
        finally:
            processor.process.kill()


def es(bootstrap: str, *args: str, stdin: str | None = None) -> Any:
    return run_riverbed("es", *args, "--bootstrap", bootstrap, stdin=stdin)


def lines(*commands: dict[str, Any] | str) -> str:
    return "".join((c if isinstance(c, str) else json.dumps(c)) + "\n" for c in commands)


def add(cart: str, product: str, ts: int, **more: Any) -> dict[str, Any]:
    data = {"product_id": product, "quantity": 1}
    return {"type": "AddItem", "cart_id": cart, "user_id": "ann", "data": data, "ts": ts, **more}


def test_send_prints_each_result_and_reports_lines_that_are_not_commands(
    bootstrap: str,
) -> None:
    result = es(
        bootstrap, "send", "carts",
        stdin=lines(
            add("s-1", "p1", 1_000, command_id="first"),
            "this is not JSON",
            add("s-1", "p2", 2_000, expected_version=0),  # stale: the cart is at 1
            {"type": "AddItem", "user_id": "ann"},  # names no cart
            {"type": "RemoveItem", "cart_id": "s-1", "data": {"product_id": "p9"}},
            add("s-1", "p1", 1_000, command_id="first"),  # a client's retry
        ),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # two lines were not commands
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(a["status"], a["version"], a.get("reason")) for a in answers] == [
        ("accepted", 1, None),
        ("rejected", 1, "version_conflict"),
        ("rejected", 1, "no_such_item"),
        ("accepted", 1, None),  # the retry: the same answer, no second event
    ]
    assert answers[0] == answers[3] and answers[0]["command_id"] == "first"
    assert "line 2: not JSON" in result.stderr
    assert "line 4: 'cart_id' must be a non-empty string" in result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(ok(es(bootstrap, "state", "carts", "s-1")))["version"] == 1


def test_time_travel_by_version_and_by_time_with_and_without_snapshots(bootstrap: str) -> None:
    products = [f"p{n % 3}" for n in range(10)]
    commands = [add("tt-1", p, 1_000 * (n + 1)) for n, p in enumerate(products)]
    commands += [
        {"type": "RemoveItem", "cart_id": "tt-1", "data": {"product_id": "p0"}, "ts": 11_000}
    ]
    ok(es(bootstrap, "send", "carts", stdin=lines(*commands)))

    def state(*args: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(ok(es(bootstrap, "state", "carts", "tt-1", *args)))
        return document

    now = state()
    assert now == {"cart_id": "tt-1", "user_id": "ann", "version": 11,
                   "items": {"p1": 3, "p2": 3}, "checked_out": False}  # fmt: skip
    assert state("--no-snapshots") == now
    after_5 = {"p0": 2, "p1": 2, "p2": 1}
    assert state("--at-version", "5")["items"] == after_5
    assert state("--at-version", "5", "--no-snapshots")["items"] == after_5
    assert state("--at-version", "9")["items"] == {"p0": 3, "p1": 3, "p2": 3}
    assert state("--at-time", "5000") == state("--at-version", "5")
    assert state("--at-time", "1970-01-01T00:00:05.999Z")["version"] == 5
    assert state("--at-time", "999")["version"] == 0
    assert "tt-1 has 11 events, not 12" in failed(es(bootstrap, "state", "carts", "tt-1",
                                                     "--at-version", "12"))  # fmt: skip
    assert json.loads(ok(es(bootstrap, "state", "carts", "no-such-cart"))) == {
        "cart_id": "no-such-cart", "user_id": None, "version": 0, "items": {},
        "checked_out": False,
    }  # fmt: skip
    # The processor wrote a snapshot (4 events or more), with its last event's offset;
    # a reader starting from one gets what a full replay gets, at every version after it.
    reader = AggregateReader(CART_TYPE, bootstrap)
    snapshot = reader.snapshot_of("tt-1")
    assert snapshot is not None and snapshot.aggregate.version >= SNAPSHOT_EVERY
    partition = reader.partition_of("tt-1")
    at_offset = [m for m in read_to_end(bootstrap, TOPICS.events)
                 if m.partition == partition and m.offset == snapshot.offset]  # fmt: skip
    assert json.loads(at_offset[0].value or b"")["version"] == snapshot.aggregate.version
    for version in range(snapshot.aggregate.version, 12):
        assert reader.state_of("tt-1", at_version=version) == reader.state_of(
            "tt-1", at_version=version, snapshots=False
        )
    reader.close()


def test_history_is_the_audit_trail_and_forget_leaves_the_events_without_the_address(
    bootstrap: str,
) -> None:
    address = "7 Quiet Lane"
    ok(es(bootstrap, "send", "carts", stdin=lines(
        add("h-1", "p1", 1_000, user_id="bob"),
        {"type": "CheckOut", "cart_id": "h-1", "user_id": "bob", "ts": 2_000,
         "data": {"shipping_address": address}},
    )))  # fmt: skip
    history = [
        json.loads(line) for line in ok(es(bootstrap, "history", "carts", "h-1")).splitlines()
    ]
    assert [(e["version"], e["type"]) for e in history] == [(1, "ItemAdded"), (2, "CheckedOut")]
    assert history[1]["data"] == {"shipping_address": address}
    raw = [m.value or b"" for m in read_to_end(bootstrap, TOPICS.events)]
    assert not any(address.encode() in value for value in raw)  # sealed in the log
    assert json.loads(ok(es(bootstrap, "forget", "bob"))) == {"user_id": "bob", "keys_deleted": 1}
    after = [json.loads(line) for line in ok(es(bootstrap, "history", "carts", "h-1")).splitlines()]
    assert after[1]["data"] == {"shipping_address": None}
    assert [{**e, "data": None} for e in after] == [{**e, "data": None} for e in history]
    assert json.loads(ok(es(bootstrap, "state", "carts", "h-1")))["checked_out"] is True
    assert json.loads(ok(es(bootstrap, "forget", "bob")))["keys_deleted"] == 0


def test_without_a_broker_or_its_topics_the_commands_say_so(bootstrap: str, tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{unused.getsockname()[1]}"
    for args in (("state", "carts", "c"), ("history", "carts", "c"), ("forget", "u")):
        message = failed(run_riverbed("es", *args, "--bootstrap", nowhere,
                                      "--connect-timeout-ms", "1500"))  # fmt: skip
        assert nowhere in message and "Traceback" not in message
    sent = run_riverbed("es", "send", "carts", "--bootstrap", nowhere,
                        "--connect-timeout-ms", "1500", stdin="{}\n")  # fmt: skip
    assert f"no broker at {nowhere}" in failed(sent)
    for broker in running_broker(tmp_path):  # a broker where no processor ran
        empty: BrokerProcess = broker
        sent = run_riverbed("es", "send", "carts", "--bootstrap", empty.bootstrap, stdin="{}\n")
        assert "start the command processor (riverbed es run carts) first" in failed(sent)
        for args in (("state", "carts", "c"), ("history", "carts", "c"), ("forget", "u")):
            read = run_riverbed("es", *args, "--bootstrap", empty.bootstrap)
            assert "has a command processor for carts run there?" in failed(read)
        listed = ok(run_riverbed("topics", "list", "--bootstrap", empty.bootstrap))
        assert "shop." not in listed  # reading created no topic
