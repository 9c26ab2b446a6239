from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Buffer

from driver.concurrent._atomic import AtomicBuffer

def frames_committed() -> int: ...
def note_committed() -> None: ...
def write_frame(
    term: AtomicBuffer,
    frame_offset: int,
    vft: int,
    session_word: int,
    stream_word: int,
    src: Buffer,
    src_offset: int,
    length: int,
    /,
) -> None: ...
def write_frames(
    term: AtomicBuffer, frame_offset: int, vft: int, session_word: int, stream_word: int, messages: Sequence[Buffer], /
) -> int: ...
def frames_length(messages: Sequence[Buffer], max_payload: int, /) -> int: ...
def scan_frames(term: AtomicBuffer, offset: int, limit: int, /) -> tuple[int, list[tuple[int, int, int]]]: ...
def scan_for_availability(term: AtomicBuffer, offset: int, max_length: int, /) -> tuple[int, int]: ...
def first_gap(term: AtomicBuffer, rebuild_offset: int, limit_offset: int, /) -> tuple[int, int]: ...
def insert_packet(term: AtomicBuffer, term_offset: int, packet: Buffer, length: int, /) -> bool: ...
def read_fragments(
    term: AtomicBuffer,
    offset: int,
    fragments_limit: int,
    handler: Callable[[memoryview, Any], object],
    header: object,
    view: memoryview,
    error_handler: Callable[[Exception], object] | None,
    /,
) -> tuple[int, int]: ...

class PublicationWriter:
    """A publication's single-message offer in one call: the accelerator of ``LogAppender.offer``."""

    active_index: int
    term_id: int
    term_offset: int
    term_begin_position: int
    def __init__(
        self,
        limit: AtomicBuffer,
        metadata: AtomicBuffer,
        terms: tuple[AtomicBuffer, ...],
        initial_term_id: int,
        max_payload_length: int,
        vft: int,
        session_word: int,
        stream_word: int,
        exclusive: bool,
    ) -> None: ...
    @property
    def term_length(self) -> int: ...
    def offer(self, buffer: Buffer, offset: int = 0, length: int | None = None, /) -> int: ...
