"""One SparkSession for every pipeline test (starting Spark takes seconds), stopped at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from endpoint.pipeline import local_session

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """local[2], with this directory on the workers' path (for ``pipeline_messages``)."""
    session = local_session("endpoint-pipeline-tests", "local[2]", python_path=[HERE])
    try:
        yield session
    finally:
        session.stop()
