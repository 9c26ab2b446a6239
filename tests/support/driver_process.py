"""Our standalone driver (``python -m driver``) as a real separate process for tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from driver.config import DriverContext
from support.logged_process import LoggedProcess
from support.waiting import execute_until

__all__ = ["DriverProcess"]


class DriverProcess(LoggedProcess):
    def __init__(self, process: subprocess.Popen[bytes], aeron_dir: Path, log_path: Path) -> None:
        super().__init__(process, log_path)
        self.aeron_dir = aeron_dir

    @classmethod
    def start(
        cls,
        aeron_dir: Path,
        log_path: Path,
        settings: Mapping[str, object] | None = None,
        threading_mode: str = "SHARED",
    ) -> DriverProcess:
        properties = DriverContext.from_env({}, None, aeron_dir=aeron_dir, **(settings or {})).to_properties()
        args = [sys.executable, "-m", "driver", "--threading-mode", threading_mode]
        for name, value in properties.items():
            args += ["-D", f"{name}={value}"]
        driver = cls(cls.popen(args, log_path), aeron_dir, log_path)
        try:
            execute_until(driver._ready, timeout_s=30, interval_s=0.02, description="our driver's cnc.dat")
        except BaseException:
            driver.stop()
            raise
        return driver

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"driver exited with {self.process.returncode}: {self.output()}")
        cnc = self.aeron_dir / "cnc.dat"
        try:
            with cnc.open("rb") as f:
                header = f.read(48)
        except FileNotFoundError:
            return False
        return (
            len(header) == 48
            and int.from_bytes(header[:4], "little") != 0
            and (int.from_bytes(header[40:48], "little") == self.process.pid)
        )
