"""``riverbed pipeline``: list, clear errors before Spark starts, riverbed's lines only while
a pipeline runs, and a failing query's error on stderr."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.references import page_views_per_minute
from tests.support.brokers import BrokerProcess
from tests.support.cli import library_noise
from tests.support.events import BASE, page_views
from tests.support.metrics import scrape
from tests.support.pipelines import PipelineProcess
from tests.support.topics import changelog, keyed, produce_events, read_json

MAX_OFFSETS = 25
"""``--max-offsets-per-trigger`` of the run that reads a backlog."""


def _riverbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", "pipeline", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_list_describes_every_pipeline() -> None:
    result = _riverbed("list")
    assert result.returncode == 0, result.stderr
    assert (
        "page_views_per_minute\n  reads:  page_views\n  writes: page_views_per_minute, late_events"
        in result.stdout
    )
    for name in ("user_sessions", "page_views_sliding"):
        assert f"\n{name}\n  reads:  page_views\n" in result.stdout
    assert "\nsearch_ctr\n  reads:  searches, clicks\n  writes: search_ctr\n" in result.stdout
    assert "\ncategory_sales\n  reads:  shop.public.orders, shop.public.products\n" in result.stdout
    assert "\nenriched_clicks\n  reads:  clicks, shop.public.users\n" in result.stdout
    assert "  writes: fraud_alerts, fraud_alerts_late\n" in result.stdout
    assert "\ncart_removals\n  reads:  shop.carts.events\n" in result.stdout
    assert "  writes: cart_removals, cart_removals_late\n" in result.stdout


def test_an_unknown_pipeline(broker_process: BrokerProcess, tmp_path: Path) -> None:
    result = _riverbed(
        "run", "nope", "--bootstrap", broker_process.bootstrap, "--checkpoint", str(tmp_path)
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "riverbed pipeline: no pipeline 'nope'; the pipelines are: cart_removals, "
        "category_sales, enriched_clicks, fraud_alerts, page_views_per_minute, "
        "page_views_sliding, search_ctr, user_sessions"
    )


def test_an_unreachable_broker(tmp_path: Path) -> None:
    result = _riverbed(
        "run", "user_sessions", "--bootstrap", "127.0.0.1:1", "--connect-timeout-ms", "2000",
        "--checkpoint", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith(
        "riverbed pipeline: no broker reachable at 127.0.0.1:1 within 2 s"
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("option", ["--trigger-ms", "--max-offsets-per-trigger"])
def test_a_bad_number(option: str) -> None:
    result = _riverbed("run", "user_sessions", option, "0")
    assert result.returncode == 2 and f"{option}: must be at least 1" in result.stderr


def _closed_windows(bootstrap: str, timeout_s: float = 60) -> dict[str, dict[str, object]]:
    deadline = time.monotonic() + timeout_s
    while not (windows := changelog(read_json(bootstrap, "page_views_per_minute"))):
        assert time.monotonic() < deadline, "no window closed"
        time.sleep(0.5)
    return windows


def test_a_run_prints_riverbed_lines_only(broker_process: BrokerProcess, tmp_path: Path) -> None:
    """A run that does real work (Spark's first start in the process; stateful windows,
    whose transformWithState driver worker announces itself; the sink's admin clients) and
    stops: its stderr holds none of the JVM's, log4j's, PySpark's or librdkafka's lines.
    Its backlog is read in batches of at most ``--max-offsets-per-trigger`` records. Its
    ``--metrics`` endpoint, scraped once it has caught up, counts what the progress lines
    say."""
    bootstrap = broker_process.bootstrap
    events = page_views(7, users=20, start=BASE, hours=1, prefix="q")
    produce_events(bootstrap, "page_views", events)
    pipeline = PipelineProcess.start(
        tmp_path,
        "page_views_per_minute",
        bootstrap,
        tmp_path / "ck",
        options=("--max-offsets-per-trigger", str(MAX_OFFSETS), "--metrics", "127.0.0.1:0"),
    )
    pipeline.wait_caught_up()
    read = [rows for _, rows, _ in pipeline.batches() if rows]
    assert max(read) <= MAX_OFFSETS and sum(read) == len(events) > 3 * MAX_OFFSETS
    url = re.search(r"riverbed pipeline: metrics on (\S+)", pipeline.log())
    assert url is not None, pipeline.log()
    metrics = scrape(url.group(1))
    labels = {"pipeline": "page_views_per_minute"}
    assert metrics.value("riverbed_pipeline_input_rows_total", **labels) == len(events)
    batches = metrics.value("riverbed_pipeline_batches_total", **labels)
    assert batches >= len(read)  # and any batch that read nothing
    assert metrics.value("riverbed_pipeline_batch_duration_seconds_count", **labels) == batches
    assert metrics.value("riverbed_pipeline_input_lag_records", **labels) == 0
    assert metrics.value("riverbed_pipeline_state_rows", **labels) > 0
    # The watermark: 2 minutes behind the latest page view's time, at least.
    latest_s = max(event["ts"] for event in events) / 1000
    watermark_s = metrics.value("riverbed_pipeline_watermark_seconds", **labels)
    assert BASE / 1000 < watermark_s <= latest_s - 120
    windows = _closed_windows(bootstrap)
    assert pipeline.stop() == 0, pipeline.log()
    expected = keyed(page_views_per_minute(events), "window_start", "page")
    assert all(expected[key] == window for key, window in windows.items())
    log = pipeline.log()
    assert library_noise(log) == []
    assert [line for line in log.splitlines() if not line.startswith("riverbed pipeline: ")] == []
    assert log.endswith("riverbed pipeline: page_views_per_minute stopped\n")


def test_a_failing_query_reaches_the_user(broker_process: BrokerProcess, tmp_path: Path) -> None:
    """The input topic deleted under a running pipeline: the query fails on the data loss,
    and both Spark's error and riverbed's one line about it reach stderr (nothing useful is
    filtered out with the noise)."""
    bootstrap = broker_process.bootstrap
    produce_events(
        bootstrap, "page_views", page_views(8, users=5, start=BASE, hours=0.2, prefix="f")
    )
    pipeline = PipelineProcess.start(tmp_path, "page_views_per_minute", bootstrap, tmp_path / "ck")
    pipeline.wait_caught_up()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics(["page_views"])["page_views"].result(30)
    admin.create_topics([NewTopic("page_views", num_partitions=1)])["page_views"].result(30)
    assert pipeline.process.wait(timeout=120) == 1
    log = pipeline.log()
    assert "ERROR MicroBatchExecution: Query page_views_per_minute" in log  # Spark's own
    assert "riverbed pipeline: page_views_per_minute failed: " in log
    assert "DataLossError" in log
    assert library_noise(log) == []
