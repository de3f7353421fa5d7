"""A watermark's delay in milliseconds, as Spark's ``withWatermark`` counts it: the bound
:class:`~riverbed.pipelines.operators.windowed_counts.WindowedCounts` writes windows by
before the timers fire, so a delay read shorter than Spark's would write windows early."""

from __future__ import annotations

import pytest

from riverbed.pipelines.operators.inputs import delay_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2 minutes", 120_000),
        ("1 minute", 60_000),
        ("10 seconds", 10_000),
        ("1.5 seconds", 1_500),
        ("250 milliseconds", 250),
        ("1500 microseconds", 1),
        ("interval 1 hour 30 minutes", 5_400_000),
        ("INTERVAL 2 MINUTES", 120_000),
        ("1 day", 86_400_000),
        ("2 weeks", 14 * 86_400_000),
        ("1 month", 31 * 86_400_000),  # Spark's watermark counts a month as 31 days
        ("0 seconds", 0),
    ],
)
def test_spark_intervals(text: str, ms: int) -> None:
    assert delay_ms(text) == ms


@pytest.mark.parametrize(
    "text", ["", "interval", "2", "two minutes", "-1 minute", "2 fortnights", "1..2 seconds"]
)
def test_anything_else_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a watermark delay"):
        delay_ms(text)
