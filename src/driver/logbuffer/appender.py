"""Term appenders: how publications write frames into the active term.

Theory of operation
-------------------
:class:`TermAppender` (concurrent publications) lets many writers, in many
processes, share a term. A writer claims space with ONE atomic fetch-add on the
partition's raw tail in the log metadata (``term_id << 32 | term_offset``); the
old value tells it where its frames go. It then writes the header with a
negative length (claimed, uncommitted), copies the payload, and publishes the
frame with an ordered store of the positive length. Readers stop at the first
frame whose length is not positive, so they never see a partial frame.

If the claimed space runs past the end of the term, the writer that crossed the
end pads the rest of the term with a PAD frame (when its claim started inside
the term) and returns ``FAILED``; the publication then rotates the log and the
caller retries in the next term. Writers whose claim starts beyond the end just
return ``FAILED``.

:class:`ExclusiveTermAppender` is the single-writer variant: the caller tracks
the term offset and the tail is published with an ordered store instead of a
fetch-add.

The batch appends reserve room for several unfragmented messages with one tail
update; every frame still gets its own header and its own ordered commit, so a
reader can never see a torn message. A batch is all-or-nothing: if it does not
fit in the rest of the term, the term is padded and nothing is written.

:class:`LogAppender` and :class:`ExclusiveLogAppender` are a publication's whole
offer over its log, the one home of the algorithm: read the publisher limit and
the active partition's tail, answer ``ADMIN_ACTION`` while a rotation is half
done, answer flow control at the limit (``BACK_PRESSURED``, ``NOT_CONNECTED``,
``MAX_POSITION_EXCEEDED``), append through the term appenders above, and rotate
the log after a claim that ran off the term. The client's publications call
them (the driver only cleans, unblocks and pads what they wrote).

The native ``PublicationWriter`` (C) accelerates :meth:`LogAppender.offer` for
a message that fits one frame: it runs the same steps in one call and answers 0
for every case it leaves to the Python method (back pressure, a rotation under
way, fragmentation, a reserved value, a buffer it cannot read, the exclusive
end of term, an unmapped log). The Python method is the reference the native
one is tested against, byte for byte. An exclusive appender's position (active
partition, term id, term offset, term begin position) lives in the native
writer, so both paths move the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import DriverError
from driver.int32 import U32_MASK as _U32
from driver.int32 import int32
from driver.logbuffer._frames import PublicationWriter, frames_length, note_committed, write_frame, write_frames
from driver.logbuffer.descriptor import (
    LOG_ACTIVE_TERM_COUNT_OFFSET,
    LOG_IS_CONNECTED_OFFSET,
    PARTITION_COUNT,
    TERM_TAIL_COUNTERS_OFFSET,
    compute_max_message_length,
    default_frame_header,
    initial_term_id,
    initialise_tail_with_term_id,
    max_possible_position,
    mtu_length,
    position_bits_to_shift,
    rotate_log,
)
from driver.logbuffer.frame import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FLAGS_OFFSET,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    RESERVED_VALUE_OFFSET,
    SESSION_ID_OFFSET,
    STREAM_ID_OFFSET,
    TERM_ID_OFFSET,
    TERM_OFFSET_OFFSET,
    TYPE_OFFSET,
    HeaderWriter,
)
from driver.logbuffer.header import BufferClaim
from driver.logbuffer.offer_result import ADMIN_ACTION, BACK_PRESSURED, MAX_POSITION_EXCEEDED, NOT_CONNECTED

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "EXCLUSIVE_FAILED",
    "FAILED",
    "ExclusiveLogAppender",
    "ExclusiveTermAppender",
    "LogAppender",
    "ReservedValueSupplier",
    "TermAppender",
    "fragmented_required_length",
]

FAILED = -2
"""TermAppender result when the claim crossed the end of the term (1.15.1 TermAppender.FAILED)."""

EXCLUSIVE_FAILED = -1
"""ExclusiveTermAppender result for the same condition (1.15.1 ExclusiveTermAppender.FAILED)."""

ReservedValueSupplier = Callable[[memoryview, int, int], int]
"""(term view, frame offset, frame length) -> reserved value stored at header offset 24."""


def fragmented_required_length(length: int, max_payload_length: int) -> int:
    """Bytes a message of ``length`` takes when split into frames of at most ``max_payload_length``."""
    full, remaining = divmod(length, max_payload_length)
    last = ((remaining + HEADER_LENGTH + 31) & ~31) if remaining > 0 else 0
    return full * (max_payload_length + HEADER_LENGTH) + last


def _check_term(expected_term_id: int, term_id: int) -> None:
    if term_id != expected_term_id:
        raise DriverError(f"action possibly delayed: expected_term_id={expected_term_id} term_id={term_id}")


def _write_frame(
    term: AtomicBuffer,
    term_view: memoryview,
    frame_offset: int,
    header: HeaderWriter,
    src: Buffer,
    offset: int,
    length: int,
    reserved_value_supplier: ReservedValueSupplier | None,
    term_id: int,
) -> None:
    """Write and commit one unfragmented frame, in Aeron's order (header with a negative length, payload, length)."""
    if reserved_value_supplier is None:
        write_frame(
            term,
            frame_offset,
            header.version_flags_type,
            header.session_word,
            header.stream_word | (term_id << 32),
            src,
            offset,
            length,
        )
        return
    frame_length = length + HEADER_LENGTH
    header.write(term, frame_offset, frame_length, term_id)
    term.put_bytes(frame_offset + HEADER_LENGTH, src, offset, length)
    term.put_long(frame_offset + RESERVED_VALUE_OFFSET, reserved_value_supplier(term_view, frame_offset, frame_length))
    term.put_int_ordered(frame_offset, frame_length)
    note_committed()


def _pad_to_end(term: AtomicBuffer, term_offset: int, header: HeaderWriter, term_length: int, term_id: int) -> None:
    """Fill the rest of the term with one PAD frame if the claim began inside it."""
    if term_offset < term_length:
        padding = term_length - term_offset
        header.write(term, term_offset, padding, term_id)
        term.put_short(term_offset + TYPE_OFFSET, HDR_TYPE_PAD)
        term.put_int_ordered(term_offset, padding)
        note_committed()


def _write_fragments(
    term: AtomicBuffer,
    term_view: memoryview,
    frame_offset: int,
    header: HeaderWriter,
    src: Buffer,
    offset: int,
    length: int,
    max_payload_length: int,
    reserved_value_supplier: ReservedValueSupplier | None,
    term_id: int,
) -> None:
    flags = BEGIN_FRAG_FLAG
    remaining = length
    write = header.write
    put_bytes = term.put_bytes
    put_byte = term.put_byte
    commit = term.put_int_ordered
    while True:
        chunk = remaining if remaining < max_payload_length else max_payload_length
        frame_length = chunk + HEADER_LENGTH
        write(term, frame_offset, frame_length, term_id)
        put_bytes(frame_offset + HEADER_LENGTH, src, offset + (length - remaining), chunk)
        if remaining <= max_payload_length:
            flags |= END_FRAG_FLAG
        put_byte(frame_offset + FLAGS_OFFSET, flags)
        if reserved_value_supplier is not None:
            term.put_long(
                frame_offset + RESERVED_VALUE_OFFSET,
                reserved_value_supplier(term_view, frame_offset, frame_length),
            )
        commit(frame_offset, frame_length)
        note_committed()
        flags = 0
        frame_offset += (frame_length + 31) & ~31
        remaining -= chunk
        if remaining <= 0:
            break


_UNLIMITED = 1 << 62


def _batch_length(messages: Sequence[Buffer]) -> int:
    return frames_length(messages, _UNLIMITED)


class _PartitionAppender:
    """What both appenders hold: one partition's term, the log metadata and its tail counter."""

    __slots__ = ("_tail_offset", "metadata", "partition_index", "term", "term_length", "term_view")

    def __init__(
        self,
        term: AtomicBuffer,
        metadata: AtomicBuffer,
        partition_index: int,
        term_view: memoryview | None = None,
    ) -> None:
        self.term = term
        self.metadata = metadata
        self.partition_index = partition_index
        self.term_length = term.capacity
        self.term_view = term_view if term_view is not None else term.view(0, term.capacity)
        self._tail_offset = TERM_TAIL_COUNTERS_OFFSET + 8 * partition_index
        metadata.get_long_volatile(self._tail_offset)  # bounds check, as Java's constructor does


class TermAppender(_PartitionAppender):
    """Appends frames to one partition's term, safely shared by many writers and processes.

    Every method returns the resulting term offset (end of the written frames), or
    :data:`FAILED` once the term is full (after padding it). Raises DriverError if
    the tail's term id is not ``active_term_id`` (the caller's rotation view is stale).
    Messages are byte buffers (``len`` is the byte count).
    """

    FAILED = FAILED

    __slots__ = ()

    def raw_tail_volatile(self) -> int:
        return self.metadata.get_long_volatile(self._tail_offset)

    def claim(self, header: HeaderWriter, length: int, buffer_claim: BufferClaim, active_term_id: int) -> int:
        """Reserve a frame for ``length`` payload bytes, to fill in place through ``buffer_claim``."""
        frame_length = length + HEADER_LENGTH
        aligned = (frame_length + 31) & ~31
        raw_tail = self.metadata.get_and_add_long(self._tail_offset, aligned)
        term_id = raw_tail >> 32
        term_offset = raw_tail & _U32
        if term_id != active_term_id:
            _check_term(active_term_id, term_id)
        resulting = term_offset + aligned
        term = self.term
        if resulting > self.term_length:
            _pad_to_end(term, term_offset, header, self.term_length, term_id)
            return FAILED
        header.write(term, term_offset, frame_length, term_id)
        buffer_claim.wrap(term, self.term_view, term_offset, frame_length)
        return resulting

    def append_unfragmented(
        self,
        header: HeaderWriter,
        src: Buffer,
        offset: int,
        length: int,
        reserved_value_supplier: ReservedValueSupplier | None,
        active_term_id: int,
    ) -> int:
        """Append ``src[offset:offset+length]`` as one frame (length must fit in one MTU)."""
        frame_length = length + HEADER_LENGTH
        aligned = (frame_length + 31) & ~31
        raw_tail = self.metadata.get_and_add_long(self._tail_offset, aligned)
        term_id = raw_tail >> 32
        term_offset = raw_tail & _U32
        if term_id != active_term_id:
            _check_term(active_term_id, term_id)
        resulting = term_offset + aligned
        term = self.term
        if resulting > self.term_length:
            _pad_to_end(term, term_offset, header, self.term_length, term_id)
            return FAILED
        _write_frame(term, self.term_view, term_offset, header, src, offset, length, reserved_value_supplier, term_id)
        return resulting

    def append_fragmented(
        self,
        header: HeaderWriter,
        src: Buffer,
        offset: int,
        length: int,
        max_payload_length: int,
        reserved_value_supplier: ReservedValueSupplier | None,
        active_term_id: int,
    ) -> int:
        """Append a message larger than one frame as BEGIN, middle..., END fragments."""
        required = fragmented_required_length(length, max_payload_length)
        raw_tail = self.metadata.get_and_add_long(self._tail_offset, required)
        term_id = raw_tail >> 32
        term_offset = raw_tail & _U32
        if term_id != active_term_id:
            _check_term(active_term_id, term_id)
        resulting = term_offset + required
        term = self.term
        if resulting > self.term_length:
            _pad_to_end(term, term_offset, header, self.term_length, term_id)
            return FAILED
        _write_fragments(
            term,
            self.term_view,
            term_offset,
            header,
            src,
            offset,
            length,
            max_payload_length,
            reserved_value_supplier,
            term_id,
        )
        return resulting

    def append_unfragmented_batch(
        self,
        header: HeaderWriter,
        messages: Sequence[Buffer],
        active_term_id: int,
        required: int | None = None,
    ) -> int:
        """Append each message as its own unfragmented frame, reserving space with one fetch-add.

        Every message must fit in one frame (the caller checks against the MTU). The
        result is the offset past the last frame, or FAILED with nothing written.
        """
        if required is None:
            required = _batch_length(messages)
        raw_tail = self.metadata.get_and_add_long(self._tail_offset, required)
        term_id = raw_tail >> 32
        term_offset = raw_tail & _U32
        if term_id != active_term_id:
            _check_term(active_term_id, term_id)
        resulting = term_offset + required
        if resulting > self.term_length:
            _pad_to_end(self.term, term_offset, header, self.term_length, term_id)
            return FAILED
        write_frames(
            self.term,
            term_offset,
            header.version_flags_type,
            header.session_word,
            header.stream_word | (term_id << 32),
            messages,
        )
        return resulting


class ExclusiveTermAppender(_PartitionAppender):
    """Single-writer appender: the caller passes the term id and offset it tracks.

    Results are the resulting term offset, or :data:`EXCLUSIVE_FAILED` (-1, as in
    1.15.1) once the term is full (after padding it). The raw tail is published
    (ordered) before the frames are written, as 1.15.1 does.
    """

    FAILED = EXCLUSIVE_FAILED

    __slots__ = ()

    def _end_of_term(self, header: HeaderWriter, term_id: int, term_offset: int) -> int:
        _pad_to_end(self.term, term_offset, header, self.term_length, term_id)
        return EXCLUSIVE_FAILED

    def claim(
        self, term_id: int, term_offset: int, header: HeaderWriter, length: int, buffer_claim: BufferClaim
    ) -> int:
        frame_length = length + HEADER_LENGTH
        resulting = term_offset + ((frame_length + 31) & ~31)
        self.metadata.put_long_ordered(self._tail_offset, (term_id << 32) | resulting)
        if resulting > self.term_length:
            return self._end_of_term(header, term_id, term_offset)
        header.write(self.term, term_offset, frame_length, term_id)
        buffer_claim.wrap(self.term, self.term_view, term_offset, frame_length)
        return resulting

    def append_padding(self, term_id: int, term_offset: int, header: HeaderWriter, length: int) -> int:
        """Append a PAD frame of ``length`` payload bytes (skipped by readers)."""
        frame_length = length + HEADER_LENGTH
        resulting = term_offset + ((frame_length + 31) & ~31)
        self.metadata.put_long_ordered(self._tail_offset, (term_id << 32) | resulting)
        if resulting > self.term_length:
            return self._end_of_term(header, term_id, term_offset)
        term = self.term
        header.write(term, term_offset, frame_length, term_id)
        term.put_short(term_offset + TYPE_OFFSET, HDR_TYPE_PAD)
        term.put_int_ordered(term_offset, frame_length)
        note_committed()
        return resulting

    def append_unfragmented(
        self,
        term_id: int,
        term_offset: int,
        header: HeaderWriter,
        src: Buffer,
        offset: int,
        length: int,
        reserved_value_supplier: ReservedValueSupplier | None,
    ) -> int:
        frame_length = length + HEADER_LENGTH
        resulting = term_offset + ((frame_length + 31) & ~31)
        self.metadata.put_long_ordered(self._tail_offset, (term_id << 32) | resulting)
        if resulting > self.term_length:
            return self._end_of_term(header, term_id, term_offset)
        term = self.term
        _write_frame(term, self.term_view, term_offset, header, src, offset, length, reserved_value_supplier, term_id)
        return resulting

    def append_fragmented(
        self,
        term_id: int,
        term_offset: int,
        header: HeaderWriter,
        src: Buffer,
        offset: int,
        length: int,
        max_payload_length: int,
        reserved_value_supplier: ReservedValueSupplier | None,
    ) -> int:
        required = fragmented_required_length(length, max_payload_length)
        resulting = term_offset + required
        self.metadata.put_long_ordered(self._tail_offset, (term_id << 32) | resulting)
        if resulting > self.term_length:
            return self._end_of_term(header, term_id, term_offset)
        _write_fragments(
            self.term,
            self.term_view,
            term_offset,
            header,
            src,
            offset,
            length,
            max_payload_length,
            reserved_value_supplier,
            term_id,
        )
        return resulting

    def append_unfragmented_batch(
        self,
        term_id: int,
        term_offset: int,
        header: HeaderWriter,
        messages: Sequence[Buffer],
        required: int | None = None,
    ) -> int:
        """Append each message as its own frame after one ordered tail update; all-or-nothing."""
        resulting = term_offset + (_batch_length(messages) if required is None else required)
        self.metadata.put_long_ordered(self._tail_offset, (term_id << 32) | resulting)
        if resulting > self.term_length:
            return self._end_of_term(header, term_id, term_offset)
        write_frames(
            self.term,
            term_offset,
            header.version_flags_type,
            header.session_word,
            header.stream_word | (term_id << 32),
            messages,
        )
        return resulting


# -- a publication's whole offer ------------------------------------------------------------------------------------

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


class _LogAppenderBase:
    """What both log appenders hold: the log, its limit, the header and the limits a message must respect."""

    __slots__ = (
        "_header",
        "_limit",
        "_metadata",
        "initial_term_id",
        "max_message_length",
        "max_payload_length",
        "max_possible_position",
        "native",
        "position_bits_to_shift",
        "term_length",
    )

    _EXCLUSIVE: ClassVar[bool] = False

    def __init__(
        self,
        metadata: AtomicBuffer,
        terms: Sequence[AtomicBuffer],
        term_views: Sequence[memoryview],
        limit: AtomicBuffer,
    ) -> None:
        term_length = terms[0].capacity
        header = HeaderWriter(default_frame_header(metadata))
        self._metadata = metadata
        self._limit = limit
        self._header = header
        self.term_length = term_length
        self.initial_term_id = initial_term_id(metadata)
        self.position_bits_to_shift = position_bits_to_shift(term_length)
        self.max_message_length = compute_max_message_length(term_length)
        self.max_payload_length = mtu_length(metadata) - HEADER_LENGTH
        self.max_possible_position = max_possible_position(term_length)
        self.native = PublicationWriter(
            limit,
            metadata,
            tuple(terms),
            self.initial_term_id,
            self.max_payload_length,
            header.version_flags_type,
            header.session_word,
            header.stream_word,
            self._EXCLUSIVE,
        )
        """The accelerator of :meth:`offer` (and, exclusive, the home of the position both paths move)."""

    def _back_pressure_status(self, position: int, length: int) -> int:
        if position + length >= self.max_possible_position:
            return MAX_POSITION_EXCEEDED
        if self._metadata.get_int_volatile(_IS_CONNECTED) == 1:
            return BACK_PRESSURED
        return NOT_CONNECTED

    def check_max_message_length(self, length: int) -> None:
        if length > self.max_message_length:
            raise ValueError(f"message exceeds max_message_length of {self.max_message_length}, length={length}")

    def check_payload_length(self, length: int) -> None:
        """What :meth:`try_claim` accepts: one frame's payload."""
        if length < 0:
            raise ValueError(f"invalid length: {length}")
        if length > self.max_payload_length:
            raise ValueError(f"claim exceeds max_payload_length of {self.max_payload_length}, length={length}")

    def _batch_length(self, messages: Sequence[Buffer]) -> int:
        """Validate a batch; returns the bytes its frames take in the term."""
        if not messages:
            raise ValueError("offer_batch needs at least one message")
        required = frames_length(messages, self.max_payload_length)
        if required > self.term_length:
            raise ValueError(f"batch of {required} bytes exceeds the term length of {self.term_length}")
        return required

    def _message_length(self, buffer: Buffer, offset: int, length: int | None) -> int:
        if length is None:
            return (len(buffer) if type(buffer) is bytes else _byte_length(buffer)) - offset
        return length

    def _check_message(self, buffer: Buffer, offset: int, length: int) -> None:
        if length > self.max_payload_length:
            self.check_max_message_length(length)
        elif length < 0:
            raise ValueError(f"invalid length: {length}")
        _check_source(buffer, offset, length)


class LogAppender(_LogAppenderBase):
    """A concurrent publication's offer: any number of threads and processes share the log.

    Every method returns the new stream position, or a negative
    :class:`~driver.logbuffer.offer_result.OfferResult` code; bad arguments raise
    ValueError before anything is claimed.
    """

    __slots__ = ("_partitions",)

    def __init__(
        self,
        metadata: AtomicBuffer,
        terms: Sequence[AtomicBuffer],
        term_views: Sequence[memoryview],
        limit: AtomicBuffer,
    ) -> None:
        super().__init__(metadata, terms, term_views, limit)
        self._partitions = tuple(TermAppender(terms[i], metadata, i, term_views[i]) for i in range(PARTITION_COUNT))

    @property
    def position(self) -> int:
        """Where the next message goes: the active partition's tail, clamped to the term."""
        metadata = self._metadata
        term_count = metadata.get_int_volatile(_TERM_COUNT)
        raw_tail = metadata.get_long_volatile(TERM_TAIL_COUNTERS_OFFSET + (term_count % PARTITION_COUNT) * 8)
        term_offset = min(raw_tail & _U32, self.term_length)
        return (int32((raw_tail >> 32) - self.initial_term_id) << self.position_bits_to_shift) + term_offset

    def _active(self) -> tuple[int, int, int, int, int]:
        """(limit, term count, term id, term offset, position) of the active partition; term id -1 mid-rotation."""
        limit = self._limit.get_long_volatile(0)
        metadata = self._metadata
        term_count = metadata.get_int_volatile(_TERM_COUNT)
        raw_tail = metadata.get_long_volatile(TERM_TAIL_COUNTERS_OFFSET + (term_count % PARTITION_COUNT) * 8)
        term_id = raw_tail >> 32
        term_offset = raw_tail & _U32
        position = (term_count << self.position_bits_to_shift) + term_offset
        return limit, term_count, term_id, term_offset, position

    def _new_position(self, term_count: int, term_offset: int, term_id: int, position: int, resulting: int) -> int:
        if resulting > 0:
            return position - term_offset + resulting
        if position + term_offset > self.max_possible_position:
            return MAX_POSITION_EXCEEDED
        rotate_log(self._metadata, term_count, term_id)
        return ADMIN_ACTION

    def offer(
        self,
        buffer: Buffer,
        offset: int = 0,
        length: int | None = None,
        reserved_value_supplier: ReservedValueSupplier | None = None,
    ) -> int:
        """Append ``buffer[offset:offset+length]`` as one message (fragmented above one frame's payload)."""
        length = self._message_length(buffer, offset, length)
        limit, term_count, term_id, term_offset, position = self._active()
        if (term_id - self.initial_term_id - term_count) & _U32:
            return ADMIN_ACTION
        if position >= limit:
            return self._back_pressure_status(position, length)
        self._check_message(buffer, offset, length)
        partition = self._partitions[term_count % PARTITION_COUNT]
        if length > self.max_payload_length:
            resulting = partition.append_fragmented(
                self._header, buffer, offset, length, self.max_payload_length, reserved_value_supplier, term_id
            )
        else:
            resulting = partition.append_unfragmented(
                self._header, buffer, offset, length, reserved_value_supplier, term_id
            )
        return self._new_position(term_count, term_offset, term_id, position, resulting)

    def offer_batch(self, messages: Sequence[Buffer]) -> int:
        """Append each message as its own frame with one claim; all or nothing (ADMIN_ACTION past the term's end)."""
        required = self._batch_length(messages)
        limit, term_count, term_id, term_offset, position = self._active()
        if (term_id - self.initial_term_id - term_count) & _U32:
            return ADMIN_ACTION
        if position >= limit:
            return self._back_pressure_status(position, required)  # (an upper bound of the batch size)
        resulting = self._partitions[term_count % PARTITION_COUNT].append_unfragmented_batch(
            self._header, messages, term_id, required
        )
        return self._new_position(term_count, term_offset, term_id, position, resulting)

    def try_claim(self, length: int, buffer_claim: BufferClaim) -> int:
        """Claim a frame of ``length`` payload bytes for ``buffer_claim`` to fill in place and commit."""
        self.check_payload_length(length)
        limit, term_count, term_id, term_offset, position = self._active()
        if (term_id - self.initial_term_id - term_count) & _U32:
            return ADMIN_ACTION
        if position >= limit:
            return self._back_pressure_status(position, length)
        resulting = self._partitions[term_count % PARTITION_COUNT].claim(self._header, length, buffer_claim, term_id)
        return self._new_position(term_count, term_offset, term_id, position, resulting)


class ExclusiveLogAppender(_LogAppenderBase):
    """A single writer's offer: the position is kept here (in the native writer), the tail is only published.

    Results as :class:`LogAppender`'s; the writer rotates the log itself at the end of a term.
    """

    __slots__ = ("_partitions",)

    _EXCLUSIVE = True

    def __init__(
        self,
        metadata: AtomicBuffer,
        terms: Sequence[AtomicBuffer],
        term_views: Sequence[memoryview],
        limit: AtomicBuffer,
    ) -> None:
        super().__init__(metadata, terms, term_views, limit)
        self._partitions = tuple(
            ExclusiveTermAppender(terms[i], metadata, i, term_views[i]) for i in range(PARTITION_COUNT)
        )
        term_count = metadata.get_int_volatile(_TERM_COUNT)
        index = term_count % PARTITION_COUNT
        raw_tail = metadata.get_long_volatile(TERM_TAIL_COUNTERS_OFFSET + index * 8)
        state = self.native
        state.active_index = index
        state.term_id = raw_tail >> 32
        state.term_offset = min(raw_tail & _U32, self.term_length)
        state.term_begin_position = int32(state.term_id - self.initial_term_id) << self.position_bits_to_shift

    @property
    def position(self) -> int:
        return self.native.term_begin_position + self.native.term_offset

    def _new_position(self, resulting: int) -> int:
        state = self.native
        if resulting > 0:
            state.term_offset = resulting
            return state.term_begin_position + resulting
        term_length = self.term_length
        if state.term_begin_position + term_length >= self.max_possible_position:
            return MAX_POSITION_EXCEEDED
        next_index = (state.active_index + 1) % PARTITION_COUNT
        next_term_id = int32(state.term_id + 1)
        state.active_index = next_index
        state.term_offset = 0
        state.term_id = next_term_id
        state.term_begin_position += term_length
        initialise_tail_with_term_id(self._metadata, next_index, next_term_id)
        self._metadata.put_int_ordered(_TERM_COUNT, int32(next_term_id - self.initial_term_id))
        return ADMIN_ACTION

    def _limited(self, length: int) -> int:
        """0 when the position is below the publisher limit, else the flow-control result for ``length`` more."""
        position = self.native.term_begin_position + self.native.term_offset
        if position >= self._limit.get_long_volatile(0):
            return self._back_pressure_status(position, length)
        return 0

    def offer(
        self,
        buffer: Buffer,
        offset: int = 0,
        length: int | None = None,
        reserved_value_supplier: ReservedValueSupplier | None = None,
    ) -> int:
        """Append ``buffer[offset:offset+length]`` as one message (fragmented above one frame's payload)."""
        length = self._message_length(buffer, offset, length)
        limited = self._limited(length)
        if limited:
            return limited
        self._check_message(buffer, offset, length)
        state = self.native
        partition = self._partitions[state.active_index]
        if length > self.max_payload_length:
            resulting = partition.append_fragmented(
                state.term_id,
                state.term_offset,
                self._header,
                buffer,
                offset,
                length,
                self.max_payload_length,
                reserved_value_supplier,
            )
        else:
            resulting = partition.append_unfragmented(
                state.term_id, state.term_offset, self._header, buffer, offset, length, reserved_value_supplier
            )
        return self._new_position(resulting)

    def offer_batch(self, messages: Sequence[Buffer]) -> int:
        required = self._batch_length(messages)
        limited = self._limited(required)
        if limited:
            return limited
        state = self.native
        return self._new_position(
            self._partitions[state.active_index].append_unfragmented_batch(
                state.term_id, state.term_offset, self._header, messages, required
            )
        )

    def try_claim(self, length: int, buffer_claim: BufferClaim) -> int:
        self.check_payload_length(length)
        limited = self._limited(length)
        if limited:
            return limited
        state = self.native
        return self._new_position(
            self._partitions[state.active_index].claim(
                state.term_id, state.term_offset, self._header, length, buffer_claim
            )
        )

    def append_padding(self, length: int) -> int:
        """Append a padding frame of ``length`` bytes (skipped by subscribers)."""
        self.check_max_message_length(length)
        if length < 0:
            raise ValueError(f"invalid length: {length}")
        limited = self._limited(length)
        if limited:
            return limited
        state = self.native
        return self._new_position(
            self._partitions[state.active_index].append_padding(state.term_id, state.term_offset, self._header, length)
        )

    def offer_block(self, buffer: Buffer, offset: int = 0, length: int | None = None) -> int:
        """Append whole, already framed frames that continue this log (see ``ExclusivePublication.offer_block``)."""
        view = memoryview(buffer).cast("B")
        if length is None:
            length = len(view) - offset
        state = self.native
        term_offset = state.term_offset
        term_length = self.term_length
        if term_offset >= term_length:
            return self._new_position(EXCLUSIVE_FAILED)
        if length <= 0 or length & 31 or offset < 0 or offset + length > len(view):
            raise ValueError(f"a block is a whole number of 32-byte aligned frames; got length {length}")
        if term_offset + length > term_length:
            raise ValueError(f"block of {length} bytes at term offset {term_offset} runs past the term ({term_length})")
        limited = self._limited(length)
        if limited:
            return limited
        header = self._header
        found = tuple(
            int.from_bytes(view[offset + field : offset + field + 4], "little", signed=True)
            for field in (TERM_OFFSET_OFFSET, SESSION_ID_OFFSET, STREAM_ID_OFFSET, TERM_ID_OFFSET)
        )
        expected = (term_offset, header.session_id, header.stream_id, state.term_id)
        if found != expected:
            raise ValueError(
                f"block's first frame (term offset {found[0]}, session {found[1]}, stream {found[2]}, "
                f"term id {found[3]}) does not continue this publication (term offset {expected[0]}, "
                f"session {expected[1]}, stream {expected[2]}, term id {expected[3]})"
            )
        index = state.active_index
        term = self._partitions[index].term
        resulting = term_offset + length
        self._metadata.put_long_ordered(TERM_TAIL_COUNTERS_OFFSET + index * 8, (state.term_id << 32) | resulting)
        term.put_bytes(term_offset + 4, view, offset + 4, length - 4)
        term.put_int_ordered(term_offset, int.from_bytes(view[offset : offset + 4], "little", signed=True))
        note_committed()
        state.term_offset = resulting
        return state.term_begin_position + resulting
