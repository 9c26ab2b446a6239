"""Frame codecs: exact byte layouts (Aeron 1.15.1 / today's flyweights), round trips, fast writers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.errors import MalformedFrameError
from driver.wire import (
    DataFrame,
    DataHeader,
    ErrorFrame,
    FrameHeader,
    Nak,
    RttMeasurement,
    SetupFrame,
    StatusMessage,
    check_setup,
    is_heartbeat,
    read_sm_group_tag,
    unpack_data_header,
    unpack_data_routing,
    unpack_frame_header,
    unpack_nak,
    unpack_rttm,
    unpack_setup,
    unpack_sm,
    write_data_header,
    write_error,
    write_heartbeat,
    write_nak,
    write_rttm,
    write_setup,
    write_sm,
    write_sm_with_group_tag,
)
from driver.wire.data import HEARTBEAT_EOS_FLAGS
from driver.wire.error import HAS_GROUP_TAG_FLAG
from driver.wire.rttm import REPLY_FLAG
from driver.wire.status import END_OF_STREAM_FLAG, SEND_SETUP_FLAG

i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u8 = st.integers(0, 255)


def _i32(raw: bytes, offset: int) -> int:
    return int(struct.unpack_from("<i", raw, offset)[0])


def _i64(raw: bytes, offset: int) -> int:
    return int(struct.unpack_from("<q", raw, offset)[0])


def _common(raw: bytes) -> tuple[int, int, int, int]:
    return _i32(raw, 0), raw[4], raw[5], int(struct.unpack_from("<H", raw, 6)[0])


# ------------------------------------------------------------------------------------------ exact layouts


def test_setup_layout_matches_reference_offsets() -> None:
    raw = SetupFrame(0x100, 11, 22, 33, 44, 1 << 16, 1408, 7).encode()
    assert len(raw) == 40
    assert _common(raw) == (40, 0, 0, 0x05)
    assert [_i32(raw, o) for o in range(8, 40, 4)] == [0x100, 11, 22, 33, 44, 1 << 16, 1408, 7]


def test_sm_layout_matches_reference_offsets() -> None:
    raw = StatusMessage(1, 2, 3, 4, 5, 0x0102030405060708, SEND_SETUP_FLAG).encode()
    assert len(raw) == 36
    assert _common(raw) == (36, 0, 0x80, 0x03)
    assert [_i32(raw, o) for o in (8, 12, 16, 20, 24)] == [1, 2, 3, 4, 5]
    assert _i64(raw, 28) == 0x0102030405060708  # unaligned receiver id


def test_sm_with_group_tag_is_44_bytes() -> None:
    raw = StatusMessage(1, 2, 3, 4, 5, 6, END_OF_STREAM_FLAG, group_tag=-99).encode()
    assert len(raw) == 44
    assert _common(raw) == (44, 0, 0x40, 0x03)
    assert _i64(raw, 36) == -99


def test_nak_layout_matches_reference_offsets() -> None:
    raw = Nak(1, 2, 3, 4, 5).encode()
    assert len(raw) == 28
    assert _common(raw) == (28, 0, 0, 0x02)
    assert [_i32(raw, o) for o in range(8, 28, 4)] == [1, 2, 3, 4, 5]


def test_rttm_layout_matches_reference_offsets() -> None:
    raw = RttMeasurement(1, 2, 3, 4, 5, REPLY_FLAG).encode()
    assert len(raw) == 40
    assert _common(raw) == (40, 0, 0x80, 0x06)
    assert [_i32(raw, 8), _i32(raw, 12), _i64(raw, 16), _i64(raw, 24), _i64(raw, 32)] == [1, 2, 3, 4, 5]


def test_error_layout_matches_todays_flyweight() -> None:
    raw = ErrorFrame(1, 2, 3, 13, "rejected", group_tag=9).encode()
    assert len(raw) == 40 + len("rejected")
    assert _common(raw) == (48, 0, HAS_GROUP_TAG_FLAG, 0x04)
    assert [_i32(raw, 8), _i32(raw, 12), _i64(raw, 16), _i64(raw, 24), _i32(raw, 32), _i32(raw, 36)] == [
        1,
        2,
        3,
        9,
        13,
        8,
    ]
    assert raw[40:] == b"rejected"
    untagged = ErrorFrame(1, 2, 3, 13, "x").encode()
    assert untagged[5] == 0
    assert _i64(untagged, 24) == 0


def test_data_header_layout_matches_reference_offsets() -> None:
    raw = DataFrame.data(b"hello", 64, 1, 2, 3, reserved_value=-5).encode()
    assert len(raw) == 37
    assert _common(raw) == (37, 0, 0xC0, 0x01)
    assert [_i32(raw, o) for o in (8, 12, 16, 20)] == [64, 1, 2, 3]
    assert _i64(raw, 24) == -5
    assert raw[32:] == b"hello"
    assert len(DataFrame.data(b"hello", 64, 1, 2, 3).encode(aligned=True)) == 64


def test_heartbeat_layout() -> None:
    buf = bytearray(64)
    assert write_heartbeat(buf, 16, 7, 8, 9, 1024, HEARTBEAT_EOS_FLAGS) == 32
    raw = bytes(buf[16:48])
    assert _common(raw) == (0, 0, 0xE0, 0x01)
    assert [_i32(raw, o) for o in (8, 12, 16, 20)] == [1024, 7, 8, 9]
    assert _i64(raw, 24) == 0
    assert is_heartbeat(raw, 32)
    assert not is_heartbeat(raw + bytes(32), 64)
    header = DataHeader.decode(raw)
    assert header.is_heartbeat
    assert header.is_end_of_stream
    assert header == DataHeader.heartbeat(7, 8, 9, 1024, eos=True)
    assert DataFrame.decode(raw).payload == b""


def test_frame_header_codec() -> None:
    raw = FrameHeader(28, 0, 2).encode()
    assert raw == struct.pack("<iBBH", 28, 0, 0, 2)
    assert FrameHeader.decode(raw) == FrameHeader(28, 0, 2)
    assert unpack_frame_header(raw) == (28, 0, 0, 2)
    with pytest.raises(MalformedFrameError):
        FrameHeader.decode(raw[:7])
    with pytest.raises(MalformedFrameError):
        FrameHeader.decode(struct.pack("<iBBH", 28, 1, 0, 2))


# ------------------------------------------------------------------------------------------ round trips


frames = st.one_of(
    st.builds(SetupFrame, i32, i32, i32, i32, i32, i32, i32, i32, u8),
    st.builds(StatusMessage, i32, i32, i32, i32, i32, i64, u8, st.none() | i64),
    st.builds(Nak, i32, i32, i32, i32, i32, u8),
    st.builds(RttMeasurement, i32, i32, i64, i64, i64, u8),
    st.builds(
        ErrorFrame,
        i32,
        i32,
        i64,
        i32,
        st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=1023),
        st.none() | i64,
        u8.map(lambda f: f & ~HAS_GROUP_TAG_FLAG),
    ),
)


@given(frames, st.binary(max_size=40), st.binary(max_size=40))
def test_round_trip_whole_with_prefix_and_trailing_bytes(frame: object, prefix: bytes, trailing: bytes) -> None:
    cls = type(frame)
    raw = frame.encode()  # type: ignore[attr-defined]
    assert cls.decode(raw) == frame  # type: ignore[attr-defined]
    # at an offset inside a larger buffer, with bytes after the frame
    assert cls.decode(prefix + raw + trailing, len(prefix)) == frame  # type: ignore[attr-defined]
    assert cls.decode(prefix + raw + trailing, len(prefix), len(raw)) == frame  # type: ignore[attr-defined]


@given(frames, st.data())
def test_truncated_frames_are_malformed(frame: object, data: st.DataObject) -> None:
    raw = frame.encode()  # type: ignore[attr-defined]
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(MalformedFrameError):
        type(frame).decode(raw[:cut])  # type: ignore[attr-defined]
    with pytest.raises(MalformedFrameError):
        type(frame).decode(raw, 0, cut)  # type: ignore[attr-defined]


@given(
    st.binary(max_size=200),
    i32,
    i32,
    i32,
    i32,
    st.sampled_from([0x80, 0x40, 0xC0, 0x00, 0xE0]),
    i64,
)
def test_data_frame_round_trip(
    payload: bytes, offset: int, session: int, stream: int, term: int, flags: int, reserved: int
) -> None:
    frame = DataFrame.data(payload, offset, session, stream, term, flags, reserved)
    raw = frame.encode()
    assert DataFrame.decode(raw) == frame
    assert DataFrame.decode(raw + b"\x00" * 31) == frame
    assert DataFrame.decode(frame.encode(aligned=True)) == frame
    assert unpack_data_header(raw) == (32 + len(payload), 0, flags, 1, offset, session, stream, term, reserved)
    assert unpack_data_routing(b"xx" + raw, 2) == (offset, session, stream, term)
    if payload:
        with pytest.raises(MalformedFrameError):
            DataFrame.decode(raw[:-1])


def test_pad_frame_is_header_only() -> None:
    header = DataHeader(4096, 0, 1, 2, 3, 0xC0, 0)
    raw = header.encode()
    frame = DataFrame.decode(raw)  # frame_length 4096 but only 32 bytes sent
    assert frame.header.is_padding
    assert frame.payload == b""
    with pytest.raises(ValueError, match="no payload"):
        DataFrame(header, b"x")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ((16, 0, 0, 1), "neither 0 nor"),
        ((-32, 0, 0, 1), "neither 0 nor"),
        ((32, 1, 0, 1), "version"),
        ((32, 0, 0, 3), "not DATA or PAD"),
    ],
)
def test_bad_data_headers(fields: tuple[int, int, int, int], reason: str) -> None:
    raw = struct.pack("<iBBH", *fields) + bytes(24)
    with pytest.raises(MalformedFrameError, match=reason):
        DataHeader.decode(raw)


@pytest.mark.parametrize(
    ("cls", "raw"),
    [
        (Nak, struct.pack("<iBBH", 28, 0, 0, 3) + bytes(20)),  # an SM type in a NAK
        (Nak, struct.pack("<iBBH", 28, 2, 0, 2) + bytes(20)),  # version 2
        (Nak, struct.pack("<iBBH", 20, 0, 0, 2) + bytes(20)),  # frame_length too short
        (Nak, struct.pack("<iBBH", 60, 0, 0, 2) + bytes(20)),  # frame_length beyond the bytes
        (StatusMessage, struct.pack("<iBBH", 52, 0, 0, 3) + bytes(44)),  # longer than with a gtag
        (ErrorFrame, struct.pack("<iBBHiiqqii", 41, 0, 0, 4, 0, 0, 0, 0, 0, 2) + b"ab"),  # text beyond frame
        (ErrorFrame, struct.pack("<iBBHiiqqii", 40, 0, 0, 4, 0, 0, 0, 0, 0, -1)),  # negative text length
        (ErrorFrame, struct.pack("<iBBHiiqqii", 41, 0, 0, 4, 0, 0, 0, 0, 0, 1) + b"\xff"),  # not ASCII
    ],
)
def test_bad_control_frames(cls: type, raw: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        cls.decode(raw)


def test_sm_tolerates_1_15_application_feedback_lengths() -> None:
    raw = struct.pack("<iBBHiiiiiq", 40, 0, 0, 3, 1, 2, 3, 4, 5, 6) + bytes(4)
    assert StatusMessage.decode(raw) == StatusMessage(1, 2, 3, 4, 5, 6)


def test_decode_rejects_bad_offsets() -> None:
    raw = Nak(1, 2, 3, 4, 5).encode()
    for offset, length in ((-1, None), (0, 29), (1, 28), (29, None)):
        with pytest.raises(MalformedFrameError):
            Nak.decode(raw, offset, length)


def test_constructors_validate_ranges() -> None:
    with pytest.raises(ValueError, match="int32"):
        Nak(1 << 31, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="uint8"):
        Nak(0, 0, 0, 0, 0, flags=256)
    with pytest.raises(TypeError):
        Nak(True, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="ASCII"):
        ErrorFrame(0, 0, 0, 0, "é")
    with pytest.raises(ValueError, match="1023"):
        ErrorFrame(0, 0, 0, 0, "x" * 1024)
    with pytest.raises(ValueError, match="frame_length"):
        DataFrame(DataHeader(40, 0, 0, 0, 0), b"x")


# ------------------------------------------------------------------------------------------ fast writers


@given(i32, i32, i32, i32, i32, i64, u8, st.integers(0, 64))
def test_write_sm_matches_codec(
    session: int, stream: int, term: int, offset: int, window: int, rid: int, flags: int, at: int
) -> None:
    buf = bytearray(at + 44)
    assert write_sm(buf, at, session, stream, term, offset, window, rid, flags) == 36
    expected = StatusMessage(session, stream, term, offset, window, rid, flags)
    assert bytes(buf[at : at + 36]) == expected.encode()
    assert unpack_sm(buf, at) == (36, 0, flags, 3, session, stream, term, offset, window, rid)
    assert read_sm_group_tag(buf, at, 36) is None
    assert write_sm_with_group_tag(buf, at, session, stream, term, offset, window, rid, -rid - 1, flags) == 44
    assert StatusMessage.decode(buf, at) == attrs_evolve(expected, group_tag=-rid - 1)
    assert read_sm_group_tag(buf, at, 44) == -rid - 1


def attrs_evolve(frame: StatusMessage, **changes: object) -> StatusMessage:
    import attrs

    return attrs.evolve(frame, **changes)


@given(i32, i32, i32, i32, i32, st.integers(0, 64))
def test_write_nak_matches_codec(session: int, stream: int, term: int, offset: int, length: int, at: int) -> None:
    buf = memoryview(bytearray(at + 28))
    assert write_nak(buf, at, session, stream, term, offset, length) == 28
    assert bytes(buf[at:]) == Nak(session, stream, term, offset, length).encode()
    assert unpack_nak(buf, at)[4:] == (session, stream, term, offset, length)


@given(st.lists(i32, min_size=8, max_size=8), st.integers(0, 64))
def test_write_setup_matches_codec(fields: list[int], at: int) -> None:
    buf = bytearray(at + 40)
    assert write_setup(buf, at, *fields) == 40
    assert bytes(buf[at:]) == SetupFrame(*fields).encode()
    assert list(unpack_setup(buf, at)[4:]) == fields


@given(i32, i32, i64, i64, i64, st.sampled_from([0, REPLY_FLAG]))
def test_write_rttm_matches_codec(session: int, stream: int, echo: int, delta: int, rid: int, flags: int) -> None:
    buf = bytearray(40)
    assert write_rttm(buf, 0, session, stream, echo, delta, rid, flags) == 40
    assert bytes(buf) == RttMeasurement(session, stream, echo, delta, rid, flags).encode()
    assert unpack_rttm(buf)[4:] == (session, stream, echo, delta, rid)


@given(i32, i32, i64, st.none() | i64, i32, st.binary(max_size=1100).map(lambda b: bytes(c & 0x7F for c in b)))
def test_write_error_matches_codec(
    session: int, stream: int, rid: int, tag: int | None, code: int, text: bytes
) -> None:
    buf = bytearray(40 + 1023 + 8)
    length = write_error(buf, 8, session, stream, rid, tag, code, text)
    assert length == 40 + min(len(text), 1023)
    frame = ErrorFrame(session, stream, rid, code, text[:1023].decode("ascii"), tag)
    assert bytes(buf[8 : 8 + length]) == frame.encode()
    assert ErrorFrame.decode(buf, 8) == frame


def test_write_data_header_into_mmap() -> None:
    import mmap

    with mmap.mmap(-1, 4096) as region:
        assert write_data_header(region, 64, 100, 0x80, 1, 64, 5, 6, 7, 8) == 32
        assert unpack_data_header(region, 64) == (100, 0, 0x80, 1, 64, 5, 6, 7, 8)


def test_check_setup() -> None:
    check_setup(0, 1 << 16, 1408)
    check_setup((1 << 16) - 32, 1 << 16, 65504)
    for term_offset, term_length, mtu in (
        (0, (1 << 16) + 32, 1408),  # not a power of two
        (0, 1 << 15, 1408),  # too small
        (0, 1 << 31, 1408),  # too large
        (16, 1 << 16, 1408),  # misaligned offset
        (1 << 16, 1 << 16, 1408),  # offset at the end
        (-32, 1 << 16, 1408),
        (0, 1 << 16, 1400),  # mtu not aligned
        (0, 1 << 16, 0),
        (0, 1 << 16, 65536),
    ):
        with pytest.raises(MalformedFrameError):
            check_setup(term_offset, term_length, mtu)
