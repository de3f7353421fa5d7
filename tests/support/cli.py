"""The ``riverbed`` command as the tests run it: to completion (:func:`run_riverbed`), or as
a child process with its stderr in a log file (:class:`ChildProcess`), and what the CLI
tests check of a run (:func:`ok`, :func:`failed`, :func:`table`)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Run = Callable[..., subprocess.CompletedProcess[str]]
"""A fixture's runner of ``riverbed ...`` against a broker (its ``--bootstrap`` added)."""
Rows = list[dict[str, str]]


def riverbed_command(*args: str) -> list[str]:
    """``riverbed ARGS`` with this interpreter (and so this worktree's riverbed)."""
    return [sys.executable, "-m", "riverbed.cli.main", *args]


def run_riverbed(
    *args: str, stdin: str | None = None, timeout_s: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``riverbed ARGS`` to completion, its output captured as text; asserts nothing."""
    return subprocess.run(
        riverbed_command(*args),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=cwd,
    )


@dataclass
class ChildProcess:
    """``riverbed ARGS`` as a child process, its stderr in ``log_path`` (unbuffered)."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def spawn(cls, log_path: Path, *args: str, stdout: int = subprocess.DEVNULL) -> ChildProcess:
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                riverbed_command(*args),
                stdout=stdout,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return cls(process, log_path)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float = 60) -> None:
        """Wait for ``pattern`` in the log; the process exiting first fails the test."""
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.log()):
            if self.process.poll() is not None:
                raise AssertionError(f"exited {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM (unless it has exited), then its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a run that succeeded without a traceback."""
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], *, code: int = 1) -> str:
    """The one stderr line of a run that failed with ``code``."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 if code == 1 else lines, result.stderr
    return result.stderr


def table(output: str) -> Rows:
    """A printed table as one dict per row, keyed by the header."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    assert all(len(line) == len(header) for line in lines), output
    return [dict(zip(header, line, strict=True)) for line in lines[1:]]


def create(riverbed: Run, topic: str, partitions: int = 1) -> None:
    """``riverbed topics create``."""
    ok(riverbed("topics", "create", "--topic", topic, "--partitions", str(partitions)))


def consume_all(riverbed: Run, topic: str, *args: str) -> str:
    """``riverbed consume`` of the whole topic, to its end."""
    return ok(riverbed("consume", "--topic", topic, "--from-beginning", "--exit-at-end", *args))


LIBRARY_NOISE = (
    "WARNING: Using incubator modules",  # the JVM, for Spark 4's jdk.incubator.vector
    "Using Spark's default log4j profile",  # log4j with Spark's default profile
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel",
    "NativeCodeLoader",  # Hadoop without its native library
    "TransformWithStateInPandas Python worker",  # PySpark's transformWithState driver worker
    "rdkafka#",  # any librdkafka log line, e.g. "...|BGQUEUE|rdkafka#producer-22| ... Purging"
)
"""Lines the libraries under riverbed print and a riverbed user has no use for."""


def library_noise(output: str) -> list[str]:
    """The lines of ``output`` that hold any of :data:`LIBRARY_NOISE`."""
    return [line for line in output.splitlines() if any(n in line for n in LIBRARY_NOISE)]
