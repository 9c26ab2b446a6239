"""What servers and clients share: the driver lease, listeners, polling and error routing.

Every end point on an event loop is polled by that loop's one poller task
(:class:`~endpoint.poller.LoopPoller`); a driver failure reported on the driver client's thread
hops onto the loop and restarts the end point on a fresh driver.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from endpoint.config import Configuration
from endpoint.connection.agenda import Agenda, grid_after
from endpoint.connection.counters import ConnectionCounters, EndpointCounters, role_of
from endpoint.connection.liveness import tick_interval_ns
from endpoint.connection.newest import Sequencer
from endpoint.connection.shell import Connection
from endpoint.errors import (
    CriticalDriverError,
    DriverUnavailableError,
    EndpointClosedError,
    UnhandledMessageError,
)
from endpoint.eventloop import check_construction, require_asyncio
from endpoint.handshake.routes import HandshakeRoutes
from endpoint.listeners import ListenerManager
from endpoint.messages import register_internal_messages
from endpoint.poller import LoopPoller, Polled
from endpoint.registry import SharedDriver, registry
from endpoint.rpc.calls import RpcRegistry

if TYPE_CHECKING:
    from driver.client.publication import Publication
    from driver.client.subscription import Subscription
    from endpoint.streaming import IncomingStream

__all__ = ["EndPoint", "MessageListenerDecorator"]

_LEASE_RETRY_S = 0.1
_CONNECTION_TICK_CEILING_NS = 500_000_000
"""Connections' timers fall on a grid of half ``ping_interval`` (the liveness promise: a dead peer is found within
``peer_timeout`` plus one ``ping_interval``), at most 500 ms and at least 10 ms apart. Each connection is filed in
the end point's agenda (:mod:`endpoint.connection.agenda`) under the point its timers next need looking at, so an
idle connection costs one look per keepalive (every 1.5 ``ping_interval``), not one per step."""
_CONNECTION_TICK_FLOOR_NS = 10_000_000
_AGENDA_SLACK_NS = 5_000_000
"""Connections due within this much after a tick are looked at in it rather than waking the loop once more."""
END_POINT_CLOSED = "end point closed"
"""The close reason of every connection of an end point that closes (a server shutting down, say)."""
_log = logging.getLogger("endpoint")

ConfigT = TypeVar("ConfigT", bound=Configuration)
F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M")
R = TypeVar("R")
ConnectListener = TypeVar("ConnectListener", bound=Callable[[Connection], Any])
ErrorListenerT = TypeVar("ErrorListenerT", bound=Callable[[Connection | None, BaseException], Any])
StreamListener = TypeVar("StreamListener", bound="Callable[[Connection, IncomingStream], Any]")


class MessageListenerDecorator(Generic[M]):
    """What ``@end_point.on_message(Move)`` returns: it registers a listener whose message parameter accepts
    ``Move`` (a type checker rejects one annotated for another class) and hands the listener back."""

    __slots__ = ("_add", "_message_type")

    def __init__(self, add: Callable[[type, Callable[..., Any]], Any], message_type: type[M]) -> None:
        self._add = add
        self._message_type = message_type

    def __call__(self, listener: Callable[[Connection, M], R]) -> Callable[[Connection, M], R]:
        self._add(self._message_type, listener)
        return listener


class EndPoint(Generic[ConfigT]):
    """Base of :class:`~endpoint.Server` and :class:`~endpoint.Client`."""

    def __init__(self, config: ConfigT) -> None:
        check_construction(f"a {type(self).__name__}")
        self.config = config
        self.listeners: ListenerManager[Connection] = ListenerManager(type(self).__name__)
        register_internal_messages(config.serialization)
        self.rpc = RpcRegistry()
        """Objects every connection's peer can call (``connection.rpc`` adds per-connection ones)."""
        self._connections: dict[int, Connection] = {}
        self._polled_now: tuple[Connection, ...] | None = ()
        """``_connections`` as a tuple, made again when next asked for after a connection came or went."""
        self._waiting_for_image: dict[int, Connection] = {}
        """Connections whose image is not mapped yet (polled in Python until it is), by id."""
        self._unmapped_now: tuple[Connection, ...] | None = ()
        self._ipc_connections = 0
        """Connections over IPC (kept as they come and go: a poll-set rebuild must not walk them once more)."""
        self._shared: SharedDriver | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._polling = False
        self._loop_poller: LoopPoller | None = None
        self._closing = False
        self._restarting = False
        self._socket_drops: int | None = None
        """The driver's count of datagrams its kernel dropped, as last read (see :meth:`_dropped_ns`)."""
        self._last_drops_ns: int | None = None
        self._connection_tick_ns = tick_interval_ns(
            int(config.ping_interval * 1e9), _CONNECTION_TICK_CEILING_NS, _CONNECTION_TICK_FLOOR_NS
        )
        """The grid of the connections' timers (see :mod:`endpoint.connection.agenda`)."""
        self._agenda: Agenda[Connection] = Agenda()
        """Every open connection, filed under when its timers next need looking at."""
        self._timers_due_ns = 0
        """When the end point's own timers (not its connections': those are on the agenda) next have something to
        do: until then a tick step skips it (a process of a thousand clients ran ten thousand steps a second)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self.restarts = 0
        self.connection_counters = ConnectionCounters(role_of(self))
        """Each connection's round trip and messages in the driver's counters file (``aeron-tools connections``)."""
        self.endpoint_counters = EndpointCounters(role_of(self), int(getattr(config, "port", 0)))
        """A server's own figures in the driver's counters file (connections, handshake outcomes ...)."""
        self.malformed_messages = 0
        """Messages dropped as malformed on this end point's connections, over its life (see the connections')."""
        self.seal_failures = 0
        """Sealed connections closed because a message of the peer's did not open (forged, replayed, tampered)."""
        """How many times the driver under this end point was restarted after a critical error."""
        self.unhandled_messages = 0
        """Messages dropped on this end point's connections because no listener takes their class."""
        self._unhandled_logged: set[type] = set()
        self.sequencer = Sequencer()
        """Newest-wins sequence numbers per message class, shared by this end point's connections and groups."""
        """Classes already logged under ``on_unhandled="log_once"`` (bounded by the registered classes)."""

    # ------------------------------------------------------------------ listeners

    def on_connect(self, listener: ConnectListener) -> ConnectListener:
        """``listener(connection)``, sync or async; runs before the connection's first message is dispatched."""
        return self.listeners.add_connect(listener)

    def on_disconnect(self, listener: ConnectListener) -> ConnectListener:
        """``listener(connection)``; runs after the connection's last message; ``connection.close_reason`` says why."""
        return self.listeners.add_disconnect(listener)

    def on_error(self, listener: ErrorListenerT) -> ErrorListenerT:
        """``listener(connection_or_None, error)`` for this end point's errors (listener failures included)."""
        return self.listeners.add_error(listener)

    def on_stream(self, listener: StreamListener) -> StreamListener:
        """``listener(connection, stream)`` for each incoming :class:`~endpoint.streaming.IncomingStream`.

        It runs as a task of its own (a long transfer holds back nothing else) and should consume the
        stream (iterate, ``read()`` or ``save()``); whatever it leaves is cancelled when it returns.
        """
        return self.listeners.add_stream(listener)

    @overload
    def on_message(
        self, message_type: type[M], listener: Callable[[Connection, M], R]
    ) -> Callable[[Connection, M], R]: ...

    @overload
    def on_message(self, message_type: type[M]) -> MessageListenerDecorator[M]: ...

    @overload
    def on_message(self) -> MessageListenerDecorator[object]: ...

    def on_message(
        self, message_type: type[Any] = object, listener: Callable[[Connection, Any], Any] | None = None
    ) -> Callable[[Connection, Any], Any] | MessageListenerDecorator[Any]:
        """``listener(connection, message)`` for ``message_type`` and its subclasses; no type = catch-all.

        ``@ep.on_message(Move)`` decorates; ``ep.on_message(Move, fn)`` registers directly. Typed: the
        listener's message parameter must accept ``message_type`` (``Move`` or a base of it; the catch-all's
        must accept ``object``), or a type checker rejects the registration.
        """
        if listener is not None:
            return self.listeners.add_message(message_type, listener)
        return MessageListenerDecorator(self.listeners.add_message, message_type)

    def remove_listener(self, listener: Callable[..., Any]) -> bool:
        return self.listeners.remove(listener)

    def _notify_error(self, connection: Connection | None, error: BaseException) -> None:
        self.listeners.notify_error(connection, error)

    def _on_unhandled(self, connection: Connection, message_type: type) -> None:
        """A message no listener takes was dropped: count it, then follow ``config.on_unhandled``."""
        self.unhandled_messages += 1
        policy = self.config.on_unhandled
        if policy == "error":
            text = f"no listener for {message_type.__name__} on {connection!r}"
            self._notify_error(connection, UnhandledMessageError(text, message_type))
        elif policy == "log_once" and message_type not in self._unhandled_logged:
            self._unhandled_logged.add(message_type)
            _log.warning(
                "%s: no listener for %s (first on %r); dropping every %s without one, counted in "
                "unhandled_messages (on_unhandled='error' reports each to on_error)",
                type(self).__name__,
                message_type.__qualname__,
                connection,
                message_type.__qualname__,
            )

    @property
    def aeron_dir(self) -> Path:
        """The directory of this end point's driver: the leased driver's while bound or connected (a unique
        directory included), else the one its configuration names."""
        shared = self._shared
        return shared.aeron_dir if shared is not None else self.config.resolved_aeron_dir()

    # ------------------------------------------------------------------ connections

    @property
    def connections(self) -> list[Connection]:
        return [c for c in self._connections.values() if not c.is_closed]

    @property
    def connection_count(self) -> int:
        """How many connections are open, ``len(connections)`` without building the list (the end point's
        counters show it every second): a connection leaves ``_connections`` in the step that closes it."""
        return len(self._connections)

    def _add_connection(self, connection: Connection) -> None:
        replaced = self._connections.get(connection.id)
        self._connections[connection.id] = connection
        if replaced is not None:
            self._ipc_connections -= replaced.is_ipc
            self._poll_set_changed(replaced)
        self._ipc_connections += connection.is_ipc
        now_ns = time.monotonic_ns()
        connection._in_service(now_ns)
        self._agenda.file(connection, grid_after(now_ns, self._connection_tick_ns))
        self._poll_set_changed(connection)
        self.connection_counters.admit(connection, now_ns)
        connection._fire_connect()

    def _connection_released(self, connection: Connection) -> None:
        for group in tuple(connection.groups):  # before on_disconnect runs: a broadcast no longer reaches it
            group.discard(connection)
        self._agenda.discard(connection)
        if self._connections.get(connection.id) is connection:
            del self._connections[connection.id]
            self._ipc_connections -= connection.is_ipc
            self._poll_set_changed(connection)
        shared = self._shared
        self._spawn(self.connection_counters.close(shared.aeron if shared else None, connection), connection)
        self._spawn(self._close_resources(connection), connection)

    async def _add_stream(self, channel: str, stream_id: int, publication: bool) -> Publication | Subscription:
        """A connection's extra stream (its unreliable half), on this end point's driver."""
        shared = self._shared
        aeron = shared.client() if shared is not None else None
        if aeron is None:
            raise DriverUnavailableError("the driver is being restarted")
        if publication:
            return await aeron.add_exclusive_publication_async(channel, stream_id)
        return await aeron.add_subscription_async(channel, stream_id)

    async def _close_resources(self, connection: Connection) -> None:
        for resource in (*connection._resources(), *connection._unreliable_resources()):
            try:
                await resource.close_async()
            except Exception as exc:  # the driver may be gone; nothing else to free
                _log.debug("closing %r failed: %s", resource, exc)
        self._after_connection_closed(connection)

    def _after_connection_closed(self, connection: Connection) -> None:
        """Hook: the server frees the connection's ids here."""

    def _tell(self, listeners: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each listener (an async one as a task of ours); a failure reaches ``on_error``, never the caller."""
        for listener in listeners:
            try:
                result = listener(*args)
            except Exception as exc:
                self._notify_error(None, exc)
                continue
            if inspect.isawaitable(result):
                self._spawn(_awaited(result))

    # ------------------------------------------------------------------ life cycle

    async def _lease_driver(self) -> SharedDriver:
        self._loop = require_asyncio(f"starting a {type(self).__name__}")
        self.config.serialization.freeze()
        shared = await registry.acquire(self.config, self)
        self._shared = shared
        if self._polling:
            LoopPoller.for_running_loop().changed = True  # a restarted INVOKER-mode driver is a new one to drive
        return shared

    def _start_poller(self) -> None:
        if not self._polling:
            self._polling = True
            self._loop_poller = LoopPoller.for_running_loop()
            self._loop_poller.add(self)

    def _poke_poller(self) -> None:
        poller = self._loop_poller
        if poller is not None:
            poller.poke()

    @property
    def _routes(self) -> HandshakeRoutes:
        return LoopPoller.for_running_loop().routes

    def _loop_endpoints(self) -> tuple[Polled, ...]:
        """The end points polled on this loop (after :meth:`close` began, without this one)."""
        return LoopPoller.for_running_loop().endpoints

    def _stop_poller(self) -> None:
        if self._polling:
            self._polling = False
            LoopPoller.for_running_loop().remove(self)
            self._loop_poller = None

    def _spawn(self, coro: Any, connection: Connection | None = None) -> asyncio.Task[Any]:
        """A task of this end point's (awaited on close); its failure reaches ``on_error`` with ``connection``."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(functools.partial(self._task_done, connection))
        return task

    def _task_done(self, connection: Connection | None, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._notify_error(connection, task.exception())  # type: ignore[arg-type]

    def _loop_call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon(fn, *args)

    def _ensure_open(self) -> None:
        if self._closing:
            raise EndpointClosedError(f"{type(self).__name__} is closed")

    polls_handshakes = False
    """A server has handshake streams to poll every round (in :meth:`_poll_extra`)."""

    def _poll_extra(self) -> int:
        """Hook: the server polls its handshake streams here."""
        return 0

    def _tick_extra(self, now_ns: int) -> bool:
        """Hook: the server expires half-done handshakes here. True if it had anything to look at (it may have
        written something for the driver to send)."""
        return False

    def _tick_extra_due_ns(self, now_ns: int) -> int:
        """Hook: when :meth:`_tick_extra` next has something to look at (``now_ns``: at every step)."""
        return now_ns

    @property
    def _sleeps_soundly(self) -> bool:
        """Nothing this end point waits for can arrive without waking the poller (see :class:`LoopPoller`): no
        connection reads an IPC log (its frames ring nothing) or waits for its image to be mapped."""
        return not self._ipc_connections and not self._unmapped

    def _poll_unmapped(self) -> int:
        """Handshakes, and connections whose image is not mapped yet; the poller checks mapped ones natively."""
        work = self._poll_extra()
        for connection in self._unmapped:
            try:
                work += connection._poll()
            except Exception as exc:
                self._notify_error(connection, exc)
        return work

    @property
    def _polled(self) -> tuple[Connection, ...]:
        """Every connection (a broadcast's targets), as a tuple made once per change of the set."""
        polled = self._polled_now
        if polled is None:
            polled = self._polled_now = tuple(self._connections.values())
        return polled

    @property
    def _unmapped(self) -> tuple[Connection, ...]:
        """The connections still waiting for their image (polled in Python until it is mapped)."""
        unmapped = self._unmapped_now
        if unmapped is None:
            unmapped = self._unmapped_now = tuple(self._waiting_for_image.values())
        return unmapped

    @property
    def _mapped(self) -> tuple[Connection, ...]:
        """The connections whose image is mapped (the poller checks them natively). Walks every connection: for
        the poller's full rebuild only, which happens when end points come or go, not per connection."""
        return tuple(c for c in self._connections.values() if c._image is not None)

    @property
    def _network_connections(self) -> int:
        """Connections over UDP (the poller sends what a round wrote at once while there is one)."""
        return len(self._connections) - self._ipc_connections

    def _poll_set_changed(self, connection: Connection) -> None:
        """``connection`` came, went, or its image (or unreliable image) was mapped or let go: file it again
        where it belongs, and tell the poller about this one connection. Costs the same at 10 connections and
        at 10,000 (a storm of connects must not rebuild anything per connection that walks the others)."""
        key = connection.id
        current = self._connections.get(key) is connection
        if current and connection._image is None:
            if self._waiting_for_image.get(key) is not connection:
                self._waiting_for_image[key] = connection
                self._unmapped_now = None
        elif self._waiting_for_image.get(key) is connection:
            del self._waiting_for_image[key]
            self._unmapped_now = None
        self._polled_now = None
        poller = self._loop_poller
        if poller is not None:
            poller.rewatch(self, connection, current and connection._image is not None)

    def _attend(self, connection: Connection) -> None:
        """``connection``'s timers need looking at from the next step of the grid on (a stream started arriving,
        reading was held off ...): file it there if it was filed later. One being looked at now (not filed) is
        filed again afterwards by what it then needs."""
        agenda = self._agenda
        due = agenda.due_of(connection)
        if due is not None:
            step = grid_after(time.monotonic_ns(), self._connection_tick_ns)
            if due > step:
                agenda.file(connection, step)

    def _dropped_ns(self, now_ns: int) -> int | None:
        """When our driver's kernel was last seen dropping datagrams for its receive sockets (their queues full: an
        overloaded driver reads too late, and whatever a peer sent meanwhile may be lost on our side); None if
        never, or the driver does not say."""
        shared = self._shared
        drops = shared.socket_drops() if shared is not None else None
        if drops is not None and drops != self._socket_drops:
            if self._socket_drops is not None:
                self._last_drops_ns = now_ns
            self._socket_drops = drops
        return self._last_drops_ns

    def _tick(self, now_ns: int) -> bool:
        """The end point's timers: the connections due on its agenda, handshakes, counters (the poller checks the
        driver's health, once per driver). True if it may have written something for the driver to send (a
        keepalive, an acknowledgement, a ping): the poller then runs the driver's duty cycle once more so it
        leaves in this wake-up. An idle server's connections fall due on a grid of half a ping interval while its
        timers run ten times a second: the steps in between look at nothing and need no second duty cycle over
        every stream; a step at which neither a connection nor a timer of its own is due costs one comparison."""
        agenda = self._agenda
        due_ns = agenda.next_due_ns
        connections_due = due_ns is not None and now_ns + _AGENDA_SLACK_NS >= due_ns
        if not connections_due and now_ns < self._timers_due_ns:
            return False
        wrote = False
        if connections_due:
            assert due_ns is not None
            grid_ns = self._connection_tick_ns
            # Held up (an overloaded loop, a starved process) past a whole step after the first connection was
            # due: that time was ours, not the peers' silence; a dead peer is found that much later, a live one
            # is not dropped for our delay.
            stall_ns = max(0, now_ns - due_ns - grid_ns)
            dropped_ns = self._dropped_ns(now_ns)
            connections = self._connections
            for connection in agenda.pop_due(now_ns, _AGENDA_SLACK_NS):
                if connection._closing or connections.get(connection.id) is not connection:
                    continue
                try:
                    if not stall_ns:
                        # The common look at an idle connection, which finds nothing owed and writes nothing.
                        next_ns = connection._tick_quiet(now_ns, grid_ns)
                        if next_ns:
                            agenda.file(connection, next_ns)
                            continue
                    wrote = True
                    connection._tick(now_ns, stall_ns, dropped_ns)
                except Exception as exc:  # one connection's failure is its own, and the others still tick
                    self._notify_error(connection, exc)
                if not connection._closing:
                    agenda.file(connection, connection._next_check_ns(now_ns, grid_ns))
        wrote = self._tick_extra(now_ns) or wrote
        wrote = self.connection_counters.refresh(now_ns) or wrote
        shared = self._shared
        if shared is not None and shared.aeron is not None and self.connection_counters.waiting:
            for connection in self.connection_counters.due(now_ns, self._handshakes_under_way()):
                self._spawn(self.connection_counters.open(shared.aeron, connection), connection)
        self.endpoint_counters.refresh(now_ns, self)
        # (Never more than a refresh period away: a connection admitted meanwhile, whose counters are due a while
        # after it came, or a driver leased again, is looked at in time without waking this earlier.)
        counters = self.connection_counters
        self._timers_due_ns = min(
            self._tick_extra_due_ns(now_ns), counters.next_due_ns, self.endpoint_counters.next_due_ns
        )
        return wrote

    # ------------------------------------------------------------------ driver failures

    def _on_driver_error(self, driver: SharedDriver, error: BaseException, critical: bool) -> None:
        """Any thread (the driver client's conductor): hop onto our loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._driver_error_on_loop, driver, error, critical)
        except RuntimeError:  # loop closed meanwhile
            pass

    def _driver_error_on_loop(self, driver: SharedDriver, error: BaseException, critical: bool) -> None:
        if driver is not self._shared:
            return
        if critical:
            self._begin_restart(driver, error)
        else:
            self._notify_error(None, error)

    def _begin_restart(self, driver: SharedDriver, cause: BaseException) -> None:
        if self._restarting or self._closing or driver is not self._shared:
            return
        self._restarting = True
        error = CriticalDriverError(f"driver {driver.aeron_dir} failed ({cause}); restarting it")
        error.__cause__ = cause
        self._notify_error(None, error)
        self._spawn(self._restart(driver))

    async def _restart(self, driver: SharedDriver) -> None:
        try:
            for connection in list(self._connections.values()):
                connection._lose("the driver failed")
            self.connection_counters.forget()
            self.endpoint_counters.forget()
            await self._drop_driver_resources()
            await registry.release(driver, self)
            self._shared = None
            if self._closing:
                return
            if not await self._lease_again():
                return
            self.restarts += 1
            await self._after_restart()
        finally:
            self._restarting = False

    async def _lease_again(self) -> bool:
        """Lease a driver after a failure, retrying for a while: an end point that does not launch drivers waits
        for a successor (a supervisor restarting the process that hosted the driver). False: given up, told."""
        deadline = time.monotonic() + max(self.config.connect_timeout, self.config.driver_timeout)
        while True:
            try:
                await self._lease_driver()
                return True
            except DriverUnavailableError as exc:
                if self._closing or time.monotonic() >= deadline:
                    self._notify_error(None, exc)
                    return False
                _log.info("no driver yet after the failure (%s); trying again", exc)
                await asyncio.sleep(_LEASE_RETRY_S)

    def _handshakes_under_way(self) -> bool:
        """Hook: handshakes are in progress (connection counters wait, see ``OPEN_AFTER_STORMING_NS``)."""
        return False

    async def _drop_driver_resources(self) -> None:
        """Hook: forget publications and subscriptions of the failed driver (no driver calls)."""

    async def _after_restart(self) -> None:
        """Hook: the server re-binds; a client with ``auto_reconnect`` reconnects."""

    async def close(self) -> None:
        """Close every connection gracefully, stop polling and release the driver."""
        if self._closing:
            return
        connections = list(self._connections.values())
        if connections:
            await asyncio.gather(*(c.close(END_POINT_CLOSED) for c in connections), return_exceptions=True)
        shared = self._shared
        if shared is not None and len(self.endpoint_counters):
            await self.endpoint_counters.close(shared.aeron)  # while the poller still drives an INVOKER driver
        self._closing = True
        self._stop_poller()
        await self._close_extra()
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.config.close_timeout)
        for connection in list(self._connections.values()):
            worker = connection._worker
            if worker is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(worker), self.config.close_timeout)
                except (TimeoutError, Exception):
                    pass
        shared, self._shared = self._shared, None
        if shared is not None:
            await registry.release(shared, self)

    async def _close_extra(self) -> None:
        """Hook: close handshake resources."""

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
