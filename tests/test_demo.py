"""``make demo`` end to end, at a small scale: every check it prints holds, and it prints
nothing of the libraries it runs on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import library_noise


@pytest.mark.timeout(600)
def test_the_demo_runs_and_every_check_it_prints_holds(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverbed.demo",
            "--data-dir",
            str(tmp_path),
            "--events",
            "5000",
            "--shop-seconds",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=590,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # Only riverbed's own lines: no JVM, log4j, PySpark worker or librdkafka noise.
    assert library_noise(out + done.stderr) == []
    assert done.stderr == ""
    assert out.count("(section took ") == 12  # each section but "try it yourself" times itself
    assert "every user's events in order: True" in out
    assert "together 5,000 of 5,000 events, each read once: True" in out
    assert "read_committed reader: 6,000 records (each click once: True)" in out
    assert "read_uncommitted reader: 6,100 records (the aborted junk too)" in out
    assert "__transaction_state-0..49/" in out
    # The event-sourcing section: accepted and refused commands, history, time travel, forget.
    assert "AddItem expecting v1     -> rejected (version_conflict), v2" in out
    assert "AddItem                  -> accepted, v1   # cmd-1 re-sent" in out
    assert 'v4 CheckedOut   {"shipping_address": "12 Harbour Street, Portsmouth"}' in out
    assert '"version": 2, "items": {"kettle": 1, "mug": 4}' in out
    assert 'a replay now reads: v4 CheckedOut {"shipping_address": null}' in out
    assert "address gone from every read: True; the events all still there: True" in out
    assert "1,000 more commands for 100 carts answered, projected meanwhile" in out
    assert "the rebuild equals the live projection: True" in out
    assert "query read 6,000 records of 'clicks'" in out  # the Spark section
    assert "equal to a plain Python count of the topic: True" in out
    # The pipeline section: windows as they arrive, every page view counted or set aside.
    assert "page_views_per_minute and fraud_alerts running; results as they arrive:" in out
    assert out.count(" UTC: ") >= 3
    assert "every page view counted once or sent to late_events: True" in out
    assert "FRAUD ALERT card " in out
    assert "the alerts are exactly DESIGN.md's rule over the others: True" in out
    # The CDC section: the database captured, two pipelines checked against it.
    assert "category_sales equals the same GROUP BY on PostgreSQL: True" in out
    assert "every click enriched once: True" in out
    # The derived-data section: dual writes against the log, verify, search, DuckDB.
    assert "dual writes (the application): " in out
    assert "the log (riverbed sink): 0 of 10 cached prices wrong" in out
    assert out.count("all stores agree\n  (exit 0)") == 2  # the log's cache, DuckDB
    assert "search 'title:running' while titles change: p3 'trail running shoe'" in out
    assert "search 'model AND 3' (p3's old title): nothing" in out
    assert "... equal to the same query on PostgreSQL: True" in out
    assert re.search(r"shop\.carts\.state -> redis://\S+: [1-9][\d,]* changes applied", out)
    assert re.search(r"category_sales -> \S+shop\.duckdb: [1-9][\d,]* changes applied", out)
