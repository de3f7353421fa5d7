"""``riverbed broker`` as a child process (:func:`start_broker_process`), and topics created
with confluent-kafka's AdminClient."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cli import ChildProcess

LISTENING = re.compile(rb"riverbed broker listening on (\S+):(\d+)")
METRICS = re.compile(r"riverbed broker metrics on (\S+)")
GROUPS_FAST = ("--set", "group.initial.rebalance.delay.ms=0")
"""Consumer-group tests need no initial rebalance delay (Kafka's 3 s would only slow them)."""


@dataclass
class BrokerProcess:
    """``riverbed broker`` as a child process; ``bootstrap`` is its HOST:PORT. As a context
    manager, it is killed when the block ends."""

    data_dir: Path
    process: subprocess.Popen[bytes]
    bootstrap: str
    log_path: Path
    _metrics_url: str | None = None

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

    def metrics_url(self) -> str:
        """Where a broker started with ``metrics.listen`` set serves ``/metrics``: the line
        it prints after "listening on" (read once)."""
        if self._metrics_url is None:
            assert self.process.stdout is not None
            line = self.process.stdout.readline().decode()
            match = METRICS.search(line)
            assert match is not None, f"no metrics line: {line!r}\n{self.log_text()}"
            self._metrics_url = match.group(1)
        return self._metrics_url


def start_broker_process(
    data_dir: Path,
    *,
    listen: str = "127.0.0.1:0",
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 30,
) -> BrokerProcess:
    """Start ``riverbed broker`` and wait for its "listening on" line."""
    log_path = data_dir.parent / f"broker-{data_dir.name}-{time.monotonic_ns()}.log"
    child = ChildProcess.spawn(
        log_path,
        "broker",
        "--data-dir",
        str(data_dir),
        "--listen",
        listen,
        *extra_args,
        stdout=subprocess.PIPE,
    )
    process = child.process
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
    raise RuntimeError(f"broker did not start: {line!r}\n{child.log()}")


def running_broker(tmp_path: Path, *extra_args: str) -> Iterator[BrokerProcess]:
    """For a fixture to ``yield from``: ``riverbed broker`` as a child process with
    ``extra_args`` (``--set key=value`` ...), killed after the test."""
    running = start_broker_process(tmp_path / "data", extra_args=extra_args)
    try:
        yield running
    finally:
        running.kill()


def create_topic(bootstrap: str, name: str, *, partitions: int) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait for the answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(timeout=30)
