"""A publication log as the driver would set it up, with its limit counter and a reader: for client unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from driver.client import Image
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer.descriptor import initialize_publication_metadata, set_is_connected
from driver.logbuffer.log_buffers import LogBuffers

__all__ = ["INITIAL_TERM_ID", "TERM", "Log"]

TERM = 64 * 1024
INITIAL_TERM_ID = 0x7FFF_FFFE
"""Term ids wrap through int32 max within a few terms."""


class Log:
    """One log file as the driver would set it up, a limit counter, and a reader of the same file."""

    def __init__(self, path: Path, term_id: int | None = None, term_offset: int = 0, term_length: int = TERM) -> None:
        self.path = path
        self.term_length = term_length
        self.buffers = LogBuffers.create(path, term_length, 4096, sparse=True)
        initialize_publication_metadata(
            self.buffers.metadata,
            session_id=-5,
            stream_id=9,
            initial_term_id=INITIAL_TERM_ID,
            mtu_length=1408,
            term_length=term_length,
            page_size=4096,
            correlation_id=1,
            term_id=term_id,
            term_offset=term_offset,
        )
        self.limit = AtomicBuffer(bytearray(8))
        self.subscriber_position = AtomicBuffer(bytearray(8))
        self.reader = LogBuffers.map(path)
        self.clean_position = 0

    def clean_to(self, position: int) -> None:
        """Zero consumed bytes, as the driver does for IPC, so a reused partition starts clean."""
        term_length = self.term_length
        while self.clean_position < position:
            offset = self.clean_position % term_length
            length = min(position - self.clean_position, term_length - offset)
            self.buffers.terms[(self.clean_position // term_length) % 3].set_memory(offset, length, 0)
            self.clean_position += length

    def connect(self, limit: int = 1 << 50) -> None:
        set_is_connected(self.buffers.metadata, True)
        self.limit.put_long(0, limit)

    def publication(self, cls: Any) -> Any:
        return cls(None, "aeron:ipc", 9, -5, self.limit, -1, self.buffers, 1, 1)

    def image(self) -> Image:
        return Image(None, -5, self.subscriber_position, 3, self.reader, _raise, "aeron:ipc", 1)  # type: ignore[arg-type]

    def snapshot(self) -> bytes:
        return self.path.read_bytes()

    def close(self) -> None:
        self.buffers.close()
        self.reader.close()


def _raise(error: BaseException) -> None:
    raise error
