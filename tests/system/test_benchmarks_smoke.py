"""The end point benchmarks run end to end with ``--quick`` and print their tables (no timing is asserted)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RUN_TIMEOUT_S = 240


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
@pytest.mark.parametrize(
    ("script", "titles"),
    [
        ("endpoint_throughput.py", ["End point throughput, one way"]),
        ("endpoint_latency.py", ["End point round trip"]),
        (
            "endpoint_connections.py",
            ["(a) Handshakes per second", "concurrent IPC clients on one server", "(c) Idle CPU"],
        ),
    ],
)
def test_benchmark_quick_run(script: str, titles: list[str], tmp_path: Path) -> None:
    output = tmp_path / "output.txt"
    with output.open("wb") as sink:
        # Its own session, so a run that overstays is killed together with the processes it spawned.
        process = subprocess.Popen(
            [sys.executable, str(BENCHMARKS / script), "--quick"],
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
            pytest.fail(f"{script} --quick still running after {RUN_TIMEOUT_S} s:\n{output.read_text()[-3000:]}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
    text = output.read_text(errors="replace")
    assert code == 0, text[-3000:]
    for title in titles:
        assert title in text, text[-3000:]
