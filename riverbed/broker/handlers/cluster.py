"""DescribeCluster (60): what this cluster of one broker is (its configs: handlers.configs)."""

from __future__ import annotations

from typing import Any

from riverbed.broker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED
from riverbed.broker.state import BrokerState
from riverbed.protocol import ErrorCode, Request

__all__ = ["describe_cluster"]


async def describe_cluster(state: BrokerState, request: Request) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": state.cluster_id,
        "controller_id": state.config.node_id,
        "brokers": [
            {
                "broker_id": state.config.node_id,
                "host": state.advertised.host,
                "port": state.advertised.port,
                "rack": None,
            }
        ],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
