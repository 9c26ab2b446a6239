"""A child process that writes to a log file and is stopped by pid: what our process fixtures share."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

__all__ = ["LoggedProcess"]


class LoggedProcess:
    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``; returns the exit code."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode
