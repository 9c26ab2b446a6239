"""The driver behind an end point, seen from code: is one running, wait for it to stop, who else uses it, and
what its counters, errors, loss report and streams say.

These are the questions dorkbox's driver wrapper answers for a configuration alone. Each reads the driver's
directory the way ``aeron-tools`` does (:class:`driver.tools.info.DriverInfo`, plain reads of shared memory):
nothing here starts a driver, sends it a command or touches its hot path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from driver.core.media_driver import is_driver_active
from driver.tools.health import DEFAULT_DRIVER_TIMEOUT_MS
from driver.tools.info import DriverInfo, DriverVersion, wait_until_stopped
from endpoint.base import EndPoint
from endpoint.config import Configuration
from endpoint.errors import EndpointError
from endpoint.registry import registry

__all__ = [
    "DriverInfo",
    "DriverStillRunningError",
    "DriverVersion",
    "driver_info",
    "ensure_stopped",
    "in_use_by_others",
    "is_running",
]

DriverSource = Configuration | EndPoint[Any] | Path | str
"""A configuration (its directory), an end point (its driver's directory, a unique one included) or a path."""


class DriverStillRunningError(EndpointError, TimeoutError):
    """:func:`ensure_stopped` waited its whole timeout and a driver still owns the directory."""


def _directory(source: DriverSource) -> Path:
    if isinstance(source, EndPoint):
        return source.aeron_dir
    if isinstance(source, Configuration):
        return source.resolved_aeron_dir()
    return Path(source)


def _timeout_ms(source: DriverSource) -> int:
    config = source.config if isinstance(source, EndPoint) else source
    if isinstance(config, Configuration):
        return int(config.driver_timeout * 1000)
    return DEFAULT_DRIVER_TIMEOUT_MS


def driver_info(source: DriverSource) -> DriverInfo:
    """A reader of the driver's directory: counters, distinct errors, loss report, backlog per stream, version,
    heartbeat age. Close it when done (``with endpoint.driver_info(server) as info: ...``)."""
    return DriverInfo(_directory(source), _timeout_ms(source))


def is_running(source: DriverSource) -> bool:
    """A live driver owns the directory this configuration (or end point, or path) names.

    A configuration with ``unique_aeron_dir`` names only the base of its end points' directories: ask the end
    point itself for those."""
    return is_driver_active(_directory(source), _timeout_ms(source))


def _own_client_ids(directory: Path) -> list[int]:
    """Ids of this process's driver clients on ``directory`` (every end point here shares one per driver)."""
    ids = []
    for shared in registry.active():
        aeron = shared.aeron
        if aeron is not None and shared.aeron_dir == directory:
            ids.append(aeron.client_id)
    return ids


def in_use_by_others(source: DriverSource) -> bool:
    """A live driver owns the directory and serves someone besides this process's end points: it runs in
    another process, or another process's client is attached to it."""
    directory = _directory(source)
    with DriverInfo(directory, _timeout_ms(source)) as info:
        return info.in_use_by_others(_own_client_ids(directory))


def ensure_stopped(source: DriverSource, timeout: float) -> None:
    """Wait up to ``timeout`` seconds until no driver runs in the directory; raise
    :class:`DriverStillRunningError` if one still does.

    It only waits: a driver stops when its process ends or the end points that launched it close. This call
    blocks; from async code run it in a thread (``await anyio.to_thread.run_sync(ensure_stopped, config, 5)``).
    """
    directory = _directory(source)
    if wait_until_stopped(directory, timeout, _timeout_ms(source)):
        return
    leased = sum(len(shared.users) for shared in registry.active() if shared.aeron_dir == directory)
    here = f"; {leased} end point(s) of this process still use it" if leased else ""
    with DriverInfo(directory) as info:
        status = info.status()
    owner = f" (pid {status.pid}{', this process' if status.pid == os.getpid() else ''})" if status.pid else ""
    raise DriverStillRunningError(f"a driver still runs in {directory}{owner} after {timeout:g} s{here}")
