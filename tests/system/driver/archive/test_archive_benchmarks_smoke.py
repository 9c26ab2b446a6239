"""The archive benchmark runs end to end with ``--quick`` and prints its tables (no timing is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.benchmark_runs import run_benchmark

pytestmark = [pytest.mark.process, pytest.mark.slow]

BENCHMARKS = Path(__file__).resolve().parents[4] / "benchmarks"
RUN_TIMEOUT_S = 100


def run_quick(tmp_path: Path, *args: str) -> str:
    """``archive_throughput.py --quick`` with ``args``, in its own session (bounded, killed if it overstays)."""
    output = tmp_path / "output.txt"
    text = run_benchmark(
        [
            sys.executable,
            str(BENCHMARKS / "archive_throughput.py"),
            "--quick",
            "--archive-dir",
            str(tmp_path),
            *args,
        ],
        output,
        RUN_TIMEOUT_S,
    )
    return text


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_archive_benchmark_quick_run(tmp_path: Path) -> None:
    text = run_quick(tmp_path, "--no-java")
    for title in (
        "Archive recording, 32-byte messages",
        "Archive recording, 1024-byte messages",
        "recorded by our archive",
        "plain subscriber (peer)",
        "Archive replay, 200,000 32-byte messages",
        "Archive replay, 20,000 1024-byte messages",
        "replay by our archive",
        "live IPC stream (peer)",
        "Bars",
        "recording keeps up with >= 1,000,000 msgs/s",
        "replay delivers >= 1,000,000 msgs/s",
    ):
        assert title in text, text[-3000:]
    assert " NO " not in text, text[-3000:]  # nothing lost
    assert "(incomplete)" not in text, text[-3000:]  # every replay complete
    assert not list(tmp_path.glob("archive-bench-*")), "the benchmark removes its archive directory"


@pytest.mark.interop
@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_archive_benchmark_quick_run_beside_javas_archive(tmp_path: Path) -> None:
    text = run_quick(tmp_path, "--sizes", "32")
    for title in ("recorded by our archive", "recorded by Aeron Java 1.15.1 archive", "replay by Aeron Java 1.15.1"):
        assert title in text, text[-3000:]
    assert " NO " not in text, text[-3000:]
    assert "(incomplete)" not in text, text[-3000:]
    assert not list(tmp_path.glob("archive-bench-*")), "the benchmark removes its archive directory"
