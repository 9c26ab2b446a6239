"""Log buffer layout and position arithmetic (Aeron 1.15.1 ``LogBufferDescriptor``).

Theory of operation
-------------------
A log buffer file is three equal *terms* followed by a metadata section; the
metadata is always the last ``LOG_META_DATA_LENGTH`` (4096) bytes of the file::

    [ term 0 | term 1 | term 2 | ...page alignment... | metadata (4096) ]

The term in use is the *active partition*, ``active_term_count % 3``. Each
partition has a 64-bit *raw tail* in the metadata packing ``term_id << 32 |
term_offset``; publishers fetch-add the offset part to claim space, so it can
run past the term length (clamp with :func:`term_offset`). When a term fills,
the appender pads it to the end and the publisher *rotates*: the partition
after the active one is re-stamped with ``term_id + 1`` and the active term
count is CAS-ed forward (:func:`rotate_log`).

Stream positions are 64-bit byte counts: ``position = (term_count << bits) +
term_offset`` where ``term_count = term_id - initial_term_id`` computed in
*int32* (term ids wrap) and ``bits = log2(term_length)``.

Metadata offsets (1.15.1; the ``HEAD_*`` names are fields later Aeron versions
added after the 1.15.1 ones, at offsets 1.15.1 leaves unused)::

    0, 8, 16  int64  raw tail of partition 0..2
    24        int32  active term count
    128       int64  end-of-stream position
    136       int32  is connected (1/0)
    256       int64  correlation (registration) id
    264       int32  initial term id
    268       int32  default frame header length (32)
    272       int32  mtu length
    276       int32  term length
    280       int32  page size
    320       32 B   default frame header (slot of 128 bytes)
"""

from __future__ import annotations

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import DriverConfigurationError
from driver.int32 import int32, int64
from driver.logbuffer.frame import HEADER_LENGTH, create_default_header

__all__ = [
    "HEAD_LOG_ACTIVE_TRANSPORT_COUNT_OFFSET",
    "HEAD_LOG_ENTITY_TAG_OFFSET",
    "HEAD_LOG_GROUP_OFFSET",
    "HEAD_LOG_IS_PUBLICATION_REVOKED_OFFSET",
    "HEAD_LOG_IS_RESPONSE_OFFSET",
    "HEAD_LOG_LINGER_TIMEOUT_NS_OFFSET",
    "HEAD_LOG_MAX_RESEND_OFFSET",
    "HEAD_LOG_OS_DEFAULT_SOCKET_RCVBUF_LENGTH_OFFSET",
    "HEAD_LOG_OS_DEFAULT_SOCKET_SNDBUF_LENGTH_OFFSET",
    "HEAD_LOG_OS_MAX_SOCKET_RCVBUF_LENGTH_OFFSET",
    "HEAD_LOG_OS_MAX_SOCKET_SNDBUF_LENGTH_OFFSET",
    "HEAD_LOG_PUBLICATION_WINDOW_LENGTH_OFFSET",
    "HEAD_LOG_RECEIVER_WINDOW_LENGTH_OFFSET",
    "HEAD_LOG_REJOIN_OFFSET",
    "HEAD_LOG_RELIABLE_OFFSET",
    "HEAD_LOG_RESPONSE_CORRELATION_ID_OFFSET",
    "HEAD_LOG_SIGNAL_EOS_OFFSET",
    "HEAD_LOG_SOCKET_RCVBUF_LENGTH_OFFSET",
    "HEAD_LOG_SOCKET_SNDBUF_LENGTH_OFFSET",
    "HEAD_LOG_SPARSE_OFFSET",
    "HEAD_LOG_SPIES_SIMULATE_CONNECTION_OFFSET",
    "HEAD_LOG_TETHER_OFFSET",
    "HEAD_LOG_TYPE_OFFSET",
    "HEAD_LOG_UNTETHERED_LINGER_TIMEOUT_NS_OFFSET",
    "HEAD_LOG_UNTETHERED_RESTING_TIMEOUT_NS_OFFSET",
    "HEAD_LOG_UNTETHERED_WINDOW_LIMIT_TIMEOUT_NS_OFFSET",
    "LOG_ACTIVE_TERM_COUNT_OFFSET",
    "LOG_CORRELATION_ID_OFFSET",
    "LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET",
    "LOG_DEFAULT_FRAME_HEADER_MAX_LENGTH",
    "LOG_DEFAULT_FRAME_HEADER_OFFSET",
    "LOG_END_OF_STREAM_POSITION_OFFSET",
    "LOG_INITIAL_TERM_ID_OFFSET",
    "LOG_IS_CONNECTED_OFFSET",
    "LOG_META_DATA_LENGTH",
    "LOG_META_DATA_SECTION_INDEX",
    "LOG_MTU_LENGTH_OFFSET",
    "LOG_PAGE_SIZE_OFFSET",
    "LOG_TERM_LENGTH_OFFSET",
    "MAX_POSITION_EXCEEDED_TERM_COUNT",
    "PAGE_MAX_SIZE",
    "PAGE_MIN_SIZE",
    "PARTITION_COUNT",
    "TERM_MAX_LENGTH",
    "TERM_MIN_LENGTH",
    "TERM_TAIL_COUNTERS_OFFSET",
    "active_term_count",
    "apply_default_header",
    "cas_active_term_count",
    "cas_raw_tail",
    "check_page_size",
    "check_term_length",
    "compute_log_length",
    "compute_max_message_length",
    "compute_position",
    "compute_term_begin_position",
    "compute_term_id_from_position",
    "compute_term_offset_from_position",
    "correlation_id",
    "default_frame_header",
    "end_of_stream_position",
    "index_by_position",
    "index_by_term",
    "index_by_term_count",
    "initial_term_id",
    "initialise_tail_with_term_id",
    "initialize_image_metadata",
    "initialize_publication_metadata",
    "int32",
    "is_connected",
    "max_possible_position",
    "mtu_length",
    "next_partition_index",
    "pack_tail",
    "page_size",
    "position_bits_to_shift",
    "raw_tail",
    "raw_tail_volatile",
    "rotate_log",
    "set_active_term_count",
    "set_active_term_count_ordered",
    "set_correlation_id",
    "set_end_of_stream_position",
    "set_initial_term_id",
    "set_is_connected",
    "set_mtu_length",
    "set_page_size",
    "set_raw_tail",
    "set_raw_tail_volatile",
    "set_term_length",
    "store_default_frame_header",
    "tail_counter_offset",
    "term_id",
    "term_length",
    "term_offset",
]

PARTITION_COUNT = 3
LOG_META_DATA_SECTION_INDEX = PARTITION_COUNT

TERM_MIN_LENGTH = 64 * 1024
TERM_MAX_LENGTH = 1024 * 1024 * 1024
PAGE_MIN_SIZE = 4 * 1024
PAGE_MAX_SIZE = 1024 * 1024 * 1024

_CACHE_LINE = 64
_LONG = 8
_INT = 4

TERM_TAIL_COUNTERS_OFFSET = 0
LOG_ACTIVE_TERM_COUNT_OFFSET = TERM_TAIL_COUNTERS_OFFSET + _LONG * PARTITION_COUNT  # 24
LOG_END_OF_STREAM_POSITION_OFFSET = _CACHE_LINE * 2  # 128
LOG_IS_CONNECTED_OFFSET = LOG_END_OF_STREAM_POSITION_OFFSET + _LONG  # 136
LOG_CORRELATION_ID_OFFSET = _CACHE_LINE * 4  # 256
LOG_INITIAL_TERM_ID_OFFSET = LOG_CORRELATION_ID_OFFSET + _LONG  # 264
LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET = LOG_INITIAL_TERM_ID_OFFSET + _INT  # 268
LOG_MTU_LENGTH_OFFSET = LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET + _INT  # 272
LOG_TERM_LENGTH_OFFSET = LOG_MTU_LENGTH_OFFSET + _INT  # 276
LOG_PAGE_SIZE_OFFSET = LOG_TERM_LENGTH_OFFSET + _INT  # 280
LOG_DEFAULT_FRAME_HEADER_OFFSET = _CACHE_LINE * 5  # 320
LOG_DEFAULT_FRAME_HEADER_MAX_LENGTH = _CACHE_LINE * 2  # 128
LOG_META_DATA_LENGTH = 4096

# Fields later Aeron versions (HEAD) added; 1.15.1 never reads them. Kept for later issues.
HEAD_LOG_ACTIVE_TRANSPORT_COUNT_OFFSET = LOG_IS_CONNECTED_OFFSET + _INT  # 140
HEAD_LOG_PUBLICATION_WINDOW_LENGTH_OFFSET = LOG_PAGE_SIZE_OFFSET + _INT  # 284
HEAD_LOG_RECEIVER_WINDOW_LENGTH_OFFSET = HEAD_LOG_PUBLICATION_WINDOW_LENGTH_OFFSET + _INT  # 288
HEAD_LOG_SOCKET_SNDBUF_LENGTH_OFFSET = HEAD_LOG_RECEIVER_WINDOW_LENGTH_OFFSET + _INT  # 292
HEAD_LOG_OS_DEFAULT_SOCKET_SNDBUF_LENGTH_OFFSET = HEAD_LOG_SOCKET_SNDBUF_LENGTH_OFFSET + _INT  # 296
HEAD_LOG_OS_MAX_SOCKET_SNDBUF_LENGTH_OFFSET = HEAD_LOG_OS_DEFAULT_SOCKET_SNDBUF_LENGTH_OFFSET + _INT  # 300
HEAD_LOG_SOCKET_RCVBUF_LENGTH_OFFSET = HEAD_LOG_OS_MAX_SOCKET_SNDBUF_LENGTH_OFFSET + _INT  # 304
HEAD_LOG_OS_DEFAULT_SOCKET_RCVBUF_LENGTH_OFFSET = HEAD_LOG_SOCKET_RCVBUF_LENGTH_OFFSET + _INT  # 308
HEAD_LOG_OS_MAX_SOCKET_RCVBUF_LENGTH_OFFSET = HEAD_LOG_OS_DEFAULT_SOCKET_RCVBUF_LENGTH_OFFSET + _INT  # 312
HEAD_LOG_MAX_RESEND_OFFSET = HEAD_LOG_OS_MAX_SOCKET_RCVBUF_LENGTH_OFFSET + _INT  # 316
HEAD_LOG_ENTITY_TAG_OFFSET = LOG_DEFAULT_FRAME_HEADER_OFFSET + LOG_DEFAULT_FRAME_HEADER_MAX_LENGTH  # 448
HEAD_LOG_RESPONSE_CORRELATION_ID_OFFSET = HEAD_LOG_ENTITY_TAG_OFFSET + _LONG  # 456
HEAD_LOG_LINGER_TIMEOUT_NS_OFFSET = HEAD_LOG_RESPONSE_CORRELATION_ID_OFFSET + _LONG  # 464
HEAD_LOG_UNTETHERED_WINDOW_LIMIT_TIMEOUT_NS_OFFSET = HEAD_LOG_LINGER_TIMEOUT_NS_OFFSET + _LONG  # 472
HEAD_LOG_UNTETHERED_RESTING_TIMEOUT_NS_OFFSET = HEAD_LOG_UNTETHERED_WINDOW_LIMIT_TIMEOUT_NS_OFFSET + _LONG  # 480
HEAD_LOG_GROUP_OFFSET = HEAD_LOG_UNTETHERED_RESTING_TIMEOUT_NS_OFFSET + _LONG  # 488
HEAD_LOG_IS_RESPONSE_OFFSET = HEAD_LOG_GROUP_OFFSET + 1  # 489
HEAD_LOG_REJOIN_OFFSET = HEAD_LOG_IS_RESPONSE_OFFSET + 1  # 490
HEAD_LOG_RELIABLE_OFFSET = HEAD_LOG_REJOIN_OFFSET + 1  # 491
HEAD_LOG_SPARSE_OFFSET = HEAD_LOG_RELIABLE_OFFSET + 1  # 492
HEAD_LOG_SIGNAL_EOS_OFFSET = HEAD_LOG_SPARSE_OFFSET + 1  # 493
HEAD_LOG_SPIES_SIMULATE_CONNECTION_OFFSET = HEAD_LOG_SIGNAL_EOS_OFFSET + 1  # 494
HEAD_LOG_TETHER_OFFSET = HEAD_LOG_SPIES_SIMULATE_CONNECTION_OFFSET + 1  # 495
HEAD_LOG_IS_PUBLICATION_REVOKED_OFFSET = HEAD_LOG_TETHER_OFFSET + 1  # 496
HEAD_LOG_TYPE_OFFSET = HEAD_LOG_IS_PUBLICATION_REVOKED_OFFSET + 1  # 497
HEAD_LOG_UNTETHERED_LINGER_TIMEOUT_NS_OFFSET = HEAD_LOG_TYPE_OFFSET + 1 + 2  # 500

MAX_POSITION_EXCEEDED_TERM_COUNT = 1 << 31
"""Term counts are int32, so a stream ends after ``2**31`` terms (position ``term_length << 31``)."""

_LONG_MAX = (1 << 63) - 1


# --- validation and sizes -----------------------------------------------------------------


def _is_power_of_two(value: int) -> bool:
    return value > 0 and (value & (value - 1)) == 0


def check_term_length(term_length: int, field: str = "term_length") -> None:
    """Reject a term length that is not a power of two in 64 KiB .. 1 GiB."""
    if not (TERM_MIN_LENGTH <= term_length <= TERM_MAX_LENGTH and _is_power_of_two(term_length)):
        raise DriverConfigurationError(
            field, term_length, f"a power of two from {TERM_MIN_LENGTH} to {TERM_MAX_LENGTH}"
        )


def check_page_size(page_size: int, field: str = "page_size") -> None:
    """Reject a file page size that is not a power of two in 4 KiB .. 1 GiB."""
    if not (PAGE_MIN_SIZE <= page_size <= PAGE_MAX_SIZE and _is_power_of_two(page_size)):
        raise DriverConfigurationError(field, page_size, f"a power of two from {PAGE_MIN_SIZE} to {PAGE_MAX_SIZE}")


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) & ~(alignment - 1)


def compute_log_length(term_length: int, page_size: int) -> int:
    """File length: three terms plus the metadata, page aligned (1.15.1's two-case formula)."""
    if term_length < 1024 * 1024 * 1024:
        return _align(term_length * PARTITION_COUNT + LOG_META_DATA_LENGTH, page_size)
    return PARTITION_COUNT * term_length + _align(LOG_META_DATA_LENGTH, page_size)


def compute_max_message_length(term_length: int) -> int:
    """A message may take at most an eighth of a term (never more than 16 MiB)."""
    return min(term_length // 8, 16 * 1024 * 1024)


def position_bits_to_shift(term_length: int) -> int:
    """log2 of a valid term length; a position's term count is ``position >> bits``."""
    if not (TERM_MIN_LENGTH <= term_length <= TERM_MAX_LENGTH and _is_power_of_two(term_length)):
        raise ValueError(f"invalid term buffer length: {term_length}")
    return term_length.bit_length() - 1


def max_possible_position(term_length: int) -> int:
    return term_length * MAX_POSITION_EXCEEDED_TERM_COUNT


# --- positions ----------------------------------------------------------------------------


def compute_position(active_term_id: int, term_offset: int, bits: int, initial_term_id: int) -> int:
    """Stream position of ``term_offset`` in term ``active_term_id`` (term count wraps in int32)."""
    return (int32(active_term_id - initial_term_id) << bits) + term_offset


def compute_term_begin_position(active_term_id: int, bits: int, initial_term_id: int) -> int:
    return int32(active_term_id - initial_term_id) << bits


def compute_term_id_from_position(position: int, bits: int, initial_term_id: int) -> int:
    return int32(int32((position & 0xFFFF_FFFF_FFFF_FFFF) >> bits) + initial_term_id)


def compute_term_offset_from_position(position: int, bits: int) -> int:
    return position & ((1 << bits) - 1)


def index_by_term(initial_term_id: int, active_term_id: int) -> int:
    """Partition of a term id. Term counts are non-negative in valid use, where this equals Java's."""
    return int32(active_term_id - initial_term_id) % PARTITION_COUNT


def index_by_term_count(term_count: int) -> int:
    return term_count % PARTITION_COUNT


def index_by_position(position: int, bits: int) -> int:
    return ((position & 0xFFFF_FFFF_FFFF_FFFF) >> bits) % PARTITION_COUNT


def next_partition_index(current_index: int) -> int:
    return (current_index + 1) % PARTITION_COUNT


# --- raw tails ----------------------------------------------------------------------------


def pack_tail(term_id: int, term_offset: int) -> int:
    """Raw tail value (signed int64) for ``term_id`` and ``term_offset``."""
    return (int32(term_id) << 32) | (term_offset & 0xFFFF_FFFF)


def term_id(raw_tail: int) -> int:
    return int32(raw_tail >> 32)


def term_offset(raw_tail: int, term_length: int) -> int:
    """Tail offset clamped to the term length (fetch-adds may push it past the end)."""
    return min(raw_tail & 0xFFFF_FFFF, term_length)


def tail_counter_offset(partition_index: int) -> int:
    return TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index


def raw_tail(metadata: AtomicBuffer, partition_index: int) -> int:
    return metadata.get_long(TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index)


def set_raw_tail(metadata: AtomicBuffer, partition_index: int, value: int) -> None:
    metadata.put_long(TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index, int64(value))


def raw_tail_volatile(metadata: AtomicBuffer, partition_index: int | None = None) -> int:
    """Raw tail of a partition, or of the active partition when none is given."""
    if partition_index is None:
        partition_index = active_term_count(metadata) % PARTITION_COUNT
    return metadata.get_long_volatile(TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index)


def set_raw_tail_volatile(metadata: AtomicBuffer, partition_index: int, value: int) -> None:
    metadata.put_long_volatile(TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index, int64(value))


def cas_raw_tail(metadata: AtomicBuffer, partition_index: int, expected: int, update: int) -> bool:
    return metadata.compare_and_set_long(
        TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index, int64(expected), int64(update)
    )


def initialise_tail_with_term_id(metadata: AtomicBuffer, partition_index: int, term_id: int) -> None:
    metadata.put_long(TERM_TAIL_COUNTERS_OFFSET + _LONG * partition_index, pack_tail(term_id, 0))


def rotate_log(metadata: AtomicBuffer, term_count: int, term_id: int) -> bool:
    """Move the log to the next term; True if this caller advanced the active term count.

    The next partition is re-stamped with ``term_id + 1`` only if it still holds the
    term three behind (so a racing rotation or a late appender cannot be undone),
    then the active term count is CAS-ed from ``term_count``.
    """
    next_term_id = int32(term_id + 1)
    next_term_count = int32(term_count + 1)
    tail_index = TERM_TAIL_COUNTERS_OFFSET + _LONG * (next_term_count % PARTITION_COUNT)
    expected_term_id = int32(next_term_id - PARTITION_COUNT)
    new_tail = next_term_id << 32
    get_tail = metadata.get_long_volatile
    cas = metadata.compare_and_set_long
    while True:
        tail = get_tail(tail_index)
        if int32(tail >> 32) != expected_term_id:
            break
        if cas(tail_index, tail, new_tail):
            break
    return metadata.compare_and_set_int(LOG_ACTIVE_TERM_COUNT_OFFSET, int32(term_count), next_term_count)


# --- metadata fields ----------------------------------------------------------------------


def active_term_count(metadata: AtomicBuffer) -> int:
    return metadata.get_int_volatile(LOG_ACTIVE_TERM_COUNT_OFFSET)


def set_active_term_count(metadata: AtomicBuffer, term_count: int) -> None:
    metadata.put_int(LOG_ACTIVE_TERM_COUNT_OFFSET, int32(term_count))


def set_active_term_count_ordered(metadata: AtomicBuffer, term_count: int) -> None:
    metadata.put_int_ordered(LOG_ACTIVE_TERM_COUNT_OFFSET, int32(term_count))


def cas_active_term_count(metadata: AtomicBuffer, expected: int, update: int) -> bool:
    return metadata.compare_and_set_int(LOG_ACTIVE_TERM_COUNT_OFFSET, int32(expected), int32(update))


def is_connected(metadata: AtomicBuffer) -> bool:
    return metadata.get_int_volatile(LOG_IS_CONNECTED_OFFSET) == 1


def set_is_connected(metadata: AtomicBuffer, connected: bool) -> None:
    metadata.put_int_ordered(LOG_IS_CONNECTED_OFFSET, 1 if connected else 0)


def end_of_stream_position(metadata: AtomicBuffer) -> int:
    return metadata.get_long_volatile(LOG_END_OF_STREAM_POSITION_OFFSET)


def set_end_of_stream_position(metadata: AtomicBuffer, position: int) -> None:
    metadata.put_long_ordered(LOG_END_OF_STREAM_POSITION_OFFSET, position)


def initial_term_id(metadata: AtomicBuffer) -> int:
    return metadata.get_int(LOG_INITIAL_TERM_ID_OFFSET)


def set_initial_term_id(metadata: AtomicBuffer, value: int) -> None:
    metadata.put_int(LOG_INITIAL_TERM_ID_OFFSET, int32(value))


def mtu_length(metadata: AtomicBuffer) -> int:
    return metadata.get_int(LOG_MTU_LENGTH_OFFSET)


def set_mtu_length(metadata: AtomicBuffer, value: int) -> None:
    metadata.put_int(LOG_MTU_LENGTH_OFFSET, value)


def term_length(metadata: AtomicBuffer) -> int:
    return metadata.get_int(LOG_TERM_LENGTH_OFFSET)


def set_term_length(metadata: AtomicBuffer, value: int) -> None:
    metadata.put_int(LOG_TERM_LENGTH_OFFSET, value)


def page_size(metadata: AtomicBuffer) -> int:
    return metadata.get_int(LOG_PAGE_SIZE_OFFSET)


def set_page_size(metadata: AtomicBuffer, value: int) -> None:
    metadata.put_int(LOG_PAGE_SIZE_OFFSET, value)


def correlation_id(metadata: AtomicBuffer) -> int:
    return metadata.get_long(LOG_CORRELATION_ID_OFFSET)


def set_correlation_id(metadata: AtomicBuffer, value: int) -> None:
    metadata.put_long(LOG_CORRELATION_ID_OFFSET, value)


def store_default_frame_header(metadata: AtomicBuffer, default_header: bytes | bytearray | memoryview) -> None:
    if len(default_header) != HEADER_LENGTH:
        raise ValueError(f"default header length must be {HEADER_LENGTH}, got {len(default_header)}")
    metadata.put_int(LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET, HEADER_LENGTH)
    metadata.put_bytes(LOG_DEFAULT_FRAME_HEADER_OFFSET, default_header, 0, HEADER_LENGTH)


def default_frame_header(metadata: AtomicBuffer) -> bytes:
    return metadata.get_bytes(LOG_DEFAULT_FRAME_HEADER_OFFSET, HEADER_LENGTH)


def apply_default_header(metadata: AtomicBuffer, term: AtomicBuffer, frame_offset: int) -> None:
    """Copy the stored default header over the frame header at ``frame_offset``."""
    term.put_bytes(frame_offset, metadata.get_bytes(LOG_DEFAULT_FRAME_HEADER_OFFSET, HEADER_LENGTH))


def _store_common(
    metadata: AtomicBuffer,
    session_id: int,
    stream_id: int,
    initial_term_id: int,
    mtu_length: int,
    term_length: int,
    page_size: int,
    correlation_id: int,
) -> None:
    store_default_frame_header(metadata, create_default_header(session_id, stream_id, initial_term_id))
    metadata.put_int(LOG_INITIAL_TERM_ID_OFFSET, int32(initial_term_id))
    metadata.put_int(LOG_MTU_LENGTH_OFFSET, mtu_length)
    metadata.put_int(LOG_TERM_LENGTH_OFFSET, term_length)
    metadata.put_int(LOG_PAGE_SIZE_OFFSET, page_size)
    metadata.put_long(LOG_CORRELATION_ID_OFFSET, correlation_id)
    metadata.put_long_ordered(LOG_END_OF_STREAM_POSITION_OFFSET, _LONG_MAX)


def initialize_publication_metadata(
    metadata: AtomicBuffer,
    *,
    session_id: int,
    stream_id: int,
    initial_term_id: int,
    mtu_length: int,
    term_length: int,
    page_size: int,
    correlation_id: int,
    term_id: int | None = None,
    term_offset: int = 0,
) -> None:
    """Everything the driver writes into a new publication's metadata (1.15.1 initPublicationMetadata).

    With ``term_id`` given the log starts at ``(term_id, term_offset)`` (the
    init-term-id/term-id/term-offset URI parameters); otherwise at the initial term.
    """
    _store_common(metadata, session_id, stream_id, initial_term_id, mtu_length, term_length, page_size, correlation_id)
    if term_id is not None:
        term_count = int32(term_id - initial_term_id)
        active_index = term_count % PARTITION_COUNT
        set_raw_tail(metadata, active_index, pack_tail(term_id, term_offset))
        for i in range(1, PARTITION_COUNT):
            active_index = (active_index + 1) % PARTITION_COUNT
            initialise_tail_with_term_id(metadata, active_index, int32(term_id + i - PARTITION_COUNT))
        metadata.put_int(LOG_ACTIVE_TERM_COUNT_OFFSET, term_count)
    else:
        initialise_tail_with_term_id(metadata, 0, initial_term_id)
        for i in range(1, PARTITION_COUNT):
            initialise_tail_with_term_id(metadata, i, int32(initial_term_id + i - PARTITION_COUNT))
        metadata.put_int(LOG_ACTIVE_TERM_COUNT_OFFSET, 0)


def initialize_image_metadata(
    metadata: AtomicBuffer,
    *,
    session_id: int,
    stream_id: int,
    initial_term_id: int,
    mtu_length: int,
    term_length: int,
    page_size: int,
    correlation_id: int,
) -> None:
    """Metadata of a publication image log (1.15.1 newPublicationImageLog); tails stay unused."""
    _store_common(metadata, session_id, stream_id, initial_term_id, mtu_length, term_length, page_size, correlation_id)
