"""A capture's Prometheus metrics (:class:`CaptureMetrics`; ``riverbed cdc run --metrics
HOST:PORT`` serves them).

- ``riverbed_cdc_changes_total``: change records produced (create, update, delete, truncate;
  tombstones not counted): ``rate()`` of it is the changes per second;
- ``riverbed_cdc_snapshot_running`` (1 while the initial snapshot reads),
  ``riverbed_cdc_snapshot_tables`` and ``riverbed_cdc_snapshot_tables_done``,
  ``riverbed_cdc_snapshot_rows_total``: the snapshot's progress;
- ``riverbed_cdc_slot_lag_bytes``: WAL the server has sent or written past the position the
  capture confirmed to its slot (log-based capture), what the slot holds back;
- ``riverbed_cdc_lag_seconds``: for the last transaction captured, the time from its
  commit in PostgreSQL to its records being produced (Debezium's
  ``MilliSecondsBehindSource``, in seconds);
- ``riverbed_cdc_confirmed_lsn``: the position confirmed to the slot, as a number.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["CaptureMetrics"]


class CaptureMetrics:
    """One capture's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.changes = Counter(
            "riverbed_cdc_changes",
            "Change records produced (create, update, delete, truncate; not tombstones).",
            registry=registry,
        )
        self.snapshot_rows = Counter(
            "riverbed_cdc_snapshot_rows", "Rows read by the snapshot.", registry=registry
        )
        self.snapshot_running = Gauge(
            "riverbed_cdc_snapshot_running",
            "1 while the snapshot reads the tables, else 0.",
            registry=registry,
        )
        self.snapshot_tables = Gauge(
            "riverbed_cdc_snapshot_tables", "Tables the snapshot reads.", registry=registry
        )
        self.snapshot_tables_done = Gauge(
            "riverbed_cdc_snapshot_tables_done",
            "Tables the snapshot has read whole.",
            registry=registry,
        )
        self.slot_lag_bytes = Gauge(
            "riverbed_cdc_slot_lag_bytes",
            "WAL past the position confirmed to the replication slot (bytes).",
            registry=registry,
        )
        self.lag_seconds = Gauge(
            "riverbed_cdc_lag_seconds",
            "From the last captured transaction's commit to its records being produced.",
            registry=registry,
        )
        self.confirmed_lsn = Gauge(
            "riverbed_cdc_confirmed_lsn",
            "The WAL position confirmed to the replication slot.",
            registry=registry,
        )

    def snapshot_started(self, tables: int) -> None:
        self.snapshot_running.set(1)
        self.snapshot_tables.set(tables)
        self.snapshot_tables_done.set(0)

    def snapshot_ended(self) -> None:
        self.snapshot_running.set(0)

    def slot_position(self, *, wal_end: int, confirmed: int) -> None:
        self.confirmed_lsn.set(confirmed)
        self.slot_lag_bytes.set(max(wal_end - confirmed, 0))
