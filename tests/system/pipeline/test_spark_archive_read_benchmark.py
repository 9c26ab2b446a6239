"""``spark_archive_read.py --quick`` records with Java's archive and ours and prints both Spark read rates and the
ratio (no timing is asserted)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.slow]

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
RUN_TIMEOUT_S = 240


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_spark_archive_read_benchmark_quick_run(tmp_path: Path) -> None:
    output = tmp_path / "output.txt"
    with output.open("wb") as sink:
        # Its own session, so a run that overstays is killed together with the JVMs it started.
        process = subprocess.Popen(
            [sys.executable, str(BENCHMARKS / "spark_archive_read.py"), "--quick"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            code = process.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            pytest.fail(f"still running after {RUN_TIMEOUT_S} s:\n{output.read_text(errors='replace')[-3000:]}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
    text = output.read_text(errors="replace")
    assert code == 0, text[-3000:]
    for title in (
        "Spark batch read + groupBy of an archive directory, local[2], Java 1.15.1's archive beside ours",
        "ours, 32 B",
        "Java, 32 B",
        "ours, 1024 B",
        "Java, 1024 B",
        "Ratio Java-written / ours",
    ):
        assert title in text, text[-3000:]
