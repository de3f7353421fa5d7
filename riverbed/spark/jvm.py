"""The driver's JVM of :func:`riverbed.spark.session`: Spark's warnings and errors, without
its start-up noise.

PySpark starts the driver's JVM (``spark-submit``, through
:func:`pyspark.java_gateway.launch_gateway`) with this process's stdout and stderr, and Spark
copies its Python workers' output to the JVM's stderr. Left alone, a session prints lines a
riverbed user has no use for, measured with Spark 4.3 on Java 17:

- the JVM's own ``WARNING: Using incubator modules: jdk.incubator.vector`` (Spark 4 starts
  it with ``--add-modules=jdk.incubator.vector``, and the JVM has no switch to keep that
  warning to itself);
- log4j with Spark's default profile: ``Using Spark's default log4j profile: ...``,
  ``Setting default log level to "WARN".``, ``To adjust logging level use
  sc.setLogLevel(newLevel). ...``, and Hadoop's ``WARN NativeCodeLoader: Unable to load
  native-hadoop library for your platform...``;
- PySpark's transformWithState driver worker
  (``pyspark/sql/streaming/transform_with_state_driver_worker.py``), which ``print``\\ s five
  lines, each followed by an empty one, when a query with a stateful processor starts
  (``Starting Streaming TransformWithStateInPandas Python worker.`` ...).

:func:`start_jvm` keeps them out: it passes :data:`LOG4J2_CONFIG` (WARN and above, on
stderr, NativeCodeLoader at ERROR) with ``spark.driver.extraJavaOptions``, which spark-submit
applies to the driver's JVM, unless the session's configuration sets that option itself; and
it hands ``launch_gateway`` pipes for the JVM's stdout and stderr, read by two threads that
copy every line to this process's stdout and stderr except the two kinds of lines log4j's
configuration cannot reach (:func:`is_noise`). All else gets through as before: Spark's WARN
and ERROR lines, a Python worker's traceback, the executors' librdkafka warnings. When this
process exits, it first waits until the JVM's output has been quiet for
:data:`EXIT_QUIET_S` (:data:`EXIT_DRAIN_S` at most), so that the threads copy what was
still on its way: without that wait, the end of a worker's traceback written while a query
stopped was lost with them (measured: only its first line got out). The JVM is left to end
as PySpark's always does, when this process is gone; ending it first, from an exit handler,
made PySpark's accumulator server print an EOFError traceback of its own when a session
had not been stopped.

PySpark starts one JVM per process and keeps it after ``SparkSession.stop()`` for the
process's later sessions (``SparkContext._gateway``), so only a process's first session
starts one; the later ones run in it, quiet as well. Not quieted: a JVM that PySpark started
before riverbed could (another ``SparkContext`` first), one that runs the process
(``spark-submit app.py``, which sets ``PYSPARK_GATEWAY_PORT``), and Spark Connect.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway

__all__ = [
    "DRIVER_JAVA_OPTIONS",
    "EXIT_DRAIN_S",
    "EXIT_QUIET_S",
    "LOG4J2_CONFIG",
    "is_noise",
    "log4j_settings",
    "start_jvm",
]

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
"""The driver's log4j2 configuration (its comments say why each line is there)."""

DRIVER_JAVA_OPTIONS = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"
"""``spark.driver.extraJavaOptions`` of a riverbed session: a ``file:`` URI, which needs no
quoting in spark-submit's option string whatever the path holds."""


def log4j_settings() -> dict[str, str]:
    """The session setting that gives the driver :data:`LOG4J2_CONFIG`, or none if the file
    is missing (an installation without riverbed's package data): log4j would then complain
    about a configuration it cannot find, on top of Spark's default profile."""
    if not LOG4J2_CONFIG.is_file():
        return {}
    return {"spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS}


EXIT_QUIET_S = 0.2
"""How long the JVM's output must have been quiet for this process to exit: the lines of one
traceback arrive within milliseconds of each other."""
EXIT_DRAIN_S = 2.0
"""How long this process's exit waits for that quiet at most."""

_NOISE = re.compile(
    rb"WARNING: Using incubator modules: "
    rb"|(Starting )?Streaming TransformWithStateIn\w+ Python worker\b"
)


def is_noise(line: bytes) -> bool:
    """Whether ``line`` of the JVM's output is start-up noise that log4j's configuration
    cannot keep out (the module docstring lists it)."""
    return _NOISE.match(line) is not None


def start_jvm(conf: SparkConf) -> None:
    """Start the driver's JVM for a session with ``conf`` (it must hold the master and app
    name unless ``spark-submit`` settings give them), its output filtered, unless PySpark
    already has one or the session is a Spark Connect one; the SparkContext it starts is the
    one ``SparkSession.builder.getOrCreate()`` then uses."""
    if SparkContext._gateway is not None or _is_connect(conf.getAll()):
        return
    readers = [_Forwarder(target=fd) for fd in (1, 2)]
    try:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]  # PySpark has no hints here
            conf, popen_kwargs={"stdout": readers[0].write_end, "stderr": readers[1].write_end}
        )
    finally:
        for reader in readers:
            reader.writer_started()  # the JVM holds its own copies of the write ends
    atexit.register(_wait_for_quiet, readers)
    SparkContext(conf=conf, gateway=gateway)


def _wait_for_quiet(readers: list[_Forwarder]) -> None:
    """At this process's exit: let the forwarders copy what the JVM is still writing."""
    deadline = time.monotonic() + EXIT_DRAIN_S
    while time.monotonic() < deadline and any(r.active_within(EXIT_QUIET_S) for r in readers):
        time.sleep(0.02)


def _is_connect(settings: list[tuple[str, str]]) -> bool:
    """Whether PySpark would make a Spark Connect session of these settings (no JVM here)."""
    config: Mapping[str, str] = dict(settings)
    mode = config.get("spark.api.mode", os.environ.get("SPARK_API_MODE", "classic")).lower()
    return (
        mode == "connect"
        or "spark.remote" in config
        or "SPARK_REMOTE" in os.environ
        or "SPARK_CONNECT_MODE_ENABLED" in os.environ
    )


class _Forwarder:
    """A pipe for one of the JVM's output streams, and the thread that copies its lines to
    ``target`` (a file descriptor of this process), noise left out. The thread runs until
    the JVM and every process that inherited the pipe have exited; a line it cannot write
    (``target`` closed) is dropped, and it keeps draining so that the JVM never blocks."""

    def __init__(self, *, target: int) -> None:
        read_end, self.write_end = os.pipe()
        self._target = target
        self._last_line_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, args=(os.fdopen(read_end, "rb"),), daemon=True,
            name=f"spark-jvm-output-{target}",
        )  # fmt: skip
        self._thread.start()

    def writer_started(self) -> None:
        os.close(self.write_end)

    def join(self, timeout_s: float) -> None:
        """Wait until every writer has closed the pipe and its lines are copied."""
        self._thread.join(timeout_s)

    def active_within(self, seconds: float) -> bool:
        """Whether a line came in the last ``seconds``."""
        return time.monotonic() - self._last_line_at < seconds

    def _run(self, lines: BinaryIO) -> None:
        after_noise = False
        with lines:
            for line in lines:
                self._last_line_at = time.monotonic()
                # The driver worker's print(f"...\n") ends each of its lines with an empty one.
                dropped = is_noise(line) or (after_noise and not line.strip())
                after_noise = is_noise(line)
                if not dropped:
                    self._write(line)

    def _write(self, line: bytes) -> None:
        try:
            while line:
                line = line[os.write(self._target, line) :]
        except OSError:
            pass  # nowhere to write it (stdout or stderr closed): the line is lost, not the JVM
