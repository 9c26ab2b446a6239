"""Async helpers (anyio: asyncio or trio): waiting without blocking the event loop.

Theory of operation: the client's data path is shared memory, so nothing here
needs a thread or a file descriptor to wait on. Every wait is a poll with a
backoff — a few immediate retries that only yield to the event loop, then
sleeps doubling up to ``max_sleep`` (1 ms by default) — so an idle waiter costs
little and a busy one reacts within a millisecond. Every wait is cancellable
(anyio cancellation or ``asyncio`` task cancel) and bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio
import sniffio

from driver.client.requests import PendingRequest, RequestService
from driver.logbuffer.header import Header
from driver.logbuffer.offer_result import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED
from driver.logbuffer.reader import ControlledAction, ControlledFragmentHandler

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "FragmentSource",
    "Offerer",
    "PollBackoff",
    "await_request",
    "offer_async",
    "offer_batch_async",
    "subscription_fragments",
]


class Offerer(Protocol):
    """What :func:`offer_async` retries: a publication's offers (the publications import this module)."""

    def offer(self, buffer: Buffer, offset: int = 0, length: int | None = None) -> int: ...

    def offer_batch(self, messages: Sequence[Buffer]) -> int: ...


class _PeekableImage(Protocol):
    def controlled_poll(self, handler: ControlledFragmentHandler, fragment_limit: int = 10) -> int: ...

    def _consume_to(self, position: int) -> None: ...


class FragmentSource(Protocol):
    """What :func:`subscription_fragments` reads: a subscription's images, until it closes."""

    @property
    def is_closed(self) -> bool: ...

    @property
    def images(self) -> Sequence[_PeekableImage]: ...


T = TypeVar("T")

_RETRYABLE = frozenset((NOT_CONNECTED, BACK_PRESSURED, ADMIN_ACTION))
_DRIVER_ANSWER_WINDOW_S = 0.001
"""An awake driver answers a command within a millisecond: keep yielding that long before sleeping."""


class PollBackoff:
    """How a poll loop waits between empty polls: yield a few times (or for ``yield_window`` seconds), then sleep
    with a doubling period up to ``max_sleep``.

    An event loop cannot sleep less than about a millisecond, so a wait for
    something that usually comes within microseconds (a driver's answer) should
    keep yielding for a while before its first sleep.
    """

    __slots__ = ("_max_sleep", "_nap", "_sleep", "_started", "_yield_window", "_yields", "max_yields")

    def __init__(self, max_sleep: float = 0.001, max_yields: int = 10, yield_window: float = 0.0) -> None:
        self._max_sleep = max_sleep
        self.max_yields = max_yields
        self._yield_window = yield_window
        self._yields = 0
        self._sleep = 0.0
        self._started = 0.0
        self._nap: Callable[[float], Awaitable[None]] | None = None

    def reset(self) -> None:
        self._yields = 0
        self._sleep = 0.0

    async def idle(self) -> None:
        nap = self._nap
        if nap is None:
            # The event loop's own sleep once known: anyio's looks the loop's library up on every call, which was a
            # fifth of the waiting in a connect storm's hundreds of polling waits.
            nap = self._nap = asyncio.sleep if sniffio.current_async_library() == "asyncio" else anyio.sleep
        if self._yields < self.max_yields:
            if self._yields == 0:
                self._started = time.monotonic()
            self._yields += 1
            await nap(0)
            return
        if self._yield_window and time.monotonic() - self._started < self._yield_window:
            self._yields += 1
            if self._yields % 4 == 0:
                # Only yielding hands the GIL back and retakes it at once, which starves the thread whose
                # answer we wait for (the driver's, the client conductor): stop briefly instead.
                time.sleep(0.000_02)
            await nap(0)
            return
        self._sleep = min(self._sleep * 2 or 0.000_05, self._max_sleep)
        await nap(self._sleep)


async def await_request(conductor: RequestService, request: PendingRequest) -> object:
    """Wait for the driver's answer to ``request`` without blocking the loop (bounded by the driver timeout)."""
    backoff = PollBackoff(yield_window=_DRIVER_ANSWER_WINDOW_S)
    try:
        # Let the other tasks of this loop round send their commands first: a driver in this process then answers
        # them all in one duty cycle (a connect storm begins hundreds at once; each first poll ran a whole cycle).
        await anyio.sleep(0)
        while not conductor.try_service(request):
            await backoff.idle()
    except BaseException:
        if not request.done:
            conductor.abandon(request)
        raise
    return request.outcome()


async def offer_async(
    publication: Offerer,
    buffer: Buffer,
    offset: int = 0,
    length: int | None = None,
    *,
    timeout: float | None = 10.0,
    max_sleep: float = 0.001,
) -> int:
    """Offer, waiting out NOT_CONNECTED, BACK_PRESSURED and ADMIN_ACTION; returns the new position.

    Returns CLOSED or MAX_POSITION_EXCEEDED as they come (retrying cannot help);
    raises TimeoutError if the message was not accepted within ``timeout`` seconds.
    """
    offer = publication.offer
    result = offer(buffer, offset, length)
    if result >= 0 or result not in _RETRYABLE:
        return result
    backoff = PollBackoff(max_sleep)
    with anyio.fail_after(timeout):
        while True:
            if result != ADMIN_ACTION:
                await backoff.idle()
            result = offer(buffer, offset, length)
            if result >= 0 or result not in _RETRYABLE:
                return result


async def offer_batch_async(
    publication: Offerer,
    messages: Sequence[Buffer],
    *,
    timeout: float | None = 10.0,
    max_sleep: float = 0.001,
) -> int:
    """:meth:`Publication.offer_batch` with the waiting of :func:`offer_async`."""
    offer_batch = publication.offer_batch
    result = offer_batch(messages)
    if result >= 0 or result not in _RETRYABLE:
        return result
    backoff = PollBackoff(max_sleep)
    with anyio.fail_after(timeout):
        while True:
            if result != ADMIN_ACTION:
                await backoff.idle()
            result = offer_batch(messages)
            if result >= 0 or result not in _RETRYABLE:
                return result


async def subscription_fragments(
    subscription: FragmentSource,
    *,
    idle_timeout: float | None = None,
    max_idle_sleep: float = 0.001,
) -> AsyncIterator[tuple[memoryview, Header]]:
    """Yield ``(payload, header)`` per fragment, zero-copy, until the subscription closes.

    A fragment is consumed (the subscriber position moves past it) only when the
    next one is requested or the iterator is closed: the driver may zero consumed
    bytes at once, so the pair must not outlive the loop body. Leaving the loop
    early (``break``) consumes the last fragment when the generator is finalised;
    use ``contextlib.aclosing`` to make that immediate. With ``idle_timeout``,
    TimeoutError is raised after that many seconds without a fragment.
    """
    captured: list[tuple[memoryview, Header]] = []
    capture = captured.append
    abort = ControlledAction.ABORT

    def peek(payload: memoryview, header: Header) -> ControlledAction:
        capture((payload, header))
        return abort

    backoff = PollBackoff(max_idle_sleep)
    idle_since: float | None = None
    next_index = 0
    while not subscription.is_closed:
        images = subscription.images
        count = len(images)
        found = False
        for i in range(count):
            image = images[(next_index + i) % count]
            image.controlled_poll(peek, 1)
            if not captured:
                continue
            next_index = (next_index + i + 1) % count
            item = captured.pop()
            end = item[1].position
            found = True
            try:
                yield item
            finally:
                image._consume_to(end)
            break
        if found:
            backoff.reset()
            idle_since = None
            continue
        if idle_timeout is not None:
            now = anyio.current_time()
            if idle_since is None:
                idle_since = now
            elif now - idle_since > idle_timeout:
                raise TimeoutError(f"no fragment within {idle_timeout} s on {subscription!r}")
        await backoff.idle()


def __getattr__(name: str) -> type[PollBackoff]:
    # ``Backoff`` was this class's name until the end point's reconnect policy took it (endpoint.reconnect.Backoff).
    if name == "Backoff":
        warnings.warn(
            "driver.client.aio.Backoff is deprecated: use PollBackoff (endpoint.reconnect.Backoff is the reconnect "
            "policy)",
            DeprecationWarning,
            stacklevel=2,
        )
        return PollBackoff
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
