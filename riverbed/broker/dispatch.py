"""Which handler serves which API key; the served set is also what ApiVersions advertises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from riverbed.broker.handlers import (
    classic_groups,
    cluster,
    configs,
    consumer_groups,
    delete_records,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    offset_commits,
    produce,
    topics,
    transactions,
)
from riverbed.broker.state import BrokerState
from riverbed.protocol import ApiKey, Request, api_versions_body

__all__ = ["HANDLERS", "Handler"]

Handler = Callable[[BrokerState, Request], Awaitable[dict[str, Any] | None]]


async def api_versions(state: BrokerState, request: Request) -> dict[str, Any]:
    return api_versions_body(served=frozenset(HANDLERS))


HANDLERS: Mapping[ApiKey, Handler] = MappingProxyType(
    {
        ApiKey.PRODUCE: produce.produce,
        ApiKey.FETCH: fetch.fetch,
        ApiKey.LIST_OFFSETS: list_offsets.list_offsets,
        ApiKey.METADATA: metadata.metadata,
        ApiKey.API_VERSIONS: api_versions,
        ApiKey.CREATE_TOPICS: topics.create_topics,
        ApiKey.DELETE_TOPICS: topics.delete_topics,
        ApiKey.CREATE_PARTITIONS: topics.create_partitions,
        ApiKey.DELETE_RECORDS: delete_records.delete_records,
        ApiKey.INIT_PRODUCER_ID: init_producer_id.init_producer_id,
        ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
        ApiKey.ALTER_CONFIGS: configs.alter_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
        ApiKey.DESCRIBE_CLUSTER: cluster.describe_cluster,
        ApiKey.FIND_COORDINATOR: find_coordinator.find_coordinator,
        ApiKey.JOIN_GROUP: classic_groups.join_group,
        ApiKey.SYNC_GROUP: classic_groups.sync_group,
        ApiKey.HEARTBEAT: classic_groups.heartbeat,
        ApiKey.LEAVE_GROUP: classic_groups.leave_group,
        ApiKey.LIST_GROUPS: classic_groups.list_groups,
        ApiKey.DESCRIBE_GROUPS: classic_groups.describe_groups,
        ApiKey.DELETE_GROUPS: classic_groups.delete_groups,
        ApiKey.OFFSET_COMMIT: offset_commits.offset_commit,
        ApiKey.OFFSET_FETCH: offset_commits.offset_fetch,
        ApiKey.OFFSET_DELETE: offset_commits.offset_delete,
        ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.consumer_group_heartbeat,
        ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.consumer_group_describe,
        ApiKey.ADD_PARTITIONS_TO_TXN: transactions.add_partitions_to_txn,
        ApiKey.ADD_OFFSETS_TO_TXN: transactions.add_offsets_to_txn,
        ApiKey.END_TXN: transactions.end_txn,
        ApiKey.TXN_OFFSET_COMMIT: transactions.txn_offset_commit,
        ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
        ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
    }
)
