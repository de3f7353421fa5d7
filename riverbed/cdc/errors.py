"""Errors of change data capture, one hierarchy for both methods (log- and trigger-based).

    CdcError                        anything the capture refuses or cannot do
    ├── CaptureSetupError           the database or an argument is not ready for capture:
    │                               the message names what to change (wal_level, a
    │                               privilege, a primary key, --key, --snapshot, the DSN)
    ├── CaptureError                the capture cannot go on (no broker, a refused record, a
    │                               lost slot); nothing unacknowledged was confirmed
    └── PgOutputError               bytes that are not a pgoutput message of protocol
                                    version 1 (the server's fault, or a plugin mismatch)

Every message is one line, for ``riverbed cdc`` to print as it is. The pure converters
(:mod:`~riverbed.cdc.changes`, :mod:`~riverbed.cdc.envelope`, :mod:`~riverbed.cdc.snapshot`'s
COPY parser, :func:`~riverbed.cdc.trigger.parse_record`) raise ``ValueError`` for input they
cannot read, as Python's own parsers do; the log-based capture reports one met while
streaming as a :class:`CaptureError` naming the LSN, the trigger-based one naming the audit
row (which it keeps, with every row after it).
"""

from __future__ import annotations


class CdcError(Exception):
    """Base class of every error the capture raises on purpose."""


class CaptureSetupError(CdcError):
    """The database is not ready for capture (the message names what to change)."""


class CaptureError(CdcError):
    """The capture cannot go on (the message says why); nothing unacknowledged is confirmed."""


class PgOutputError(CdcError):
    """Bytes that are not a pgoutput message of protocol version 1 (the server's fault, or a
    plugin/version mismatch)."""
