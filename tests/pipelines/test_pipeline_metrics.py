"""PipelineMetrics from Spark's progress reports, read back with Prometheus' text parser."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from riverbed.pipelines.metrics import PipelineMetrics, input_lag, watermark_seconds


def progress(batch: int, rows: int, *, watermark: str, latest: int, end: int) -> dict:
    """A progress report as ``StreamingQuery.recentProgress`` gives it (the fields read)."""
    return {
        "batchId": batch,
        "numInputRows": rows,
        "processedRowsPerSecond": rows / 2.0,
        "durationMs": {"triggerExecution": 2000, "addBatch": 1500},
        "eventTime": {"watermark": watermark},
        "stateOperators": [{"numRowsTotal": 40}, {"numRowsTotal": 2}],
        "sources": [
            {
                "startOffset": '{"page_views":{"0":0,"1":0}}',
                "endOffset": f'{{"page_views":{{"0":{end},"1":{end}}}}}',
                "latestOffset": f'{{"page_views":{{"0":{latest},"1":{end}}}}}',
            }
        ],
    }


def samples(metrics: PipelineMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_each_batch_moves_the_counters_and_sets_the_gauges() -> None:
    metrics = PipelineMetrics("user_sessions")
    label = (("pipeline", "user_sessions"),)
    before = samples(metrics)
    assert ("riverbed_pipeline_watermark_seconds", label) not in before  # none yet
    metrics.observe(progress(0, 100, watermark="1970-01-01T00:00:00.000Z", latest=80, end=50))
    metrics.observe(progress(1, 60, watermark="2026-01-01T00:02:00.000Z", latest=70, end=70))
    after = samples(metrics)
    assert after[("riverbed_pipeline_batches_total", label)] == 2
    assert after[("riverbed_pipeline_input_rows_total", label)] == 160
    assert after[("riverbed_pipeline_batch_duration_seconds_count", label)] == 2
    assert after[("riverbed_pipeline_batch_duration_seconds_sum", label)] == 4.0
    assert after[("riverbed_pipeline_rows_per_second", label)] == 30.0
    assert after[("riverbed_pipeline_watermark_seconds", label)] == 1_767_225_720.0
    assert after[("riverbed_pipeline_input_lag_records", label)] == 0
    assert after[("riverbed_pipeline_state_rows", label)] == 42
    assert after[("riverbed_pipeline_last_batch_id", label)] == 1


def test_input_lag_and_watermark_of_a_report() -> None:
    report = progress(3, 10, watermark="2026-01-01T00:00:00.000Z", latest=90, end=50)
    assert input_lag(report) == 40  # partition 0 only: 90 - 50
    assert watermark_seconds(report) == 1_767_225_600.0
    assert watermark_seconds({"eventTime": {}}) is None
    assert input_lag({"sources": [{"endOffset": None, "latestOffset": "not json"}]}) == 0
