"""``riverbed es run carts`` killed with -9 again and again while commands stream in:
restarted (same instance), no accepted command is lost, no event written twice, no gap in
a cart's versions, every command answered. Snapshots are written every few events, so each
restart restores carts from snapshots plus the events after them; a cart read from its
snapshot is the cart a full replay gives."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path

from riverbed.eventsourcing.reader import AggregateReader
from riverbed.eventsourcing.shop.carts import CART_TYPE, TOPICS
from riverbed.testing.topic_reader import read_to_end
from tests.support.brokers import BrokerProcess
from tests.support.carts import check_the_log, commands, send, wait_for_answers
from tests.support.cli import ChildProcess

KILLS = 3


def start(tmp_path: Path, bootstrap: str) -> ChildProcess:
    log = tmp_path / f"es-{time.monotonic_ns()}.log"
    return ChildProcess.spawn(
        log, "es", "run", "carts", "--bootstrap", bootstrap, "--snapshot-every", "5"
    )


def test_kill_9_mid_stream_loses_and_repeats_nothing(
    group_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap
    sent = commands(3_000, carts=150, seed=11)
    processor = start(tmp_path, bootstrap)
    processor.wait_for("assigned .* partitions \\[0, 1, 2\\]")
    chunks = [sent[i : i + 100] for i in range(0, len(sent), 100)]
    sender = threading.Thread(
        target=lambda: [(send(bootstrap, TOPICS, c), time.sleep(0.05)) for c in chunks]
    )
    sender.start()
    logs = []
    for _ in range(KILLS):
        time.sleep(0.7)
        processor.process.kill()  # SIGKILL: mid-transaction, most likely
        processor.process.wait(30)
        logs.append(processor.log())
        processor = start(tmp_path, bootstrap)
    # Running before it is stopped: a SIGTERM while it still starts ends it with -15 (the
    # earlier processors may have answered everything already).
    processor.wait_for("assigned .* partitions \\[0, 1, 2\\]")
    sender.join(60)
    send(bootstrap, TOPICS, sent[:100])  # re-sent after the crashes
    wait_for_answers(bootstrap, TOPICS, len(sent), lambda: [*logs, processor.log()])
    assert processor.stop() == 0, processor.log()
    assert any("processing" in log for log in logs)  # the killed ones were working
    events, _ = check_the_log(bootstrap, TOPICS, sent)
    assert "Traceback" not in processor.log()
    snapshots = read_to_end(bootstrap, TOPICS.snapshots)
    assert len({s.key for s in snapshots}) > 50  # most carts have one
    # One more start restores every cart from its snapshot, skipping the events it holds:
    # a snapshot every 5 events holds 5 or more.
    again = start(tmp_path, bootstrap)
    again.wait_for("assigned .* partitions \\[0, 1, 2\\]: restored")
    assert again.stop() == 0, again.log()
    restored = re.search(
        r"restored ([\d,]+) aggregates from ([\d,]+) snapshots and ([\d,]+) events",
        again.log(),
    )
    assert restored is not None, again.log()
    carts, from_snapshots, events_read = (int(n.replace(",", "")) for n in restored.groups())
    assert carts == len({e.aggregate_id for e in events})
    assert 0 < from_snapshots <= carts
    assert events_read <= len(events) - 5 * from_snapshots
    reader = AggregateReader(CART_TYPE, bootstrap)
    longest = Counter(e.aggregate_id for e in events).most_common(3)
    for cart, count in longest:
        assert reader.state_of(cart) == reader.state_of(cart, snapshots=False)
        assert reader.state_of(cart).version == count
    reader.close()
