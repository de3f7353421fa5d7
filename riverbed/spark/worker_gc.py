"""Garbage collection in Spark's Python workers: :func:`freeze_survivors`, which riverbed's
code calls as it starts its part of a task in a worker (the source's read, the sink's write,
the operators' ``init`` and their ``mapInArrow`` steps).

PySpark's daemon reuses a worker process for task after task and runs a full garbage
collection (``gc.collect()``, ``pyspark/daemon.py``) after each. A full collection scans
every object the process tracks, and with PySpark, pandas, pyarrow and riverbed imported
that is about 80,000 objects: 23-57 ms a collection (measured, depending on the machine's
speed that day), paid after every Python task, several per micro-batch. py-spy put 38% of
the Python workers' samples in ``page_views_per_minute`` (2,000,000 page views) in that
collection (BENCHMARKS.md).

``gc.freeze()`` moves every object tracked at that moment to a permanent generation that
collections skip: the daemon's collection after the task then scans only what the task
made. The collection after the previous task has just run, so what is frozen is alive.
Something frozen that is dropped later and left in a reference cycle would never be
collected, so every :data:`SWEEP_EVERY`-th call unfreezes instead: the collection after
that task scans everything once, and the next call freezes again.
"""

from __future__ import annotations

import gc

from pyspark import TaskContext

__all__ = ["SWEEP_EVERY", "freeze_survivors"]

SWEEP_EVERY = 100
"""One call in this many unfreezes, so that the next full collection sees every object."""

_calls = 0


def freeze_survivors() -> None:
    """In a Spark task (a Python worker; elsewhere, such as on the driver, nothing): freeze
    the objects alive now, or unfreeze every :data:`SWEEP_EVERY`-th time (module
    docstring)."""
    global _calls
    if TaskContext.get() is None:
        return
    _calls += 1
    if _calls % SWEEP_EVERY == 0:
        gc.unfreeze()
    else:
        gc.freeze()
