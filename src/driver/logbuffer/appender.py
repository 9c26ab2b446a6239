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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from driver.concurrent.atomic_buffer import AtomicBuffer, frames_length
from driver.errors import DriverError
from driver.int32 import U32_MASK as _U32
from driver.logbuffer.descriptor import TERM_TAIL_COUNTERS_OFFSET
from driver.logbuffer.frame import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    FLAGS_OFFSET,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    RESERVED_VALUE_OFFSET,
    TYPE_OFFSET,
    HeaderWriter,
)
from driver.logbuffer.header import BufferClaim

__all__ = [
    "EXCLUSIVE_FAILED",
    "FAILED",
    "ExclusiveTermAppender",
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


def _pad_to_end(term: AtomicBuffer, term_offset: int, header: HeaderWriter, term_length: int, term_id: int) -> None:
    """Fill the rest of the term with one PAD frame if the claim began inside it."""
    if term_offset < term_length:
        padding = term_length - term_offset
        header.write(term, term_offset, padding, term_id)
        term.put_short(term_offset + TYPE_OFFSET, HDR_TYPE_PAD)
        term.put_int_ordered(term_offset, padding)


def _write_fragments(
    term: AtomicBuffer,
    term_view: memoryview,
    frame_offset: int,
    header: HeaderWriter,
    src: bytes | bytearray | memoryview,
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
        flags = 0
        frame_offset += (frame_length + 31) & ~31
        remaining -= chunk
        if remaining <= 0:
            break


_UNLIMITED = 1 << 62


def _batch_length(messages: Sequence[bytes | bytearray | memoryview]) -> int:
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
        src: bytes | bytearray | memoryview,
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
        header.write(term, term_offset, frame_length, term_id)
        term.put_bytes(term_offset + HEADER_LENGTH, src, offset, length)
        if reserved_value_supplier is not None:
            term.put_long(
                term_offset + RESERVED_VALUE_OFFSET,
                reserved_value_supplier(self.term_view, term_offset, frame_length),
            )
        term.put_int_ordered(term_offset, frame_length)
        return resulting

    def append_fragmented(
        self,
        header: HeaderWriter,
        src: bytes | bytearray | memoryview,
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
        messages: Sequence[bytes | bytearray | memoryview],
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
        self.term.write_frames(
            term_offset, header.version_flags_type, header.session_word, header.stream_word | (term_id << 32), messages
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
        return resulting

    def append_unfragmented(
        self,
        term_id: int,
        term_offset: int,
        header: HeaderWriter,
        src: bytes | bytearray | memoryview,
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
        header.write(term, term_offset, frame_length, term_id)
        term.put_bytes(term_offset + HEADER_LENGTH, src, offset, length)
        if reserved_value_supplier is not None:
            term.put_long(
                term_offset + RESERVED_VALUE_OFFSET,
                reserved_value_supplier(self.term_view, term_offset, frame_length),
            )
        term.put_int_ordered(term_offset, frame_length)
        return resulting

    def append_fragmented(
        self,
        term_id: int,
        term_offset: int,
        header: HeaderWriter,
        src: bytes | bytearray | memoryview,
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
        messages: Sequence[bytes | bytearray | memoryview],
        required: int | None = None,
    ) -> int:
        """Append each message as its own frame after one ordered tail update; all-or-nothing."""
        resulting = term_offset + (_batch_length(messages) if required is None else required)
        self.metadata.put_long_ordered(self._tail_offset, (term_id << 32) | resulting)
        if resulting > self.term_length:
            return self._end_of_term(header, term_id, term_offset)
        self.term.write_frames(
            term_offset, header.version_flags_type, header.session_word, header.stream_word | (term_id << 32), messages
        )
        return resulting
