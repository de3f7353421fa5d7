"""A private ``redis-server`` for the tests, the benchmarks and ``make demo``: Debian's
server on 127.0.0.1 and a free port, its files in a temporary directory, no persistence
(the sink's durability is Redis's business, not what is shown), stopped with the process.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RedisServer"]


@dataclass
class RedisServer:
    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, timeout_s: float = 10) -> RedisServer:
        program = shutil.which("redis-server")
        if program is None:
            raise RuntimeError("redis-server is not installed: run `make install`")
        directory = Path(tempfile.mkdtemp(prefix="riverbed-redis-"))
        for _ in range(5):  # a free port may be taken between the probe and the bind
            port = _free_port()
            process = subprocess.Popen(
                [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(directory), "--protected-mode", "yes"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            return cls(process, port, directory)
                except OSError:
                    time.sleep(0.02)
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
