"""Publications: append messages to a log buffer the driver created (Aeron 1.15.1 semantics).

Theory of operation
-------------------
The driver answers ADD_PUBLICATION with the name of a log file and the id of a
*publisher limit* counter. Offering a message is done entirely in shared memory:

1. read the limit (how far the driver lets us get ahead of the slowest consumer);
2. read the active term count and that partition's raw tail (``term_id << 32 |
   term_offset``); a term count that does not match the tail's term id means a
   rotation is half-way done: ``ADMIN_ACTION``, try again;
3. at or beyond the limit: ``MAX_POSITION_EXCEEDED`` if the stream is used up,
   else ``BACK_PRESSURED`` when the driver flags the log connected, else
   ``NOT_CONNECTED``;
4. claim space in the term (a fetch-add on the tail for :class:`Publication`,
   which any number of threads and processes share; a local offset for
   :class:`ExclusivePublication`), write header and payload, commit the frame with
   an ordered store of its length, and return the new stream position;
5. a claim that crosses the end of the term pads the rest, rotates the log and
   returns ``ADMIN_ACTION``; the caller retries and lands in the next term.

The data path never raises for flow-control conditions: it returns one of the
negative :class:`OfferResult` codes. Bad arguments (negative length, a message
above ``max_message_length``) raise ``ValueError`` as Java throws
``IllegalArgumentException``.

Hot path notes: ``offer`` of a message that fits one frame, with no reserved
value supplier, is one native call (``PublicationWriter.offer`` in
``driver/concurrent/_atomic.c``) that does steps 1-4 and, for a concurrent claim
that ran off the term, step 5. It writes nothing and answers 0 for every other
case (back pressure, a rotation under way, fragmentation, a buffer it cannot
read, the exclusive end of term, an unmapped log), and ``_python_offer`` then
does the whole offer in Python: the reference the native path is tested
against. An exclusive publication's position (partition, term id, term offset,
term begin position) lives in the writer, so both paths move the same state.
Bad source ranges raise ``ValueError`` before anything is claimed on either path.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

from driver.client.aio import await_request, offer_async, offer_batch_async
from driver.client.offer_result import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    OfferResult,
)
from driver.client.requests import PendingRequest, RequestService
from driver.concurrent._atomic import PublicationWriter
from driver.concurrent.atomic_buffer import AtomicBuffer, frames_length
from driver.errors import DriverError
from driver.int32 import U32_MASK as _U32
from driver.logbuffer.appender import (
    ExclusiveTermAppender,
    ReservedValueSupplier,
    TermAppender,
)
from driver.logbuffer.descriptor import (
    LOG_ACTIVE_TERM_COUNT_OFFSET,
    LOG_IS_CONNECTED_OFFSET,
    PARTITION_COUNT,
    default_frame_header,
    initial_term_id,
    initialise_tail_with_term_id,
    int32,
    mtu_length,
    position_bits_to_shift,
    rotate_log,
)
from driver.logbuffer.frame import HEADER_LENGTH, HeaderWriter, compute_max_message_length
from driver.logbuffer.header import BufferClaim
from driver.logbuffer.log_buffers import LogBuffers

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


_TERM_COUNT = LOG_ACTIVE_TERM_COUNT_OFFSET
_IS_CONNECTED = LOG_IS_CONNECTED_OFFSET


def _byte_length(buffer: Buffer) -> int:
    if isinstance(buffer, (bytes, bytearray)):
        return len(buffer)
    with memoryview(buffer) as view:
        if not view.c_contiguous:
            raise BufferError(f"{type(buffer).__name__} is not C-contiguous")
        return view.nbytes


def _check_source(buffer: Buffer, offset: int, length: int) -> None:
    """Raise before a claim, never after: a claimed frame left unwritten stalls every subscriber."""
    size = len(buffer) if type(buffer) is bytes else _byte_length(buffer)
    if offset < 0 or offset + length > size:
        raise ValueError(f"source range {offset}+{length} outside {size} bytes")


class Publication(abc.ABC):
    """What every publication offers: identity, state, positions and ``close``.

    The data path lives in :class:`ConcurrentPublication` (``add_publication``) and
    :class:`ExclusivePublication` (``add_exclusive_publication``).
    """

    __slots__ = (
        "_conductor",
        "_header_writer",
        "_initial_term_id",
        "_is_closed",
        "_limit",
        "_log",
        "_max_payload_length",
        "_max_possible_position",
        "_meta",
        "_position_bits_to_shift",
        "_session_word",
        "_stream_word",
        "_term_views",
        "_terms",
        "_vft",
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

    _EXCLUSIVE: ClassVar[bool] = False

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
        meta = log.metadata
        term_length = log.term_length
        self._conductor = conductor
        self._log = log
        self._meta = meta
        self._limit = position_limit
        self._is_closed = False
        self.channel = channel
        self.stream_id = stream_id
        self.session_id = session_id
        self.channel_status_id = channel_status_id
        self.original_registration_id = original_registration_id
        self.registration_id = registration_id
        self.term_buffer_length = term_length
        self.max_message_length = compute_max_message_length(term_length)
        self.max_payload_length = self._max_payload_length = mtu_length(meta) - HEADER_LENGTH
        self.max_possible_position = self._max_possible_position = term_length * (1 << 31)
        self.initial_term_id = self._initial_term_id = initial_term_id(meta)
        self.position_bits_to_shift = self._position_bits_to_shift = position_bits_to_shift(term_length)
        writer = HeaderWriter(default_frame_header(meta))
        self._header_writer = writer
        self._vft = writer.version_flags_type
        self._session_word = writer.session_word
        self._stream_word = writer.stream_word
        self._terms = tuple(log.terms)
        self._term_views = tuple(log.term_views)
        self._writer = PublicationWriter(
            position_limit,
            meta,
            self._terms,
            self._initial_term_id,
            self._max_payload_length,
            self._vft,
            self._session_word,
            self._stream_word,
            self._EXCLUSIVE,
        )
        self._on_mapped(log)

    @abc.abstractmethod
    def _on_mapped(self, log: LogBuffers) -> None:
        """Set up the subclass's appenders and cached state once the log is mapped."""

    # ------------------------------------------------------------------ state

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def is_original(self) -> bool:
        """True for the ``add_publication`` that made the driver create the publication."""
        return self.original_registration_id == self.registration_id

    @property
    def is_connected(self) -> bool:
        """True while the driver reports at least one subscriber (the log's connected flag)."""
        return not self._is_closed and self._meta.get_int_volatile(_IS_CONNECTED) == 1

    @property
    def position(self) -> int:
        """Position of the publication's tail (where the next message goes), or CLOSED."""
        if self._is_closed:
            return CLOSED
        meta = self._meta
        term_count = meta.get_int_volatile(_TERM_COUNT)
        raw_tail = meta.get_long_volatile((term_count % PARTITION_COUNT) * 8)
        term_offset = min(raw_tail & _U32, self.term_buffer_length)
        term_id = raw_tail >> 32
        return (int32(term_id - self._initial_term_id) << self._position_bits_to_shift) + term_offset

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

    # ------------------------------------------------------------------ helpers

    def _back_pressure_status(self, position: int, length: int) -> int:
        if position + length >= self._max_possible_position:
            return MAX_POSITION_EXCEEDED
        if self._meta.get_int_volatile(_IS_CONNECTED) == 1:
            return BACK_PRESSURED
        return NOT_CONNECTED

    def _check_max_message_length(self, length: int) -> None:
        if length > self.max_message_length:
            raise ValueError(f"message exceeds max_message_length of {self.max_message_length}, length={length}")

    def _check_payload_length(self, length: int) -> None:
        if length < 0:
            raise ValueError(f"invalid length: {length}")
        if length > self._max_payload_length:
            raise ValueError(f"claim exceeds max_payload_length of {self._max_payload_length}, length={length}")

    def _batch_lengths(self, messages: Sequence[Buffer]) -> int:
        """Validate a batch; returns the bytes its frames take in the term."""
        if not messages:
            raise ValueError("offer_batch needs at least one message")
        required = frames_length(messages, self._max_payload_length)
        if required > self.term_buffer_length:
            raise ValueError(f"batch of {required} bytes exceeds the term length of {self.term_buffer_length}")
        return required

    def _pad(self, term: AtomicBuffer, frame_offset: int, term_id: int) -> None:
        padding = self.term_buffer_length - frame_offset
        self._header_writer.write(term, frame_offset, padding, term_id)
        term.put_short(frame_offset + 6, 0)
        term.put_int_ordered(frame_offset, padding)

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

    # ------------------------------------------------------------------ data path (subclasses)

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
        if reserved_value_supplier is None and not self._is_closed:
            result = self._writer.offer(buffer, offset, length)
            if result > 0:
                return result
            if result:
                return OfferResult(result)
        return self._python_offer(buffer, offset, length, reserved_value_supplier)

    @abc.abstractmethod
    def _python_offer(
        self,
        buffer: Buffer,
        offset: int,
        length: int | None,
        reserved_value_supplier: ReservedValueSupplier | None,
    ) -> int:
        """The whole offer in Python: every case the native writer leaves (and the reference it is tested against)."""

    @abc.abstractmethod
    def offer_batch(self, messages: Sequence[Buffer]) -> int:
        """Append several small messages (each within ``max_payload_length``) with one claim.

        All or nothing: returns the position after the last message, or an
        OfferResult code with nothing written (ADMIN_ACTION when the batch did not
        fit in the rest of the term: retry and it goes into the next one). Each
        message is its own frame with its own commit, so subscribers see them one
        by one. This is the fast path for many small messages.
        """

    @abc.abstractmethod
    def try_claim(self, length: int, buffer_claim: BufferClaim) -> int:
        """Claim a frame of ``length`` payload bytes to fill in place, then ``commit()`` (or ``abort()``) it."""


class ConcurrentPublication(Publication):
    """A publication many threads (and processes sharing the stream) may offer to at once.

    Obtained from ``Aeron.add_publication``. Each call returns its own object; those
    for the same channel and stream share one driver publication (the same
    ``original_registration_id``, ``session_id`` and log).
    """

    __slots__ = ("_appenders", "_hot")

    def _on_mapped(self, log: LogBuffers) -> None:
        self._appenders = tuple(
            TermAppender(log.terms[i], log.metadata, i, log.term_views[i]) for i in range(PARTITION_COUNT)
        )
        # Everything offer() reads, unpacked in one step (cheaper than ten attribute loads).
        self._hot = (
            self._limit,
            self._meta,
            self._terms,
            self._initial_term_id,
            self._position_bits_to_shift,
            self._max_payload_length,
            self.term_buffer_length,
            self._vft,
            self._session_word,
            self._stream_word,
        )

    def _new_position(self, term_count: int, term_offset: int, term_id: int, position: int, resulting: int) -> int:
        if resulting > 0:
            return position - term_offset + resulting
        if position + term_offset > self._max_possible_position:
            return MAX_POSITION_EXCEEDED
        rotate_log(self._meta, term_count, term_id)
        return ADMIN_ACTION

    # ------------------------------------------------------------------ data path

    def _python_offer(
        self,
        buffer: Buffer,
        offset: int,
        length: int | None,
        reserved_value_supplier: ReservedValueSupplier | None,
    ) -> int:
        if self._is_closed:
            return CLOSED
        if length is None:
            length = (len(buffer) if type(buffer) is bytes else _byte_length(buffer)) - offset
        limit_counter, meta, terms, initial_term_id, bits, max_payload, term_length, vft, session_word, stream_word = (
            self._hot
        )
        limit = limit_counter.get_long_volatile(0)
        term_count = meta.get_int_volatile(_TERM_COUNT)
        index = term_count % 3
        raw_tail = meta.get_long_volatile(index << 3)
        term_id = raw_tail >> 32
        if (term_id - initial_term_id - term_count) & _U32:
            return ADMIN_ACTION
        term_offset = raw_tail & _U32
        position = (term_count << bits) + term_offset
        if position >= limit:
            return self._back_pressure_status(position, length)
        if length > max_payload:
            self._check_max_message_length(length)
            _check_source(buffer, offset, length)
            resulting = self._appenders[index].append_fragmented(
                self._header_writer,
                buffer,  # type: ignore[arg-type]
                offset,
                length,
                max_payload,
                reserved_value_supplier,
                term_id,
            )
            return self._new_position(term_count, term_offset, term_id, position, resulting)
        if length < 0:
            raise ValueError(f"invalid length: {length}")
        _check_source(buffer, offset, length)
        # Unfragmented, inline: claim with one fetch-add, then Java's write order.
        frame_length = length + 32
        aligned = (frame_length + 31) & -32
        raw = meta.get_and_add_long(index << 3, aligned)
        frame_offset = raw & _U32
        if raw >> 32 != term_id:
            raise DriverError(f"action possibly delayed: expected_term_id={term_id} term_id={raw >> 32}")
        resulting = frame_offset + aligned
        term = terms[index]
        if resulting > term_length:
            if frame_offset < term_length:
                self._pad(term, frame_offset, term_id)
            return self._new_position(term_count, term_offset, term_id, position, -2)
        if reserved_value_supplier is None:
            term.write_frame(frame_offset, vft, session_word, stream_word | (term_id << 32), buffer, offset, length)
            return position - term_offset + resulting
        term.put_long_ordered(frame_offset, vft | (-frame_length & _U32))
        term.put_long(frame_offset + 8, session_word | frame_offset)
        term.put_long(frame_offset + 16, stream_word | (term_id << 32))
        term.put_bytes(frame_offset + 32, buffer, offset, length)
        term.put_long(frame_offset + 24, reserved_value_supplier(self._term_views[index], frame_offset, frame_length))
        term.put_int_ordered(frame_offset, frame_length)
        return position - term_offset + resulting

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
        required = self._batch_lengths(messages)
        limit = self._limit.get_long_volatile(0)
        meta = self._meta
        term_count = meta.get_int_volatile(_TERM_COUNT)
        index = term_count % 3
        raw_tail = meta.get_long_volatile(index << 3)
        term_id = raw_tail >> 32
        if (term_id - self._initial_term_id - term_count) & _U32:
            return ADMIN_ACTION
        term_offset = raw_tail & _U32
        position = (term_count << self._position_bits_to_shift) + term_offset
        if position >= limit:
            return self._back_pressure_status(position, required)  # (an upper bound of the batch size)
        resulting = self._appenders[index].append_unfragmented_batch(
            self._header_writer,
            messages,  # type: ignore[arg-type]
            term_id,
            required,
        )
        return self._new_position(term_count, term_offset, term_id, position, resulting)

    def try_claim(self, length: int, buffer_claim: BufferClaim) -> int:
        """Claim a frame of ``length`` payload bytes to fill in place, then ``commit()`` (or ``abort()``) it."""
        self._check_payload_length(length)
        if self._is_closed:
            return CLOSED
        limit = self._limit.get_long_volatile(0)
        meta = self._meta
        term_count = meta.get_int_volatile(_TERM_COUNT)
        index = term_count % 3
        raw_tail = meta.get_long_volatile(index << 3)
        term_id = raw_tail >> 32
        if (term_id - self._initial_term_id - term_count) & _U32:
            return ADMIN_ACTION
        term_offset = raw_tail & _U32
        position = (term_count << self._position_bits_to_shift) + term_offset
        if position >= limit:
            return self._back_pressure_status(position, length)
        resulting = self._appenders[index].claim(self._header_writer, length, buffer_claim, term_id)
        return self._new_position(term_count, term_offset, term_id, position, resulting)


class ExclusivePublication(Publication):
    """A publication with a single writer: cheaper appends, only one thread may offer at a time.

    The term offset is tracked locally (in the native writer) and the tail
    published with an ordered store (no fetch-add); rotation is done by this
    writer directly.
    """

    __slots__ = ("_appenders",)

    _EXCLUSIVE = True

    def _on_mapped(self, log: LogBuffers) -> None:
        self._appenders = tuple(
            ExclusiveTermAppender(log.terms[i], log.metadata, i, log.term_views[i]) for i in range(PARTITION_COUNT)
        )
        meta = self._meta
        term_count = meta.get_int_volatile(_TERM_COUNT)
        index = term_count % PARTITION_COUNT
        raw_tail = meta.get_long_volatile(index * 8)
        writer = self._writer
        writer.active_index = index
        writer.term_id = raw_tail >> 32
        writer.term_offset = min(raw_tail & _U32, self.term_buffer_length)
        writer.term_begin_position = int32(writer.term_id - self._initial_term_id) << self._position_bits_to_shift

    @property
    def position(self) -> int:
        if self._is_closed:
            return CLOSED
        return self._writer.term_begin_position + self._writer.term_offset

    def _new_exclusive_position(self, resulting: int) -> int:
        writer = self._writer
        if resulting > 0:
            writer.term_offset = resulting
            return writer.term_begin_position + resulting
        term_length = self.term_buffer_length
        if writer.term_begin_position + term_length >= self._max_possible_position:
            return MAX_POSITION_EXCEEDED
        next_index = (writer.active_index + 1) % PARTITION_COUNT
        next_term_id = int32(writer.term_id + 1)
        writer.active_index = next_index
        writer.term_offset = 0
        writer.term_id = next_term_id
        writer.term_begin_position += term_length
        initialise_tail_with_term_id(self._meta, next_index, next_term_id)
        self._meta.put_int_ordered(_TERM_COUNT, int32(next_term_id - self._initial_term_id))
        return ADMIN_ACTION

    def _python_offer(
        self,
        buffer: Buffer,
        offset: int,
        length: int | None,
        reserved_value_supplier: ReservedValueSupplier | None,
    ) -> int:
        if self._is_closed:
            return CLOSED
        if length is None:
            length = (len(buffer) if type(buffer) is bytes else _byte_length(buffer)) - offset
        writer = self._writer
        term_offset = writer.term_offset
        position = writer.term_begin_position + term_offset
        if position >= self._limit.get_long_volatile(0):
            return self._back_pressure_status(position, length)
        term_id = writer.term_id
        if length > self._max_payload_length:
            self._check_max_message_length(length)
            _check_source(buffer, offset, length)
            return self._new_exclusive_position(
                self._appenders[writer.active_index].append_fragmented(
                    term_id,
                    term_offset,
                    self._header_writer,
                    buffer,  # type: ignore[arg-type]
                    offset,
                    length,
                    self._max_payload_length,
                    reserved_value_supplier,
                )
            )
        if length < 0:
            raise ValueError(f"invalid length: {length}")
        _check_source(buffer, offset, length)
        index = writer.active_index
        frame_length = length + 32
        resulting = term_offset + ((frame_length + 31) & -32)
        self._meta.put_long_ordered(index << 3, (term_id << 32) | resulting)
        term = self._terms[index]
        if resulting > self.term_buffer_length:
            if term_offset < self.term_buffer_length:
                self._pad(term, term_offset, term_id)
            return self._new_exclusive_position(-1)
        if reserved_value_supplier is None:
            term.write_frame(
                term_offset, self._vft, self._session_word, self._stream_word | (term_id << 32), buffer, offset, length
            )
        else:
            term.put_long_ordered(term_offset, self._vft | (-frame_length & _U32))
            term.put_long(term_offset + 8, self._session_word | term_offset)
            term.put_long(term_offset + 16, self._stream_word | (term_id << 32))
            term.put_bytes(term_offset + 32, buffer, offset, length)
            term.put_long(term_offset + 24, reserved_value_supplier(self._term_views[index], term_offset, frame_length))
            term.put_int_ordered(term_offset, frame_length)
        writer.term_offset = resulting
        return writer.term_begin_position + resulting

    def offer_batch(self, messages: Sequence[Buffer]) -> int:
        if self._is_closed:
            return CLOSED
        required = self._batch_lengths(messages)
        term_offset = self._writer.term_offset
        position = self._writer.term_begin_position + term_offset
        if position >= self._limit.get_long_volatile(0):
            return self._back_pressure_status(position, required)
        return self._new_exclusive_position(
            self._appenders[self._writer.active_index].append_unfragmented_batch(
                self._writer.term_id,
                term_offset,
                self._header_writer,
                messages,  # type: ignore[arg-type]
                required,
            )
        )

    def try_claim(self, length: int, buffer_claim: BufferClaim) -> int:
        self._check_payload_length(length)
        if self._is_closed:
            return CLOSED
        term_offset = self._writer.term_offset
        position = self._writer.term_begin_position + term_offset
        if position >= self._limit.get_long_volatile(0):
            return self._back_pressure_status(position, length)
        return self._new_exclusive_position(
            self._appenders[self._writer.active_index].claim(
                self._writer.term_id, term_offset, self._header_writer, length, buffer_claim
            )
        )

    def offer_block(self, buffer: Buffer, offset: int = 0, length: int | None = None) -> int:
        """Append whole, already framed frames (an archive's replay): the block must start at this
        publication's position, stay within the current term, and its first frame must carry this
        publication's term offset, session, stream and term id (every frame should).

        Returns the new position, or a negative status as :meth:`offer` does (ADMIN_ACTION: the term
        was full and has rotated; offer again).
        """
        if self._is_closed:
            return CLOSED
        view = memoryview(buffer).cast("B")
        if length is None:
            length = len(view) - offset
        term_offset = self._writer.term_offset
        term_length = self.term_buffer_length
        if term_offset >= term_length:
            return self._new_exclusive_position(-1)
        if length <= 0 or length & 31 or offset < 0 or offset + length > len(view):
            raise ValueError(f"a block is a whole number of 32-byte aligned frames; got length {length}")
        if term_offset + length > term_length:
            raise ValueError(f"block of {length} bytes at term offset {term_offset} runs past the term ({term_length})")
        position = self._writer.term_begin_position + term_offset
        if position >= self._limit.get_long_volatile(0):
            return self._back_pressure_status(position, length)
        first = view[offset : offset + 24]
        frame_term_offset = int.from_bytes(first[8:12], "little", signed=True)
        session_id = int.from_bytes(first[12:16], "little", signed=True)
        stream_id = int.from_bytes(first[16:20], "little", signed=True)
        frame_term_id = int.from_bytes(first[20:24], "little", signed=True)
        if (frame_term_offset, session_id, stream_id, frame_term_id) != (
            term_offset,
            self.session_id,
            self.stream_id,
            self._writer.term_id,
        ):
            raise ValueError(
                f"block's first frame (term offset {frame_term_offset}, session {session_id}, stream {stream_id}, "
                f"term id {frame_term_id}) does not continue this publication (term offset {term_offset}, "
                f"session {self.session_id}, stream {self.stream_id}, term id {self._writer.term_id})"
            )
        index = self._writer.active_index
        term = self._terms[index]
        resulting = term_offset + length
        self._meta.put_long_ordered(index << 3, (self._writer.term_id << 32) | resulting)
        term.put_bytes(term_offset + 4, view, offset + 4, length - 4)
        term.put_int_ordered(term_offset, int.from_bytes(view[offset : offset + 4], "little", signed=True))
        self._writer.term_offset = resulting
        return self._writer.term_begin_position + resulting

    def append_padding(self, length: int) -> int:
        """Append a padding frame of ``length`` bytes (skipped by subscribers), e.g. to align a stream."""
        self._check_max_message_length(length)
        if self._is_closed:
            return CLOSED
        if length < 0:
            raise ValueError(f"invalid length: {length}")
        term_offset = self._writer.term_offset
        position = self._writer.term_begin_position + term_offset
        if position >= self._limit.get_long_volatile(0):
            return self._back_pressure_status(position, length)
        return self._new_exclusive_position(
            self._appenders[self._writer.active_index].append_padding(
                self._writer.term_id, term_offset, self._header_writer, length
            )
        )
