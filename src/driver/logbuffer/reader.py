"""Term reader: delivers committed fragments from a term to a handler (subscriber hot path).

Theory of operation
-------------------
Starting at a frame boundary, the reader does one acquire load of each frame's
first 8 bytes (length | version | flags | type). A length <= 0 means the next
frame is not committed yet, so reading stops there; that single load also gives
the type, so padding is skipped without a second read. Each data fragment is
handed over as a zero-copy memoryview slice of the term's payload bytes plus the
shared :class:`Header` repointed at the frame; the handler must copy anything it
keeps beyond the call (the term is reused after the publisher laps it).

The caller turns the returned offset into its new subscriber position
(``position + (new_offset - term_offset)``).

:func:`read` runs its loop natively (``read_fragments`` in ``_frames.c``): per
fragment that leaves the slice and the handler call, about half of what the
same loop costs in Python. :func:`controlled_read` stays in Python.

If a handler raises, the fragment counts as consumed (as in Aeron): with an
``error_handler`` the error is reported and reading stops with the progress
returned; without one the exception propagates and the caller loses the
progress of this call.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import read_fragments
from driver.logbuffer.header import Header

__all__ = [
    "ControlledAction",
    "ControlledFragmentHandler",
    "ErrorHandler",
    "FragmentHandler",
    "TermReader",
    "controlled_read",
    "read",
]

FragmentHandler = Callable[[memoryview, Header], object]
ErrorHandler = Callable[[Exception], object]


class ControlledAction(enum.IntEnum):
    """What a controlled handler wants done after a fragment (Aeron's ControlledFragmentHandler.Action)."""

    ABORT = 0
    """Do not consume this fragment; stop; it is delivered again next time."""
    BREAK = 1
    """Consume this fragment and stop."""
    COMMIT = 2
    """Consume this fragment and make the position so far durable (``commit`` callback)."""
    CONTINUE = 3
    """Consume this fragment and go on."""


ControlledFragmentHandler = Callable[[memoryview, Header], "ControlledAction | int"]

_ABORT = ControlledAction.ABORT
_BREAK = ControlledAction.BREAK
_COMMIT = ControlledAction.COMMIT


def read(
    term: AtomicBuffer,
    term_offset: int,
    handler: FragmentHandler,
    fragments_limit: int,
    header: Header,
    error_handler: ErrorHandler | None = None,
    term_view: memoryview | None = None,
) -> tuple[int, int]:
    """Deliver up to ``fragments_limit`` fragments from ``term_offset``; returns (fragments, new offset).

    ``term_view`` (a memoryview over the same term, e.g. ``LogBuffers.term_views[i]``)
    is the view payload slices are cut from; without it a raw view of ``term`` is used.
    """
    if header.buffer is not term or (term_view is not None and header.view is not term_view):
        header.set_buffer(term, term_view)
    view = header.view
    assert view is not None
    return read_fragments(term, term_offset, fragments_limit, handler, header, view, error_handler)


def controlled_read(
    term: AtomicBuffer,
    term_offset: int,
    handler: ControlledFragmentHandler,
    fragments_limit: int,
    header: Header,
    commit: Callable[[int], object] | None = None,
    error_handler: ErrorHandler | None = None,
    term_view: memoryview | None = None,
) -> tuple[int, int]:
    """Like :func:`read`, but the handler steers with a :class:`ControlledAction`.

    ``commit(offset)`` is called with the term offset just past the fragment when the
    handler answers COMMIT (the image stores the corresponding position). ABORT rewinds
    to the start of that fragment.
    """
    if header.buffer is not term or (term_view is not None and header.view is not term_view):
        header.set_buffer(term, term_view)
    view = header.view
    assert view is not None
    capacity = header.capacity
    get_word = term.get_long_volatile
    offset = term_offset
    fragments = 0
    try:
        while fragments < fragments_limit and offset < capacity:
            word = get_word(offset)
            length = word & 0xFFFF_FFFF
            if not 0 < length < 0x8000_0000:
                break
            frame_offset = offset
            aligned = (length + 31) & -32
            offset += aligned
            if not word >> 48:
                continue
            header.offset = frame_offset
            action = handler(view[frame_offset + 32 : frame_offset + length], header)
            if action == _ABORT:
                offset -= aligned
                break
            fragments += 1
            if action == _BREAK:
                break
            if action == _COMMIT and commit is not None:
                commit(offset)
    except Exception as exc:
        if error_handler is None:
            raise
        error_handler(exc)
    return fragments, offset


class TermReader:
    """Namespace mirroring Aeron's ``TermReader``; bind ``TermReader.read`` to a local in hot loops."""

    read = staticmethod(read)
    controlled_read = staticmethod(controlled_read)
