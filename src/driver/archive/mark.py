"""The mark file: one live archive per directory.

An exclusive ``flock`` on ``archive-mark.dat`` is the guard (the kernel drops
it when the holder dies, however it dies); the file's text says who holds it,
so the error names the other archive's pid and when it started.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from pathlib import Path

from driver.archive.errors import ArchiveError, ArchiveInUseError

__all__ = ["ARCHIVE_ID_FILE", "MARK_FILE", "MarkFile", "archive_id_of"]

MARK_FILE = "archive-mark.dat"
ARCHIVE_ID_FILE = "archive-id"
"""The directory's archive id, in decimal. Today's Aeron keeps the id in its mark file; the 1.15.1 mark file has
no such field, so it lives beside it (Aeron's tools ignore other files in the directory)."""


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


def archive_id_of(archive_dir: str | os.PathLike[str], configured: int = -1) -> int:
    """The archive's id: ``configured`` when set (not -1), else the one the directory keeps, made once (a random
    positive 63-bit number, written whole by rename) so it stays the same across restarts."""
    if configured != -1:
        return configured
    path = Path(archive_dir) / ARCHIVE_ID_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        archive_id = secrets.randbits(63)
        temporary = path.with_name(f"{ARCHIVE_ID_FILE}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{archive_id}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return archive_id
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path}: unreadable archive id ({exc})") from None
    if not text.isdigit() or int(text) >= 1 << 63:
        raise ArchiveError(f"{path}: {text[:40]!r} is not an archive id")
    return int(text)
