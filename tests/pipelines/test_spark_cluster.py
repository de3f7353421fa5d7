"""Outgrowing one machine: ``riverbed pipeline run NAME --master spark://...`` on a real Spark
standalone cluster (a master and two one-core workers from the installed PySpark, the
checkpoint on a path both workers see), with one worker killed with -9 while the pipeline
runs; its windows are the ``local[2]`` run's over the same input, and the reference's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from riverbed.testing.references import page_views_per_minute
from tests.support.brokers import BrokerProcess, start_broker_process
from tests.support.events import BASE, MINUTE, page_views
from tests.support.pipelines import PipelineProcess
from tests.support.spark_cluster import SparkCluster
from tests.support.topics import changelog, keyed, produce_events, read_json

NAME = "page_views_per_minute"
FIRST = page_views(21, users=20, start=BASE, hours=1, prefix="a")
SECOND = page_views(22, users=20, start=BASE + 120 * MINUTE, hours=1, prefix="b")  # none late


def windows_of_a_run(
    tmp_path: Path, bootstrap: str, master: str, *, between: Any = None, then: Any = None
) -> tuple[dict[str, dict[str, Any]], str]:
    """The windows the pipeline wrote from :data:`FIRST` then :data:`SECOND` (``between``
    called once the first is processed, as the second is sent; ``then`` once the second is
    processed, before the pipeline stops), and its log."""
    tmp_path.mkdir()
    produce_events(bootstrap, "page_views", FIRST)
    pipeline = PipelineProcess.start(tmp_path, NAME, bootstrap, tmp_path / "ck", master=master)
    try:
        caught_up = pipeline.wait_caught_up(timeout_s=240)
        produce_events(bootstrap, "page_views", SECOND)
        if between is not None:
            between()
        pipeline.wait_caught_up(after_batch=caught_up, timeout_s=240)
        if then is not None:
            then()
    finally:
        assert pipeline.stop() == 0, pipeline.log()
    assert f"{NAME} stopped" in pipeline.log()
    return changelog(read_json(bootstrap, NAME)), pipeline.log()


def test_a_pipeline_on_a_standalone_cluster_loses_a_worker_and_nothing_else(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    cluster = SparkCluster.start(tmp_path / "cluster", workers=2)
    killed: list[psutil.Process] = []

    def kill_a_worker() -> None:
        executors = cluster.executors(0)
        assert executors, "the first worker runs an executor of the pipeline"
        cluster.workers[0].process.kill()  # -9: its executor exits with it
        cluster.workers[0].process.wait(30)
        killed.extend(executors)

    def the_other_worker_runs_it() -> None:
        assert cluster.executors(1), "the second worker runs the pipeline's executor"

    try:
        on_cluster, log = windows_of_a_run(
            tmp_path / "cluster-run", broker_process.bootstrap, cluster.url,
            between=kill_a_worker, then=the_other_worker_runs_it,
        )  # fmt: skip
    finally:
        cluster.stop()
    _, alive = psutil.wait_procs(killed, timeout=30)
    assert not alive
    assert "ERROR TaskSchedulerImpl: Lost executor" in log  # the driver went on without it

    with start_broker_process(tmp_path / "local-broker") as local_broker:
        local, _ = windows_of_a_run(tmp_path / "local-run", local_broker.bootstrap, "local[2]")
    expected = keyed(page_views_per_minute(FIRST + SECOND), "window_start", "page")
    assert on_cluster == local
    assert len(local) > 100 and all(expected[key] == window for key, window in local.items())
