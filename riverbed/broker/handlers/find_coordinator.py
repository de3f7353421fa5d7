"""FindCoordinator (10): which broker coordinates a group or a transactional id.

This broker coordinates every group and every transactional id, so the answer is always
itself, except for an empty transactional id or an unknown key type (INVALID_REQUEST).
Version 4 batches its keys where older versions ask for one and are answered at the top
level; the handler fills both shapes and the codec keeps the one the negotiated version has.
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.state import BrokerState
from riverbed.protocol import ErrorCode, Request

__all__ = ["find_coordinator"]

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


async def find_coordinator(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    key_type = getattr(body, "key_type", KEY_TYPE_GROUP)
    keys = list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]
    coordinators = []
    for key in keys:
        entry: dict[str, Any] = {
            "key": key,
            "node_id": state.config.node_id,
            "host": state.advertised.host,
            "port": state.advertised.port,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        refusal = None
        if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            refusal = f"unknown key type {key_type}"
        elif key_type == KEY_TYPE_TRANSACTION and not key:
            refusal = "empty transactional id"
        if refusal is not None:
            entry.update(
                node_id=-1,
                host="",
                port=-1,
                error_code=ErrorCode.invalid_request,
                error_message=refusal,
            )
        coordinators.append(entry)
    first = coordinators[0] if coordinators else {}
    return {
        "throttle_time": 0,
        "coordinators": coordinators,
        # v0-3: one key, answered at the top level.
        "error_code": first.get("error_code", ErrorCode.none),
        "error_message": first.get("error_message"),
        "node_id": first.get("node_id", -1),
        "host": first.get("host", ""),
        "port": first.get("port", -1),
    }
