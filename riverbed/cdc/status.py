"""``riverbed cdc status``: how far each logical replication slot is behind the WAL.

A slot that does not advance makes PostgreSQL keep every WAL file from its restart point:
the disk fills (Debezium's users' most common complaint). The status shows, per slot, the
bytes of WAL between the server's current position and the slot's confirmed position, the
time lag PostgreSQL measured from the consumer's last feedback (``pg_stat_replication``'s
``flush_lag``, for an active slot; it reads as nothing once the consumer has caught up and
the server is idle), and ``wal_status`` (``lost`` means the slot's WAL was removed, e.g. by
``max_slot_wal_keep_size``: the capture must take a new snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SlotStatus", "slot_status"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotStatus:
    slot: str
    plugin: str
    database: str
    active: bool
    confirmed_lsn: str | None
    wal_lsn: str
    lag_bytes: int | None
    lag_ms: float | None
    """flush_lag of the slot's walsender; None when the slot is inactive or caught up."""
    wal_status: str | None


def slot_status(cursor: Any, slot: str | None = None) -> list[SlotStatus]:
    """The logical slots of the server (only ``slot``, if given), by name."""
    cursor.execute(
        "SELECT s.slot_name, s.plugin, s.database, s.active, s.confirmed_flush_lsn::text, "
        "pg_current_wal_lsn()::text, "
        "pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint, "
        "(SELECT extract(epoch FROM r.flush_lag) * 1000 FROM pg_stat_replication r "
        " WHERE r.pid = s.active_pid), s.wal_status "
        "FROM pg_replication_slots s WHERE s.slot_type = 'logical' "
        "AND (%s::text IS NULL OR s.slot_name = %s) ORDER BY s.slot_name",
        (slot, slot),
    )
    return [
        SlotStatus(
            slot=name,
            plugin=plugin,
            database=database,
            active=bool(active),
            confirmed_lsn=confirmed,
            wal_lsn=wal,
            lag_bytes=None if lag_bytes is None else int(lag_bytes),
            lag_ms=None if lag_ms is None else float(lag_ms),
            wal_status=wal_status,
        )
        for name, plugin, database, active, confirmed, wal, lag_bytes, lag_ms, wal_status in (
            cursor.fetchall()
        )
    ]
