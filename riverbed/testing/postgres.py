"""A private PostgreSQL cluster for the tests, the benchmarks and ``make demo``: ``initdb`` +
``pg_ctl`` with ``wal_level=logical``, on 127.0.0.1 and a free port, in a temporary
directory; :func:`database` makes a database of its own for one test or measurement.

PostgreSQL refuses to run as root, so as root the server programs run as the ``postgres``
user (``runuser -u postgres --``) in a directory that user owns; as any other user they run
directly. The cluster trusts local connections (it listens on loopback only and lives as
long as the test session or the demo). It is throwaway: ``fsync`` is off.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2

SERVER_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",  # a throwaway cluster: the database's own durability is not what is shown
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def _bin_dir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError("PostgreSQL is not installed (no pg_ctl): run `make install`")
    return Path(candidates[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresCluster:
    directory: Path
    port: int
    _as_postgres: bool

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(_bin_dir() / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    @classmethod
    def start(cls, **settings: str) -> PostgresCluster:
        """A new cluster; ``settings`` override SERVER_SETTINGS (e.g. wal_level="replica")."""
        as_postgres = os.geteuid() == 0
        directory = Path(tempfile.mkdtemp(prefix="riverbed-pg-"))
        if as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(directory, user.pw_uid, user.pw_gid)
        cluster = cls(directory, _free_port(), as_postgres)
        data = directory / "data"
        cluster._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with (data / "postgresql.conf").open("a") as conf:
            for key, value in {**SERVER_SETTINGS, **settings, "port": str(cluster.port)}.items():
                conf.write(f"{key} = {value}\n")
            conf.write(f"unix_socket_directories = '{directory}'\n")
        cluster._run("pg_ctl", "-D", str(data), "-l", str(directory / "server.log"), "-w", "start")
        return cluster

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def database(postgres: PostgresCluster) -> Iterator[str]:
    """A new database of ``postgres`` for one test or measurement (its DSN); its
    replication slots and itself are dropped after."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(postgres.dsn)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield postgres.dsn.rsplit("/", 1)[0] + f"/{name}"
    finally:
        cursor = admin.cursor()
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        for _ in range(50):
            cursor.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active",
                (name,),
            )
            cursor.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s", (name,))
            if (cursor.fetchone() or (0,))[0] == 0:
                break
            time.sleep(0.1)
        cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def sql(dsn: str) -> Any:
    """An autocommit connection to ``dsn`` (psycopg2's)."""
    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    return connection
