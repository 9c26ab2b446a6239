"""A child process that writes to a log file and is stopped by pid: what our process fixtures share."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from signal import SIGCONT, SIGKILL, SIGTERM
from types import TracebackType
from typing import Self

__all__ = ["LoggedProcess"]


class LoggedProcess:
    """Leaving a ``with`` block on one SIGKILLs it (by pid) if it still runs."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    @staticmethod
    def popen(args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``args`` in a session of its own (a signal to the test's process group never reaches it), its
        stdout and stderr appended to ``log_path``."""
        with log_path.open("ab") as sink:
            return subprocess.Popen(list(args), stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    @classmethod
    def spawn(cls, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> Self:
        """:meth:`popen`, for a class constructed from the process and its log alone."""
        return cls(cls.popen(args, log_path, env), log_path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.kill()

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def has(self, text: str) -> bool:
        """Whether it has printed ``text``; AssertionError with the log once it has exited without (no wait for
        more output can succeed then)."""
        if self.process.poll() is not None and text not in self.output():
            raise AssertionError(
                f"{self.log_path.name}: exited with {self.process.returncode} before printing {text!r}:\n"
                f"{self.output()}"
            )
        return text in self.output()

    def signal(self, signum: int) -> None:
        """Send ``signum`` if it still runs; no wait (see :meth:`wait`)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def wait(self, timeout_s: float = 15.0) -> int:
        """Its exit code, once it has exited (TimeoutExpired after ``timeout_s``)."""
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.signal(SIGKILL)
        self.process.wait(10)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM (after a SIGCONT, in case it was stopped), then SIGKILL if it has not exited within
        ``timeout_s``; returns the exit code."""
        if self.process.poll() is None:
            os.kill(self.process.pid, SIGCONT)
            os.kill(self.process.pid, SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode
