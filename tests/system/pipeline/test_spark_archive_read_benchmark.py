"""``spark_archive_read.py --quick`` records with Java's archive and ours and prints both Spark read rates and the
ratio (no timing is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.benchmark_runs import run_benchmark

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.slow]

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
RUN_TIMEOUT_S = 240


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_spark_archive_read_benchmark_quick_run(tmp_path: Path) -> None:
    output = tmp_path / "output.txt"
    text = run_benchmark([sys.executable, str(BENCHMARKS / "spark_archive_read.py"), "--quick"], output, RUN_TIMEOUT_S)
    for title in (
        "Spark batch read + groupBy of an archive directory, local[2], Java 1.15.1's archive beside ours",
        "ours, 32 B",
        "Java, 32 B",
        "ours, 1024 B",
        "Java, 1024 B",
        "Ratio Java-written / ours",
    ):
        assert title in text, text[-3000:]
