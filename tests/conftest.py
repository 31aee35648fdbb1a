"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the whole run, built like the product's: JVM start-up dominates."""
    from core.spark.session import SparkConfig, spark_session

    session = spark_session(SparkConfig(master="local[2,4]", shuffle_partitions=2, app_name="sponge-tests"))
    yield session
    session.stop()
