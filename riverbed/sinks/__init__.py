"""Derived data kept in sync: stores that follow the log instead of being written by the
application (DESIGN.md, "Derived data").

- :mod:`riverbed.sinks.changes` reads a changelog record (a CDC change in Debezium's
  envelope, or a riverbed changelog entry) as a :class:`~riverbed.sinks.changes.Change`.
- :mod:`riverbed.sinks.store` is what a store is to a sink (open, apply a batch, commit it
  with the sink's position, close): a user adds their own store in one file.
- :mod:`riverbed.sinks.runner` follows the topics into a store (``riverbed sink run``).
- The stores: :mod:`~riverbed.sinks.redis_store` (the cache),
  :mod:`~riverbed.sinks.search_store` (a Tantivy full-text index),
  :mod:`~riverbed.sinks.duckdb_store` (the analytics database).
- :mod:`riverbed.sinks.verify` compares a store with its source
  (``riverbed sink verify``).
"""
