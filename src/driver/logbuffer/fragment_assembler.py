"""Reassembles fragmented messages (BEGIN .. END frames) before handing them on.

Unfragmented frames (flags B|E) go straight to the delegate with the reader's
zero-copy slice. Fragments are appended to a per-session builder; on the END
fragment the delegate gets one memoryview of the whole message (valid only for
the duration of the call; the builder is reused) and the header of the last
fragment. A middle or END fragment with no BEGIN seen (joined mid-message) is
dropped, as in Aeron. So is a partial message whose next fragment is not the one
that follows it in the log (today's Aeron checks the term offset too): the stream
skipped, e.g. a new image of the same session joined after the old one was lost,
and appending would join the head of one message to the tail of another.
"""

from __future__ import annotations

from collections.abc import Callable

from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG, FRAME_ALIGNMENT, UNFRAGMENTED
from driver.logbuffer.header import Header

__all__ = ["BufferBuilder", "FragmentAssembler"]

MIN_ALLOCATED_CAPACITY = 4096
MAX_CAPACITY = 0x7FFF_FFF7


class BufferBuilder:
    """Growable byte accumulator; grows by doubling from 4 KiB, never shrinks on reset."""

    __slots__ = ("buffer", "limit", "next_term_id", "next_term_offset")

    def __init__(self, initial_capacity: int = 0) -> None:
        self.buffer = bytearray(initial_capacity)
        self.limit = 0
        self.next_term_id = 0
        """Where the message's next fragment must be (term id, term offset): set by the assembler."""
        self.next_term_offset = -1

    @property
    def capacity(self) -> int:
        return len(self.buffer)

    def reset(self) -> BufferBuilder:
        self.limit = 0
        return self

    def append(self, src: bytes | bytearray | memoryview) -> BufferBuilder:
        length = len(src)
        limit = self.limit
        required = limit + length
        if required > len(self.buffer):
            self._grow(required)
        self.buffer[limit:required] = src
        self.limit = required
        return self

    def _grow(self, required: int) -> None:
        if required > MAX_CAPACITY:
            raise ValueError(f"max capacity exceeded: limit={self.limit} required={required}")
        capacity = max(len(self.buffer), MIN_ALLOCATED_CAPACITY)
        while capacity < required:
            capacity = min(capacity * 2, MAX_CAPACITY)
        # A fresh buffer rather than a resize: a delegate may still hold a view of the old one.
        grown = bytearray(capacity)
        grown[: self.limit] = self.buffer[: self.limit]
        self.buffer = grown


class FragmentAssembler:
    """A fragment handler that calls ``delegate(payload, header)`` once per whole message."""

    __slots__ = ("_builders", "delegate", "initial_buffer_length")

    def __init__(self, delegate: Callable[[memoryview, Header], object], initial_buffer_length: int = 0) -> None:
        self.delegate = delegate
        self.initial_buffer_length = initial_buffer_length
        self._builders: dict[int, BufferBuilder] = {}

    def __call__(self, payload: memoryview, header: Header) -> None:
        flags = header.flags
        if flags & UNFRAGMENTED == UNFRAGMENTED:
            self.delegate(payload, header)
            return
        session_id = header.session_id
        if flags & BEGIN_FRAG_FLAG:
            builder = self._builders.get(session_id)
            if builder is None:
                builder = self._builders[session_id] = BufferBuilder(self.initial_buffer_length)
            builder.reset().append(payload)
            _expect_next(builder, header)
            return
        builder = self._builders.get(session_id)
        if builder is None or builder.limit == 0:
            return
        if header.term_offset != builder.next_term_offset or header.term_id != builder.next_term_id:
            builder.reset()  # not the fragment after the last one: the stream skipped, this message is lost
            return
        builder.append(payload)
        if flags & END_FRAG_FLAG:
            self.delegate(memoryview(builder.buffer)[: builder.limit], header)
            builder.reset()
        else:
            _expect_next(builder, header)

    on_fragment = __call__

    def free_session_buffer(self, session_id: int) -> bool:
        return self._builders.pop(session_id, None) is not None

    def clear(self) -> None:
        self._builders.clear()


def _expect_next(builder: BufferBuilder, header: Header) -> None:
    """Remember where the fragment after ``header``'s must be: the same term, just past this frame."""
    builder.next_term_id = header.term_id
    builder.next_term_offset = header.term_offset + (
        (header.frame_length + FRAME_ALIGNMENT - 1) & ~(FRAME_ALIGNMENT - 1)
    )
