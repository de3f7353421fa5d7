"""Fixtures of the Spark tests: one local[2] SparkSession for the whole run (starting Spark
takes seconds), with riverbed registered."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

import riverbed.spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = riverbed.spark.session("riverbed-tests", master="local[2]", log_level="ERROR")
    try:
        yield session
    finally:
        session.stop()
