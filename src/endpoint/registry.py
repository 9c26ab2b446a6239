"""One driver (and one driver client) per driver configuration per process, shared and reference-counted.

End points whose :meth:`~endpoint.config.Configuration.driver_key` is equal lease
the same :class:`SharedDriver`. The first lease starts an embedded driver when
no live driver owns the directory (or attaches to the live one, e.g. a
standalone driver or another process's); the last release closes the client
and, only if this process launched the driver, stops it and removes its
directory. A critical error (lost driver heartbeat, a channel endpoint or
network failure) marks the shared driver failed: every lessee is told, drops
its connections and leases again, which starts a fresh driver.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import anyio.to_thread
import attrs

from driver.agent import AgentInvoker
from driver.client.aeron import Aeron
from driver.concurrent.counters import AtomicCounter
from driver.concurrent.system_counters import DriverSystemCounterId, SystemCounterId, system_counter_id
from driver.config import IDLE_STRATEGY_FIELDS, ClientContext, DriverContext, env_name
from driver.core.conductor import DriverConductor
from driver.core.media_driver import MediaDriver, is_driver_active
from driver.errors import ActiveDriverError, ChannelEndpointError, DriverError, DriverTimeoutError
from driver.media._net import ImageJournal
from driver.ownership import reclaim_dead_siblings
from endpoint.config import Configuration
from endpoint.errors import DriverUnavailableError

__all__ = ["DriverUser", "SharedDriver", "is_critical", "registry"]

_log = logging.getLogger("endpoint")

_CLIENT_CONDUCTOR_BUSY_SLEEP_NS = 2_000_000
_CLIENT_CONDUCTOR_QUIET_SLEEP_NS = 10_000_000
_KEEPER_PERIOD_S = 0.02
_KEEPER_STALE_NS = 50_000_000
_KEEPER_STALLED_PERIOD_S = 0.001
_RESERVED_SESSIONS = (0x1000_0000, 0x7FFF_FFFF)
"""Session ids the end points choose themselves; an embedded driver never auto-assigns them."""
_IMAGES_PER_SOURCE_ENV = env_name(attrs.fields(DriverContext).receiver_max_images_per_source.metadata["property"])
_IMAGES_PER_SOURCE_CEILING = 1 << 16
"""An end point's driver lets each subscription ask for its own per-address image limit (a server's
``max_routes_per_source``); images per subscription stay bounded by the driver's own limit."""


_SOCKET_DROPS_LABEL = DriverSystemCounterId.RECEIVE_SOCKET_DROPS.label


class DriverUser(Protocol):
    """An end point leasing a driver: told (from any thread) when the driver failed."""

    def _on_driver_error(self, driver: SharedDriver, error: BaseException, critical: bool) -> None: ...


def is_critical(error: BaseException) -> bool:
    """Errors after which the driver (or its network) can't be trusted: restart it."""
    if isinstance(error, (ChannelEndpointError, DriverTimeoutError)):
        return True
    text = str(error).lower()
    return "heartbeat" in text or "network is unreachable" in text or "driver is terminated" in text


class SharedDriver:
    """A driver and the one client of it that every lessee in this process uses."""

    def __init__(self, key: tuple[object, ...], config: Configuration, base_dir: Path | None = None) -> None:
        self.key = key
        self.aeron_dir: Path = config.resolved_aeron_dir()
        self.base_dir = base_dir if base_dir is not None else self.aeron_dir
        """The configured directory; a unique one is ``<base_dir>-<pid>-<random>``."""
        self.config = config
        self.media_driver: MediaDriver | None = None
        self.aeron: Aeron | None = None
        self.users: list[DriverUser] = []
        self.failed: BaseException | None = None
        self.generation = 0
        self.driven_ns = time.monotonic_ns()
        """When an event loop's poller last ran this driver's invokers (INVOKER mode)."""
        self.napping_until_ns = 0
        """When the poller, napping, means to run them next at the latest (a datagram or a client's command may
        wake it sooner): until then the driver is not stalled, only idle."""
        self._keeper: _Keeper | None = None
        self._gap_fills: tuple[DriverConductor, AtomicCounter] | None = None
        self._drops_counter: tuple[Aeron, int] | None = None

    @property
    def launched_here(self) -> bool:
        return self.media_driver is not None

    @property
    def invoker(self) -> AgentInvoker | None:
        """The embedded driver's invoker when it runs in INVOKER mode: the event loop's poller drives it."""
        media_driver = self.media_driver
        return media_driver.invoker if media_driver is not None else None

    @property
    def invokers(self) -> tuple[AgentInvoker, ...]:
        """What the loop's poller runs each round: an INVOKER-mode driver and, with it, the driver client's
        conductor (no thread of ours is left to contend for the GIL)."""
        invoker = self.invoker
        aeron = self.aeron
        if invoker is None or aeron is None:
            return ()
        conductor = aeron.conductor_agent_invoker
        return (invoker,) if conductor is None else (invoker, conductor)

    def commands_handled(self) -> int:
        """Commands the embedded driver has handled (0 when it is not ours): a client busy with it is work."""
        media_driver = self.media_driver
        return media_driver.conductor.commands_handled if media_driver is not None else 0

    def data_version(self) -> int | None:
        """Changes whenever this process's driver may have put a frame into one of its images (a datagram read, a
        gap filled) or its client mapped an image (which may hold frames that came before); None when the driver
        is not ours to run (frames may then come at any time)."""
        media_driver = self.media_driver
        aeron = self.aeron
        if media_driver is None or self.invoker is None or aeron is None:
            return None
        conductor = media_driver.conductor
        cached = self._gap_fills
        if cached is None or cached[0] is not conductor:  # (a restart brings another driver)
            cached = self._gap_fills = (conductor, conductor.system_counters.get(SystemCounterId.LOSS_GAP_FILLS))
        return conductor.receiver.datagrams + cached[1].get() + aeron.conductor.images_mapped

    def image_journal(self) -> ImageJournal | None:
        """The journal of the images this process's driver wrote to (see ``driver.media._net.ImageJournal``);
        None when the driver is not ours to run (frames may then come at any time)."""
        media_driver = self.media_driver
        if media_driver is None or self.invoker is None:
            return None
        return media_driver.conductor.receiver.image_journal

    def sockets_version(self) -> int:
        """Changes whenever ``readable_sockets`` would answer differently."""
        invoker = self.invoker
        return int(getattr(invoker.agent, "sockets_version", 0)) if invoker is not None else 0

    def readable_sockets(self) -> list[socket.socket]:
        """Sockets of an INVOKER-mode driver, its doorbell's included: data on any ends the poller's nap."""
        invoker = self.invoker
        sockets_of = getattr(invoker.agent, "readable_sockets", None) if invoker is not None else None
        found = list(sockets_of()) if sockets_of is not None else []
        doorbell = self.media_driver.doorbell if self.media_driver is not None else None
        if doorbell is not None:
            found.append(doorbell.socket)
        return found

    def feedback_sockets(self) -> list[socket.socket]:
        """Those of :meth:`readable_sockets` that carry only feedback to the driver's publications (status
        messages, NAKs): an idle poller lets a datagram on them wait a little (see ``endpoint.poller``)."""
        invoker = self.invoker
        sockets_of = getattr(invoker.agent, "feedback_sockets", None) if invoker is not None else None
        return list(sockets_of()) if sockets_of is not None else []

    def park(self) -> bool:
        """The poller is about to nap: let clients ring the doorbell; False (stay awake) if work waits."""
        media_driver = self.media_driver
        if media_driver is None or media_driver.doorbell is None:
            return True
        media_driver.doorbell.park()
        if media_driver.has_pending_work():
            media_driver.doorbell.unpark()
            return False
        return True

    def unpark(self) -> None:
        media_driver = self.media_driver
        if media_driver is not None and media_driver.doorbell is not None:
            media_driver.doorbell.unpark()

    def client(self) -> Aeron:
        if self.aeron is None:
            raise RuntimeError("shared driver is not started")
        return self.aeron

    def socket_drops(self) -> int | None:
        """Datagrams the driver's kernel dropped for its receive sockets (their queues full: the driver read them
        too late), as the driver's counter says (it counts them about once a second); None when the driver does not
        count them (Aeron's own) or is not started."""
        aeron = self.aeron
        if aeron is None:
            return None
        cached = self._drops_counter
        if cached is None or cached[0] is not aeron:  # (a restart brings another client)
            cached = self._drops_counter = (aeron, system_counter_id(aeron.counters_reader, _SOCKET_DROPS_LABEL))
        return aeron.counters_reader.get_counter_value(cached[1]) if cached[1] >= 0 else None

    # ------------------------------------------------------------------ blocking parts (worker thread)

    def _driver_context(self) -> DriverContext:
        cfg = self.config
        overrides: dict[str, object] = {
            "aeron_dir": self.aeron_dir,
            "threading_mode": cfg.threading_mode,
            "mtu_length": cfg.mtu,
            "publication_reserved_session_id_low": _RESERVED_SESSIONS[0],
            "publication_reserved_session_id_high": _RESERVED_SESSIONS[1],
            "driver_timeout_ms": int(cfg.driver_timeout * 1000),
            "dir_delete_on_shutdown": True,
            "dir_warn_if_exists": False,
            # A UDP connection holds about twelve counters at a server; Aeron's 1 MiB default (8,192) runs out short
            # of a thousand.
            "counters_values_buffer_length": cfg.counters_buffer_length,
            # Idle UDP connections: each status message is a datagram for both drivers to handle. (Heartbeats are
            # spaced per stream, on the connections' channels: handshake streams keep Aeron's 100 ms, by which a
            # live client's handshake holds its place against forged SETUPs.)
            "status_message_timeout_ns": round(cfg.status_message_interval * 1e9),
            "term_buffer_sparse_file": cfg.sparse_logs,
        }
        if cfg.sparse_logs:
            overrides["receiver_sparse_image_threshold"] = 0
        if _IMAGES_PER_SOURCE_ENV not in os.environ:
            # The ceiling of what a subscription may ask for: a server's handshake subscription asks for its
            # ``max_routes_per_source`` (64 unless raised); its other subscriptions name a session.
            overrides["receiver_max_images_per_source"] = _IMAGES_PER_SOURCE_CEILING
        for name in IDLE_STRATEGY_FIELDS:
            overrides[name] = cfg.driver_idle_strategy
        if cfg.socket_rcvbuf:
            overrides["socket_rcvbuf_length"] = cfg.socket_rcvbuf
        if cfg.socket_sndbuf:
            overrides["socket_sndbuf_length"] = cfg.socket_sndbuf
        return DriverContext.from_env().evolve(**overrides)

    def _start(self) -> None:
        timeout_ms = int(self.config.driver_timeout * 1000)
        if self.config.launch_driver:
            with _launch_lock(self.aeron_dir):
                # Per-process directories of this naming whose process was killed: give their memory back.
                reclaim_dead_siblings(self.base_dir)
                if not is_driver_active(self.aeron_dir, timeout_ms):
                    try:
                        self.media_driver = MediaDriver.launch(self._driver_context())
                    except ActiveDriverError:
                        self.media_driver = None  # another process won the race: attach to its driver
        try:
            self.aeron = Aeron.connect(
                ClientContext.from_env(
                    aeron_dir=self.aeron_dir,
                    driver_timeout_ms=timeout_ms,
                    # (A driver this loop does not run.) New images (a connecting peer) arrive through this
                    # thread: while the client is active it naps 2 ms, not Aeron's 16 ms, which every handshake
                    # waited for; after a quiet second 10 ms (a loop that cannot be woken by arrivals naps as long
                    # then), so an idle end point's thread wakes a hundred times a second, not five hundred.
                    idle_sleep_duration_ns=_CLIENT_CONDUCTOR_QUIET_SLEEP_NS,
                    busy_sleep_duration_ns=_CLIENT_CONDUCTOR_BUSY_SLEEP_NS,
                ),
                error_handler=self._on_client_error,
                driver_agent_invoker=self.invoker,
                use_conductor_agent_invoker=self.invoker is not None,
            )
        except BaseException:
            self._stop()
            raise
        if self.invokers:
            self._keeper = _Keeper(self)
        self.generation += 1

    def _stop(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop()
        aeron, self.aeron = self.aeron, None
        if aeron is not None:
            try:
                aeron.close()
            except Exception as exc:  # a dead driver makes the close complain; we are leaving anyway
                _log.debug("closing the driver client failed: %s", exc)
        media_driver, self.media_driver = self.media_driver, None
        if media_driver is not None:
            media_driver.close()

    def _on_client_error(self, error: BaseException) -> None:
        """Client conductor thread: pass the error to every lessee, marking the driver failed when critical."""
        critical = is_critical(error)
        if critical:
            if self.failed is not None:
                return  # already restarting: later errors are echoes of the first
            self.failed = error
        for user in list(self.users):
            try:
                user._on_driver_error(self, error, critical)
            except Exception:  # pragma: no cover - a lessee must not break the others
                _log.exception("driver error listener failed")

    def check_alive(self) -> BaseException | None:
        """Poll-side health check: a closed client or a stale driver heartbeat is a critical failure."""
        if self.failed is not None:
            return self.failed
        aeron = self.aeron
        if aeron is None:
            return None
        if aeron.is_closed:
            cause = aeron.termination_cause or DriverTimeoutError(f"driver client for {self.aeron_dir} closed")
            self._on_client_error(cause if is_critical(cause) else DriverTimeoutError(str(cause)))
        return self.failed


class _Keeper:
    """Runs an INVOKER-mode driver while no event loop does (a loop blocked in synchronous code).

    The loop's poller normally runs the driver every round and stamps ``driven_ns`` (and ``napping_until_ns``
    before it naps); when both are more than 50 ms past, this thread takes over at a millisecond cadence until
    the poller is back. Until then it sleeps until they could go stale. Without
    it, a blocked loop would stall the driver for every process using it, and a blocking call to the driver
    made on the loop by a client that cannot run it (another ``Aeron`` in this process) would never be answered.
    """

    def __init__(self, shared: SharedDriver) -> None:
        self._shared = shared
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="endpoint-driver-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        shared = self._shared
        period = _KEEPER_PERIOD_S
        while not self._stopped.wait(period):
            fresh_until = max(shared.driven_ns, shared.napping_until_ns) + _KEEPER_STALE_NS
            left = fresh_until - time.monotonic_ns()
            if left >= 0:
                # Asleep until the stamp could go stale, not on a short period: an idle process is not woken
                # for nothing (the take-over still comes within a millisecond of the stamp going stale).
                period = left / 1e9 + _KEEPER_STALLED_PERIOD_S
                continue
            period = _KEEPER_STALLED_PERIOD_S
            for invoker in shared.invokers:
                invoker.invoke()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)


class _Registry:
    """Process-wide table of shared drivers; all changes under one lock, blocking work off the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._drivers: dict[tuple[object, ...], SharedDriver] = {}
        self._unique = 0
        self._leasing: dict[tuple[object, ...], anyio.Event] = {}
        """Leases under way on a worker thread, by driver key and the thread of the event loop asking: the
        others of that loop wait for it and then attach on their own thread (at most one entry per loop thread
        and driver key)."""
        self.blocking_leases = 0
        """Leases that took a worker thread (a driver started or attached to, or the lock was busy)."""

    def _key(self, config: Configuration) -> tuple[object, ...]:
        key = config.driver_key()
        if config.unique_aeron_dir:
            self._unique += 1
            key = (*key, "unique", os.getpid(), self._unique, time.monotonic_ns())
        return key

    def acquire_blocking(self, config: Configuration, user: DriverUser) -> SharedDriver:
        with self._lock:
            base = config.resolved_aeron_dir()
            if config.unique_aeron_dir:
                config = _with_dir(config, base.with_name(f"{base.name}-{os.getpid()}-{os.urandom(4).hex()}"))
            key = self._key(config)
            shared = self._drivers.get(key)
            if shared is not None and shared.failed is not None:
                # Its lessees are dropping everything on it; stop it now so the new driver gets a clean directory.
                shared._stop()
                del self._drivers[key]
                shared = None
            if shared is None:
                shared = SharedDriver(key, config, base)
                shared._start()
                self._drivers[key] = shared
            shared.users.append(user)
            return shared

    def release_blocking(self, shared: SharedDriver, user: DriverUser) -> None:
        with self._lock:
            if user in shared.users:
                shared.users.remove(user)
            if shared.users:
                return
            if self._drivers.get(shared.key) is shared:
                del self._drivers[shared.key]
            shared._stop()

    def _attach_running(self, config: Configuration, user: DriverUser) -> SharedDriver | None:
        """Lease a healthy driver that is already running, on the caller's thread (no thread hop: a client that
        connects often should not wait for a worker thread); None when that takes blocking work."""
        if config.unique_aeron_dir or not self._lock.acquire(blocking=False):
            return None
        try:
            shared = self._drivers.get(self._key(config))
            if shared is None or shared.failed is not None or shared.aeron is None:
                return None
            shared.users.append(user)
            return shared
        finally:
            self._lock.release()

    async def acquire(self, config: Configuration, user: DriverUser) -> SharedDriver:
        attached = self._attach_running(config, user)
        if attached is not None:
            return attached
        # The clients of a connect storm lease at once: one of a loop starts the driver on a worker thread, the
        # rest of that loop wait for it and attach on their own thread (each took a thread before, and queued
        # behind the start on the registry's lock: 5% of a storm's client process).
        gate: tuple[object, ...] | None = None
        mine: anyio.Event | None = None
        if not config.unique_aeron_dir:
            gate = (config.driver_key(), threading.get_ident())
            leasing = self._leasing.get(gate)
            if leasing is not None:
                # Bounded like the lease itself: a leasing task that hangs leaves the rest to lease on their own.
                with anyio.move_on_after(config.driver_timeout):
                    await leasing.wait()
                attached = self._attach_running(config, user)
                if attached is not None:
                    return attached
            else:
                mine = self._leasing[gate] = anyio.Event()
        try:
            self.blocking_leases += 1
            return await anyio.to_thread.run_sync(self.acquire_blocking, config, user)
        except (DriverError, OSError) as exc:
            raise DriverUnavailableError(f"no driver on {config.resolved_aeron_dir()}: {exc}") from exc
        finally:
            if mine is not None and gate is not None:
                del self._leasing[gate]
                mine.set()

    async def release(self, shared: SharedDriver, user: DriverUser) -> None:
        if self._lock.acquire(blocking=False):
            try:
                if user in shared.users and len(shared.users) > 1:
                    shared.users.remove(user)  # others still lease it: nothing to stop
                    return
            finally:
                self._lock.release()
        await anyio.to_thread.run_sync(self.release_blocking, shared, user)

    def active(self) -> list[SharedDriver]:
        with self._lock:
            return list(self._drivers.values())

    def _forget_after_fork(self) -> None:
        """In a forked child: the drivers and clients copied from the parent are the parent's (their threads
        did not come along); running them here would make two conductors of one driver. Start afresh."""
        self._lock = threading.Lock()
        self._drivers = {}


@contextlib.contextmanager
def _launch_lock(aeron_dir: Path) -> Iterator[None]:
    """Serialise "is a driver alive here? then launch one" across processes (flock on the parent directory)."""
    parent = aeron_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _with_dir(config: Configuration, aeron_dir: Path) -> Configuration:
    return attrs.evolve(config, aeron_dir=aeron_dir, unique_aeron_dir=True)


registry = _Registry()
"""The process's driver registry."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=registry._forget_after_fork)
