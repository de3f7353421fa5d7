"""Acceptance of the exactly-once sink: a streaming copy job (``sink_job.py``, its own process
with its own Spark) killed with SIGKILL and restarted from its checkpoint writes every input
row once, as a read_committed confluent-kafka consumer sees the output."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from riverbed.broker import Broker
from tests.support.brokers import create_topic
from tests.support.sink_job import (
    DONE,
    ROWS_PER_FILE,
    SOURCE_RECORDS_PER_BATCH,
    read_output,
    write_input,
)

JOB = Path(__file__).parent.parent / "support" / "sink_job.py"
FILES = 8
JOB_TIMEOUT_S = 120


class Job:
    """One run of the copy job, leading its own process group (Spark's JVM and workers)."""

    def __init__(
        self, tmp_path: Path, bootstrap: str, run: int, *crash: str, source: str | None = None
    ) -> None:
        self.log = tmp_path / f"job-{run}.log"
        where = ["--source-topic", source] if source else ["--input", str(tmp_path / "in")]
        self.checkpoint = tmp_path / "checkpoint"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(JOB),
                    "--bootstrap",
                    bootstrap,
                    *where,
                    "--checkpoint",
                    str(self.checkpoint),
                    "--topic",
                    "out",
                    *crash,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            )

    def batches(self, kind: str) -> set[int]:
        """Batch ids in the checkpoint's ``offsets`` (planned) or ``commits`` (done) log."""
        directory = self.checkpoint / kind
        if not directory.is_dir():
            return set()
        return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}

    def wait(self) -> int:
        try:
            code = self.process.wait(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not end:\n{self.output()}") from None
        return code

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]


def _copied_ids(bootstrap: str, *, isolation: str = "read_committed") -> list[int]:
    records = read_output(bootstrap, "out", partitions=2, isolation=isolation)
    return sorted(json.loads(r.value or b"")["id"] for r in records)


@pytest.fixture
def bootstrap(broker: Broker, tmp_path: Path) -> str:
    create_topic(broker.bootstrap_servers, "out", partitions=2)
    write_input(tmp_path / "in", range(FILES))
    return broker.bootstrap_servers


@pytest.mark.slow
def test_a_job_killed_again_and_again_writes_each_row_once(bootstrap: str, tmp_path: Path) -> None:
    # 1. Killed while the tasks of batch 1 have their rows in open transactions.
    job = Job(tmp_path, bootstrap, 1, "--crash-in-write", "1")
    assert job.wait() == -signal.SIGKILL, job.output()
    assert 1 in job.batches("offsets") and 1 not in job.batches("commits")

    # 2. Killed after the tasks of batch 3 committed, before Spark recorded the batch: the
    # restart replays it, and the sink must not write it again.
    job = Job(tmp_path, bootstrap, 2, "--crash-after-commit", "3")
    assert job.wait() == -signal.SIGKILL, job.output()
    assert 3 in job.batches("offsets") and 3 not in job.batches("commits")
    copied = _copied_ids(bootstrap)  # batches 0 to 3, a file each, all committed by the sink
    assert len(copied) == len(set(copied)) == 4 * ROWS_PER_FILE

    # 3. Killed from outside at whatever point it has reached after another batch.
    job = Job(tmp_path, bootstrap, 3)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(job.batches("commits")) < 5:
        assert job.process.poll() is None, f"the job ended early:\n{job.output()}"
        assert time.monotonic() < deadline, f"no batch committed:\n{job.output()}"
        time.sleep(0.02)
    job.kill()
    assert len(job.batches("commits")) < FILES, "killed too late: the job had finished"

    # 4. Restarted once more, it finishes: every input row is in the output once.
    job = Job(tmp_path, bootstrap, 4)
    assert job.wait() == 0, job.output()
    assert DONE in job.output()
    assert _copied_ids(bootstrap) == list(range(FILES * ROWS_PER_FILE))
    # The rows of the write killed in step 1 did reach the log, in a transaction now aborted.
    assert len(_copied_ids(bootstrap, isolation="read_uncommitted")) > FILES * ROWS_PER_FILE


@pytest.mark.slow
def test_a_riverbed_to_riverbed_copy_killed_and_restarted_writes_each_record_once(
    bootstrap: str, tmp_path: Path
) -> None:
    """The same with the riverbed source as input: a topic of 3,000 records copied 500 per
    micro-batch, killed with SIGKILL from outside after some batches, restarted to the end."""
    total = 3_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(total):
        producer.produce("in", key=str(i), value=json.dumps({"id": i, "payload": "x" * 50}))
    assert producer.flush(30) == 0
    job = Job(tmp_path, bootstrap, 1, source="in")
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(job.batches("commits")) < 2:
        assert job.process.poll() is None, f"the job ended early:\n{job.output()}"
        assert time.monotonic() < deadline, f"no batch committed:\n{job.output()}"
        time.sleep(0.02)
    time.sleep(random.uniform(0, 0.5))  # somewhere in a later batch, if it is still running
    job.kill()
    assert len(job.batches("commits")) < total // SOURCE_RECORDS_PER_BATCH, "killed too late"
    job = Job(tmp_path, bootstrap, 2, source="in")
    assert job.wait() == 0, job.output()
    assert _copied_ids(bootstrap) == list(range(total))
