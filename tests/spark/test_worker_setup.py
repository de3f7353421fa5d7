"""``riverbed.spark.register`` in a session whose Python workers cannot import riverbed: one
line saying what to set, instead of a worker's traceback at the first query.

The case: a job run from a virtualenv without ``PYSPARK_PYTHON``, so Spark's workers run
another Python. Here that Python is a bare virtualenv (no riverbed, no pyarrow, no pandas;
Spark puts its own pyspark.zip on the worker's path). Each Spark session runs in its own
process: one pytest process cannot start a second session with another worker Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from riverbed.broker import Broker
from riverbed.spark.workers import failure_reason

ROOT = Path(__file__).resolve().parents[2]

REGISTER = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from pyspark.sql import SparkSession
import riverbed.spark
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
try:
    riverbed.spark.register(spark)
except riverbed.spark.WorkerSetupError as e:
    print(f"WorkerSetupError: {{e}}")
else:
    print("registered")
spark.stop()
"""

SESSION = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from pyspark import SparkContext
from pyspark.sql import SparkSession
import riverbed.spark
try:
    riverbed.spark.session(master="local[1]", log_level="ERROR")
except riverbed.spark.WorkerSetupError:
    print("WorkerSetupError")
print(f"active session: {{SparkSession.getActiveSession() is not None}}")
print(f"active context: {{SparkContext._active_spark_context is not None}}")
"""

CLI = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from riverbed.cli.main import main
sys.exit(main())
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python without riverbed or any other package: a new virtualenv."""
    path = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    found = subprocess.run(
        [python, "-c", "import riverbed"], capture_output=True, cwd=path, env=_environment("")
    )
    assert found.returncode != 0, "the bare virtualenv imports riverbed"
    return str(python)


def _environment(worker_python: str) -> dict[str, str]:
    """The workers run ``worker_python``; the driver finds this checkout through its
    sys.path, not PYTHONPATH, which Spark would hand on to the workers."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**environment, "PYSPARK_PYTHON": worker_python}


ADVICE = (
    "set PYSPARK_PYTHON (or spark.pyspark.python, with spark-submit) to a Python that has "
    f"riverbed installed, e.g. {sys.executable}, before the Spark session starts"
)


def _expected(worker_python: str) -> str:
    return (
        f"Spark's Python workers run {worker_python}, which cannot import riverbed "
        f"(ModuleNotFoundError: No module named 'riverbed'): {ADVICE}"
    )


def _register(
    worker_python: str, cwd: Path, script: str = REGISTER
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=cwd,  # not the checkout: a worker's sys.path starts with its directory
        env=_environment(worker_python),
        timeout=300,
        check=False,
    )


def test_register_says_in_one_line_that_the_workers_lack_riverbed(
    bare_python: str, tmp_path: Path
) -> None:
    done = _register(bare_python, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"WorkerSetupError: {_expected(bare_python)}"]
    assert "Traceback" not in done.stderr, done.stderr


def test_register_says_in_one_line_that_the_workers_cannot_start(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-python")
    done = _register(missing, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "WorkerSetupError: Spark's Python workers cannot run (IOException: Cannot run program "
        f'"{missing}": error=2, No such file or directory): {ADVICE}'
    ]


def test_a_session_started_only_to_fail_the_check_is_stopped(
    bare_python: str, tmp_path: Path
) -> None:
    done = _register(bare_python, tmp_path, SESSION)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "WorkerSetupError",
        "active session: False",
        "active context: False",
    ], done.stderr


def test_the_reason_of_a_failed_job_is_its_innermost_cause() -> None:
    java = (
        "An error occurred while calling o45.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage "
        "0.0 failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 (TID 0) "
        '(192.0.2.2 executor driver): java.io.IOException: Cannot run program "/x/python": '
        "error=2, No such file or directory\n"
        "\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)\n"
        "Caused by: java.io.IOException: error=2, No such file or directory\n"
    )
    assert failure_reason(java) == (
        'IOException: Cannot run program "/x/python": error=2, No such file or directory'
    )
    python = (
        "An exception was thrown from the Python worker:\n"
        "Traceback (most recent call last):\n"
        '  File "pyspark.zip/pyspark/worker_util.py", line 93, in check_python_version\n'
        "    raise PySparkRuntimeError(\n"
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python "
        "in worker has different version: 3.12 than that in driver: 3.11, PySpark cannot run "
        "with different minor versions.\n"
        "Please check environment variables PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON.\n"
    )
    assert failure_reason(python) == (
        "PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker has different "
        "version: 3.12 than that in driver: 3.11, PySpark cannot run with different minor "
        "versions."
    )
    assert failure_reason("\n  no cause here\n") == "no cause here"
    assert failure_reason("") == ""


def test_pipeline_run_ends_with_that_line_and_no_traceback(
    bare_python: str, broker: Broker, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable, "-c", CLI,
            "pipeline", "run", "page_views_per_minute", "--bootstrap", broker.bootstrap_servers,
            "--checkpoint", str(tmp_path / "checkpoint"), "--master", "local[1]",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_environment(bare_python),
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == f"riverbed pipeline: {_expected(bare_python)}"
    assert "Traceback" not in done.stderr, done.stderr
