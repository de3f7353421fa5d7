"""Helpers for testing riverbed and the pipelines built on it, shared by riverbed's own tests,
its benchmarks and ``make demo`` (as ``bytewax.testing`` is Bytewax's).

- :mod:`riverbed.testing.postgres`: a private, throwaway PostgreSQL cluster
  (``wal_level=logical``) on a free port, for CDC.

Nothing here is needed to run riverbed; everything here may start processes and open
connections, unlike the pure modules of the library.
"""
