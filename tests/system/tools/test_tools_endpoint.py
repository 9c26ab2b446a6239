"""The tools, as separate processes, find an end point's driver with no ``--dir``.

The end point is configured with defaults (only its port is chosen); ``AERON_DIR`` moves the default directory
of both the end point and the tools into the test's own directory, so the real default is never touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from endpoint import ServerConfiguration
from support.endpoints import free_udp_port, running_server

pytestmark = pytest.mark.process


def tools(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver.tools", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=dict(os.environ),
    )


async def test_tools_find_a_default_end_point(monkeypatch: pytest.MonkeyPatch, aeron_dir: Path) -> None:
    monkeypatch.setenv("AERON_DIR", str(aeron_dir))
    config = ServerConfiguration(port=free_udp_port())
    assert config.aeron_dir is None
    async with running_server(config):
        assert (aeron_dir / "cnc.dat").is_file()
        driver = await asyncio.to_thread(tools, "driver", "--json")
        assert driver.returncode == 0, driver.stdout + driver.stderr
        status = json.loads(driver.stdout)
        assert status["alive"] is True
        assert Path(status["directory"]) == aeron_dir
        stat = await asyncio.to_thread(tools, "stat", "--json")
        assert stat.returncode == 0, stat.stderr
        labels = [c["label"] for c in json.loads(stat.stdout)["counters"]]
        assert any(label.startswith("Bytes sent") for label in labels), labels
    after = await asyncio.to_thread(tools, "driver", "-q")
    assert after.returncode == 1
