"""The request handlers: one module per API family, each entry point named after its API.

Every handler is ``async NAME(state, request) -> dict | None``, ``NAME`` being the API's
name in snake_case (``produce.produce``, ``topics.create_topics``,
``classic_groups.join_group``); :mod:`riverbed.broker.dispatch` maps each API key to one.
A handler returns the response body as a plain dict in the newest version's field names
(``riverbed.protocol.encode_response`` fits it to the version the client speaks), or ``None``
when no response is due (``acks=0`` produce). It never raises for a client's mistake:
storage failures become Kafka error codes through ``riverbed.broker.errors.error_code_for``.

- data: :mod:`~riverbed.broker.handlers.produce`, :mod:`~riverbed.broker.handlers.fetch`,
  :mod:`~riverbed.broker.handlers.list_offsets`,
  :mod:`~riverbed.broker.handlers.delete_records`;
- cluster and topics: :mod:`~riverbed.broker.handlers.metadata`,
  :mod:`~riverbed.broker.handlers.cluster` (DescribeCluster),
  :mod:`~riverbed.broker.handlers.topics` (CreateTopics, DeleteTopics, CreatePartitions),
  :mod:`~riverbed.broker.handlers.configs` (DescribeConfigs, AlterConfigs,
  IncrementalAlterConfigs);
- groups: :mod:`~riverbed.broker.handlers.find_coordinator` (for groups and transactions),
  :mod:`~riverbed.broker.handlers.classic_groups` (JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, ListGroups, DescribeGroups, DeleteGroups),
  :mod:`~riverbed.broker.handlers.consumer_groups` (ConsumerGroupHeartbeat,
  ConsumerGroupDescribe), :mod:`~riverbed.broker.handlers.offset_commits` (OffsetCommit,
  OffsetFetch, OffsetDelete);
- producers: :mod:`~riverbed.broker.handlers.init_producer_id`,
  :mod:`~riverbed.broker.handlers.transactions` (AddPartitionsToTxn, AddOffsetsToTxn,
  EndTxn, TxnOffsetCommit, DescribeTransactions, ListTransactions).

ApiVersions is answered in :mod:`riverbed.broker.dispatch` itself, from the table of handlers.
"""
