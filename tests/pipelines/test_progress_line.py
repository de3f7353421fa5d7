"""The runner's progress line, from a query progress as Spark reports it."""

from __future__ import annotations

from riverbed.pipelines.runner import progress_line


def test_rows_rate_watermark_and_input_lag() -> None:
    progress = {
        "batchId": 7,
        "numInputRows": 1200,
        "processedRowsPerSecond": 5321.4,
        "eventTime": {"watermark": "2026-01-01T00:18:00.000Z"},
        "sources": [
            {
                "endOffset": '{"page_views":{"0":100,"1":250}}',
                "latestOffset": '{"page_views":{"0":130,"1":250}}',
            },
            {"endOffset": {"clicks": {"0": 5}}, "latestOffset": {"clicks": {"0": 9}}},
        ],
    }
    assert progress_line(progress) == (
        "batch 7: 1200 rows, 5321 rows/s, watermark 2026-01-01T00:18:00.000Z, input lag 34 records"
    )


def test_missing_parts_are_shown_as_nothing() -> None:
    line = progress_line({"batchId": 0, "sources": [{"endOffset": None, "latestOffset": "x"}]})
    assert line == "batch 0: 0 rows, 0 rows/s, watermark -, input lag 0 records"
