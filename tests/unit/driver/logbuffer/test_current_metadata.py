"""Today's extra log metadata fields: offsets as in aeron_logbuffer_metadata_t, round trip, 1.15.1 untouched."""

from __future__ import annotations

import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.current_metadata import (
    LOG_TYPE_EXCLUSIVE_PUBLICATION,
    LOG_TYPE_PUBLICATION_IMAGE,
    CurrentLogMetadata,
    read_current_metadata,
    write_current_metadata,
)

_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)


def _meta() -> AtomicBuffer:
    return AtomicBuffer(mmap.mmap(-1, lbd.LOG_META_DATA_LENGTH))


def test_offsets_are_the_c_struct_s() -> None:
    meta = _meta()
    write_current_metadata(
        meta,
        CurrentLogMetadata(
            log_type=LOG_TYPE_PUBLICATION_IMAGE,
            active_transport_count=3,
            publication_window_length=11,
            receiver_window_length=12,
            socket_sndbuf_length=13,
            os_default_socket_sndbuf_length=14,
            os_max_socket_sndbuf_length=15,
            socket_rcvbuf_length=16,
            os_default_socket_rcvbuf_length=17,
            os_max_socket_rcvbuf_length=18,
            max_resend=19,
            entity_tag=20,
            response_correlation_id=21,
            linger_timeout_ns=22,
            untethered_window_limit_timeout_ns=23,
            untethered_resting_timeout_ns=24,
            untethered_linger_timeout_ns=25,
            group=True,
            rejoin=True,
            sparse=True,
            tether=True,
        ),
    )
    # aeron-client/src/main/c/concurrent/aeron_logbuffer_descriptor.h, aeron_logbuffer_metadata_t
    assert meta.get_int(140) == 3
    assert [meta.get_int(284 + 4 * i) for i in range(9)] == list(range(11, 20))
    assert [meta.get_long(448 + 8 * i) for i in range(5)] == list(range(20, 25))
    assert [meta.get_ubyte(488 + i) for i in range(9)] == [1, 0, 1, 0, 1, 0, 0, 1, 0]
    assert meta.get_ubyte(497) == 2
    assert meta.get_long(500) == 25


def test_1_15_1_fields_are_left_alone() -> None:
    meta = _meta()
    lbd.initialize_publication_metadata(
        meta,
        session_id=7,
        stream_id=9,
        initial_term_id=-5,
        mtu_length=1408,
        term_length=64 * 1024,
        page_size=4096,
        correlation_id=99,
    )
    before = meta.get_bytes(0, lbd.LOG_META_DATA_LENGTH)
    write_current_metadata(meta, CurrentLogMetadata(log_type=LOG_TYPE_EXCLUSIVE_PUBLICATION, max_resend=16))
    after = meta.get_bytes(0, lbd.LOG_META_DATA_LENGTH)
    for offset, width in (
        (0, 28),
        (lbd.LOG_END_OF_STREAM_POSITION_OFFSET, 12),
        (lbd.LOG_CORRELATION_ID_OFFSET, 28),
        (lbd.LOG_DEFAULT_FRAME_HEADER_OFFSET, 32),
    ):
        assert after[offset : offset + width] == before[offset : offset + width]


def test_log_type_is_checked() -> None:
    with pytest.raises(ValueError, match="log type"):
        write_current_metadata(_meta(), CurrentLogMetadata(log_type=3))


@given(
    log_type=st.sampled_from([0, 1, 2]),
    ints=st.lists(_I32, min_size=10, max_size=10),
    longs=st.lists(_I64, min_size=6, max_size=6),
    flags=st.lists(st.booleans(), min_size=9, max_size=9),
)
def test_round_trip(log_type: int, ints: list[int], longs: list[int], flags: list[bool]) -> None:
    names = [f for f in CurrentLogMetadata.__dataclass_fields__ if f != "log_type"]
    values = CurrentLogMetadata(log_type, *ints, *longs, *flags)  # type: ignore[arg-type]
    assert len(names) == 25
    meta = _meta()
    write_current_metadata(meta, values)
    assert read_current_metadata(meta) == values
