"""The reusable frame-header view handed to fragment handlers, and ``BufferClaim``.

A reader repoints one :class:`Header` at each fragment (``header.offset =
frame_offset``) instead of allocating, so handlers must read what they need from
it during the call. Field getters read the term directly.
"""

from __future__ import annotations

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import note_committed
from driver.logbuffer.frame import (
    FLAGS_OFFSET,
    FRAME_ALIGNMENT,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    RESERVED_VALUE_OFFSET,
    SESSION_ID_OFFSET,
    STREAM_ID_OFFSET,
    TERM_ID_OFFSET,
    TYPE_OFFSET,
)

__all__ = ["BufferClaim", "Header"]

_EMPTY = memoryview(b"")


class Header:
    """Header of the fragment being delivered: ``buffer`` is the term, ``offset`` the frame's offset.

    ``view`` is a memoryview over the whole term the reader slices payloads from;
    :meth:`set_buffer` takes it from the caller (a view of the mapped file keeps
    the mapping alive while slices exist) or derives a raw one from the buffer.
    """

    __slots__ = ("buffer", "capacity", "context", "initial_term_id", "offset", "position_bits_to_shift", "view")

    def __init__(self, initial_term_id: int, position_bits_to_shift: int, context: object = None) -> None:
        self.initial_term_id = initial_term_id
        self.position_bits_to_shift = position_bits_to_shift
        self.context = context
        self.buffer: AtomicBuffer | None = None
        self.view: memoryview | None = None
        self.capacity = 0
        self.offset = 0

    def set_buffer(self, buffer: AtomicBuffer, view: memoryview | None = None) -> None:
        if buffer is self.buffer and (view is None or view is self.view):
            return
        self.buffer = buffer
        self.capacity = buffer.capacity
        self.view = view if view is not None else buffer.view(0, buffer.capacity)

    def _term(self) -> AtomicBuffer:
        buffer = self.buffer
        if buffer is None:
            raise ValueError("header is not pointed at a term buffer")
        return buffer

    @property
    def frame_length(self) -> int:
        return self._term().get_int(self.offset)

    @property
    def session_id(self) -> int:
        return self._term().get_int(self.offset + SESSION_ID_OFFSET)

    @property
    def stream_id(self) -> int:
        return self._term().get_int(self.offset + STREAM_ID_OFFSET)

    @property
    def term_id(self) -> int:
        return self._term().get_int(self.offset + TERM_ID_OFFSET)

    @property
    def term_offset(self) -> int:
        return self.offset

    @property
    def type(self) -> int:
        return self._term().get_ushort(self.offset + TYPE_OFFSET)

    @property
    def flags(self) -> int:
        """Flags byte as an unsigned value (Java returns a signed byte)."""
        return self._term().get_ubyte(self.offset + FLAGS_OFFSET)

    @property
    def reserved_value(self) -> int:
        return self._term().get_long(self.offset + RESERVED_VALUE_OFFSET)

    @property
    def position(self) -> int:
        """Stream position just past this frame (its aligned end), as Java's Header.position()."""
        term = self._term()
        offset = self.offset
        end = (offset + term.get_int(offset) + FRAME_ALIGNMENT - 1) & ~(FRAME_ALIGNMENT - 1)
        term_count = (term.get_int(offset + TERM_ID_OFFSET) - self.initial_term_id + 0x8000_0000) & 0xFFFF_FFFF
        return ((term_count - 0x8000_0000) << self.position_bits_to_shift) + end


class BufferClaim:
    """A claimed, uncommitted frame in a term that the caller fills in place.

    ``buffer`` is a writable memoryview of exactly the payload; ``term``/``offset``
    locate the same bytes in the term's AtomicBuffer (``offset`` = payload start).
    :meth:`commit` publishes the frame; :meth:`abort` turns it into padding so
    readers skip it. One of the two must be called promptly: an uncommitted frame
    blocks every reader and, after the unblock timeout, the driver pads it.
    """

    __slots__ = ("_term", "buffer", "frame_length", "frame_offset")

    def __init__(self) -> None:
        self._term: AtomicBuffer | None = None
        self.buffer: memoryview = _EMPTY
        self.frame_offset = 0
        self.frame_length = 0

    def wrap(self, term: AtomicBuffer, term_view: memoryview, frame_offset: int, frame_length: int) -> None:
        self._term = term
        self.frame_offset = frame_offset
        self.frame_length = frame_length
        self.buffer = term_view[frame_offset + HEADER_LENGTH : frame_offset + frame_length]

    @property
    def term(self) -> AtomicBuffer:
        term = self._term
        if term is None:
            raise ValueError("BufferClaim is not wrapped around a claimed frame")
        return term

    @property
    def offset(self) -> int:
        """Offset of the payload inside :attr:`term`."""
        return self.frame_offset + HEADER_LENGTH

    @property
    def length(self) -> int:
        """Payload length."""
        return self.frame_length - HEADER_LENGTH

    def put_bytes(self, src: bytes | bytearray | memoryview, src_offset: int = 0, length: int = -1) -> None:
        self.term.put_bytes(self.frame_offset + HEADER_LENGTH, src, src_offset, length)

    @property
    def reserved_value(self) -> int:
        return self.term.get_long(self.frame_offset + RESERVED_VALUE_OFFSET)

    @reserved_value.setter
    def reserved_value(self, value: int) -> None:
        self.term.put_long(self.frame_offset + RESERVED_VALUE_OFFSET, value)

    @property
    def flags(self) -> int:
        return self.term.get_ubyte(self.frame_offset + FLAGS_OFFSET)

    @flags.setter
    def flags(self, value: int) -> None:
        self.term.put_byte(self.frame_offset + FLAGS_OFFSET, value)

    @property
    def header_type(self) -> int:
        return self.term.get_ushort(self.frame_offset + TYPE_OFFSET)

    @header_type.setter
    def header_type(self, value: int) -> None:
        self.term.put_short(self.frame_offset + TYPE_OFFSET, value)

    def commit(self) -> None:
        """Publish the frame (ordered store of its positive length)."""
        self.term.put_int_ordered(self.frame_offset, self.frame_length)
        note_committed()
        self._release()

    def abort(self) -> None:
        """Turn the frame into padding, then publish it, so readers skip it."""
        term = self.term
        term.put_short(self.frame_offset + TYPE_OFFSET, HDR_TYPE_PAD)
        term.put_int_ordered(self.frame_offset, self.frame_length)
        note_committed()
        self._release()

    def _release(self) -> None:
        self._term = None
        self.buffer = _EMPTY
