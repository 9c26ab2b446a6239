"""Datagram validation: classify (common header) and the DATA/PAD packet checks of today's C driver."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.errors import MalformedFrameError
from driver.wire import (
    HDR_TYPE_DATA,
    HDR_TYPE_ERR,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_RES,
    HDR_TYPE_RTTM,
    HDR_TYPE_SETUP,
    HDR_TYPE_SM,
    DataFrame,
    DataHeader,
    ErrorFrame,
    Nak,
    RttMeasurement,
    SetupFrame,
    StatusMessage,
    classify,
    validate_data_datagram,
    write_heartbeat,
)

TERM = 64 * 1024


def datagram(*frames: bytes) -> memoryview:
    return memoryview(b"".join(frames))


def data(term_offset: int, payload_length: int, flags: int = 0xC0) -> bytes:
    """One DATA frame padded to 32 bytes, as it sits in a term and goes on the wire."""
    payload = bytes(i & 0xFF for i in range(payload_length))
    return DataFrame.data(payload, term_offset, 1, 2, 3, flags).encode(aligned=True)


def pad(term_offset: int, length: int) -> bytes:
    return DataHeader(length, term_offset, 1, 2, 3, 0xC0, HDR_TYPE_PAD).encode()


def heartbeat(term_offset: int = 0) -> bytes:
    buf = bytearray(32)
    write_heartbeat(buf, 0, 1, 2, 3, term_offset)
    return bytes(buf)


# ------------------------------------------------------------------------------------------ classify


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (data(0, 10), HDR_TYPE_DATA),
        (pad(0, 4096), HDR_TYPE_PAD),
        (heartbeat(), HDR_TYPE_DATA),
        (SetupFrame(0, 1, 2, 3, 3, TERM, 1408).encode(), HDR_TYPE_SETUP),
        (StatusMessage(1, 2, 3, 4, 5, 6).encode(), HDR_TYPE_SM),
        (StatusMessage(1, 2, 3, 4, 5, 6, group_tag=7).encode(), HDR_TYPE_SM),
        (Nak(1, 2, 3, 4, 5).encode(), HDR_TYPE_NAK),
        (RttMeasurement(1, 2, 3, 4, 5).encode(), HDR_TYPE_RTTM),
        (ErrorFrame(1, 2, 3, 4, "no").encode(), HDR_TYPE_ERR),
        (struct.pack("<iBBH", 8, 0, 0, HDR_TYPE_RES), HDR_TYPE_RES),  # unknown to 1.15: passed on to be ignored
        (Nak(1, 2, 3, 4, 5).encode() + bytes(5), HDR_TYPE_NAK),  # trailing bytes after a control frame
    ],
)
def test_classify_valid(raw: bytes, expected: int) -> None:
    assert classify(memoryview(raw), len(raw)) == expected
    assert classify(bytearray(raw) + bytearray(100), len(raw)) == expected  # receive buffer larger than datagram


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "shorter than a frame header"),
        (bytes(7), "shorter than a frame header"),
        (struct.pack("<iBBH", 28, 1, 0, 2) + bytes(20), "version"),
        (struct.pack("<iBBH", -1, 0, 0, 2) + bytes(20), "negative"),
        (data(0, 10)[:40], "multiple of 32"),
        (data(0, 10) + bytes(8), "multiple of 32"),
        (struct.pack("<iBBH", 0, 0, 0, 1) + bytes(8), "multiple of 32"),
        (Nak(1, 2, 3, 4, 5).encode()[:27], "at least 28"),
        (struct.pack("<iBBH", 20, 0, 0, 2) + bytes(20), "at least 28"),
        (struct.pack("<iBBH", 36, 0, 0, 2) + bytes(20), "exceeds"),
        (StatusMessage(1, 2, 3, 4, 5, 6).encode()[:35], "at least 36"),
        (SetupFrame(0, 1, 2, 3, 3, TERM, 1408).encode()[:39], "at least 40"),
        (RttMeasurement(1, 2, 3, 4, 5).encode()[:39], "at least 40"),
        (ErrorFrame(1, 2, 3, 4, "no").encode()[:41], "exceeds"),
    ],
)
def test_classify_invalid(raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedFrameError, match=reason):
        classify(memoryview(raw), len(raw))


def test_length_beyond_buffer_is_malformed() -> None:
    with pytest.raises(MalformedFrameError):
        classify(memoryview(bytes(4)), 40)
    raw = data(0, 10)
    with pytest.raises(MalformedFrameError, match="larger than its buffer"):
        validate_data_datagram(memoryview(raw), len(raw) + 64, TERM)


# ------------------------------------------------------------------------------------------ DATA datagrams


@pytest.mark.parametrize(
    ("raw", "covers"),
    [
        (heartbeat(96), 0),
        (data(0, 0), 32),
        (data(0, 10), 64),
        (data(64, 1) + data(128, 32) + data(192, 100), 64 + 64 + 160),
        (data(TERM - 64, 32), 64),  # ends exactly at the term end
        (pad(TERM - 4096, 4096), 4096),  # header-only PAD at the term end
        (data(0, 10) + pad(64, TERM - 64), TERM),  # batch ended by a header-only PAD
        (pad(0, 32) + data(32, 5), 96),  # PAD of exactly one header, then data
        (data(0, 10, 0x80) + data(64, 10, 0x00) + data(128, 10, 0x40), 192),  # fragments
    ],
)
def test_valid_data_datagrams(raw: bytes, covers: int) -> None:
    assert validate_data_datagram(memoryview(raw), len(raw), TERM) == covers


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (data(16, 10), "32-aligned inside"),
        (data(TERM, 10), "32-aligned inside"),
        (pad(-32, 64), "32-aligned inside"),
        (data(TERM - 32, 10), "crosses the end"),
        (pad(TERM - 32, 64), "crosses the end"),
        (data(0, 10) + data(96, 10), "term_offset 96 is not 64"),
        (data(0, 10) + struct.pack("<iBBH", 32, 0, 0, HDR_TYPE_NAK) + bytes(24), "not DATA or PAD"),
        (data(0, 100)[:64], "only a trailing PAD"),  # incomplete DATA frame
        (data(0, 10) + data(64, 40)[:32], "only a trailing PAD"),  # second DATA frame cut short
        (data(0, 10) + bytes(32), "shorter than a header"),  # zero frame after data
        (struct.pack("<iBBHiiiiq", 16, 0, 0xC0, 1, 0, 1, 2, 3, 0), "shorter than a header"),
        (struct.pack("<iBBHiiiiq", 0, 0, 0xC0, 0, 0, 1, 2, 3, 0), "heartbeat of type 0"),
        (data(0, 0) + struct.pack("<iBBHiiiiq", 32, 1, 0xC0, 1, 32, 1, 2, 3, 0), "version"),
        (data(0, 10)[:48], "multiple of 32"),
        (b"", "multiple of 32"),
    ],
)
def test_invalid_data_datagrams(raw: bytes, reason: str) -> None:
    with pytest.raises(MalformedFrameError, match=reason):
        validate_data_datagram(memoryview(raw), len(raw), TERM)


def test_bytes_inside_a_pad_are_skipped() -> None:
    raw = pad(0, 64) + bytes(32) + data(64, 0)  # the PAD covers its own header and the next 32 bytes
    assert validate_data_datagram(memoryview(raw), len(raw), TERM) == 96


def test_bytes_after_a_long_pad_are_ignored_as_the_c_driver_does() -> None:
    raw = pad(0, 4096) + data(4096, 0)  # the PAD's length ends the walk; what follows lies inside it
    assert validate_data_datagram(memoryview(raw), len(raw), TERM) == 4096


# ------------------------------------------------------------------------------------------ fuzz


@given(st.binary(max_size=300), st.integers(0, 320))
def test_fuzz_arbitrary_bytes_only_raise_malformed(raw: bytes, length: int) -> None:
    for call in (lambda: classify(memoryview(raw), length), lambda: validate_data_datagram(raw, length, TERM)):
        try:
            call()
        except MalformedFrameError:
            pass


valid_datagrams = st.sampled_from(
    [
        heartbeat(64),
        data(0, 10) + data(64, 100) + pad(224, 1024),
        data(TERM - 96, 64),
        SetupFrame(0, 1, 2, 3, 3, TERM, 1408).encode(),
        StatusMessage(1, 2, 3, 4, 5, 6, group_tag=7).encode(),
        Nak(1, 2, 3, 4, 5).encode(),
        RttMeasurement(1, 2, 3, 4, 5).encode(),
        ErrorFrame(1, 2, 3, 4, "no").encode(),
    ]
)


@given(valid_datagrams, st.data())
def test_fuzz_mutated_datagrams_only_raise_malformed(raw: bytes, draw: st.DataObject) -> None:
    mutated = bytearray(raw)
    for _ in range(draw.draw(st.integers(1, 6))):
        mutated[draw.draw(st.integers(0, len(mutated) - 1))] = draw.draw(st.integers(0, 255))
    cut = draw.draw(st.integers(0, len(mutated) + 8))
    view = memoryview(bytes(mutated[:cut]))
    try:
        frame_type = classify(view, len(view))
    except MalformedFrameError:
        return
    if frame_type in (HDR_TYPE_DATA, HDR_TYPE_PAD):
        try:
            covers = validate_data_datagram(view, len(view), TERM)
        except MalformedFrameError:
            return
        assert covers == 0 or covers >= len(view)


@given(st.lists(st.integers(0, 200), min_size=1, max_size=20), st.integers(0, 100), st.booleans())
def test_any_batch_of_aligned_frames_is_valid(payloads: list[int], start: int, end_with_pad: bool) -> None:
    offset = start * 32
    frames = []
    for length in payloads:
        frames.append(data(offset, length))
        offset += len(frames[-1])
    if end_with_pad and offset < TERM:
        frames.append(pad(offset, TERM - offset))
    raw = b"".join(frames)
    if offset > TERM:
        with pytest.raises(MalformedFrameError):
            validate_data_datagram(raw, len(raw), TERM)
        return
    expected = TERM - start * 32 if end_with_pad and offset < TERM else offset - start * 32
    assert validate_data_datagram(raw, len(raw), TERM) == expected
