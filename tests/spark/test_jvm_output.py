"""What riverbed.spark.jvm lets through of the JVM's output: everything but the start-up
noise log4j's configuration cannot reach. No Spark here: the forwarder is fed by hand."""

from __future__ import annotations

import os

from riverbed.spark.jvm import _Forwarder, is_noise

TWS_WORKER = (
    b"Streaming TransformWithStateInPandas Python worker received parameters for UDF. "
    b"State server port/path: 41853, key schema: StructType([StructField('page', "
    b"StringType(), True)]).\n"
)


def test_the_noise_is_the_jvm_incubator_warning_and_the_driver_worker_announcements() -> None:
    assert is_noise(b"WARNING: Using incubator modules: jdk.incubator.vector\n")
    assert is_noise(b"Starting Streaming TransformWithStateInPandas Python worker.\n")
    assert is_noise(TWS_WORKER)
    for kept in (
        b"26/11/24 13:38:20 ERROR MicroBatchExecution: Query q terminated with error\n",
        b"26/11/24 13:38:20 WARN ProcessingTimeExecutor: Current batch is falling behind.\n",
        b"Traceback (most recent call last):\n",
        b"  Streaming TransformWithStateInPandas Python worker, quoted in a traceback\n",
        b"WARNING: something else\n",
        b"\n",
    ):
        assert not is_noise(kept), kept


def _forward(*chunks: bytes) -> bytes:
    """What a forwarder writes to its target when the JVM writes ``chunks``."""
    read_end, target = os.pipe()
    forwarder = _Forwarder(target=target)
    for chunk in chunks:
        os.write(forwarder.write_end, chunk)
    forwarder.writer_started()  # the JVM's end of the pipe closes: the forwarder drains
    forwarder.join(10)
    os.close(target)
    with os.fdopen(read_end, "rb") as copied:
        return copied.read()


def test_every_other_line_is_copied_and_the_empty_line_after_an_announcement_goes() -> None:
    error = b"26/11/24 13:38:20 ERROR Utils: Aborting task\n\tat org.apache.spark.X(X.scala:1)\n"
    assert _forward(
        b"WARNING: Using incubator modules: jdk.incubator.vector\n",
        b"Starting Streaming TransformWithStateInPandas Python worker.\n\n",
        TWS_WORKER + b"\n",
        error,
        b"\n",  # an empty line after a kept one stays
        b'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: x\n',
        b"no newline at the end",
    ) == (
        error
        + b"\n"
        + b'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: x\n'
        + b"no newline at the end"
    )
