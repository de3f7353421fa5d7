"""The classic group APIs: JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16) and DeleteGroups (42).

Thin translations between the wire and :class:`~riverbed.broker.groups.GroupCoordinator`;
every rule lives there. ListGroups and DeleteGroups cover consumer-protocol (KIP-848) groups
too; DescribeGroups is the classic protocol's (Kafka 4 answers other groups as Dead, with
GROUP_ID_NOT_FOUND from v6). LeaveGroup v3 batches its members where older versions name
one, so that handler fills both shapes and the codec keeps the one the negotiated version
has. FindCoordinator, which groups and transactions share, is
:mod:`riverbed.broker.handlers.find_coordinator`.
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED
from riverbed.broker.state import CLIENT_HOST, BrokerState
from riverbed.log import LogError
from riverbed.protocol import ErrorCode, Request, milliseconds

__all__ = [
    "delete_groups",
    "describe_groups",
    "heartbeat",
    "join_group",
    "leave_group",
    "list_groups",
    "sync_group",
]


async def join_group(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    session_timeout_ms = milliseconds(body.session_timeout)
    # v0 has no rebalance timeout: Kafka uses the session timeout.
    rebalance_timeout_ms = milliseconds(getattr(body, "rebalance_timeout", body.session_timeout))
    result = await state.groups.join_group(
        group_id=body.group_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.client_id or "",
        client_host=CLIENT_HOST.get(),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        protocol_type=body.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        # KIP-394: from v4 on a new member first gets its id with MEMBER_ID_REQUIRED.
        require_known_member_id=request.api_version >= 4,
    )
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        # v0-6 have a non-nullable protocol_name: "" when there is none.
        "protocol_name": result.protocol_name
        if result.protocol_name is not None or request.api_version >= 7
        else "",
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": member_id, "group_instance_id": instance, "metadata": metadata}
            for member_id, instance, metadata in result.members
        ],
    }


async def sync_group(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    result = await state.groups.sync_group(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in body.assignments},
    )
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


async def heartbeat(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    code = state.groups.heartbeat(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
    )
    return {"throttle_time": 0, "error_code": code}


async def leave_group(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    if hasattr(body, "members"):
        wanted = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        wanted = [(body.member_id, None)]
    group_code, codes = state.groups.leave_group(group_id=body.group_id, members=wanted)
    if not hasattr(body, "members") and group_code == ErrorCode.none:
        group_code = codes[0]  # v0-2: the one member's error is the response's
    return {
        "throttle_time": 0,
        "error_code": group_code,
        "members": [
            {"member_id": member_id, "group_instance_id": instance, "error_code": code}
            for (member_id, instance), code in zip(wanted, codes, strict=True)
        ],
    }


async def list_groups(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    states = list(getattr(body, "states_filter", ()))
    types = list(getattr(body, "types_filter", ()))
    if not state.groups.loaded:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.coordinator_load_in_progress,
            "groups": [],
        }
    listings = state.groups.list_groups(states=states, types=types)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in listings
        ],
    }


async def describe_groups(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    groups = []
    for group_id in body.groups:
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_id": group_id,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }
        if not state.groups.loaded:
            entry["error_code"] = ErrorCode.coordinator_load_in_progress
            groups.append(entry)
            continue
        described = state.groups.describe_group(group_id)
        if request.api_version >= 6:  # older versions answer Dead without an error (Kafka's)
            entry.update(error_code=described.error_code, error_message=described.error_message)
        entry.update(
            group_state=described.state,
            protocol_type=described.protocol_type,
            protocol_data=described.protocol_name,
            members=[
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata,
                    "member_assignment": m.assignment,
                }
                for m in described.members
            ],
        )
        groups.append(entry)
    return {"throttle_time": 0, "groups": groups}


async def delete_groups(state: BrokerState, request: Request) -> dict[str, Any]:
    results = []
    for group_id in request.body.groups_names:
        try:
            code = await state.groups.delete_group(group_id)
        except (LogError, OSError) as e:
            code = error_code_for(e)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}
