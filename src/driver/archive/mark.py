"""The mark file: one live archive per directory.

An exclusive ``flock`` on ``archive-mark.dat`` is the guard (the kernel drops
it when the holder dies, however it dies); the file's text says who holds it,
so the error names the other archive's pid and when it started.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from driver.archive.errors import ArchiveInUseError

__all__ = ["MARK_FILE", "MarkFile"]

MARK_FILE = "archive-mark.dat"


class MarkFile:
    """Hold the directory for this process until :meth:`close`."""

    def __init__(self, archive_dir: str | os.PathLike[str], control_channel: str = "") -> None:
        self.path = Path(archive_dir) / MARK_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.path.read_text(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise ArchiveInUseError(f"{self.path.parent} is in use by another archive ({holder})") from None
        record = {"pid": os.getpid(), "started_ms": int(time.time() * 1000), "control_channel": control_channel}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(record).encode(), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = -1
