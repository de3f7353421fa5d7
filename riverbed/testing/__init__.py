"""Helpers for testing riverbed and the pipelines built on it, shared by riverbed's own tests,
its benchmarks and ``make demo`` (as ``bytewax.testing`` is Bytewax's).

- :mod:`riverbed.testing.postgres`: a private, throwaway PostgreSQL cluster
  (``wal_level=logical``) on a free port, for CDC, and a database of its own per test.
- :mod:`riverbed.testing.topic_reader`: reading a topic to its end (records or a count, under an
  isolation level, bounded by a timeout), and the table a changelog describes. Errors:
  :class:`~riverbed.testing.topic_reader.TopicReadError`.
- :mod:`riverbed.testing.references`: what each shop pipeline must output, in plain
  Python from DESIGN.md's contract, one reference per pipeline.
- :mod:`riverbed.testing.memory_states`: in-memory stand-ins for the map and value states
  and the event-time timers PySpark hands a stateful processor, to run an operator without
  Spark.

Nothing here is needed to run riverbed; everything here may start processes and open
connections, unlike the pure modules of the library.
"""
