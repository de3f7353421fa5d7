"""search_ctr in a real Spark session against a real broker, checked against a plain-Python
reference: searches and clicks in any order within the watermark delay, clicks at the
interval's bounds and just outside them, clicks on unknown searches, a kill -9 and restart."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from riverbed.pipelines.shop.search_ctr import summed
from riverbed.testing.references import search_ctr
from tests.support.brokers import BrokerProcess
from tests.support.events import BASE, MINUTE, disordered
from tests.support.pipelines import PipelineProcess
from tests.support.topics import changelog, read_json

QUERIES = ["shoes", "red shoes", "tent", "lamp", "é café"]
OFFSETS_MS = [0, 1, 30_000, 5 * MINUTE, 10 * MINUTE, 10 * MINUTE + 1, -1, -30_000, 11 * MINUTE]


def searches_and_clicks(
    seed: int, *, start: int, minutes: int, prefix: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    searches, clicks = [], []
    for i in range(minutes * 8):
        ts = start + rng.randrange(minutes * MINUTE)
        search = {"search_id": f"{prefix}s{i}", "user_id": f"u{i % 17}",
                  "query": rng.choice(QUERIES), "ts": ts}  # fmt: skip
        searches.append(search)
        for j in range(rng.choice([0, 0, 1, 1, 2, 3])):
            offset = rng.choice(OFFSETS_MS)
            clicks.append({"click_id": f"{prefix}c{i}.{j}", "search_id": search["search_id"],
                           "user_id": search["user_id"], "product_id": f"p{j}",
                           "ts": ts + offset})  # fmt: skip
    for k in range(20):  # clicks on searches that never came
        clicks.append({"click_id": f"{prefix}o{k}", "search_id": f"{prefix}none{k}",
                       "user_id": "u0", "product_id": "p0",
                       "ts": start + rng.randrange(minutes * MINUTE)})  # fmt: skip
    return searches, clicks


def _keyed(rows: Iterable[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    return {(v["window_start"], v["query"]): v for v in rows}


def test_search_ctr_with_disorder_and_a_kill(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = broker_process.bootstrap
    first = searches_and_clicks(1, start=BASE, minutes=40, prefix="a")
    later = searches_and_clicks(2, start=BASE + 40 * MINUTE, minutes=20, prefix="b")
    checkpoint = tmp_path / "checkpoint"

    def send(searches: list[dict[str, Any]], clicks: list[dict[str, Any]], seed: int) -> None:
        both = [("searches", s) for s in searches] + [("clicks", c) for c in clicks]
        arrival = disordered([e for _, e in both], seed=seed, max_ms=90_000)
        topic_of = {id(e): t for t, e in both}
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for event in arrival:  # the two topics interleaved, as the events arrive
            key = json.dumps({"user_id": event["user_id"]}).encode()
            producer.produce(topic_of[id(event)], json.dumps(event).encode(), key=key)
        assert producer.flush(30) == 0

    send(*first, seed=1)
    pipeline = PipelineProcess.start(tmp_path, "search_ctr", bootstrap, checkpoint)
    pipeline.wait_caught_up()
    pipeline.kill()
    send(*later, seed=2)  # while it is down
    pipeline = PipelineProcess.start(tmp_path, "search_ctr", bootstrap, checkpoint)
    pipeline.wait_caught_up()
    expected = _keyed(search_ctr(first[0] + later[0], first[1] + later[1]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _keyed(changelog(read_json(bootstrap, "search_ctr")).values()) == expected:
            break
        time.sleep(1)
    assert pipeline.stop() == 0, pipeline.log()
    assert _keyed(changelog(read_json(bootstrap, "search_ctr")).values()) == expected


def test_the_deltas_of_a_call_are_summed_per_window_and_query() -> None:
    deltas = [(0, "tent", 1, 0), (MINUTE, "tent", 1, 0), (0, "tent", 0, 1), (0, "lamp", 1, 0),
              (0, "tent", 1, 0)]  # fmt: skip
    assert summed(deltas) == [(0, "tent", 2, 1), (MINUTE, "tent", 1, 0), (0, "lamp", 1, 0)]
