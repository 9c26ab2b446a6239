"""``promtool check metrics`` on exposition text: Prometheus's own linter, run for real.

CI installs it (Debian's ``prometheus`` package); elsewhere a test that needs it skips and says why.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

__all__ = ["promtool_check_metrics"]


def promtool_check_metrics(text: str, timeout_s: float = 60.0) -> None:
    """Fail the test with promtool's complaints unless it finds none; skip when promtool is not installed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); CI installs it")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, f"promtool check metrics: {done.stdout}{done.stderr}"
    assert not done.stdout.strip(), done.stdout
    assert not done.stderr.strip(), done.stderr
