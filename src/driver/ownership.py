"""Who owns a driver directory, and is that process still alive?

Theory of operation: Aeron judges a driver by the age of the heartbeat it
stamps on the to-driver ring buffer. A driver killed by SIGKILL (or by a
SIGTERM it does not handle) leaves a fresh heartbeat behind, so for the whole
driver timeout (10 s) every newcomer takes the directory for live: a new
driver refuses to start and a client attaches to a corpse. A supervisor that
restarts a killed server at once fails exactly when it is needed.

Our driver therefore also holds an advisory lock (``flock``) on
``<aeron.dir>/driver.lock`` for as long as it runs. The kernel drops the lock
when the process dies, whatever the signal, so "the lock file is there and
nobody holds its lock" means "the owner is dead", at once and for sure. The
file also records the owner's pid and process start time (from
``/proc/<pid>/stat``) for where a lock cannot be probed.

The lock file appears already locked: it is written and locked under a
temporary name and renamed into place, so nobody ever sees it unlocked while
its owner lives. Real Aeron drivers (Java, C) hold no such lock and write no
such file: for their directories the answer is UNKNOWN and callers fall back to
the heartbeat age.

A forked child does not keep its parent's lock alive: the descriptor is closed
in the child (the lock belongs to the open file, which the parent still holds).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import os
import re
import shutil
import weakref
from pathlib import Path

__all__ = [
    "LOCK_FILE",
    "DirectoryLock",
    "OwnerState",
    "OwnerWatch",
    "owner_state",
    "process_is_alive",
    "process_start_time",
    "reclaim_dead_siblings",
]

LOCK_FILE = "driver.lock"
_MAX_LOCK_FILE_BYTES = 256
_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})
"""What ``flock`` answers on a file system that has no locks."""


class OwnerState(enum.Enum):
    """What the lock file says about a directory's owner."""

    ALIVE = "alive"
    """The lock is held: the owner process lives."""
    DEAD = "dead"
    """The lock file is there but nobody holds its lock: the owner died (or closed without cleaning up)."""
    UNKNOWN = "unknown"
    """No lock file (a real Aeron driver's directory, or one still being created): judge by the heartbeat."""


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if unknown.

    With the pid it names a process for sure: a pid reused by a later process has a later start time.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_is_alive(pid: int, start_time: int | None = None) -> bool | None:
    """Whether ``pid`` (started at ``start_time``, when given) runs: True, False, or None when it cannot be told."""
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:
        if not isinstance(exc, PermissionError):  # EPERM: it exists, under another user
            return None
    if start_time is None:
        return True
    now = process_start_time(pid)
    if now is None:
        return None if not os.path.isdir("/proc") else True
    return now == start_time


def _read_owner(fd: int) -> tuple[int, int | None] | None:
    try:
        text = os.pread(fd, _MAX_LOCK_FILE_BYTES, 0).decode("ascii", "replace")
    except OSError:
        return None
    parts = text.split()
    try:
        pid = int(parts[0])
        start = int(parts[1]) if len(parts) > 1 and parts[1] != "-" else None
    except (IndexError, ValueError):
        return None
    return pid, start


def _probe(fd: int) -> OwnerState:
    """Try a shared lock without waiting: held by someone means alive; ours at once means the owner is gone."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return OwnerState.ALIVE
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return OwnerState.ALIVE
        # No locks on this file system: fall back to the pid and start time the owner wrote.
        owner = _read_owner(fd)
        alive = process_is_alive(*owner) if owner is not None else None
        if alive is None:
            return OwnerState.UNKNOWN
        return OwnerState.ALIVE if alive else OwnerState.DEAD
    fcntl.flock(fd, fcntl.LOCK_UN)
    return OwnerState.DEAD


def owner_state(directory: Path) -> OwnerState:
    """What the lock file of ``directory`` says about its driver's process (see :class:`OwnerState`)."""
    try:
        fd = os.open(Path(directory) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return OwnerState.UNKNOWN
    except OSError:
        return OwnerState.UNKNOWN
    try:
        return _probe(fd)
    finally:
        os.close(fd)


_held: weakref.WeakSet[DirectoryLock] = weakref.WeakSet()


class DirectoryLock:
    """The lock a running driver holds on its directory; released by :meth:`close` or by the process's death."""

    __slots__ = ("__weakref__", "_fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        _held.add(self)

    @classmethod
    def acquire(cls, directory: Path) -> DirectoryLock:
        """Create ``directory/driver.lock`` already locked (lock under a temporary name, then rename).

        The caller has made sure no live driver owns ``directory``; the rename replaces a dead owner's file.
        """
        directory = Path(directory)
        path = directory / LOCK_FILE
        temporary = directory / f".{LOCK_FILE}.{os.getpid()}.{os.urandom(4).hex()}"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in _NO_LOCKS:
                    raise
                # A file system without locks: the pid and start time written below still tell (see _probe).
            pid = os.getpid()
            start = process_start_time(pid)
            os.write(fd, f"{pid} {start if start is not None else '-'}\n".encode("ascii"))
            os.rename(temporary, path)
        except BaseException:
            os.close(fd)
            temporary.unlink(missing_ok=True)
            raise
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def close(self) -> None:
        """Release the lock (closing the descriptor does); idempotent. The file stays: it now says "dead"."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        _held.discard(self)

    def _forget_in_child(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __repr__(self) -> str:
        return f"DirectoryLock({str(self.path)!r}, held={self.held})"


def _after_fork_in_child() -> None:
    for lock in list(_held):
        lock._forget_in_child()
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class OwnerWatch:
    """A client's eye on the driver it attached to: an open descriptor on that driver's lock file.

    Holding the file (not its name) keeps watching the same driver even after a successor replaced the
    directory; :meth:`owner_alive` turns False the moment the owner process is gone.
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def open(cls, directory: Path) -> OwnerWatch | None:
        """Watch the owner of ``directory``; None when it has no lock file (a real Aeron driver)."""
        try:
            fd = os.open(Path(directory) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        return cls(fd)

    def owner_pid(self) -> int | None:
        """The pid the owner wrote into its lock file (None if unreadable)."""
        owner = _read_owner(self._fd) if self._fd >= 0 else None
        return owner[0] if owner is not None else None

    def state(self) -> OwnerState:
        if self._fd < 0:
            return OwnerState.UNKNOWN
        return _probe(self._fd)

    def owner_alive(self) -> bool:
        """False only when the owner is known to be dead."""
        return self.state() is not OwnerState.DEAD

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def reclaim_dead_siblings(base: Path) -> list[Path]:
    """Remove the directories named ``<base>-<pid>-<8 hex digits>`` (per-process driver directories) whose owner
    is dead; returns what was removed.

    A directory with a lock file is judged by its lock. One without (a driver still creating it, or made by an
    older version) is removed only when the pid in its name no longer runs.
    """
    base = Path(base)
    parent = base.parent
    pattern = re.compile(re.escape(base.name) + r"-(\d+)-[0-9a-f]{8}")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        state = owner_state(path)
        if state is OwnerState.ALIVE:
            continue
        if state is OwnerState.UNKNOWN and process_is_alive(int(match.group(1))) is not False:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed
