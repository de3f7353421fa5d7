"""``riverbed.spark.worker_gc``: in a Spark task, the objects alive are frozen, so that
PySpark's full collection after the task scans only what the task made; every hundredth
call unfreezes instead; outside a task nothing changes."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator

import pytest
from pyspark.sql import SparkSession

from riverbed.spark import worker_gc


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class InATask:
    """Stands in for pyspark's TaskContext as a task's code sees it."""

    @staticmethod
    def get() -> object:
        return object()


@pytest.mark.usefixtures("unfrozen")
def test_outside_a_task_nothing_is_frozen() -> None:
    worker_gc.freeze_survivors()

    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("unfrozen")
def test_every_hundredth_call_unfreezes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_gc, "TaskContext", InATask)
    monkeypatch.setattr(worker_gc, "_calls", 0)
    frozen = []
    for _ in range(2 * worker_gc.SWEEP_EVERY):
        worker_gc.freeze_survivors()
        frozen.append(gc.get_freeze_count())

    sweeps = [call for call, count in enumerate(frozen, start=1) if count == 0]
    assert sweeps == [worker_gc.SWEEP_EVERY, 2 * worker_gc.SWEEP_EVERY]
    assert all(count > 1_000 for count in frozen[: worker_gc.SWEEP_EVERY - 1])


def freeze_in_a_task(rows: Iterable[int]) -> Iterator[tuple[int, int]]:
    import gc

    from riverbed.spark.worker_gc import freeze_survivors

    freeze_survivors()
    yield gc.get_freeze_count(), len(gc.get_objects())


def test_in_a_spark_task_the_worker_is_frozen(spark: SparkSession) -> None:
    tasks = spark.sparkContext.parallelize(range(4), 4).mapPartitions(freeze_in_a_task).collect()

    assert len(tasks) == 4
    for frozen, collected in tasks:
        # PySpark, pyarrow and riverbed: tens of thousands of objects the full collection
        # after the task no longer scans.
        assert frozen > 10_000
        assert collected < frozen
