"""Spark pipelines over the log: the reusable stream operators, and the shop's pipelines
built from them.

- :mod:`riverbed.pipelines.operators`: the library, generic and documented operators a
  user builds pipelines from (windowed counts with a late side output, session windows,
  interval, as-of and changelog joins, CEP), each with its pure logic beside it;
- :mod:`riverbed.pipelines.shop`: the shop's pipelines (DESIGN.md, "Pipelines"), one module
  each, and their catalog by name;
- :class:`Pipeline` (:mod:`riverbed.pipelines.pipeline`): what a pipeline is;
  :mod:`riverbed.pipelines.runner` runs one (``riverbed pipeline run NAME``).
"""

from riverbed.pipelines.pipeline import Pipeline

__all__ = ["Pipeline"]
