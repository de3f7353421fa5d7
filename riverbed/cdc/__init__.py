"""Change data capture: PostgreSQL tables into topics, in Debezium's format.

Every committed change of a captured table becomes a record on topic
``PREFIX.SCHEMA.TABLE``: the key is the JSON object of the primary-key columns, the value
Debezium's envelope with schemas disabled (``before``, ``after``, ``op`` ``c|u|d|r|t``,
``ts_ms``, ``source``), and a delete is followed by a tombstone. An initial snapshot (op
``r``) comes first; then the changes, per key in commit order. Two methods fill the same
topics in the same format (``riverbed cdc run --method log|trigger``):

- log-based (:func:`run_log_capture`): a logical replication slot streamed with the
  ``pgoutput`` plugin; needs ``wal_level=logical`` and the REPLICATION privilege; the slot
  confirms only what the broker acknowledged, so a kill -9 loses nothing;
- trigger-based (:func:`run_trigger_capture`): row triggers write each change into an audit
  table that the capture drains, for databases where logical replication is not allowed.

The modules, from the bytes up:

- :mod:`~riverbed.cdc.pgoutput`: the pgoutput message decoder (sans-IO);
- :mod:`~riverbed.cdc.envelope`: column texts to JSON values, Debezium's envelope;
- :mod:`~riverbed.cdc.changes`: decoded messages to records (pure), with their positions;
- :mod:`~riverbed.cdc.snapshot`: the initial snapshot, read with ``COPY``;
- :mod:`~riverbed.cdc.preflight`: connecting, the checks before a capture starts, the
  publication;
- :mod:`~riverbed.cdc.publisher`: the Kafka side (compacted topics, an idempotent
  producer, what is acknowledged and may be confirmed);
- :mod:`~riverbed.cdc.config`, :mod:`~riverbed.cdc.capture`, :mod:`~riverbed.cdc.trigger`:
  the settings and the two methods;
- :mod:`~riverbed.cdc.status`: how far each replication slot is behind (``riverbed cdc
  status``);
- :mod:`~riverbed.cdc.errors`: the one exception hierarchy, rooted at :class:`CdcError`.
"""

from __future__ import annotations

from riverbed.cdc.capture import LogCaptureConfig, run_log_capture
from riverbed.cdc.config import CaptureConfig
from riverbed.cdc.errors import CaptureError, CaptureSetupError, CdcError, PgOutputError
from riverbed.cdc.trigger import TriggerCaptureConfig, run_trigger_capture

__all__ = [
    "CaptureConfig",
    "CaptureError",
    "CaptureSetupError",
    "CdcError",
    "LogCaptureConfig",
    "PgOutputError",
    "TriggerCaptureConfig",
    "run_log_capture",
    "run_trigger_capture",
]
