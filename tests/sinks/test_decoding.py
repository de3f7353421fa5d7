"""The sink reading and decoding in processes of its own (``decoders`` > 1): every change
applied once, in order per key, and the positions told to the group, whichever store (one
that stages where the batch is decoded, DuckDB, and one that takes the changes, which get
sent); a record that is not a change refused from a decoder as in the sink's own process; a
decoder killed with -9 stopping the sink with one clear line; the decoders ending with a
sink killed with -9."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.sinks.changes import NotAChangelog, SinkError
from riverbed.sinks.decoding import Decoder, share
from riverbed.sinks.duckdb_store import DuckDBStore
from riverbed.sinks.runner import SinkConfig, run_sink
from riverbed.sinks.store import ChangeList
from tests.support.brokers import BrokerProcess, start_broker_process
from tests.support.cli import ChildProcess
from tests.support.sinks import Recording

TOPIC = "shop.totals"
PARTITIONS = 3
KEYS = 40
RECORDS = 400


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker_process(tmp_path_factory.mktemp("broker")) as running:
        yield running


@pytest.fixture(scope="module")
def topic(module_broker: BrokerProcess) -> dict[int, dict[str, Any] | None]:
    """A changelog of :data:`RECORDS` changes to :data:`KEYS` keys over 3 partitions, a key
    always in the same one, some removed by a tombstone; the last value per key."""
    bootstrap = module_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(TOPIC, num_partitions=PARTITIONS, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    last: dict[int, dict[str, Any] | None] = {}
    for n in range(RECORDS):
        k = n * 7 % KEYS
        value = None if n % 11 == 0 else {"n": n, "text": f"v{n}", "price": f"{n}.25"}
        last[k] = value
        producer.produce(TOPIC, None if value is None else orjson.dumps(value),
                         orjson.dumps({"k": k}), partition=k % PARTITIONS)  # fmt: skip
    assert producer.flush(30) == 0
    return last


def config(bootstrap: str, **options: Any) -> SinkConfig:
    return SinkConfig(bootstrap=bootstrap, topics=(TOPIC,), group_id="g", max_batch=25,
                      **{"until_caught_up": True, **options})  # fmt: skip


def decoders_running() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children(recursive=True)
        if "riverbed.sinks.decoding" in " ".join(child.cmdline())
    ]


def test_the_partitions_are_shared_round_robin_none_left_empty() -> None:
    start = {("t", p): 10 * p for p in range(5)}
    assert share(start, 2) == [
        {("t", 0): 0, ("t", 2): 20, ("t", 4): 40},
        {("t", 1): 10, ("t", 3): 30},
    ]
    assert share(start, 9) == [{("t", p): 10 * p} for p in range(5)]
    assert share({("t", 0): 0}, 3) == [{("t", 0): 0}]


def test_a_decoder_without_a_broker_is_one_line() -> None:
    unreachable = SinkConfig(bootstrap="127.0.0.1:1", topics=(TOPIC,), group_id="g",
                             timeout_s=1)  # fmt: skip
    with pytest.raises(SinkError, match=r"^no broker at 127\.0\.0\.1:1: "):
        Decoder(unreachable, {(TOPIC, 0): 0}, ChangeList())


def test_decoder_processes_give_a_store_every_change_once(
    module_broker: BrokerProcess, topic: dict[int, dict[str, Any] | None]
) -> None:
    said: list[str] = []
    store = Recording()
    counts = run_sink(config(module_broker.bootstrap, decoders=2), store,
                      stopping=lambda: False, say=said.append)  # fmt: skip
    assert "2 decoder processes" in said[0]
    assert counts.changes == RECORDS == len(store.applied)
    assert sorted(c.row["n"] for c in store.applied if c.row) == [
        n for n in range(RECORDS) if n % 11
    ]
    written: dict[str, list[int]] = {}
    for n in range(RECORDS):
        written.setdefault(orjson.dumps({"k": n * 7 % KEYS}).decode(), []).append(
            n if n % 11 else -1
        )
    applied: dict[str, list[int]] = {}
    for change in store.applied:  # each key's changes in the order they were written
        applied.setdefault(change.row_id, []).append(change.row["n"] if change.row else -1)
    assert applied == written
    ends = {(TOPIC, p): n for p, n in enumerate(records_per_partition())}
    assert store.committed == ends
    assert len(store.threads) == 1 and threading.get_ident() not in store.threads
    assert store.closed and not decoders_running()
    # The sink's process told the group too, for Kafka's tools.
    group = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "g"})
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        told = group.committed(partitions, timeout=30)
    finally:
        group.close()
    assert {(tp.topic, tp.partition): tp.offset for tp in told} == ends


def records_per_partition() -> list[int]:
    counts = [0] * PARTITIONS
    for n in range(RECORDS):
        counts[n * 7 % KEYS % PARTITIONS] += 1
    return counts


def test_duckdb_staged_in_decoder_processes_holds_the_last_value_of_every_key(
    module_broker: BrokerProcess, topic: dict[int, dict[str, Any] | None], tmp_path: Path
) -> None:
    found = {}
    for decoders in (1, 2, 3):
        store = DuckDBStore(tmp_path / f"d{decoders}.duckdb")
        counts = run_sink(config(module_broker.bootstrap, decoders=decoders), store,
                          stopping=lambda: False, say=lambda _: None)  # fmt: skip
        assert counts.changes == RECORDS
        store.open()
        try:
            found[decoders] = store.rows("totals")
            assert store.positions() == {
                (TOPIC, p): n for p, n in enumerate(records_per_partition())
            }
        finally:
            store.close()
    expected = {
        str(k): {"k": k, "n": v["n"], "text": v["text"], "price": v["price"]}
        for k, v in topic.items()
        if v is not None
    }
    as_text = {
        row_id: {c: (str(v) if c == "price" else v) for c, v in row.items()}
        for row_id, row in found[2].items()
    }
    assert as_text == expected
    assert found[1] == found[2] == found[3]


def test_a_record_that_is_not_a_change_stops_the_sink_from_a_decoder(
    module_broker: BrokerProcess,
) -> None:
    bootstrap, bad = module_broker.bootstrap, "shop.bad"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(bad, num_partitions=2, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[bad].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(20):
        producer.produce(bad, orjson.dumps({"n": n}), orjson.dumps({"k": n}), partition=0)
    producer.produce(bad, orjson.dumps({"n": 20}), b'{"k": 20}', partition=1)
    producer.produce(bad, b"not json", b'{"k": 99}', partition=1)
    assert producer.flush(30) == 0
    store = Recording()
    settings = SinkConfig(bootstrap=bootstrap, topics=(bad,), group_id="g", max_batch=25,
                          until_caught_up=True, decoders=2)  # fmt: skip
    with pytest.raises(NotAChangelog, match=f"{bad}: a record whose value is not JSON"):
        run_sink(settings, store, stopping=lambda: False, say=lambda _: None)
    # Nothing at or past it was applied (the record before it may have been, alone).
    assert store.committed.get((bad, 1), 0) <= 1
    assert {c.row_id for c in store.applied} <= {f'{{"k":{n}}}' for n in range(20)} | {'{"k": 20}'}
    assert store.closed and not decoders_running()


def test_a_decoder_killed_stops_the_sink_with_one_line(
    module_broker: BrokerProcess, topic: dict[int, dict[str, Any] | None]
) -> None:
    store = Recording()
    outcome: list[BaseException] = []

    def follow() -> None:
        try:
            run_sink(config(module_broker.bootstrap, decoders=2, until_caught_up=False), store,
                     stopping=lambda: False, say=lambda _: None)  # fmt: skip
        except BaseException as e:  # the test's outcome
            outcome.append(e)

    sink = threading.Thread(target=follow)
    sink.start()
    deadline = time.monotonic() + 30
    while len(store.applied) < RECORDS and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = decoders_running()[0]
    victim.kill()
    sink.join(30)
    assert not sink.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SinkError), outcome
    assert str(outcome[0]) == ("a decoder process ended (exit code -9) before the sink stopped it")
    assert store.closed and not decoders_running()


def test_the_decoders_end_with_a_sink_killed_with_9(
    module_broker: BrokerProcess, topic: dict[int, dict[str, Any] | None], tmp_path: Path
) -> None:
    sink = ChildProcess.spawn(
        tmp_path / "sink.log", "sink", "run", "duckdb", "--bootstrap", module_broker.bootstrap,
        "--topics", TOPIC, "--database", str(tmp_path / "s.duckdb"), "--decoders", "2",
    )  # fmt: skip
    try:
        sink.wait_for("following")
        decoders = psutil.Process(sink.process.pid).children()
        assert len(decoders) == 2, sink.log()
    finally:
        sink.process.kill()
        sink.process.wait(30)
    gone, alive = psutil.wait_procs(decoders, timeout=10)
    assert not alive and len(gone) == 2
