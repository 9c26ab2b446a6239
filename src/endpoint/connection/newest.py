"""Newest-wins messages: the frame that carries them and the rule that drops superseded ones.

Theory of operation. A message sent with ``send_unreliable`` (or of a class registered ``unreliable=True``) is a
snapshot: only the latest one matters, and an older one arriving after a newer one must never be delivered. The
sender stamps each with a sequence number taken from one counter per message class for the whole end point
(:class:`Sequencer`), so numbers only grow per class, whichever connection or group sends them, and one encoded
frame can go to every member of a group unchanged. The receiver keeps, per connection and class, the highest number
delivered (:class:`NewestFilter`) and drops anything not above it: a late retransmission, a datagram reordered by the
network, a copy sent on the reliable path while the unreliable stream was still connecting. Nothing here is
reliable: a dropped or lost snapshot is simply superseded by the next.

The frame is a msgpack ext value, like a stream chunk, so a reader knows it from its first six bytes::

    0xC9 | ext length (4 bytes, big-endian) | NEWEST_EXT | sequence (8 bytes, little-endian) | the message, encoded

Pure: bytes and numbers in, decisions out.
"""

from __future__ import annotations

from endpoint.messages import NEWEST_EXT

__all__ = [
    "MAX_NEWEST_CLASSES",
    "NEWEST_EXT",
    "NEWEST_HEADER_LENGTH",
    "NewestFilter",
    "Sequencer",
    "frame",
    "is_newest",
    "sequence_of",
]

NEWEST_HEADER_LENGTH = 14
"""0xC9, the 4-byte big-endian ext length, the ext code, the 8-byte little-endian sequence."""
MAX_NEWEST_CLASSES = 1024
"""Message classes one connection tracks newest-wins (at most the registered ones can arrive, decoded; this bounds
the table whatever the registry holds). A class beyond it is dropped and counted as stale."""
_U64 = (1 << 64) - 1


def frame(sequence: int, encoded: bytes) -> bytes:
    """``encoded`` (one message as the codec wrote it) behind a newest-wins header carrying ``sequence``."""
    return b"".join(
        (
            b"\xc9",
            (8 + len(encoded)).to_bytes(4, "big"),
            bytes((NEWEST_EXT,)),
            sequence.to_bytes(8, "little"),
            encoded,
        )
    )


def is_newest(payload: memoryview | bytes) -> bool:
    """The payload is a newest-wins frame (its header is whole; the ext length is checked by the reader)."""
    return len(payload) >= NEWEST_HEADER_LENGTH and payload[0] == 0xC9 and payload[5] == NEWEST_EXT


def sequence_of(payload: memoryview | bytes) -> int | None:
    """The frame's sequence, or None when its ext length disagrees with its size (a malformed frame)."""
    if int.from_bytes(payload[1:5], "big") != len(payload) - 6:
        return None
    return int.from_bytes(payload[6:14], "little")


class Sequencer:
    """The next sequence number per message class, shared by every connection and group of one end point."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: dict[type, int] = {}

    def next(self, cls: type) -> int:
        """A number above every one given out for ``cls`` before (from 1; 64 bits never wrap in practice)."""
        number = self._next.get(cls, 0) + 1
        self._next[cls] = number
        return number


class NewestFilter:
    """What one connection delivered last per message class: anything not newer is stale."""

    __slots__ = ("_last", "stale")

    def __init__(self) -> None:
        self._last: dict[type, int] = {}
        self.stale = 0
        """Newest-wins messages dropped: superseded, reordered, or of a class beyond :data:`MAX_NEWEST_CLASSES`."""

    def accept(self, cls: type, sequence: int) -> bool:
        """True if ``sequence`` is the newest seen for ``cls`` (it becomes the one to beat); else counted stale."""
        last = self._last.get(cls)
        if last is None:
            if len(self._last) >= MAX_NEWEST_CLASSES or not 0 < sequence <= _U64:
                self.stale += 1
                return False
        elif sequence <= last:
            self.stale += 1
            return False
        self._last[cls] = sequence
        return True

    def __len__(self) -> int:
        return len(self._last)
