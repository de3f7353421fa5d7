"""Spark pipelines over the log, and the reusable stream operators they are built from.

- :mod:`riverbed.pipelines.windows`: the pure logic of event-time windows, lateness and
  sessions;
- :mod:`riverbed.pipelines.operators`: stateful Spark operators on it (windowed counts with
  a late side output, session windows);
- :mod:`riverbed.pipelines.catalog`: the pipelines by name; :mod:`riverbed.pipelines.runner`
  runs one (``riverbed pipeline run NAME``).
"""
