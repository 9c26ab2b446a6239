"""Which clients of a driver run in this process.

A sender looks at every publication's log on each duty cycle for a frame to send, because a client in any
process may have written one: with a thousand publications that look is a cache miss each, every cycle. When
every client of an embedded driver runs in the driver's own process, this process's count of committed frames
(``driver.logbuffer._frames.frames_committed``) tells the sender that nothing was written since a look that found
nothing, and the look can wait for the next write.

A client registers here under its driver's cnc.dat before it sends its first command, and leaves when it closes;
the driver asks when a client's first command arrives. A client of another process (Java, C, another Python
process) is never here, so its driver looks every cycle, as Aeron's does.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ClientLocality", "DriverKey", "add", "discard", "driver_key", "is_local"]

DriverKey = tuple[int, int, int]
"""A driver instance: its cnc.dat's device and inode, and the driver's start time (ms)."""

_local: set[tuple[DriverKey, int]] = set()


def driver_key(cnc_path: Path | str, start_timestamp_ms: int) -> DriverKey:
    """The key of the driver whose cnc.dat is ``cnc_path`` (the same file however its path is spelt)."""
    stat = os.stat(cnc_path)
    return (stat.st_dev, stat.st_ino, start_timestamp_ms)


def add(driver: DriverKey, client_id: int) -> None:
    _local.add((driver, client_id))


def discard(driver: DriverKey, client_id: int) -> None:
    _local.discard((driver, client_id))


def is_local(driver: DriverKey, client_id: int) -> bool:
    return (driver, client_id) in _local


class ClientLocality:
    """Which clients of one driver run in other processes: kept by its conductor as clients come and go, read by
    its sender each cycle (a plain set under the GIL; the conductor notes a client before it hands the sender
    anything of that client's)."""

    __slots__ = ("others",)

    def __init__(self) -> None:
        self.others: set[int] = set()

    @property
    def all_local(self) -> bool:
        return not self.others
