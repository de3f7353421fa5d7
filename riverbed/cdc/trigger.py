"""Trigger-based capture (``--method trigger``): for databases where logical replication is
not allowed (no ``wal_level=logical``, no REPLICATION privilege).

Row triggers on each captured table write every change into an audit table,
``riverbed_cdc.<name>``, in the writing transaction; the capture drains it into the same
topics, in the same format, as the log-based capture, and deletes what the broker
acknowledged.

- **Values**: the trigger stores the row as its composite text, ``NEW::text``, in a
  function that runs with ``TimeZone=UTC`` and ``DateStyle=ISO``: each column in its output
  function's form, exactly what pgoutput sends, so both methods give identical JSON.
- **Order**: the audit id comes from a sequence at the time of the change. A transaction's
  changes are produced together, transactions ordered by their *last* audit id: when a
  transaction changes a row after another committed a change to it (row locks make it
  wait), its last id is the larger one, so every row's changes come in commit order. Only
  committed transactions are visible to the drain, and a transaction's rows become visible
  at once.
- **Times**: there is no commit time in a trigger; ``source.ts_ms`` is the time of the
  transaction's last change (``clock_timestamp()``), ``source.lsn`` the change's audit id
  (it grows per row, so consumers deduplicate as with the log-based capture) and
  ``source.txId`` the transaction id.
- **Snapshot**: the triggers are installed first; then the tables are read in one
  ``REPEATABLE READ`` transaction, and the audit rows of the transactions that snapshot
  already sees are deleted once the rows are acknowledged, so nothing is missed or doubled.
  The state topic records that the snapshot is complete (a crash during it starts it over).
- **Delivery**: audit rows are deleted only after their records were acknowledged; killed
  in between, the capture produces them again (same ``source.lsn``).
- **Schema changes**: ``ALTER TABLE ... ADD COLUMN`` appears in later changes. Dropping a
  column while changes are still waiting in the audit table is not supported.

The cost is paid by the writer: one extra INSERT per changed row, in its transaction (see
BENCHMARKS.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg2

from riverbed.cdc.changes import Record, dumps, topic_name
from riverbed.cdc.config import CaptureConfig
from riverbed.cdc.envelope import Json, Source, change_event, key_of, row_of
from riverbed.cdc.errors import CaptureError
from riverbed.cdc.metrics import CaptureMetrics
from riverbed.cdc.pgoutput import Column
from riverbed.cdc.preflight import TableInfo, connect, identifier, inspect_tables, quoted_name
from riverbed.cdc.publisher import STATE_TOPIC, Publisher
from riverbed.cdc.snapshot import snapshot_tables

__all__ = ["TriggerCaptureConfig", "parse_record", "run_trigger_capture"]

SCHEMA = "riverbed_cdc"
BATCH = 20_000
"""Audit rows read per poll (more when a transaction is larger)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerCaptureConfig(CaptureConfig):
    """A trigger-based capture: its audit table, and how often it is drained."""

    name: str
    """The audit table's name in schema riverbed_cdc (the CLI's --slot)."""
    poll_ms: int = 100
    drop: bool = False
    """On stop, remove the triggers and the audit table: the next run starts over."""

    @property
    def audit(self) -> str:
        return f"{identifier(SCHEMA)}.{identifier(self.name)}"


_FIELD = re.compile(r'"((?:[^"\\]+|\\.|"")*)"(?=,|\Z)|([^,"]*)(?=,|\Z)', re.DOTALL)
_ESCAPED = re.compile(r'\\(.)|""', re.DOTALL)


def _unescape(match: re.Match[str]) -> str:
    return match.group(1) if match.group(1) is not None else '"'


def parse_record(text: str) -> list[str | None]:
    """PostgreSQL's composite text ``(1,"a b",,"")`` as its fields (None for NULL)."""
    if len(text) < 2 or text[0] != "(" or text[-1] != ")":
        raise ValueError(f"not a record: {text[:40]!r}")
    body, position = text[1:-1], 0
    values: list[str | None] = []
    while True:
        match = _FIELD.match(body, position)
        if match is None:
            raise ValueError(f"not a record (at {position}): {text[:40]!r}")
        quoted, plain = match.groups()
        if quoted is None:
            values.append(plain or None)  # empty and unquoted: NULL
        elif "\\" in quoted or '""' in quoted:
            values.append(_ESCAPED.sub(_unescape, quoted))
        else:
            values.append(quoted)
        position = match.end()
        if position == len(body):
            return values
        position += 1  # the comma (the pattern's lookahead saw it)


def _install(cursor: Any, config: TriggerCaptureConfig, tables: list[TableInfo]) -> None:
    function = f"{identifier(SCHEMA)}.{identifier('capture_' + config.name)}"
    trigger = identifier(f"riverbed_cdc_{config.name}")
    cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {identifier(SCHEMA)}")
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS {config.audit} ("
        "id bigserial PRIMARY KEY, txid xid8 NOT NULL DEFAULT pg_current_xact_id(), "
        "schema_name text NOT NULL, table_name text NOT NULL, op char NOT NULL, "
        "old_row text, new_row text, at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    cursor.execute(
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql "
        "SET TimeZone = 'UTC' SET DateStyle = 'ISO' SET IntervalStyle = 'postgres' AS $$ "
        "BEGIN "
        "IF TG_LEVEL = 'STATEMENT' THEN "
        f"  INSERT INTO {config.audit} (schema_name, table_name, op) "
        "  VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, 't'); "
        "ELSIF TG_OP = 'INSERT' THEN "
        f"  INSERT INTO {config.audit} (schema_name, table_name, op, new_row) "
        "  VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, 'c', NEW::text); "
        "ELSIF TG_OP = 'UPDATE' THEN "
        f"  INSERT INTO {config.audit} (schema_name, table_name, op, old_row, new_row) "
        "  VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, 'u', OLD::text, NEW::text); "
        "ELSE "
        f"  INSERT INTO {config.audit} (schema_name, table_name, op, old_row) "
        "  VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, 'd', OLD::text); "
        "END IF; RETURN NULL; END $$"
    )
    for table in tables:
        name = quoted_name(table)
        cursor.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {name}")
        cursor.execute(
            f"CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {name} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
        truncate = identifier(f"riverbed_cdc_{config.name}_truncate")
        cursor.execute(f"DROP TRIGGER IF EXISTS {truncate} ON {name}")
        cursor.execute(
            f"CREATE TRIGGER {truncate} AFTER TRUNCATE ON {name} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )


def _uninstall(cursor: Any, config: TriggerCaptureConfig, tables: list[TableInfo]) -> None:
    for table in tables:
        for trigger in (f"riverbed_cdc_{config.name}", f"riverbed_cdc_{config.name}_truncate"):
            cursor.execute(f"DROP TRIGGER IF EXISTS {identifier(trigger)} ON {quoted_name(table)}")
    cursor.execute(f"DROP TABLE IF EXISTS {config.audit}")
    function = f"{identifier(SCHEMA)}.{identifier('capture_' + config.name)}"
    cursor.execute(f"DROP FUNCTION IF EXISTS {function}()")


@dataclass
class _Drain:
    """The audit table's rows turned into records, a transaction at a time."""

    config: TriggerCaptureConfig
    db: str
    tables: Mapping[tuple[str, str], TableInfo]
    columns: dict[tuple[str, str], tuple[list[Column], set[str]]] = field(default_factory=dict)

    def table_columns(
        self, cursor: Any, table: TableInfo, fields: int
    ) -> tuple[list[Column], set[str]]:
        """The columns of ``table`` that ``row(t.*)`` has (re-read when a row has more:
        ALTER TABLE), and the names of the generated ones (which pgoutput leaves out)."""
        key = (table.schema, table.table)
        known = self.columns.get(key)
        if known is None or len(known[0]) < fields:
            cursor.execute(
                "SELECT a.attname, a.atttypid, a.atttypmod, a.attgenerated <> '' "
                "FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum",
                (quoted_name(table),),
            )
            rows = cursor.fetchall()
            columns = [
                Column(name=n, type_oid=o, type_modifier=m, is_key=n in table.key_columns)
                for n, o, m, _ in rows
            ]
            known = (columns, {n for n, _, _, generated in rows if generated})
            self.columns[key] = known
        return known[0][:fields], known[1]

    def records(self, cursor: Any, rows: list[tuple[Any, ...]]) -> list[Record]:
        """One transaction's audit rows (by id) as records."""
        records: list[Record] = []
        last_at = max(row[7] for row in rows)
        last_id = max(row[0] for row in rows)  # the transaction's place in the order
        for audit_id, txid, schema, table_name, op, old_text, new_text, _ in rows:
            table = self.tables.get((schema, table_name))
            if table is None:
                continue
            source = Source(
                name=self.config.prefix,
                db=self.db,
                schema=schema,
                table=table_name,
                tx_id=int(txid),
                lsn=audit_id,
                commit_lsn=last_id,
                commit_ts_ms=int(last_at.timestamp() * 1000),
            )
            topic = topic_name(self.config.prefix, table)
            if op == "t":
                records.append(self._record(topic, {}, "t", None, None, source))
                continue
            try:
                old = None if old_text is None else self._row(cursor, table, old_text)
                new = None if new_text is None else self._row(cursor, table, new_text)
            except ValueError as e:  # not written by our trigger: stop, delete nothing
                raise CaptureError(
                    f"cannot read row {audit_id} of {self.config.audit} ({schema}.{table_name},"
                    f" op {op!r}): {e}; stopped before its transaction, which stays there"
                ) from None
            if op == "c":
                assert new is not None
                key = key_of(new, table.key_columns)
                records.append(self._record(topic, key, "c", None, new, source))
                continue
            assert old is not None
            old_key = key_of(old, table.key_columns)
            # What pgoutput sends: the old row with REPLICA IDENTITY FULL, else the old key
            # (for a delete or a key change) or nothing.
            full = table.replica_identity == "f"
            if op == "d" or (new is not None and key_of(new, table.key_columns) != old_key):
                records.append(
                    self._record(topic, old_key, "d", old if full else old_key, None, source)
                )
                records.append(Record(topic, dumps(old_key), None, None))
                if op == "u":
                    assert new is not None
                    records.append(
                        self._record(topic, key_of(new, table.key_columns), "c", None, new, source)
                    )
            else:
                records.append(
                    self._record(topic, old_key, "u", old if full else None, new, source)
                )
        return records

    def _row(self, cursor: Any, table: TableInfo, text: str) -> dict[str, Json]:
        fields = parse_record(text)
        columns, generated = self.table_columns(cursor, table, len(fields))
        row = row_of(columns, [None if f is None else f.encode() for f in fields])
        for name in generated:
            row.pop(name, None)
        return row

    @staticmethod
    def _record(
        topic: str,
        key: Mapping[str, Json],
        op: str,
        before: Mapping[str, Json] | None,
        after: Mapping[str, Json] | None,
        source: Source,
    ) -> Record:
        value = change_event(
            op=op, before=before, after=after, source=source, ts_ms=int(time.time() * 1000)
        )
        return Record(topic, dumps(dict(key)), dumps(value), None)


def run_trigger_capture(
    config: TriggerCaptureConfig,
    *,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    metrics: CaptureMetrics | None = None,
) -> None:
    """Install the triggers, snapshot if needed, then drain the audit table until stopped,
    counting in ``metrics``."""
    metrics = metrics or CaptureMetrics()
    sql = connect(config.dsn, timeout_s=config.connect_timeout_s)
    publisher = None
    try:
        cursor = sql.cursor()
        cursor.execute("SELECT current_database()")
        db = cursor.fetchone()[0]
        tables = inspect_tables(cursor, config.tables, keys=config.keys, logical=False)
        publisher = Publisher(config.bootstrap, client_id="riverbed-cdc-trigger",
                              partitions=config.partitions)  # fmt: skip
        publisher.check_reachable(config.connect_timeout_s)
        publisher.ensure_topics([*(topic_name(config.prefix, t) for t in tables), STATE_TOPIC])
        state_key = dumps({"prefix": config.prefix, "trigger": config.name})
        # One transaction: a trigger replaced on a restart is never missing for a moment (a
        # change made then would be lost), and nothing is left half installed.
        sql.autocommit = False
        try:
            _install(cursor, config, tables)
            sql.commit()
        except psycopg2.Error as e:  # e.g. not the owner of a table
            sql.rollback()
            reason = " ".join(str(e).split())
            raise CaptureError(f"cannot install the capture triggers: {reason}") from None
        finally:
            sql.autocommit = True
        if publisher.read_state(state_key) is None:
            if config.snapshot == "never":
                cursor.execute(f"DELETE FROM {config.audit}")
            elif not _snapshot(config, db, tables, publisher, say, stopping, cursor, metrics):
                return
            publisher.write_state(state_key, dumps({"snapshot": config.snapshot}))
        drain = _Drain(config, db, {(t.schema, t.table): t for t in tables})
        _drain_loop(config, drain, sql, publisher, say, stopping, metrics)
        if config.drop:
            sql.autocommit = False
            _uninstall(cursor, config, tables)
            sql.commit()
            publisher.write_state(state_key, None)
            say(f"removed the triggers and {SCHEMA}.{config.name}")
    finally:
        if publisher is not None:
            publisher.close()
        sql.close()


def _snapshot(
    config: TriggerCaptureConfig,
    db: str,
    tables: list[TableInfo],
    publisher: Publisher,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    cursor: Any,
    metrics: CaptureMetrics,
) -> bool:
    reader = connect(config.dsn, timeout_s=config.connect_timeout_s)
    try:
        reader.autocommit = False
        reader.set_session(isolation_level="REPEATABLE READ", readonly=True)
        read = reader.cursor()
        read.execute("SELECT pg_current_snapshot()::text, txid_current()")
        snapshot, tx_id = read.fetchone()
        total = snapshot_tables(
            read,
            tables,
            publisher,
            prefix=config.prefix,
            db=db,
            lsn=0,
            tx_id=tx_id,
            say=say,
            stopping=stopping,
            metrics=metrics,
        )
        if total is None:
            return False
        reader.rollback()
    finally:
        reader.close()
    publisher.flush()
    # The changes the snapshot already saw must not be applied again.
    cursor.execute(
        f"DELETE FROM {config.audit} WHERE pg_visible_in_snapshot(txid, %s::pg_snapshot)",
        (snapshot,),
    )
    return True


def _drain_loop(
    config: TriggerCaptureConfig,
    drain: _Drain,
    sql: Any,
    publisher: Publisher,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    metrics: CaptureMetrics,
) -> None:
    cursor = sql.cursor()
    limit, changes = BATCH, 0
    last_progress, progress_changes = time.monotonic(), 0
    say(f"draining {SCHEMA}.{config.name}")
    while not stopping():
        cursor.execute(
            f"SELECT id, txid::text, schema_name, table_name, op, old_row, new_row, at "
            f"FROM {config.audit} ORDER BY id LIMIT %s",
            (limit,),
        )
        rows = cursor.fetchall()
        full = len(rows) == limit
        by_transaction: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            by_transaction.setdefault(row[1], []).append(row)
        if full:  # a transaction may go on past the last row read: complete them
            cursor.execute(
                f"SELECT id, txid::text, schema_name, table_name, op, old_row, new_row, at "
                f"FROM {config.audit} WHERE id > %s AND txid::text = ANY(%s) ORDER BY id",
                (rows[-1][0], list(by_transaction)),
            )
            for row in cursor.fetchall():
                by_transaction[row[1]].append(row)
        cut = rows[-1][0] if full else None
        done = sorted(
            (t for t in by_transaction.values() if cut is None or t[-1][0] <= cut),
            key=lambda t: t[-1][0],
        )
        if full and not done:
            limit *= 2
            continue
        ids: list[int] = []
        unreadable = None
        for transaction in done:
            try:
                records = drain.records(cursor, transaction)
            except CaptureError as e:  # publish and delete the transactions before it
                unreadable = e
                break
            for record in records:
                publisher.send(record)
                if record.value is not None:
                    changes += 1
                    metrics.changes.inc()
            ids.extend(row[0] for row in transaction)
        if ids:
            publisher.flush()
            cursor.execute(f"DELETE FROM {config.audit} WHERE id = ANY(%s)", (ids,))
            limit = BATCH
        if unreadable is not None:
            raise unreadable
        now = time.monotonic()
        if now - last_progress >= config.progress_every_s:
            rate = (changes - progress_changes) / (now - last_progress)
            say(f"{changes} changes ({rate:.0f}/s)")
            last_progress, progress_changes = now, changes
        if not full:
            time.sleep(config.poll_ms / 1000)
    say(f"stopped: {changes} changes")
