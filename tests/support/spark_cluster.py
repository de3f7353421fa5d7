"""A Spark standalone cluster on this machine, from the installed PySpark's own launcher
(``bin/spark-class``: PySpark's wheel has no ``sbin/start-master.sh``): a master and
workers as child processes on free loopback ports, each with its log file, so that a test
can run a pipeline with ``--master spark://...`` and kill a worker with -9."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyspark

from tests.support.cli import ChildProcess
from tests.support.ports import free_port

SPARK_HOME = Path(pyspark.__file__).parent


def _daemon(directory: Path, name: str, *arguments: str) -> ChildProcess:
    log_path = directory / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *arguments],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={
                **os.environ,
                "SPARK_HOME": str(SPARK_HOME),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_NO_DAEMONIZE": "1",
                # No REST submission server (it takes the fixed port 6066).
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            },
        )
    return ChildProcess(process, log_path)


@dataclass
class SparkCluster:
    """A master and ``workers`` workers of one core each."""

    url: str
    master: ChildProcess
    workers: list[ChildProcess] = field(default_factory=list)

    @classmethod
    def start(cls, directory: Path, *, workers: int = 2, memory: str = "1536M") -> SparkCluster:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        master = _daemon(
            directory, "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
        )  # fmt: skip
        cluster = cls(f"spark://127.0.0.1:{port}", master)
        try:
            master.wait_for(r"I have been elected leader")
            for n in range(workers):
                work = directory / f"worker-{n}"
                work.mkdir()
                worker = _daemon(
                    directory, f"worker-{n}", "org.apache.spark.deploy.worker.Worker",
                    "--host", "127.0.0.1", "--cores", "1", "--memory", memory,
                    "--work-dir", str(work), "--webui-port", str(free_port()), cluster.url,
                )  # fmt: skip
                cluster.workers.append(worker)
            for worker in cluster.workers:
                worker.wait_for(r"Successfully registered with master")
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def executors(self, worker: int) -> list[psutil.Process]:
        """The processes worker ``worker`` launched: its executors' JVMs (and their Python
        workers)."""
        try:
            return psutil.Process(self.workers[worker].process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """Every daemon and what it launched, killed."""
        processes: list[psutil.Process] = []
        for n in range(len(self.workers)):
            processes += self.executors(n)
        for daemon in [*self.workers, self.master]:
            if daemon.process.poll() is None:
                daemon.process.kill()
            daemon.process.wait(timeout=30)
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(processes, timeout=30)
