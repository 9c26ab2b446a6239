from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import insert_packet
from driver.logbuffer.frame import HDR_TYPE_DATA, HDR_TYPE_PAD, UNFRAGMENTED
from driver.logbuffer.rebuilder import insert

TL = 64 * 1024
HDR = struct.Struct("<iBBHiiiiq")
SESSION, STREAM, TERM_ID = 77, 1001, 5


def frame(term_offset: int, payload: bytes, *, frame_type: int = HDR_TYPE_DATA, reserved: int = 0) -> bytes:
    """A DATA frame as it arrives on the wire, padded to 32 bytes like a datagram carries it."""
    length = 32 + len(payload)
    raw = HDR.pack(length, 0, UNFRAGMENTED, frame_type, term_offset, SESSION, STREAM, TERM_ID, reserved) + payload
    return raw + bytes(-len(raw) % 32)


def new_term() -> tuple[bytearray, AtomicBuffer]:
    raw = bytearray(TL)
    return raw, AtomicBuffer(raw)


def test_insert_into_empty_slot_copies_whole_frame() -> None:
    raw, term = new_term()
    packet = frame(128, b"hello world", reserved=-5)
    insert(term, 128, memoryview(packet), len(packet))
    assert bytes(raw[128 : 128 + len(packet)]) == packet
    assert not any(raw[:128])
    assert not any(raw[128 + len(packet) :])


def test_insert_accepts_readonly_packet_and_leaves_bytes_beyond_length() -> None:
    raw, term = new_term()
    packet = frame(0, b"x" * 40) + b"\xff" * 64  # trailing bytes not part of the datagram
    insert(term, 0, memoryview(bytes(packet)), 96)
    assert bytes(raw[:96]) == packet[:96]
    assert not any(raw[96:])


def test_duplicate_is_ignored_and_never_overwrites() -> None:
    raw, term = new_term()
    first = frame(64, b"A" * 32)
    insert(term, 64, memoryview(first), len(first))
    second = frame(64, b"B" * 32, reserved=9)
    insert(term, 64, memoryview(second), len(second))
    assert bytes(raw[64 : 64 + len(first)]) == first


def test_slot_with_any_nonzero_length_word_is_left_alone() -> None:
    raw, term = new_term()
    term.put_int(32, 96)  # e.g. a PAD from the gap filler, or a longer frame starting here
    packet = frame(32, b"z" * 10)
    insert(term, 32, memoryview(packet), len(packet))
    assert term.get_int(32) == 96
    assert not any(raw[36:])


def test_header_only_frame() -> None:
    raw, term = new_term()
    packet = frame(0, b"", frame_type=HDR_TYPE_PAD)
    insert(term, 0, memoryview(packet), 32)
    assert bytes(raw[:32]) == packet


def test_multi_frame_datagram_inserted_as_one_block() -> None:
    raw, term = new_term()
    packet = frame(256, b"a" * 5) + frame(256 + 64, b"b" * 100) + frame(256 + 64 + 160, b"c")
    insert(term, 256, memoryview(packet), len(packet))
    assert bytes(raw[256 : 256 + len(packet)]) == packet


def test_out_of_order_arrival_matches_in_order() -> None:
    frames = [frame(i * 64, bytes([i]) * 20) for i in range(10)]
    raw_a, term_a = new_term()
    raw_b, term_b = new_term()
    for i, f in enumerate(frames):
        insert(term_a, i * 64, memoryview(f), len(f))
    for i in reversed(range(10)):
        insert(term_b, i * 64, memoryview(frames[i]), len(frames[i]))
    assert raw_a == raw_b


def test_insert_publishes_the_whole_packet() -> None:
    # The native insert copies bytes [8, length) and then release-stores word 0, so a reader
    # that sees the frame length sees the whole frame.
    raw, term = new_term()
    packet = frame(512, b"q" * 200)
    assert insert_packet(term, 512, packet, len(packet))
    assert bytes(raw[512 : 512 + len(packet)]) == packet
    assert term.get_int_volatile(512) == int.from_bytes(packet[:4], "little")


def test_duplicate_never_overwrites() -> None:
    raw, term = new_term()
    first = frame(0, b"x" * 40)
    insert(term, 0, memoryview(first), len(first))
    other = frame(0, b"y" * 40)
    assert not insert_packet(term, 0, other, len(other))
    insert(term, 0, memoryview(other), len(other))
    assert bytes(raw[: len(first)]) == first


@st.composite
def datagrams_and_order(draw: st.DrawFn) -> tuple[list[tuple[int, bytes]], list[int]]:
    """A run of frames cut into datagrams, and an arrival order with duplicates."""
    sizes = draw(st.lists(st.integers(0, 300), min_size=1, max_size=25))
    frames: list[tuple[int, bytes]] = []
    offset = 0
    for n, size in enumerate(sizes):
        f = frame(offset, bytes([n % 251 + 1]) * size)
        frames.append((offset, f))
        offset += len(f)
    cuts = draw(st.lists(st.booleans(), min_size=len(frames) - 1, max_size=len(frames) - 1))
    datagrams: list[tuple[int, bytes]] = []
    start, body = frames[0]
    for (off, f), cut in zip(frames[1:], cuts, strict=True):
        if cut:
            datagrams.append((start, body))
            start, body = off, f
        else:
            body += f
    datagrams.append((start, body))
    order = draw(st.permutations(list(range(len(datagrams)))))
    dups = draw(st.lists(st.integers(0, len(datagrams) - 1), max_size=5))
    return datagrams, [*order, *dups]


@settings(max_examples=200, deadline=None)
@given(datagrams_and_order())
def test_any_arrival_order_rebuilds_identical_term(case: tuple[list[tuple[int, bytes]], list[int]]) -> None:
    datagrams, order = case
    raw_ref, term_ref = new_term()
    for off, body in datagrams:
        insert(term_ref, off, memoryview(body), len(body))
    raw, term = new_term()
    for i in order:
        off, body = datagrams[i]
        insert(term, off, memoryview(body), len(body))
    assert raw == raw_ref
    expected = b"".join(body for _, body in datagrams)
    assert bytes(raw[: len(expected)]) == expected
