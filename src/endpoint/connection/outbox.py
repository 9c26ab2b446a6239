"""A connection's way out: what every message the connection, its remote calls and its streams send goes through.

One guard (nothing is sent once the connection is closing), one offer (the
publication's, or sealing then the publication's), and one queue that waits out
back pressure in order: a sender the log refuses joins it, and a single writer
task offers for all of them as the log frees up, so thousands of waiting calls
cost one offer attempt each time, not one each, and none starves. Internal
messages that must arrive (answers, cancels) queue without a task of their own,
bounded: a peer that calls but never reads its answers cannot make them pile up.

:mod:`endpoint.rpc.calls` and :mod:`endpoint.streaming` send only through this; the
connection owns one and flips :attr:`Outbox.closing`.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.client.aio import PollBackoff
from driver.client.publication import ADMIN_ACTION, BACK_PRESSURED, CLOSED, NOT_CONNECTED
from endpoint.errors import ConnectionClosedError, TransmitError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Outbox"]


class Outbox:
    """Sends of one connection (see the module's docstring). ``closed_error`` makes the error a send on a closing
    connection raises; ``report`` hears of a queued internal message that could not go out."""

    def __init__(
        self,
        *,
        offer: Callable[[Buffer], int],
        encode: Callable[[object], bytes],
        poke: Callable[[], None],
        send_timeout: float,
        later_limit: int,
        closed_error: Callable[[], ConnectionClosedError],
        report: Callable[[BaseException], None],
        name: Callable[[], str],
    ) -> None:
        self.offer = offer
        """Every offer goes through here (sealing replaces it)."""
        self.quiet_offer: Callable[[Buffer], int] | None = None
        """How a keepalive is offered so that the driver sends no tail probe after it (a UDP connection's; None:
        as everything else). See ``driver.logbuffer.frame.QUIET_RESERVED_VALUE``."""
        self.closing = False
        """Set once the connection starts closing: every send raises the closed error from then on."""
        self.sent = 0
        """Messages the driver accepted."""
        self.dropped_answers = 0
        """Internal messages (answers, cancels) dropped because too many already waited on back pressure."""
        self._encode = encode
        self._poke = poke
        self._send_timeout = send_timeout
        self._later_limit = later_limit
        self._queued_later = 0
        self.closed_error = closed_error
        self._report = report
        self._name = name
        self._backlog: collections.deque[tuple[Buffer, asyncio.Future[None], float]] = collections.deque()
        self._writer: asyncio.Task[None] | None = None

    def ensure_open(self) -> None:
        """Raise the connection's closed error once it is closing (the one guard every send passes)."""
        if self.closing:
            raise self.closed_error()

    @property
    def queued_later(self) -> int:
        """Internal messages waiting on back pressure (at most the limit; see :meth:`send_later`)."""
        return self._queued_later

    @property
    def backlogged(self) -> bool:
        """Sends wait on back pressure (anything offered now would overtake them)."""
        return bool(self._backlog)

    def offer_now(self, data: Buffer, poke: bool = True, *, jump_queue: bool = False, quiet: bool = False) -> bool:
        """Offer once, and once more straight away after ADMIN_ACTION (the log rotated: the retry succeeds).

        False while sends are queued behind back pressure (they go first) unless ``jump_queue``.
        A message the user sent pokes the poller (an answer may follow); a keepalive does not. ``quiet``: through
        :attr:`quiet_offer` when there is one.
        """
        if self._backlog and not jump_queue:
            return False
        offer = self.offer if not quiet or self.quiet_offer is None else self.quiet_offer
        result = offer(data)
        if result == ADMIN_ACTION:
            result = offer(data)
        if result >= 0:
            self.sent += 1
            if poke:
                self._poke()
            return True
        if result == CLOSED:
            raise self.closed_error()
        return False

    async def send_bytes(self, data: Buffer, timeout: float | None) -> None:
        """Offer one encoded message, waiting out back pressure for up to ``timeout`` (None: ``send_timeout``)."""
        if self.offer_now(data):
            return
        self.ensure_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        wait = self._send_timeout if timeout is None else timeout
        self._backlog.append((data, future, loop.time() + wait))
        self._start_writer(loop)
        await future

    async def send_message(self, message: object, timeout: float | None) -> None:
        """Encode and send ``message``, waiting out back pressure (an internal message that must arrive)."""
        self.ensure_open()
        await self.send_bytes(self._encode(message), timeout)

    def send_control(self, message: object, *, must_arrive: bool = False, quiet: bool = False) -> bool:
        """Offer an internal message at once, ahead of queued sends; one that ``must_arrive`` queues if refused;
        a ``quiet`` one (a keepalive) through :attr:`quiet_offer`."""
        try:
            data = self._encode(message)
            if self.offer_now(data, poke=False, jump_queue=True, quiet=quiet):
                return True
        except Exception:  # a control message must never take the poller down
            return False
        if must_arrive and not self.closing:
            self.send_later(data)
        return False

    def send_answer(self, data: bytes) -> None:
        """Send an encoded answer in its turn (behind queued sends); nothing once closing."""
        if self.closing:
            return
        try:
            if self.offer_now(data):
                return
        except ConnectionClosedError:
            return
        self.send_later(data)

    def send_later(self, data: bytes) -> None:
        """Queue an internal message back pressure refused (an answer, a cancel) behind the writer, without a task.

        Bounded: beyond the limit (the peer's calls in flight and as many control messages) it is dropped and
        counted in :attr:`dropped_answers`.
        """
        if self._queued_later >= self._later_limit:
            self.dropped_answers += 1
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        future.add_done_callback(self._sent_later)
        self._queued_later += 1
        self._backlog.append((data, future, loop.time() + self._send_timeout))
        self._start_writer(loop)

    def _sent_later(self, future: asyncio.Future[None]) -> None:
        self._queued_later -= 1
        error = None if future.cancelled() else future.exception()
        if error is not None and not isinstance(error, ConnectionClosedError):
            self._report(error)

    async def offer_until(self, data: bytes, timeout: float) -> None:
        """Offer ahead of queued sends, waiting out back pressure for up to ``timeout`` (TimeoutError)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        backoff = PollBackoff(0.001)
        while not self.offer_now(data, poke=False, jump_queue=True):
            if loop.time() > deadline:
                raise TimeoutError(f"{self._name()}: the message was not accepted within {timeout:g} s")
            await backoff.idle()

    def fail_backlog(self) -> None:
        """The connection closed: every queued send fails with the closed error."""
        error = self.closed_error()
        while self._backlog:
            _, future, _ = self._backlog.popleft()
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.cancel()

    def _start_writer(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._writer is None:
            self._writer = loop.create_task(self._write_backlog(), name=f"{self._name()} writer")

    async def _write_backlog(self) -> None:
        backlog = self._backlog
        backoff = PollBackoff(0.001)
        time_now = asyncio.get_running_loop().time
        try:
            while backlog:
                data, future, deadline = backlog[0]
                if future.done():  # its sender was cancelled
                    backlog.popleft()
                    continue
                offer = self.offer
                result = offer(data)
                if result == ADMIN_ACTION:
                    result = offer(data)
                if result >= 0:
                    backlog.popleft()
                    self.sent += 1
                    future.set_result(None)
                    backoff.reset()
                    self._poke()
                elif result in (BACK_PRESSURED, NOT_CONNECTED):
                    if time_now() > deadline:  # the head waits longest; equal timeouts expire in order
                        backlog.popleft()
                        future.set_exception(TransmitError(f"{self._name()}: back pressure outlasted the send timeout"))
                        continue
                    await backoff.idle()
                else:
                    backlog.popleft()
                    future.set_exception(
                        self.closed_error()
                        if result == CLOSED
                        else TransmitError(f"{self._name()}: offer failed with {result}")
                    )
        finally:
            self._writer = None
