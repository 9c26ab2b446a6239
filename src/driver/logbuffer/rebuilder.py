"""Insert received datagrams into an image's term (1.15.1 ``TermRebuilder``).

Theory of operation
-------------------
The receiver owns the image terms and writes each DATA datagram at the term offset
carried in its first header, so frames may land out of order and leave holes that the
loss detector later NAKs. The slot's first int (``frame_length``) is the commit flag
that subscribers and the gap scanner read with acquire semantics:

* non-zero: something was already inserted here (a duplicate or a retransmit of data
  we have) and the datagram is dropped — a slot is never overwritten;
* zero: copy everything except the first 8 bytes with plain stores, then release-store
  the first header word (frame_length | version | flags | type) last, so a reader that
  sees a positive length also sees the whole frame.

A datagram holding several frames is inserted as one block; the inner frames' lengths
are published by the release of the first frame's word, which orders all earlier stores.
Java copies the payload and then header words 24, 16 and 8 one by one; the order of
plain stores is not observable before the release, so one copy of ``[8, length)`` does
the same job with one C call less.

The datagram is assumed validated (``driver.wire.datagram.validate_data_datagram``).
"""

from __future__ import annotations

import struct

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import insert_packet

__all__ = ["insert"]

_WORD0 = struct.Struct("<q").unpack_from


def insert(term: AtomicBuffer, term_offset: int, packet: memoryview, length: int) -> None:
    """Insert ``packet[0:length]`` at ``term_offset`` unless the slot is already filled."""
    insert_packet(term, term_offset, packet, length)
