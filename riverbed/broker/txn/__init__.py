"""Transactions: the transaction coordinator, its two-phase commit and its state log.

- :mod:`~riverbed.broker.txn.coordinator` — :class:`TransactionCoordinator`, every
  transactional id of the broker: InitProducerId (fencing older instances), the partitions
  and offsets a transaction adds, EndTxn, the check of every transactional batch Produce
  writes, the admin views, and recovery after a crash;
- :mod:`~riverbed.broker.txn.engine` — its base class: the cached state of every id, the
  two-phase commit that ends a transaction (markers written by the coordinator itself),
  transaction timeouts, and :class:`TxnSettings`;
- :mod:`~riverbed.broker.txn.transaction_metadata` — :class:`TxnMetadata` and
  :class:`TxnState`, one transactional id's state, and the format of its record;
- :mod:`~riverbed.broker.txn.state_log` — ``__transaction_state``, where those records are
  appended and read back at start-up.

The coordinator answers with Kafka error codes and never raises for a client's mistake; a
failed write of the state log answers COORDINATOR_NOT_AVAILABLE. Its timers are
:mod:`riverbed.broker.groups.timers`'.
"""

from riverbed.broker.txn.coordinator import TransactionCoordinator
from riverbed.broker.txn.engine import TxnSettings
from riverbed.broker.txn.state_log import TxnStateLog
from riverbed.broker.txn.transaction_metadata import TxnMetadata, TxnState

__all__ = ["TransactionCoordinator", "TxnMetadata", "TxnSettings", "TxnState", "TxnStateLog"]
