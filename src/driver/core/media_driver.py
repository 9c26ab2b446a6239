"""The media driver: its directory, its cnc.dat, and its agents on threads.

Threading modes only decide which thread runs which agent: DEDICATED gives the
conductor, sender and receiver a thread each, SHARED_NETWORK puts sender and
receiver on one, SHARED puts everything on one, and INVOKER runs no thread at
all (the application calls ``invoker.invoke()``). IPC needs only the
conductor; the sender and receiver carry the network transport.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from driver.agent import Agent, AgentInvoker, AgentRunner, CompositeAgent
from driver.clock import SystemEpochClock
from driver.cnc import CncFile
from driver.concurrent.loss_report import LossReport, LossReportFile
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.config import DriverContext, ThreadingMode
from driver.core.conductor import DriverConductor
from driver.core.loss_observer import LossObserver
from driver.doorbell import Doorbell
from driver.errors import ActiveDriverError, ChannelEndpointError, DriverError
from driver.idle import IdleStrategy, idle_strategy_from_name
from driver.media.os_buffers import refused_buffer_lengths
from driver.ownership import DirectoryLock, OwnerState, owner_state, reclaim_dead_siblings

__all__ = ["MediaDriver", "is_driver_active"]

_log = logging.getLogger("driver")
_warned_buffers: set[str] = set()
_LOG_REPEAT_S = 10.0


def is_driver_active(aeron_dir: Path, driver_timeout_ms: int, now_ms: int | None = None) -> bool:
    """True when a live driver owns ``aeron_dir``.

    Ours is judged by its process (the lock it holds; see :mod:`driver.ownership`): alive while it runs, dead
    the moment it is gone, whatever its heartbeat says. A real Aeron driver holds no lock: its heartbeat on
    the to-driver ring buffer must be younger than ``driver_timeout_ms``.
    """
    aeron_dir = Path(aeron_dir)
    if not (aeron_dir / "cnc.dat").exists():
        return False
    state = owner_state(aeron_dir)
    if state is not OwnerState.UNKNOWN:
        return state is OwnerState.ALIVE
    try:
        cnc = CncFile.map_existing(aeron_dir, timeout_s=0.0)
    except (DriverError, OSError, ValueError):
        return False
    try:
        heartbeat_ms = ManyToOneRingBuffer(cnc.to_driver_buffer).consumer_heartbeat_time()
    finally:
        cnc.close()
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return now_ms - heartbeat_ms <= driver_timeout_ms


class MediaDriver:
    """A running driver; use ``launch`` or ``launch_embedded`` and close it (or use ``with``)."""

    def __init__(self, context: DriverContext) -> None:
        self.context = context
        self._logged: dict[str, tuple[float, int]] = {}
        self.aeron_dir = Path(context.aeron_dir)
        self._lock = self._prepare_directory()
        try:
            self._create(context)
        except BaseException:
            self._lock.close()
            raise

    def _create(self, context: DriverContext) -> None:
        self.cnc = CncFile.create(
            self.aeron_dir,
            to_driver_length=context.conductor_buffer_length,
            to_clients_length=context.to_clients_buffer_length,
            counters_values_length=context.counters_values_buffer_length,
            error_log_length=context.error_buffer_length,
            client_liveness_timeout_ns=context.client_liveness_timeout_ns,
            start_timestamp_ms=time.time_ns() // 1_000_000,
            pid=os.getpid(),
            generation=context.cnc_generation,
            file_page_size=context.file_page_size,
        )
        self.loss_report_file = LossReportFile.create(self.aeron_dir, context.loss_report_buffer_length)
        self.loss_report = LossReport(self.loss_report_file.buffer)
        self.conductor = DriverConductor(context, self.cnc, error_handler=self._log_error)
        self.conductor.answered_error_handler = self._log_answered
        self.conductor.network.loss_observer = LossObserver(self.loss_report, SystemEpochClock())
        self.termination_requested = threading.Event()
        """Set when a client's TERMINATE_DRIVER passed ``termination_validator``; the owner then closes the driver."""
        self.conductor.termination_hook = self.termination_requested.set
        self.conductor.on_start()
        self._runners: list[AgentRunner] = []
        self.invoker: AgentInvoker | None = None
        self.doorbell: Doorbell | None = None
        """INVOKER mode: what clients ring while the host sleeps (see :mod:`driver.doorbell`)."""
        self._closed = False
        self._warn_of_refused_buffers(context)
        self._start_agents()
        self.cnc.signal_ready()

    @staticmethod
    def _warn_of_refused_buffers(context: DriverContext) -> None:
        """Once per process and length asked: the kernel grants less socket buffer than the context asks for."""
        for line in refused_buffer_lengths(context.socket_sndbuf_length, context.socket_rcvbuf_length):
            if line not in _warned_buffers:
                _warned_buffers.add(line)
                _log.warning("%s", line)

    @classmethod
    def launch(cls, context: DriverContext | None = None, **overrides: Any) -> MediaDriver:
        """Start a driver in this process on the directory the context names."""
        ctx = context if context is not None else DriverContext.from_env(**overrides)
        return cls(ctx.conclude())

    @classmethod
    def launch_embedded(cls, context: DriverContext | None = None, **overrides: Any) -> MediaDriver:
        """Start a driver inside the application, on a fresh directory unless one is given.

        The directory is deleted again when the driver closes. A fresh directory is named
        ``<aeron.dir>-<pid>-<random>``; those of that naming whose process died (killed before it could
        remove its own) are removed first, so killed processes do not pile up directories in memory.
        """
        ctx = context if context is not None else DriverContext.from_env(**overrides)
        if context is None and "aeron_dir" not in overrides:
            reclaim_dead_siblings(Path(ctx.aeron_dir))
            ctx = ctx.evolve(aeron_dir=f"{ctx.aeron_dir}-{os.getpid()}-{os.urandom(4).hex()}")
        ctx = ctx.evolve(dir_delete_on_shutdown=True)
        return cls(ctx.conclude())

    def _prepare_directory(self) -> DirectoryLock:
        """Take the directory (refusing one a live driver owns) and hold its lock for as long as we run."""
        ctx = self.context
        if self.aeron_dir.exists():
            state = owner_state(self.aeron_dir)
            if not ctx.dir_delete_on_start and is_driver_active(self.aeron_dir, ctx.driver_timeout_ms):
                raise ActiveDriverError(f"an active driver owns {self.aeron_dir}; stop it or choose another aeron.dir")
            if state is OwnerState.DEAD:
                _log.info("driver directory %s: its driver's process is gone, taking it over", self.aeron_dir)
            elif ctx.dir_warn_if_exists and not ctx.dir_delete_on_start:
                _log.warning("driver directory %s exists and no live driver owns it: taking it over", self.aeron_dir)
            shutil.rmtree(self.aeron_dir)
        try:
            self.aeron_dir.mkdir(parents=True)
        except FileExistsError:
            raise ActiveDriverError(f"another driver is starting in {self.aeron_dir}") from None
        return DirectoryLock.acquire(self.aeron_dir)

    def _idle(self, name: str) -> IdleStrategy:
        return idle_strategy_from_name(str(getattr(self.context, name)))

    def _start_agents(self) -> None:
        mode = self.context.threading_mode
        conductor: Agent = self.conductor
        network: list[Agent] = [self.conductor.sender, self.conductor.receiver]
        error = self._on_agent_error
        if mode is ThreadingMode.INVOKER:
            self.invoker = AgentInvoker(CompositeAgent([conductor, *network]), error)
            self.invoker.start()
            self.doorbell = Doorbell(self.aeron_dir)
            return
        if mode is ThreadingMode.SHARED:
            self._runners.append(
                AgentRunner(CompositeAgent([conductor, *network]), self._idle("shared_idle_strategy"), error)
            )
        else:
            self._runners.append(AgentRunner(conductor, self._idle("conductor_idle_strategy"), error))
            if mode is ThreadingMode.SHARED_NETWORK:
                self._runners.append(
                    AgentRunner(CompositeAgent(network), self._idle("shared_network_idle_strategy"), error)
                )
            else:
                names = ("sender_idle_strategy", "receiver_idle_strategy")
                self._runners.extend(AgentRunner(a, self._idle(n), error) for a, n in zip(network, names, strict=True))
        for runner in self._runners:
            runner.start()

    def has_unread_commands(self) -> bool:
        """True when a client's command waits in the to-driver buffer (a host checks before it sleeps)."""
        return self.conductor.has_unread_commands()

    def has_pending_work(self) -> bool:
        """True when a client's command or a hand-off between the driver's agents waits (a host that runs the
        driver checks before it sleeps: a handshake's next step would otherwise wait out the nap)."""
        return self.conductor.has_pending_work()

    def _on_agent_error(self, error: BaseException) -> None:
        if not isinstance(error, ChannelEndpointError) or error.status_indicator_id is None:
            self.conductor.record_error(error)
            return
        self.conductor.record_error(error, answered=True)  # the clients are told next: they raise it as theirs
        # Raised on the sender or receiver thread; the conductor owns counters and the clients' channel.
        self.conductor.conductor_command(functools.partial(self.conductor.on_channel_endpoint_error, error))

    def _log_error(self, error: BaseException) -> None:
        """Log an error, but the same one (type and text) at most once every 10 s: a dead network repeats it."""
        key = f"{type(error).__name__}: {error}"
        now = time.monotonic()
        last, repeats = self._logged.get(key, (-_LOG_REPEAT_S, 0))
        if now - last < _LOG_REPEAT_S:
            self._logged[key] = (last, repeats + 1)
            return
        if len(self._logged) > 1024:
            self._logged.clear()
        self._logged[key] = (now, 0)
        suffix = f" (and {repeats} times more in the last {now - last:.0f} s)" if repeats else ""
        _log.error("driver error: %s%s", error, suffix, exc_info=error if not repeats else None)

    @staticmethod
    def _log_answered(error: BaseException) -> None:
        """An error the clients concerned were told of (they raise it as theirs): a line at DEBUG, no traceback.

        Like every driver error it is counted (system counter ERRORS) and kept in the distinct error log of
        cnc.dat, where ``aeron-tools errors`` shows it."""
        _log.debug("driver error, told to the client: %s: %s", type(error).__name__, error)

    def close(self, timeout_s: float = 5.0, *, delete_dir: bool | None = None) -> None:
        """Stop the agents and unmap; remove the directory if ``delete_dir`` (default: ``dir_delete_on_shutdown``)."""
        if self._closed:
            return
        self._closed = True
        # The sender and receiver stop before the conductor, whose close frees what they use.
        for runner in reversed(self._runners):
            runner.close(timeout_s)
        if self.invoker is not None:
            self.invoker.close()
        if self.doorbell is not None:
            self.doorbell.close()
        self.cnc.close()
        self.loss_report_file.close()
        if self.context.dir_delete_on_shutdown if delete_dir is None else delete_dir:
            shutil.rmtree(self.aeron_dir, ignore_errors=True)
        self._lock.close()  # after the removal: a successor must not start in a directory we still clear

    def __enter__(self) -> MediaDriver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MediaDriver(aeron_dir={str(self.aeron_dir)!r}, threading_mode={self.context.threading_mode.name})"
