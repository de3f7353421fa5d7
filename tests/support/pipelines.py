"""``riverbed pipeline run NAME`` as a child process (:class:`PipelineProcess`): started on a
broker with a checkpoint, waited for until it has caught up, stopped or killed."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.support.cli import ChildProcess
from tests.support.topics import JsonRecord, Row, changelog, read_json

TRIGGER_MS = 300  # short micro-batches: the tests wait for a few of them


@dataclass
class PipelineProcess(ChildProcess):
    @classmethod
    def start(
        cls,
        tmp_path: Path,
        name: str,
        bootstrap: str,
        checkpoint: Path,
        master: str = "local[2]",
        options: Sequence[str] = (),
    ) -> PipelineProcess:
        """``riverbed pipeline run name`` with short triggers, and any further ``options``."""
        child = ChildProcess.spawn(
            tmp_path / f"{name}-{time.monotonic_ns()}.log",
            "pipeline",
            "run",
            name,
            "--bootstrap",
            bootstrap,
            "--checkpoint",
            str(checkpoint),
            "--trigger-ms",
            str(TRIGGER_MS),
            "--master",
            master,
            *options,
        )
        return cls(child.process, child.log_path)

    def batches(self) -> list[tuple[int, int, int]]:
        """(batch id, rows, input lag) of each progress line so far."""
        return [
            (int(b), int(r), int(lag))
            for b, r, lag in re.findall(
                r"batch (\d+): (\d+) rows, .*? input lag (\d+) records", self.log()
            )
        ]

    def wait_caught_up(self, after_batch: int = -1, timeout_s: float = 180) -> int:
        """Wait for a batch after ``after_batch`` that read rows and left no input lag,
        then one more batch (so its watermark is in force); returns that batch's id."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"pipeline exited {self.process.returncode}:\n{self.log()}")
            done = [
                b for b, rows, lag in self.batches() if b > after_batch and rows > 0 and lag == 0
            ]
            if done:
                return done[0]
            time.sleep(0.2)
        raise AssertionError(f"pipeline did not catch up:\n{self.log()[-3000:]}")

    def stop(self, timeout_s: float = 120) -> int:
        return super().stop(timeout_s)

    def kill(self) -> None:
        children = psutil.Process(self.process.pid).children(recursive=True)
        self.process.kill()
        self.process.wait(timeout=30)
        psutil.wait_procs(children, timeout=60)  # Spark's JVM exits when its parent dies


def stop_once_written(
    pipeline: PipelineProcess,
    bootstrap: str,
    name: str,
    *,
    keys: int | None = None,
    expected: Mapping[str, Row] | None = None,
    timeout_s: float,
) -> list[JsonRecord]:
    """Wait (up to ``timeout_s``) until topic ``name`` holds ``keys`` keys, or, for an output
    whose values may change before they are final, until its :func:`changelog` is
    ``expected``; then stop pipeline ``name``, which must exit cleanly and say so; the
    topic's records then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        table = changelog(read_json(bootstrap, name))
        if (table == expected) if keys is None else (len(table) >= keys):
            break
        time.sleep(1)
    assert pipeline.stop() == 0, pipeline.log()
    assert f"{name} stopped" in pipeline.log()
    return read_json(bootstrap, name)


def late_reasons(
    bootstrap: str, topic: str, stragglers: list[dict[str, Any]], id_field: str
) -> list[tuple[dict[str, Any], str]]:
    """Checks that side output ``topic`` holds the ``stragglers``, each once, keyed
    ``{id_field: ...}``, as they were sent plus a ``reason``; (straggler, reason) of each."""
    late = read_json(bootstrap, topic)
    assert sorted(r.key[id_field] for r in late) == sorted(e[id_field] for e in stragglers)
    by_id = {e[id_field]: e for e in stragglers}
    reasons = []
    for record in late:
        assert record.value is not None
        event = dict(record.value)
        reason = event.pop("reason")
        assert record.key == {id_field: event[id_field]}
        assert event == by_id[event[id_field]]
        reasons.append((event, reason))
    return reasons
