"""Publications: append messages to a log buffer the driver created (Aeron 1.15.1 semantics).

Theory of operation
-------------------
The driver answers ADD_PUBLICATION with the name of a log file and the id of a
*publisher limit* counter. Offering a message is done entirely in shared memory,
by the log appender of :mod:`driver.logbuffer.appender` (:class:`LogAppender`
for :class:`ConcurrentPublication`, :class:`ExclusiveLogAppender` for
:class:`ExclusivePublication`): read the limit and the active partition's tail,
answer flow control at the limit, claim space in the term, write header and
payload, commit the frame with an ordered store of its length, and rotate the
log after a claim that ran off the term. A publication adds what a client object
needs around it: identity, ``close``, destinations and the async waits.

The data path never raises for flow-control conditions: it returns one of the
negative :class:`OfferResult` codes. Bad arguments (negative length, a message
above ``max_message_length``) raise ``ValueError`` as Java throws
``IllegalArgumentException``.

Hot path: ``offer`` of a message that fits one frame, with no reserved value
supplier, is one native call (the appender's ``PublicationWriter``), which
answers 0 for every case it leaves to the appender's Python ``offer``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

from driver.client.aio import await_request, offer_async, offer_batch_async
from driver.client.requests import PendingRequest, RequestService
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer.appender import ExclusiveLogAppender, LogAppender, ReservedValueSupplier
from driver.logbuffer.descriptor import is_connected
from driver.logbuffer.header import BufferClaim
from driver.logbuffer.log_buffers import LogBuffers
from driver.logbuffer.offer_result import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    OfferResult,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "CLOSED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "ConcurrentPublication",
    "ExclusivePublication",
    "OfferResult",
    "Publication",
    "PublicationOwner",
]


class PublicationOwner(RequestService, Protocol):
    """What a publication needs from the client conductor that made it (which implements it)."""

    @property
    def lock(self) -> AbstractContextManager[object]: ...

    def channel_status(self, channel_status_id: int) -> int: ...

    def begin_destination(self, registration_id: int, channel: str, *, add: bool, receive: bool) -> PendingRequest: ...

    def await_response(self, request: PendingRequest) -> object: ...

    def release_publication(self, publication: Publication) -> None: ...

    def begin_release(self, resource: Publication) -> PendingRequest | None: ...


class Publication(abc.ABC):
    """What every publication offers: identity, state, positions and ``close``.

    The data path lives in :class:`ConcurrentPublication` (``add_publication``) and
    :class:`ExclusivePublication` (``add_exclusive_publication``).
    """

    __slots__ = (
        "_appender",
        "_conductor",
        "_is_closed",
        "_limit",
        "_log",
        "_writer",
        "channel",
        "channel_status_id",
        "initial_term_id",
        "max_message_length",
        "max_payload_length",
        "max_possible_position",
        "original_registration_id",
        "position_bits_to_shift",
        "registration_id",
        "session_id",
        "stream_id",
        "term_buffer_length",
    )

    _appender: LogAppender | ExclusiveLogAppender
    _APPENDER: ClassVar[type[LogAppender | ExclusiveLogAppender]]

    def __init__(
        self,
        conductor: PublicationOwner,
        channel: str,
        stream_id: int,
        session_id: int,
        position_limit: AtomicBuffer,
        channel_status_id: int,
        log: LogBuffers,
        original_registration_id: int,
        registration_id: int,
    ) -> None:
        self._conductor = conductor
        self._log = log
        self._limit = position_limit
        self._is_closed = False
        self.channel = channel
        self.stream_id = stream_id
        self.session_id = session_id
        self.channel_status_id = channel_status_id
        self.original_registration_id = original_registration_id
        self.registration_id = registration_id
        appender = self._APPENDER(log.metadata, log.terms, log.term_views, position_limit)
        self._appender = appender
        self._writer = appender.native  # its offer is called as self._writer.offer: a specialised method call
        self.term_buffer_length = appender.term_length
        self.max_message_length = appender.max_message_length
        self.max_payload_length = appender.max_payload_length
        self.max_possible_position = appender.max_possible_position
        self.initial_term_id = appender.initial_term_id
        self.position_bits_to_shift = appender.position_bits_to_shift

    # ------------------------------------------------------------------ state

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def native_offer(self) -> Callable[[Buffer], int]:
        """The native writer's offer of one whole message, for a caller's hot path: > 0 the new position; 0 nothing
        written (back pressure, a message to fragment, an unmapped log...); < 0 an OfferResult code. On anything but
        > 0 take :meth:`offer`, which decides (and says CLOSED: this one does not look at :attr:`is_closed`)."""
        return self._writer.offer

    @property
    def is_original(self) -> bool:
        """True for the ``add_publication`` that made the driver create the publication."""
        return self.original_registration_id == self.registration_id

    @property
    def is_connected(self) -> bool:
        """True while the driver reports at least one subscriber (the log's connected flag)."""
        return not self._is_closed and is_connected(self._log.metadata)

    @property
    def position(self) -> int:
        """Position of the publication's tail (where the next message goes), or CLOSED."""
        if self._is_closed:
            return CLOSED
        return self._appender.position

    @property
    def position_limit(self) -> int:
        """Position the driver lets the publication reach (flow control), or CLOSED."""
        if self._is_closed:
            return CLOSED
        return self._limit.get_long_volatile(0)

    @property
    def available_window(self) -> int:
        if self._is_closed:
            return CLOSED
        return self._limit.get_long_volatile(0) - self.position

    @property
    def channel_status(self) -> int:
        """Channel endpoint status (1 ACTIVE for IPC), or -1 once closed."""
        if self._is_closed:
            return -1
        return self._conductor.channel_status(self.channel_status_id)

    @property
    def log_buffers(self) -> LogBuffers:
        return self._log

    def add_destination(self, endpoint_channel: str) -> None:
        """Send to one more destination (``aeron:udp?endpoint=host:port``) too.

        For publications on a ``control-mode=manual`` channel (multi-destination
        cast); waits, bounded, for the driver; RegistrationError if it refuses.
        """
        self._destination(endpoint_channel, add=True)

    def remove_destination(self, endpoint_channel: str) -> None:
        """Stop sending to a destination added with :meth:`add_destination`."""
        self._destination(endpoint_channel, add=False)

    def _destination(self, endpoint_channel: str, *, add: bool) -> None:
        conductor = self._conductor
        with conductor.lock:
            request = conductor.begin_destination(
                self.original_registration_id, endpoint_channel, add=add, receive=False
            )
        conductor.await_response(request)

    def close(self) -> None:
        """Release the publication (REMOVE_PUBLICATION; waits, bounded, for the driver's answer)."""
        if not self._is_closed:
            self._conductor.release_publication(self)

    def _internal_close(self) -> None:
        self._is_closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(registration_id={self.registration_id}, "
            f"original_registration_id={self.original_registration_id}, session_id={self.session_id}, "
            f"stream_id={self.stream_id}, channel={self.channel!r}, closed={self._is_closed})"
        )

    # ------------------------------------------------------------------ async

    async def offer_async(
        self,
        buffer: Buffer,
        offset: int = 0,
        length: int | None = None,
        *,
        timeout: float | None = 10.0,
    ) -> int:
        """Offer, awaiting (with a backoff, cancellable) while NOT_CONNECTED, BACK_PRESSURED or ADMIN_ACTION.

        Returns the new position, or CLOSED / MAX_POSITION_EXCEEDED; raises
        TimeoutError when not accepted within ``timeout`` seconds.
        """
        return await offer_async(self, buffer, offset, length, timeout=timeout)

    async def offer_batch_async(self, messages: Sequence[Buffer], *, timeout: float | None = 10.0) -> int:
        """:meth:`offer_batch`, awaiting flow control like :meth:`offer_async`."""
        return await offer_batch_async(self, messages, timeout=timeout)

    async def close_async(self) -> None:
        """:meth:`close` without blocking the event loop while the driver answers."""
        request = self._conductor.begin_release(self)
        if request is not None:
            await await_request(self._conductor, request)

    # ------------------------------------------------------------------ data path

    def offer(
        self,
        buffer: Buffer,
        offset: int = 0,
        length: int | None = None,
        reserved_value_supplier: ReservedValueSupplier | None = None,
    ) -> int:
        """Append ``buffer[offset:offset+length]`` as one message; new position or an OfferResult code.

        Messages longer than ``max_payload_length`` are fragmented (up to
        ``max_message_length``). ``reserved_value_supplier(term_view, frame_offset,
        frame_length)`` may return the 64-bit reserved value of each frame.
        """
        if self._is_closed:
            return CLOSED
        if reserved_value_supplier is None:
            result = self._writer.offer(buffer, offset, length)
            if result > 0:
                return result
            if result:
                return OfferResult(result)
        return self._appender.offer(buffer, offset, length, reserved_value_supplier)

    def offer_batch(self, messages: Sequence[Buffer]) -> int:
        """Append several small messages (each within ``max_payload_length``) with one claim.

        All or nothing: returns the position after the last message, or an
        OfferResult code with nothing written (ADMIN_ACTION when the batch did not
        fit in the rest of the term: retry and it goes into the next one). Each
        message is its own frame with its own commit, so subscribers see them one
        by one. This is the fast path for many small messages.
        """
        if self._is_closed:
            return CLOSED
        return self._appender.offer_batch(messages)

    def try_claim(self, length: int, buffer_claim: BufferClaim) -> int:
        """Claim a frame of ``length`` payload bytes to fill in place, then ``commit()`` (or ``abort()``) it."""
        if self._is_closed:
            self._appender.check_payload_length(length)
            return CLOSED
        return self._appender.try_claim(length, buffer_claim)


class ConcurrentPublication(Publication):
    """A publication many threads (and processes sharing the stream) may offer to at once.

    Obtained from ``Aeron.add_publication``. Each call returns its own object; those
    for the same channel and stream share one driver publication (the same
    ``original_registration_id``, ``session_id`` and log).
    """

    __slots__ = ()

    _APPENDER = LogAppender


class ExclusivePublication(Publication):
    """A publication with a single writer: cheaper appends, only one thread may offer at a time.

    The term offset is tracked locally (in the native writer) and the tail
    published with an ordered store (no fetch-add); rotation is done by this
    writer directly.
    """

    __slots__ = ()

    _appender: ExclusiveLogAppender
    _APPENDER = ExclusiveLogAppender

    def offer_block(self, buffer: Buffer, offset: int = 0, length: int | None = None) -> int:
        """Append whole, already framed frames (an archive's replay): the block must start at this
        publication's position, stay within the current term, and its first frame must carry this
        publication's term offset, session, stream and term id (every frame should).

        Returns the new position, or a negative status as :meth:`offer` does (ADMIN_ACTION: the term
        was full and has rotated; offer again).
        """
        if self._is_closed:
            return CLOSED
        return self._appender.offer_block(buffer, offset, length)

    def append_padding(self, length: int) -> int:
        """Append a padding frame of ``length`` bytes (skipped by subscribers), e.g. to align a stream."""
        self._appender.check_max_message_length(length)
        if self._is_closed:
            return CLOSED
        return self._appender.append_padding(length)
