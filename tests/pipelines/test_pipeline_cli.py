"""``riverbed pipeline``: list, and clear errors before Spark starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.brokers import BrokerProcess


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


def test_an_unknown_pipeline(broker_process: BrokerProcess, tmp_path: Path) -> None:
    result = _riverbed(
        "run", "nope", "--bootstrap", broker_process.bootstrap, "--checkpoint", str(tmp_path)
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "riverbed pipeline: no pipeline 'nope'; the pipelines are: category_sales, "
        "enriched_clicks, fraud_alerts, page_views_per_minute, page_views_sliding, search_ctr, "
        "user_sessions"
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


def test_a_bad_trigger_interval() -> None:
    result = _riverbed("run", "user_sessions", "--trigger-ms", "0")
    assert result.returncode == 2 and "must be at least 1" in result.stderr
