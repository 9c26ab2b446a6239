"""Today's extra log-buffer metadata fields (``aeron_logbuffer_metadata_t`` after 1.15.1).

Theory of operation
-------------------
Today's drivers fill, besides 1.15.1's fields, the settings a log was created
with: windows, socket buffer sizes (asked for, and the OS default and maximum),
max resend, entity tag, response correlation id, linger and untethered
timeouts, a row of one-byte flags and the log type. They all sit at offsets
1.15.1 leaves unused (``HEAD_LOG_*`` in :mod:`driver.logbuffer.descriptor`), so
writing them never disturbs a 1.15.1 reader; the driver writes them only when
it speaks the current generation, as the C driver's
``aeron_logbuffer_metadata_init`` does. Sans-IO: the caller supplies every value.
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import descriptor as lbd

__all__ = [
    "LOG_TYPE_CONCURRENT_PUBLICATION",
    "LOG_TYPE_EXCLUSIVE_PUBLICATION",
    "LOG_TYPE_PUBLICATION_IMAGE",
    "NULL_VALUE",
    "CurrentLogMetadata",
    "read_current_metadata",
    "write_current_metadata",
]

LOG_TYPE_CONCURRENT_PUBLICATION = 0
LOG_TYPE_EXCLUSIVE_PUBLICATION = 1
LOG_TYPE_PUBLICATION_IMAGE = 2
NULL_VALUE = -1

_INTS = (
    ("active_transport_count", lbd.HEAD_LOG_ACTIVE_TRANSPORT_COUNT_OFFSET),
    ("publication_window_length", lbd.HEAD_LOG_PUBLICATION_WINDOW_LENGTH_OFFSET),
    ("receiver_window_length", lbd.HEAD_LOG_RECEIVER_WINDOW_LENGTH_OFFSET),
    ("socket_sndbuf_length", lbd.HEAD_LOG_SOCKET_SNDBUF_LENGTH_OFFSET),
    ("os_default_socket_sndbuf_length", lbd.HEAD_LOG_OS_DEFAULT_SOCKET_SNDBUF_LENGTH_OFFSET),
    ("os_max_socket_sndbuf_length", lbd.HEAD_LOG_OS_MAX_SOCKET_SNDBUF_LENGTH_OFFSET),
    ("socket_rcvbuf_length", lbd.HEAD_LOG_SOCKET_RCVBUF_LENGTH_OFFSET),
    ("os_default_socket_rcvbuf_length", lbd.HEAD_LOG_OS_DEFAULT_SOCKET_RCVBUF_LENGTH_OFFSET),
    ("os_max_socket_rcvbuf_length", lbd.HEAD_LOG_OS_MAX_SOCKET_RCVBUF_LENGTH_OFFSET),
    ("max_resend", lbd.HEAD_LOG_MAX_RESEND_OFFSET),
)
_LONGS = (
    ("entity_tag", lbd.HEAD_LOG_ENTITY_TAG_OFFSET),
    ("response_correlation_id", lbd.HEAD_LOG_RESPONSE_CORRELATION_ID_OFFSET),
    ("linger_timeout_ns", lbd.HEAD_LOG_LINGER_TIMEOUT_NS_OFFSET),
    ("untethered_window_limit_timeout_ns", lbd.HEAD_LOG_UNTETHERED_WINDOW_LIMIT_TIMEOUT_NS_OFFSET),
    ("untethered_resting_timeout_ns", lbd.HEAD_LOG_UNTETHERED_RESTING_TIMEOUT_NS_OFFSET),
    ("untethered_linger_timeout_ns", lbd.HEAD_LOG_UNTETHERED_LINGER_TIMEOUT_NS_OFFSET),
)
_FLAGS = (
    ("group", lbd.HEAD_LOG_GROUP_OFFSET),
    ("is_response", lbd.HEAD_LOG_IS_RESPONSE_OFFSET),
    ("rejoin", lbd.HEAD_LOG_REJOIN_OFFSET),
    ("reliable", lbd.HEAD_LOG_RELIABLE_OFFSET),
    ("sparse", lbd.HEAD_LOG_SPARSE_OFFSET),
    ("signal_eos", lbd.HEAD_LOG_SIGNAL_EOS_OFFSET),
    ("spies_simulate_connection", lbd.HEAD_LOG_SPIES_SIMULATE_CONNECTION_OFFSET),
    ("tether", lbd.HEAD_LOG_TETHER_OFFSET),
    ("is_publication_revoked", lbd.HEAD_LOG_IS_PUBLICATION_REVOKED_OFFSET),
)


@dataclass(frozen=True, slots=True)
class CurrentLogMetadata:
    """The values; defaults are what the C driver writes for a field that does not apply."""

    log_type: int
    active_transport_count: int = 0
    publication_window_length: int = 0
    receiver_window_length: int = 0
    socket_sndbuf_length: int = 0
    os_default_socket_sndbuf_length: int = 0
    os_max_socket_sndbuf_length: int = 0
    socket_rcvbuf_length: int = 0
    os_default_socket_rcvbuf_length: int = 0
    os_max_socket_rcvbuf_length: int = 0
    max_resend: int = 0
    entity_tag: int = 0
    response_correlation_id: int = 0
    linger_timeout_ns: int = 0
    untethered_window_limit_timeout_ns: int = 0
    untethered_resting_timeout_ns: int = 0
    untethered_linger_timeout_ns: int = NULL_VALUE
    group: bool = False
    is_response: bool = False
    rejoin: bool = False
    reliable: bool = False
    sparse: bool = False
    signal_eos: bool = False
    spies_simulate_connection: bool = False
    tether: bool = False
    is_publication_revoked: bool = False


def write_current_metadata(metadata: AtomicBuffer, values: CurrentLogMetadata) -> None:
    """Write today's fields; the 1.15.1 fields are left as they are."""
    if values.log_type not in (
        LOG_TYPE_CONCURRENT_PUBLICATION,
        LOG_TYPE_EXCLUSIVE_PUBLICATION,
        LOG_TYPE_PUBLICATION_IMAGE,
    ):
        raise ValueError(f"log type must be 0, 1 or 2: {values.log_type}")
    for name, offset in _INTS:
        metadata.put_int(offset, lbd.int32(getattr(values, name)))
    for name, offset in _LONGS:
        metadata.put_long(offset, getattr(values, name))
    for name, offset in _FLAGS:
        metadata.put_byte(offset, 1 if getattr(values, name) else 0)
    metadata.put_byte(lbd.HEAD_LOG_TYPE_OFFSET, values.log_type)


def read_current_metadata(metadata: AtomicBuffer) -> CurrentLogMetadata:
    """Read today's fields back (tools and tests)."""
    fields: dict[str, int | bool] = {name: metadata.get_int(offset) for name, offset in _INTS}
    fields.update({name: metadata.get_long(offset) for name, offset in _LONGS})
    fields.update({name: metadata.get_ubyte(offset) != 0 for name, offset in _FLAGS})
    return CurrentLogMetadata(log_type=metadata.get_ubyte(lbd.HEAD_LOG_TYPE_OFFSET), **fields)  # type: ignore[arg-type]
