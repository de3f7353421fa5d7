"""Log-based capture: a logical replication slot (pgoutput) streamed into the CDC topics.

The life of ``riverbed cdc run`` (:func:`run_log_capture`):

1. Pre-flight checks (:mod:`riverbed.cdc.preflight`), the publication created or completed,
   the topics created (compacted), the broker's last positions read back.
2. The slot. A new one is created with ``EXPORT_SNAPSHOT``: the snapshot it exports is the
   database exactly at the slot's consistent point. With ``--snapshot initial`` (the
   default) or ``when_needed``, every table is read in that snapshot (op ``r``), the rows
   are acknowledged by the broker, and then the state topic records that the snapshot is
   complete. A slot found without that record is the trace of an interrupted snapshot: it is
   dropped and the snapshot starts over (as Debezium's does). A slot that has disappeared
   after a complete snapshot is an error with ``initial`` (changes may be lost) and a new
   snapshot with ``when_needed``; ``never`` streams from wherever the slot is.
3. Streaming from the slot's confirmed position: each transaction's changes are produced in
   commit order, and the slot is told a transaction's end LSN (``flush_lsn``) only after
   the broker acknowledged every record of it and of the transactions before it. Killed
   at any moment, the capture loses nothing: PostgreSQL replays from the confirmed
   position, and the records a partition already has are skipped by their position header.
4. Heartbeats: every ``heartbeat_ms`` the capture asks the server for a keepalive; when no
   transaction is in flight it confirms the server's sent position, so the slot keeps up
   with the WAL while the captured tables are idle (the WAL of other tables and other
   databases is not held back).
5. On stop (SIGTERM), everything produced is acknowledged and confirmed; with
   ``drop_slot`` the slot and the snapshot record are removed.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from riverbed.cdc.changes import (
    ChangeTranslator,
    TransactionEnd,
    dumps,
    topic_name,
)
from riverbed.cdc.config import SNAPSHOT_MODES, CaptureConfig
from riverbed.cdc.errors import CaptureError, CaptureSetupError, PgOutputError
from riverbed.cdc.metrics import CaptureMetrics
from riverbed.cdc.pgoutput import decode_message
from riverbed.cdc.preflight import (
    TableInfo,
    connect,
    ensure_publication,
    identifier,
    inspect_tables,
)
from riverbed.cdc.publisher import STATE_TOPIC, Publisher
from riverbed.cdc.snapshot import snapshot_tables

__all__ = ["LogCaptureConfig", "format_lsn", "parse_lsn", "run_log_capture"]

FEEDBACK_EVERY_S = 0.05
"""How often at most an advanced confirmed position is sent to the server."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogCaptureConfig(CaptureConfig):
    """A log-based capture: its replication slot and publication, and how often it confirms
    the server's position while the captured tables are idle."""

    slot: str
    publication: str
    heartbeat_ms: int = 10_000
    drop_slot: bool = False
    """On stop, drop the slot and its snapshot record: the next run starts over."""


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class _Run:
    config: LogCaptureConfig
    say: Callable[[str], None]
    stopping: Callable[[], bool]
    db: str = ""
    tables: list[TableInfo] = field(default_factory=list)
    changes: int = 0
    metrics: CaptureMetrics = field(default_factory=CaptureMetrics)

    @property
    def state_key(self) -> bytes:
        return dumps({"prefix": self.config.prefix, "slot": self.config.slot})


def run_log_capture(
    config: LogCaptureConfig,
    *,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    metrics: CaptureMetrics | None = None,
) -> None:
    """Capture until ``stopping()`` is true (module docstring), counting in ``metrics``;
    errors as CaptureSetupError (the database is not ready) or CaptureError (the capture
    cannot go on)."""
    if config.snapshot not in SNAPSHOT_MODES:
        raise CaptureSetupError(f"--snapshot must be one of {', '.join(SNAPSHOT_MODES)}")
    state = _Run(config, say, stopping, metrics=metrics or CaptureMetrics())
    sql = connect(config.dsn, timeout_s=config.connect_timeout_s)
    publisher = None
    try:
        cursor = sql.cursor()
        cursor.execute("SELECT current_database()")
        state.db = cursor.fetchone()[0]
        state.tables = inspect_tables(cursor, config.tables, keys=config.keys)
        ensure_publication(cursor, config.publication, state.tables)
        publisher = Publisher(
            config.bootstrap, client_id="riverbed-cdc", partitions=config.partitions
        )
        publisher.check_reachable(config.connect_timeout_s)
        topics = [topic_name(config.prefix, t) for t in state.tables]
        publisher.ensure_topics([*topics, STATE_TOPIC])
        publisher.resume_positions(topics)
        replication = connect(config.dsn, timeout_s=config.connect_timeout_s, replication=True)
        try:
            _prepare_slot(state, sql, replication, publisher)
            if not stopping():
                _stream(state, replication, publisher)
        finally:
            replication.close()
        if config.drop_slot:
            _drop_slot(sql, config.slot)
            publisher.write_state(state.state_key, None)
            say(f"dropped slot {config.slot}")
    finally:
        if publisher is not None:
            publisher.close()
        sql.close()


def _slot_exists(sql: Any, state: _Run) -> bool:
    cursor = sql.cursor()
    cursor.execute(
        "SELECT plugin, database FROM pg_replication_slots WHERE slot_name = %s",
        (state.config.slot,),
    )
    row = cursor.fetchone()
    if row is None:
        return False
    plugin, database = row
    if plugin != "pgoutput" or database != state.db:
        raise CaptureSetupError(
            f"slot {state.config.slot} exists for {plugin!r} in database {database!r}; "
            "choose another --slot"
        )
    return True


def _prepare_slot(state: _Run, sql: Any, replication: Any, publisher: Publisher) -> None:
    config = state.config
    recorded = publisher.read_state(state.state_key)
    exists = _slot_exists(sql, state)
    if exists and (recorded is not None or config.snapshot == "never"):
        state.say(f"resuming from slot {config.slot}")
        return
    if exists:
        state.say(f"slot {config.slot} has no complete snapshot: starting it over")
        _drop_slot(sql, config.slot)
    elif recorded is not None and config.snapshot == "initial":
        raise CaptureError(
            f"slot {config.slot} is gone, but its snapshot was taken: changes made since may "
            "be lost. Run with --snapshot when_needed to take a new snapshot, or --snapshot "
            "never to stream from now on"
        )
    cursor = replication.cursor()
    try:
        cursor.execute(
            f"CREATE_REPLICATION_SLOT {identifier(config.slot)} LOGICAL pgoutput EXPORT_SNAPSHOT"
        )
    except psycopg2.Error as e:
        raise CaptureSetupError(
            f"cannot create slot {config.slot}: {' '.join(str(e).split())}"
        ) from None
    _, consistent_point, snapshot_name, _ = cursor.fetchone()
    lsn = parse_lsn(consistent_point)
    state.say(f"created slot {config.slot} at {consistent_point}")
    if config.snapshot == "never":
        publisher.write_state(state.state_key, dumps({"snapshot": "skipped", "lsn": lsn}))
    elif _snapshot(state, snapshot_name, lsn, publisher):
        publisher.write_state(state.state_key, dumps({"snapshot": "complete", "lsn": lsn}))


def _snapshot(state: _Run, snapshot_name: str, lsn: int, publisher: Publisher) -> bool:
    """Read every table in the slot's exported snapshot and produce its rows as op ``r``;
    False if stopped before the end (the next run starts it over)."""
    config = state.config
    reader = connect(config.dsn, timeout_s=config.connect_timeout_s)
    try:
        reader.autocommit = False
        reader.set_session(isolation_level="REPEATABLE READ", readonly=True)
        cursor = reader.cursor()
        cursor.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
        cursor.execute("SELECT txid_current()")  # the snapshot transaction's id
        tx_id = int(cursor.fetchone()[0])
        started = time.monotonic()

        total = snapshot_tables(
            cursor,
            state.tables,
            publisher,
            prefix=config.prefix,
            db=state.db,
            lsn=lsn,
            tx_id=tx_id,
            say=state.say,
            stopping=state.stopping,
            metrics=state.metrics,
        )
        if total is None:
            return False
        publisher.end_unit(lsn)
        publisher.flush()
        reader.rollback()
        elapsed = time.monotonic() - started
        state.say(
            f"snapshot complete: {total} rows in {elapsed:.1f} s "
            f"({total / elapsed if elapsed else 0:.0f} rows/s)"
        )
        return True
    finally:
        reader.close()


def _stream(state: _Run, replication: Any, publisher: Publisher) -> None:
    config = state.config
    cursor = replication.cursor()
    try:
        cursor.start_replication(
            slot_name=config.slot,
            decode=False,
            options={"proto_version": "1", "publication_names": config.publication},
            status_interval=max(1, config.heartbeat_ms // 1000),
        )
    except psycopg2.Error as e:
        reason = " ".join(str(e).split())
        raise CaptureError(f"cannot stream from slot {config.slot}: {reason}") from None
    translator = ChangeTranslator(
        prefix=config.prefix,
        db=state.db,
        tables={(t.schema, t.table): t for t in state.tables},
        clock_ms=lambda: int(time.time() * 1000),
    )
    in_transaction = False
    confirmed = 0
    metrics = state.metrics
    last_feedback = last_heartbeat = last_progress = time.monotonic()
    progress_changes = 0
    state.say(f"streaming from slot {config.slot}")

    def feedback(lsn: int, *, reply: bool = False) -> None:
        nonlocal confirmed, last_feedback
        confirmed = max(confirmed, lsn)
        cursor.send_feedback(flush_lsn=confirmed, write_lsn=confirmed, reply=reply, force=True)
        last_feedback = time.monotonic()

    received = 0
    while not state.stopping():
        message = cursor.read_message()
        if message is not None:
            try:
                decoded = decode_message(message.payload)
                result = translator.feed(decoded, message.data_start)
            except (PgOutputError, ValueError) as e:
                where = format_lsn(message.data_start)
                raise CaptureError(f"cannot decode the change at {where}: {e}") from None
            if isinstance(result, TransactionEnd):
                publisher.end_unit(result.end_lsn)
                in_transaction = False
                if result.commit_ts_ms is not None:
                    metrics.lag_seconds.set(max(time.time() * 1000 - result.commit_ts_ms, 0) / 1000)
            else:
                in_transaction = True
                for record in result:
                    if publisher.send(record) and record.value is not None:
                        state.changes += 1
                        metrics.changes.inc()
            received += 1
            if received % 256:
                continue  # a busy stream: look after the rest every 256 messages
        publisher.poll(0)
        now = time.monotonic()
        ready = publisher.confirmable()
        if ready is not None and ready > confirmed and now - last_feedback >= FEEDBACK_EVERY_S:
            feedback(ready)
        if message is None and not in_transaction and not publisher.pending():
            # Everything received is acknowledged: the server's sent position is safe.
            wal_end = cursor.wal_end
            if wal_end > confirmed and now - last_feedback >= FEEDBACK_EVERY_S:
                feedback(wal_end)
        if now - last_heartbeat >= config.heartbeat_ms / 1000:
            feedback(confirmed, reply=True)
            last_heartbeat = now
        metrics.slot_position(wal_end=cursor.wal_end, confirmed=confirmed)
        if now - last_progress >= config.progress_every_s:
            rate = (state.changes - progress_changes) / (now - last_progress)
            state.say(f"{state.changes} changes ({rate:.0f}/s), confirmed {format_lsn(confirmed)}")
            last_progress, progress_changes = now, state.changes
        if message is None:
            select.select([replication], [], [], 0.02 if publisher.pending() else 0.5)
    publisher.flush()
    ready = publisher.confirmable()  # complete transactions only, even when stopped inside one
    if ready is not None:
        feedback(max(ready, confirmed))
    state.say(f"stopped: {state.changes} changes, confirmed {format_lsn(confirmed)}")


def _drop_slot(sql: Any, slot: str) -> None:
    cursor = sql.cursor()
    for _ in range(50):  # the walsender of a just-closed connection may still hold it
        try:
            cursor.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            )
            return
        except psycopg2.errors.ObjectInUse:
            time.sleep(0.1)
    raise CaptureError(f"slot {slot} is still in use: stop the other capture first")
