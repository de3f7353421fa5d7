"""Fixtures shared by the whole suite: a real broker, in-process or as its own process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.broker import Broker

LISTENING = re.compile(rb"riverbed broker listening on (\S+):(\d+)")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker on 127.0.0.1, a free port, in this process."""
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as running:
        yield running


@dataclass
class BrokerProcess:
    """``riverbed broker`` as a child process; ``bootstrap`` is its HOST:PORT. As a context
    manager, it is killed when the block ends."""

    data_dir: Path
    process: subprocess.Popen[bytes]
    bootstrap: str
    log_path: Path

    def stop(self, *, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout_s)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

    def kill(self) -> None:
        self.stop(sig=signal.SIGKILL)

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.kill()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_broker_process(
    data_dir: Path,
    *,
    listen: str = "127.0.0.1:0",
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 30,
) -> BrokerProcess:
    """Start ``riverbed broker`` and wait for its "listening on" line."""
    log_path = data_dir.parent / f"broker-{data_dir.name}-{time.monotonic_ns()}.log"
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riverbed.cli.main",
            "broker",
            "--data-dir",
            str(data_dir),
            "--listen",
            listen,
            *extra_args,
        ],
        stdout=subprocess.PIPE,
        stderr=log_file,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log_file.close()
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = LISTENING.search(line)
        if match:
            bootstrap = f"{match.group(1).decode()}:{match.group(2).decode()}"
            return BrokerProcess(data_dir, process, bootstrap, log_path)
    process.kill()
    process.wait()
    process.stdout.close()
    raise RuntimeError(f"broker did not start: {line!r}\n{log_path.read_text()}")


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """``riverbed broker`` as a real child process on a free port."""
    with start_broker_process(tmp_path / "data") as running:
        yield running


def create_topic(bootstrap: str, name: str, *, partitions: int) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait for the answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(timeout=30)


def run_riverbed(
    *args: str, stdin: str | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


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
