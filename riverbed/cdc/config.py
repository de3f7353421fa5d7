"""What a capture is given, whichever its method: :class:`CaptureConfig`.

Each method adds its own settings: :class:`~riverbed.cdc.capture.LogCaptureConfig` (a
logical replication slot) and :class:`~riverbed.cdc.trigger.TriggerCaptureConfig` (row
triggers and an audit table). ``riverbed cdc run`` builds one from its flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SNAPSHOT_MODES", "CaptureConfig"]

SNAPSHOT_MODES = ("initial", "never", "when_needed")
"""Debezium's ``snapshot.mode`` values that riverbed supports (``--snapshot``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureConfig:
    dsn: str
    bootstrap: str
    prefix: str
    """Topics are named ``PREFIX.SCHEMA.TABLE``."""
    tables: tuple[str, ...]
    """``schema.table`` (or ``table``, in ``public``) of every captured table."""
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Key columns of tables without a primary key (``--key``), by ``schema.table``."""
    snapshot: str = "initial"
    """One of :data:`SNAPSHOT_MODES`."""
    partitions: int = 1
    """Partitions of the topics the capture creates (Kafka's num.partitions default)."""
    connect_timeout_s: float = 10.0
    progress_every_s: float = 10.0
