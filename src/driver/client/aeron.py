"""``Aeron``: the client entry point — connect to a driver through its directory, then add resources.

Theory of operation: connecting maps ``<aeron.dir>/cnc.dat`` once the driver
marked it ready (version 15), checks that the driver's heartbeat on the
to-driver ring buffer is fresh (a stale file left by a dead driver is re-mapped
until the driver timeout), takes a client id from the ring's correlation
counter and starts the conductor: on its own thread by default
(:class:`~driver.agent.AgentRunner`), or driven by the caller through
:attr:`Aeron.conductor_agent_invoker` with ``use_conductor_agent_invoker=True``.

Every ``add_*`` exists twice: blocking (safe from any thread; bounded by the
driver timeout) and ``*_async`` (awaits without blocking the event loop;
cancellable). The client is a context manager, sync and async.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs

from driver.agent import AgentInvoker, AgentRunner
from driver.client.aio import await_request
from driver.client.conductor import (
    AvailableCounterHandler,
    ClientConductor,
    ErrorHandler,
    PendingRequest,
    PublicationErrorHandler,
    UnavailableCounterHandler,
)
from driver.client.counter import Counter
from driver.client.publication import ConcurrentPublication, ExclusivePublication
from driver.client.subscription import AvailableImageHandler, Subscription, UnavailableImageHandler
from driver.cnc import CncFile, CncGeneration
from driver.concurrent.counters import CountersReader
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.config import ClientContext
from driver.errors import DeadDriverError, DriverClientError, DriverTimeoutError
from driver.idle import BackoffIdleStrategy, IdleStrategy, SleepingIdleStrategy, idle_strategy_from_name
from driver.ownership import OwnerWatch

__all__ = ["Aeron", "default_error_handler"]

_log = logging.getLogger("driver.client")

T = TypeVar("T")

_CLIENT_OPTIONS = frozenset(
    (
        "use_conductor_agent_invoker",
        "driver_agent_invoker",
        "available_image_handler",
        "unavailable_image_handler",
        "available_counter_handler",
        "unavailable_counter_handler",
        "publication_error_handler",
    )
)
_STALE_DRIVER_RETRY_S = 0.1
SUPPORTED_CNC_GENERATIONS = (CncGeneration.V15, CncGeneration.CURRENT)
"""The client speaks whichever of these it finds; any other cnc.dat version is a CncVersionError."""
_HEARTBEAT_POLL_S = 0.001
_BUSY_FOR_NS = 1_000_000_000
"""With ``busy_sleep_duration_ns``: the conductor sleeps that while it found work within about this long."""


def default_error_handler(error: BaseException) -> None:
    """Log errors the client cannot raise to a caller (they happen on the conductor's thread)."""
    _log.error("Aeron client error: %s", error, exc_info=error)


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def _connect_to_driver(context: ClientContext) -> tuple[CncFile, OwnerWatch | None]:
    """Map cnc.dat and wait, within the driver timeout, for a live driver heartbeat.

    Our driver's process is watched through its lock (see :mod:`driver.ownership`): when it is dead the
    answer is a DeadDriverError at once, not a wait for its heartbeat to go stale.
    """
    timeout_s = context.driver_timeout_ms / 1000.0
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = max(deadline - time.monotonic(), 0.001)
        cnc = CncFile.map_existing(context.aeron_dir, timeout_s=remaining, supported=SUPPORTED_CNC_GENERATIONS)
        watch: OwnerWatch | None = None
        try:
            watch = OwnerWatch.open(context.aeron_dir)
            if watch is not None and watch.owner_pid() not in (None, cnc.pid):
                # A successor replaced the directory between the two opens: look again.
                watch.close()
                watch = None
                if time.monotonic() > deadline:
                    raise DriverTimeoutError(f"the driver of {cnc.path} kept changing while connecting")
                cnc.close()
                time.sleep(_STALE_DRIVER_RETRY_S / 10)
                continue
            if watch is not None and not watch.owner_alive():
                raise DeadDriverError(
                    f"the driver of {cnc.path} (pid {cnc.pid}) is dead: its process is gone, "
                    "start a driver (or an end point that launches one) on this directory"
                )
            ring = ManyToOneRingBuffer(cnc.to_driver_buffer)
            while ring.consumer_heartbeat_time() == 0:
                if time.monotonic() > deadline:
                    raise DriverTimeoutError(f"no driver heartbeat detected in {cnc.path}")
                time.sleep(_HEARTBEAT_POLL_S)
            if ring.consumer_heartbeat_time() >= _epoch_ms() - context.driver_timeout_ms:
                return cnc, watch
            if time.monotonic() > deadline:
                raise DriverTimeoutError(
                    f"no driver heartbeat detected in {cnc.path}: the last one is older than "
                    f"{context.driver_timeout_ms} ms (a dead driver's directory?)"
                )
        except BaseException:
            if watch is not None:
                watch.close()
            cnc.close()
            raise
        cnc.close()
        time.sleep(_STALE_DRIVER_RETRY_S)


def _idle_strategy(context: ClientContext) -> IdleStrategy:
    name = context.idle_strategy
    if name.rsplit(".", 1)[-1].lower() in ("sleeping", "sleepingidlestrategy", "sleepingmillisidlestrategy"):
        quiet, busy = context.idle_sleep_duration_ns, context.busy_sleep_duration_ns
        if not busy:
            return SleepingIdleStrategy(quiet)
        # The busy sleep until a second of sleeps found no work, then the idle sleep: the backoff's deep parks.
        return BackoffIdleStrategy(
            max_spins=0,
            max_yields=0,
            min_park_period_ns=busy,
            max_park_period_ns=busy,
            deep_park_period_ns=quiet,
            deep_idle_after=max(1, _BUSY_FOR_NS // busy),
            deeper_park_period_ns=quiet,
        )
    return idle_strategy_from_name(name)


class Aeron:
    """A client connected to one media driver. Create with :meth:`connect` (or :meth:`connect_async`)."""

    def __init__(
        self,
        context: ClientContext,
        *,
        use_conductor_agent_invoker: bool = False,
        driver_agent_invoker: AgentInvoker | None = None,
        available_image_handler: AvailableImageHandler | None = None,
        unavailable_image_handler: UnavailableImageHandler | None = None,
        available_counter_handler: AvailableCounterHandler | None = None,
        unavailable_counter_handler: UnavailableCounterHandler | None = None,
        publication_error_handler: PublicationErrorHandler | None = None,
    ) -> None:
        """Connect with a concluded context; prefer :meth:`connect`, which also builds the context."""
        self.context = context
        cnc, watch = _connect_to_driver(context)
        error_handler: ErrorHandler = context.error_handler
        try:
            self._conductor = ClientConductor(
                context,
                cnc,
                error_handler=error_handler,
                available_image_handler=available_image_handler,
                unavailable_image_handler=unavailable_image_handler,
                available_counter_handler=available_counter_handler,
                unavailable_counter_handler=unavailable_counter_handler,
                publication_error_handler=publication_error_handler,
                invoker_mode=use_conductor_agent_invoker,
                driver_invoker=driver_agent_invoker.invoke if driver_agent_invoker is not None else None,
                owner_watch=watch,
            )
        except BaseException:
            if watch is not None:
                watch.close()
            cnc.close()
            raise
        self._cnc_path = cnc.path
        self._driver_invoker = driver_agent_invoker
        self._runner: AgentRunner | None = None
        self._invoker: AgentInvoker | None = None
        if use_conductor_agent_invoker:
            self._invoker = AgentInvoker(self._conductor, error_handler)
            self._invoker.start()
        else:
            self._runner = AgentRunner(self._conductor, _idle_strategy(context), error_handler)
            self._runner.start()

    # ------------------------------------------------------------------ connecting

    @classmethod
    def connect(cls, context: ClientContext | None = None, **kwargs: Any) -> Aeron:
        """Connect to the driver of ``context.aeron_dir`` (default: from the environment, as Aeron does).

        Keyword arguments override context fields (``aeron_dir``, ``driver_timeout_ms``,
        ``error_handler``, ``idle_strategy``, ...) or set client options:
        ``use_conductor_agent_invoker``, ``driver_agent_invoker`` (an INVOKER-mode driver's invoker: blocking
        calls run it while they wait for its answer), ``available_image_handler``,
        ``unavailable_image_handler``, ``available_counter_handler``,
        ``unavailable_counter_handler``, ``publication_error_handler`` (today's drivers tell
        a publication's owner when a receiver refused it with an ERR frame). The conductor
        thread sleeps 16 ms when idle, as Aeron's client conductor does (a blocking add drives the conductor itself
        while it waits); errors go to :mod:`logging` unless ``error_handler`` is given.
        Raises DriverTimeoutError if no live driver shows up within the driver timeout.
        """
        options = {name: kwargs.pop(name) for name in list(kwargs) if name in _CLIENT_OPTIONS}
        if "aeron_dir" in kwargs and not isinstance(kwargs["aeron_dir"], Path):
            kwargs["aeron_dir"] = Path(kwargs["aeron_dir"])
        if context is None:
            context = ClientContext.from_env(**kwargs)
        elif kwargs:
            context = attrs.evolve(context, **kwargs)
        context.conclude()
        return cls(context, **options)

    @classmethod
    async def connect_async(cls, context: ClientContext | None = None, **kwargs: Any) -> Aeron:
        """:meth:`connect` on a worker thread; cancelling it closes the client if it connected meanwhile."""
        cancelled = False
        made: list[Aeron] = []

        def run() -> Aeron:
            client = cls.connect(context, **kwargs)
            made.append(client)
            if cancelled:
                client.close()
            return client

        try:
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except BaseException:
            cancelled = True
            for client in made:
                client.close()
            raise

    # ------------------------------------------------------------------ state

    @property
    def client_id(self) -> int:
        return self._conductor.client_id

    @property
    def is_closed(self) -> bool:
        return self._conductor.is_closed or self._conductor.is_terminating

    @property
    def termination_cause(self) -> BaseException | None:
        """Why the client closed itself (DriverTimeoutError, DriverClientTimeoutError ...), or None."""
        return self._conductor.termination_cause

    @property
    def counters_reader(self) -> CountersReader:
        return self._conductor.counters_reader

    @property
    def conductor(self) -> ClientConductor:
        return self._conductor

    @property
    def conductor_agent_invoker(self) -> AgentInvoker | None:
        """With ``use_conductor_agent_invoker=True``: call its ``invoke()`` regularly to run the conductor."""
        return self._invoker

    def invoke_driver(self) -> int:
        """Run one duty cycle of the INVOKER-mode driver given as ``driver_agent_invoker`` (0 without one)."""
        invoker = self._driver_invoker
        return invoker.invoke() if invoker is not None else 0

    @property
    def cnc_path(self) -> Path:
        return self._cnc_path

    def next_correlation_id(self) -> int:
        """A correlation id unique across the driver's clients (e.g. for application-level requests)."""
        if self.is_closed:
            raise DriverClientError("Aeron client is closed")
        return self._conductor._ring.next_correlation_id()

    def close(self) -> None:
        """Close every resource of this client, tell the driver, stop the conductor; idempotent."""
        if self._runner is not None:
            self._runner.close()
        if self._invoker is not None:
            self._invoker.close()
        self._conductor.on_close()

    def __enter__(self) -> Aeron:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Aeron:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Aeron(client_id={self.client_id}, aeron_dir={str(self.context.aeron_dir)!r}, closed={self.is_closed})"

    # ------------------------------------------------------------------ resources (blocking)

    def _begin(self, start: Callable[[], PendingRequest]) -> PendingRequest:
        with self._conductor.lock:
            return start()

    def _await(self, request: PendingRequest, kind: type[T]) -> T:
        result = self._conductor.await_response(request)
        assert isinstance(result, kind)
        return result

    def add_publication(self, channel: str, stream_id: int) -> ConcurrentPublication:
        """Add (or share) the publication on ``channel``/``stream_id``; blocks until the driver answered."""
        request = self._begin(lambda: self._conductor.begin_add_publication(channel, stream_id, False))
        return self._await(request, ConcurrentPublication)

    def add_exclusive_publication(self, channel: str, stream_id: int) -> ExclusivePublication:
        """Add a publication of its own session, for a single writer; blocks until the driver answered."""
        request = self._begin(lambda: self._conductor.begin_add_publication(channel, stream_id, True))
        return self._await(request, ExclusivePublication)

    def add_subscription(
        self,
        channel: str,
        stream_id: int,
        available_image_handler: AvailableImageHandler | None = None,
        unavailable_image_handler: UnavailableImageHandler | None = None,
    ) -> Subscription:
        """Subscribe to ``channel``/``stream_id``; images arrive asynchronously (see the handlers)."""
        request = self._begin(
            lambda: self._conductor.begin_add_subscription(
                channel, stream_id, available_image_handler, unavailable_image_handler
            )
        )
        return self._await(request, Subscription)

    def add_counter(self, type_id: int, key: bytes = b"", label: str = "") -> Counter:
        """Have the driver allocate a counter (type id, key up to 112 bytes, ASCII label up to 380)."""
        request = self._begin(lambda: self._conductor.begin_add_counter(type_id, key, label))
        return self._await(request, Counter)

    def add_static_counter(self, type_id: int, registration_id: int, key: bytes = b"", label: str = "") -> int:
        """Today's drivers only: a counter no client owns, found again by (type id, registration id).

        Returns its counter id (the same one for every caller of the same pair).
        """
        request = self._begin(lambda: self._conductor.begin_add_static_counter(type_id, registration_id, key, label))
        return self._await(request, int)

    def next_available_session_id(self, stream_id: int) -> int:
        """Today's drivers only: a session id no publication on ``stream_id`` uses now."""
        request = self._begin(lambda: self._conductor.begin_next_session_id(stream_id))
        return self._await(request, int)

    @property
    def cnc_generation(self) -> CncGeneration:
        """The cnc.dat generation the driver writes (and this client speaks)."""
        return self._conductor.generation

    # ------------------------------------------------------------------ resources (async)

    async def _begin_async(self, start: Callable[[], PendingRequest]) -> PendingRequest:
        lock = self._conductor.lock
        if not lock.acquire(blocking=False):  # usually free: the timed wait (a cancel scope) only when it is not
            with anyio.fail_after(self.context.driver_timeout_ms / 1000.0):
                while not lock.acquire(blocking=False):
                    await anyio.sleep(0.000_1)
        try:
            return start()
        finally:
            lock.release()

    async def _await_async(self, start: Callable[[], PendingRequest], kind: type[T]) -> T:
        request = await self._begin_async(start)
        result = await await_request(self._conductor, request)
        assert isinstance(result, kind)
        return result

    async def add_publication_async(self, channel: str, stream_id: int) -> ConcurrentPublication:
        return await self._await_async(
            lambda: self._conductor.begin_add_publication(channel, stream_id, False), ConcurrentPublication
        )

    async def add_exclusive_publication_async(self, channel: str, stream_id: int) -> ExclusivePublication:
        return await self._await_async(
            lambda: self._conductor.begin_add_publication(channel, stream_id, True), ExclusivePublication
        )

    async def add_subscription_async(
        self,
        channel: str,
        stream_id: int,
        available_image_handler: AvailableImageHandler | None = None,
        unavailable_image_handler: UnavailableImageHandler | None = None,
    ) -> Subscription:
        return await self._await_async(
            lambda: self._conductor.begin_add_subscription(
                channel, stream_id, available_image_handler, unavailable_image_handler
            ),
            Subscription,
        )

    async def add_counter_async(self, type_id: int, key: bytes = b"", label: str = "") -> Counter:
        return await self._await_async(lambda: self._conductor.begin_add_counter(type_id, key, label), Counter)
