"""A local SparkSession set up for the ``endpoint-archive`` data source, and its registration.

Spark's Python workers must run this interpreter (the one with ``endpoint``,
numpy and pyarrow installed), Python data sources only push filters down when
``spark.sql.python.filterPushdown.enabled`` is on, and a local session wants
neither the UI nor 200 shuffle partitions.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from endpoint.pipeline.source import ArchiveDataSource

__all__ = ["local_session", "register"]

_LOG4J2 = Path(__file__).with_name("log4j2.properties")


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("endpoint-archive")`` (and the writers) known to ``spark``."""
    spark.dataSource.register(ArchiveDataSource)


def _cores(master: str) -> int:
    found = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master.strip())
    if found is None:
        return 1 if master.strip() == "local" else 4
    if found.group(1) == "*":
        return os.cpu_count() or 2
    return max(1, int(found.group(1)))


def local_session(
    app_name: str,
    master: str = "local[2]",
    *,
    python_path: Sequence[str | os.PathLike[str]] = (),
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or get) a SparkSession for this process, with the data source registered.

    ``python_path``: directories Spark's Python workers should import from too
    (e.g. the module a ``serialization`` option names); they take effect only
    when this call starts the JVM, as do ``PYSPARK_PYTHON`` and ``PYTHONPATH``.
    """
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    if python_path:
        extra = [os.fspath(p) for p in python_path]
        existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join([*extra, *(p for p in existing if p not in extra)])
    shuffle = str(_cores(master))
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", shuffle)
        .config("spark.default.parallelism", shuffle)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG4J2}")
    )
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session: no "resolves to a loopback" notice
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
