"""The workload tests use the CDC tests' private PostgreSQL cluster (one per session)."""

from __future__ import annotations

from tests.cdc.conftest import postgres  # noqa: F401
