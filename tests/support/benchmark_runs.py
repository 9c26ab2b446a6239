"""Run a benchmark script's quick mode as the smoke tests do: its own session, bounded, output kept on failure."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = ["run_benchmark"]


def run_benchmark(argv: Sequence[str], output: Path, timeout_s: float) -> str:
    """Run ``argv`` to completion within ``timeout_s`` and return what it printed; fail the test otherwise.

    The run gets its own session, so one that overstays is killed together with every process (and JVM) it
    started.
    """
    with output.open("wb") as sink:
        process = subprocess.Popen(
            list(argv),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            pytest.fail(f"{' '.join(argv[1:])} still running after {timeout_s} s:\n{_tail(output)}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
    text = output.read_text(errors="replace")
    assert code == 0, text[-3000:]
    return text


def _tail(output: Path) -> str:
    return output.read_text(errors="replace")[-3000:]
