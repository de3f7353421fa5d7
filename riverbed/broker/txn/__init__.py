"""Transactions: the transaction coordinator and its state log ``__transaction_state``."""

from riverbed.broker.txn.coordinator import TransactionCoordinator
from riverbed.broker.txn.engine import TxnSettings
from riverbed.broker.txn.metadata import TxnMetadata, TxnState

__all__ = ["TransactionCoordinator", "TxnMetadata", "TxnSettings", "TxnState"]
