"""A driver directory read from code: the readers behind ``aeron-tools``, typed, in one object.

Theory of operation: :class:`DriverInfo` keeps the directory's cnc.dat mapped
(remapping it when a new driver replaces the file, as ``stat`` does) and answers
each question with one plain read of shared memory — counters, the distinct
error log, the loss report, positions and lags per stream, the version and the
heartbeat's age, end point connections. Nothing is written and no command reaches the driver, so an
application may ask as often as it likes without touching the driver's hot
path. A directory that cannot be read raises :class:`~driver.tools.common.ToolError`
(a :class:`~driver.errors.DriverError`) whose message says why; :meth:`status`
and :meth:`is_running` never raise.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import attrs

from driver.concurrent.error_log import ErrorObservation, read_error_log
from driver.concurrent.loss_report import LossEntry, read_loss_report
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.concurrent.system_counters import CLIENT_HEARTBEAT_TYPE_ID, SYSTEM_COUNTER_TYPE_ID
from driver.core.media_driver import is_driver_active
from driver.tools.common import ToolError, open_counters, open_loss_report
from driver.tools.connections import ConnectionRow, read_connections
from driver.tools.health import DEFAULT_DRIVER_TIMEOUT_MS, DriverStatus, check_driver
from driver.tools.stat import CounterFilter, CounterSample, CounterSource, read_counters
from driver.tools.streams import StreamPositions, read_streams

__all__ = ["DriverInfo", "DriverVersion", "wait_until_stopped"]

_SOFTWARE_LABEL = "Aeron software:"


@attrs.frozen
class DriverVersion:
    """Which driver wrote the directory."""

    cnc_version: int
    """The cnc.dat layout version (15 for Aeron 1.15.1's, 512 for today's 0.2.0)."""
    generation: str
    """The Aeron generation that layout belongs to, as the tools print it."""
    software: str | None
    """The driver's own description (today's drivers' ``Aeron software:`` counter), if it has one."""


class DriverInfo:
    """Read-only questions about the driver of one directory; close it (or use ``with``) to unmap."""

    def __init__(
        self,
        directory: Path,
        driver_timeout_ms: int = DEFAULT_DRIVER_TIMEOUT_MS,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.directory = Path(directory)
        self.driver_timeout_ms = driver_timeout_ms
        self._clock_ms = clock_ms
        self._source = CounterSource(self.directory, clock_ms=clock_ms)

    def __enter__(self) -> DriverInfo:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._source.close()

    def __repr__(self) -> str:
        return f"DriverInfo({str(self.directory)!r})"

    # ------------------------------------------------------------------------------------------- liveness

    def is_running(self) -> bool:
        """A live driver owns the directory: ours by the lock it holds, Aeron's by a fresh heartbeat."""
        return is_driver_active(self.directory, self.driver_timeout_ms, self._clock_ms())

    def status(self) -> DriverStatus:
        """Everything ``aeron-tools driver`` reports; a directory that cannot be read is a status with a
        ``problem``, never an exception."""
        return check_driver(self.directory, self.driver_timeout_ms, self._clock_ms())

    def heartbeat_age(self) -> float:
        """Seconds since the driver's conductor last stamped its heartbeat."""
        cnc = self._source.cnc()
        heartbeat_ms = ManyToOneRingBuffer(cnc.to_driver_buffer).consumer_heartbeat_time()
        return (self._clock_ms() - heartbeat_ms) / 1000

    def version(self) -> DriverVersion:
        cnc = self._source.cnc()
        software = next(
            (
                c.label[len(_SOFTWARE_LABEL) :].strip()
                for c in read_counters(open_counters(cnc))
                if c.type_id == SYSTEM_COUNTER_TYPE_ID and c.label.startswith(_SOFTWARE_LABEL)
            ),
            None,
        )
        return DriverVersion(cnc.version, cnc.generation.label, software)

    def pid(self) -> int:
        """The process id the driver wrote into cnc.dat."""
        return self._source.cnc().pid

    # ------------------------------------------------------------------------------------------- readers

    def counters(self, counter_filter: CounterFilter | None = None) -> list[CounterSample]:
        """Every counter (``aeron-tools stat``), optionally filtered as its options filter."""
        return read_counters(open_counters(self._source.cnc()), counter_filter)

    def errors(self, since_ms: int = 0) -> list[ErrorObservation]:
        """The distinct error log (``aeron-tools errors``), each error with its count and first and last time."""
        return read_error_log(self._source.cnc().error_log_buffer, since_ms)

    def loss_report(self) -> list[LossEntry]:
        """The loss report (``aeron-tools loss``): per image, the loss observed and when."""
        with open_loss_report(self.directory) as report:
            return read_loss_report(report.buffer)

    def backlog(self) -> list[StreamPositions]:
        """Positions per stream and session and the lags between them (``aeron-tools streams``)."""
        return read_streams(open_counters(self._source.cnc()))

    def connections(self) -> list[ConnectionRow]:
        """End point connections with counters in this driver (``aeron-tools connections``): peer, transport,
        round trip, messages and bytes each way, back-pressure headroom."""
        return read_connections(self._source, self._clock_ms).rows

    def client_ids(self) -> list[int]:
        """The ids of the clients whose heartbeat counters the driver holds."""
        return [
            c.registration_id
            for c in self.counters()
            if c.type_id == CLIENT_HEARTBEAT_TYPE_ID and c.registration_id is not None
        ]

    def in_use_by_others(self, own_client_ids: Iterable[int] = ()) -> bool:
        """A live driver here serves someone besides the caller: it runs in another process, or it has a
        client that is not one of ``own_client_ids``."""
        if not self.is_running():
            return False
        try:
            if self.pid() != os.getpid():
                return True
            return bool(set(self.client_ids()) - set(own_client_ids))
        except ToolError:
            return False


def wait_until_stopped(
    directory: Path,
    timeout_s: float,
    driver_timeout_ms: int = DEFAULT_DRIVER_TIMEOUT_MS,
    interval_s: float = 0.05,
) -> bool:
    """Wait (bounded by ``timeout_s``) until no live driver owns ``directory``; True if none does by then."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        if not is_driver_active(Path(directory), driver_timeout_ms):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(interval_s, remaining))
