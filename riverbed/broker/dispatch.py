"""Which handler serves which API key; the served set is also what ApiVersions advertises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from riverbed.broker.handlers import (
    cluster,
    configs,
    fetch,
    list_offsets,
    metadata,
    produce,
    producers,
    records,
    transactions,
)
from riverbed.broker.handlers import consumer_groups as consumer_protocol
from riverbed.broker.handlers import groups as group_handlers
from riverbed.broker.handlers import offsets as offset_handlers
from riverbed.broker.handlers import topics as topic_admin
from riverbed.broker.state import BrokerState
from riverbed.protocol import ApiKey, Request, api_versions_body

__all__ = ["HANDLERS", "Handler"]

Handler = Callable[[BrokerState, Request], Awaitable[dict[str, Any] | None]]


async def _api_versions(state: BrokerState, request: Request) -> dict[str, Any]:
    return api_versions_body(served=frozenset(HANDLERS))


HANDLERS: Mapping[ApiKey, Handler] = MappingProxyType(
    {
        ApiKey.PRODUCE: produce.handle,
        ApiKey.FETCH: fetch.handle,
        ApiKey.LIST_OFFSETS: list_offsets.handle,
        ApiKey.METADATA: metadata.handle,
        ApiKey.API_VERSIONS: _api_versions,
        ApiKey.CREATE_TOPICS: topic_admin.create_topics,
        ApiKey.DELETE_TOPICS: topic_admin.delete_topics,
        ApiKey.CREATE_PARTITIONS: topic_admin.create_partitions,
        ApiKey.DELETE_RECORDS: records.delete_records,
        ApiKey.INIT_PRODUCER_ID: producers.handle,
        ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
        ApiKey.ALTER_CONFIGS: configs.alter_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
        ApiKey.DESCRIBE_CLUSTER: cluster.describe_cluster,
        ApiKey.FIND_COORDINATOR: group_handlers.find_coordinator,
        ApiKey.JOIN_GROUP: group_handlers.join_group,
        ApiKey.SYNC_GROUP: group_handlers.sync_group,
        ApiKey.HEARTBEAT: group_handlers.heartbeat,
        ApiKey.LEAVE_GROUP: group_handlers.leave_group,
        ApiKey.LIST_GROUPS: group_handlers.list_groups,
        ApiKey.DESCRIBE_GROUPS: group_handlers.describe_groups,
        ApiKey.DELETE_GROUPS: group_handlers.delete_groups,
        ApiKey.OFFSET_COMMIT: offset_handlers.offset_commit,
        ApiKey.OFFSET_FETCH: offset_handlers.offset_fetch,
        ApiKey.OFFSET_DELETE: offset_handlers.offset_delete,
        ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_protocol.heartbeat,
        ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_protocol.describe,
        ApiKey.ADD_PARTITIONS_TO_TXN: transactions.add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: transactions.add_offsets_to_txn,
        ApiKey.END_TXN: transactions.end_txn,
        ApiKey.TXN_OFFSET_COMMIT: transactions.txn_offset_commit,
        ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
        ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
    }
)
