"""The sink runner in this process, with a store that records what it is asked: every call
made from one thread of the store's own, a batch applied while the next one is read and
decoded, the cycle collector held back while it follows (and put back after), and a
store's failure stopping the sink with the store closed; ``sink run``'s batch size and
decoder processes per store."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.cli.main import build_parser
from riverbed.cli.sink_command import sink_config
from riverbed.sinks import decoding
from riverbed.sinks.changes import Change, SinkError, change_of
from riverbed.sinks.runner import SinkConfig, run_sink
from tests.support.brokers import BrokerProcess
from tests.support.sinks import Recording

TOPIC = "totals"
RECORDS = 60


@pytest.fixture
def bootstrap(broker_process: BrokerProcess) -> str:
    bootstrap = broker_process.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(TOPIC, num_partitions=2, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[TOPIC].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(RECORDS):
        producer.produce(TOPIC, orjson.dumps({"n": n}), orjson.dumps({"k": n}), partition=n % 2)
    assert producer.flush(30) == 0
    return bootstrap


def follow(bootstrap: str, store: Recording, **options: Any) -> Any:
    config = SinkConfig(bootstrap=bootstrap, topics=(TOPIC,), group_id="g", until_caught_up=True,
                        max_batch=10, **options)  # fmt: skip
    return run_sink(config, store, stopping=lambda: False, say=lambda _: None)


def test_the_store_is_driven_from_a_thread_of_its_own_while_the_next_batch_is_read(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[float] = []

    def timed_change_of(*args: Any, **kwargs: Any) -> Change:
        decoded.append(time.monotonic())
        # A decode that takes a little time (and lets the GIL go): without it, a batch of
        # ten could be decoded before the store's thread, woken to apply the batch before
        # it, had started; on a loaded machine every time (CI, once).
        time.sleep(0.002)
        return change_of(*args, **kwargs)

    monkeypatch.setattr("riverbed.sinks.decoding.change_of", timed_change_of)
    before = gc.get_threshold()
    store = Recording(apply_s=0.05)
    counts = follow(bootstrap, store)
    assert counts.changes == RECORDS and counts.batches == len(store.applying) >= 6
    assert sorted(c.row["n"] for c in store.applied if c.row) == list(range(RECORDS))
    assert store.committed == {(TOPIC, 0): RECORDS // 2, (TOPIC, 1): RECORDS // 2}
    assert len(store.threads) == 1 and threading.get_ident() not in store.threads
    assert store.closed
    # Records were decoded while an earlier batch was being applied.
    assert any(start < t < end for start, end in store.applying for t in decoded)
    # The collector was held back while the sink followed, and is as it was after.
    assert store.thresholds == {(decoding.COLLECT_EVERY, 20, 100)}
    assert gc.get_threshold() == before


def test_a_store_that_fails_stops_the_sink_with_its_error_and_is_closed(bootstrap: str) -> None:
    before = gc.get_threshold()
    store = Recording(fail_at_batch=2)
    with pytest.raises(SinkError, match="the store is full"):
        follow(bootstrap, store)
    assert store.closed and len(store.applying) == 2
    assert sum(store.committed.values()) == store.sizes[0]  # the first batch only
    assert gc.get_threshold() == before


@pytest.mark.parametrize(
    ("arguments", "max_batch", "decoders"),
    [
        (["redis"], 5_000, 1),
        (["search", "--index", "i"], 5_000, 1),
        (["duckdb", "--database", "d"], 20_000, 2),
        (["duckdb", "--database", "d", "--max-batch", "7", "--decoders", "3"], 7, 3),
        (["redis", "--decoders", "2"], 5_000, 2),
    ],
)
def test_sink_run_takes_each_stores_default_batch_and_decoders_unless_told(
    arguments: list[str], max_batch: int, decoders: int
) -> None:
    args = build_parser().parse_args(["sink", "run", *arguments, "--topics", "a, b"])
    config = sink_config(args)
    assert config.max_batch == max_batch and config.topics == ("a", "b")
    assert config.decoders == decoders
