"""The pure parts of endpoint.streaming: the chunk frame, filling chunks from every kind of source, known sizes.

No connection or driver: ``_fill`` is driven directly with a payload buffer, as ``StreamManager.send`` does.
"""

from __future__ import annotations

import array
import io
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import msgpack
import pytest

from endpoint.serialization import Serialization
from endpoint.streaming import CHUNK_EXT, CHUNK_HEADER_LENGTH, _fill, _known_size, _write_header, is_chunk

SIZES = [0, 1, 999, 1000, 1001, 4096, 10_000, 65_536 * 2 + 17]
"""Source lengths around the payload sizes used below (0, under, exactly, just over, several)."""
ROOMS = [1000, 4096, 1 << 16]
"""Payload sizes; 64 KiB and more is read from files off the loop's thread."""


def data_of(size: int, seed: int = 0) -> bytes:
    return random.Random(seed * 1_000_003 + size).randbytes(size)


# ------------------------------------------------------------------------------------------------ chunk frame


def frame_of(stream_id: int, payload: bytes) -> bytearray:
    frame = bytearray(CHUNK_HEADER_LENGTH + len(payload))
    frame[CHUNK_HEADER_LENGTH:] = payload
    _write_header(frame, stream_id, len(payload))
    return frame


@pytest.mark.parametrize("stream_id", [0, 1, 0x1234_5678, 0xFFFF_FFFF])
@pytest.mark.parametrize("length", [0, 1, 300, 70_000])
def test_chunk_header_layout(stream_id: int, length: int) -> None:
    payload = data_of(length)
    frame = frame_of(stream_id, payload)
    assert CHUNK_HEADER_LENGTH == 10
    assert frame[0] == 0xC9  # msgpack ext 32
    assert int.from_bytes(frame[1:5], "big") == 4 + length  # the ext's data: stream id and payload
    assert frame[5] == CHUNK_EXT == 2
    assert int.from_bytes(frame[6:10], "little") == stream_id
    assert frame[10:] == payload
    assert is_chunk(frame)
    assert is_chunk(bytes(frame))
    assert is_chunk(memoryview(frame))


def test_a_chunk_frame_is_valid_msgpack_ext_data() -> None:
    frame = frame_of(77, b"payload bytes")
    decoded = msgpack.unpackb(bytes(frame))
    assert decoded == msgpack.ExtType(CHUNK_EXT, (77).to_bytes(4, "little") + b"payload bytes")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc9\x00\x00\x00\x04\x02\x01\x00\x00",  # one byte short of a header
        b"\xc9\x00\x00\x00\x05\x01\x01\x00\x00\x00x",  # ext code 1: a registered object, not a chunk
        b"\xc8\x00\x05\x02\x01\x00\x00\x00x" + b"\x00" * 4,  # ext 16 header
        b"\x00" * 16,
    ],
)
def test_other_bytes_are_not_chunks(data: bytes) -> None:
    assert not is_chunk(data)


@attrs.define
class Big:
    data: bytes


def test_encoded_messages_are_never_chunks() -> None:
    serialization = Serialization()
    serialization.register(Big, type_id=1)
    for message in (Big(b"x" * 10), Big(b"x" * 70_000), b"\xc9" * 100, [1, 2, 3], {"a": 1}, "text", 5):
        assert not is_chunk(serialization.encode(message))


# ------------------------------------------------------------------------------------------------ _fill


async def collect(source: Any, room: int) -> list[bytes]:
    """Drive ``_fill`` as the sender does: copy out each filled prefix of the payload before the next fill."""
    payload = memoryview(bytearray(room))
    return [bytes(payload[:n]) async for n in _fill(source, payload)]


def assert_chunked(chunks: list[bytes], expected: bytes, room: int) -> None:
    assert b"".join(chunks) == expected
    assert all(len(chunk) == room for chunk in chunks[:-1])
    if chunks:
        assert 0 < len(chunks[-1]) <= room
    assert len(chunks) == -(-len(expected) // room)  # ceil: as few chunks as the payload size allows


@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
async def test_fill_from_bytes_like(kind: str, size: int, room: int) -> None:
    data = data_of(size)
    source = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[kind]
    assert_chunked(await collect(source, room), data, room)


async def test_fill_from_a_memoryview_of_wider_items_streams_its_bytes() -> None:
    numbers = array.array("q", range(1000))
    assert_chunked(await collect(memoryview(numbers), 999), numbers.tobytes(), 999)


async def test_fill_from_a_memoryview_slice() -> None:
    data = data_of(5000)
    assert_chunked(await collect(memoryview(data)[123:4567], 1000), data[123:4567], 1000)


@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["str", "Path"])
async def test_fill_from_a_path(kind: str, size: int, room: int, tmp_path: Path) -> None:
    data = data_of(size, seed=1)
    path = tmp_path / "source.bin"
    path.write_bytes(data)
    assert_chunked(await collect(str(path) if kind == "str" else path, room), data, room)


@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("size", SIZES)
async def test_fill_from_an_open_binary_file_from_its_position(size: int, room: int, tmp_path: Path) -> None:
    data = data_of(size, seed=2)
    path = tmp_path / "source.bin"
    path.write_bytes(b"skipped header" + data)
    with path.open("rb") as file:
        file.seek(len(b"skipped header"))
        assert_chunked(await collect(file, room), data, room)
        assert file.read() == b""  # read to its end


@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("size", SIZES)
async def test_fill_from_an_in_memory_binary_file(size: int, room: int) -> None:
    data = data_of(size, seed=3)
    assert_chunked(await collect(io.BytesIO(data), room), data, room)


def odd_pieces(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut at random points into pieces of odd sizes (empty pieces among them)."""
    rng = random.Random(seed)
    pieces: list[bytes] = []
    at = 0
    while at < len(data):
        size = rng.choice([0, 1, 3, 7, 13, 333, 999, 1001, 2047, 5003, 70_001])
        pieces.append(data[at : at + size])
        at += size
    return pieces


@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["list", "generator", "tuple of mixed buffers"])
async def test_fill_from_a_sync_iterable_of_odd_sized_pieces(kind: str, size: int, room: int) -> None:
    data = data_of(size, seed=4)
    pieces = odd_pieces(data, seed=size)
    source: Any
    if kind == "list":
        source = pieces
    elif kind == "generator":
        source = (piece for piece in pieces)
    else:
        source = tuple(
            [bytes(p), bytearray(p), memoryview(p)][i % 3]  # any buffer is a fine piece
            for i, p in enumerate(pieces)
        )
    assert_chunked(await collect(source, room), data, room)


@pytest.mark.parametrize("room", ROOMS)
@pytest.mark.parametrize("size", SIZES)
async def test_fill_from_an_async_iterable_of_odd_sized_pieces(size: int, room: int) -> None:
    data = data_of(size, seed=5)

    async def pieces() -> AsyncIterator[bytes]:
        for piece in odd_pieces(data, seed=size + 1):
            yield piece

    assert_chunked(await collect(pieces(), room), data, room)


async def test_fill_from_an_async_iterable_object() -> None:
    data = data_of(12_345, seed=6)

    class Source:
        def __aiter__(self) -> AsyncIterator[bytes]:
            return self._pieces()

        async def _pieces(self) -> AsyncIterator[bytes]:
            for piece in odd_pieces(data, seed=6):
                yield piece

    assert_chunked(await collect(Source(), 4096), data, 4096)


async def test_fill_of_only_empty_pieces_yields_nothing() -> None:
    assert await collect([b"", b"", bytearray()], 100) == []


async def test_fill_with_a_one_byte_payload() -> None:
    assert await collect([b"ab", b"", b"c"], 1) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("source", [12345, 1.5, None, object()])
async def test_fill_refuses_what_it_cannot_stream(source: Any) -> None:
    with pytest.raises(TypeError, match="cannot stream"):
        await collect(source, 100)


async def test_fill_passes_on_a_failing_source() -> None:
    def pieces() -> Iterator[bytes]:
        yield b"x" * 150
        raise OSError("disk gone")

    payload = memoryview(bytearray(100))
    got: list[bytes] = []

    async def drive() -> None:
        async for n in _fill(pieces(), payload):
            got.append(bytes(payload[:n]))

    with pytest.raises(OSError, match="disk gone"):
        await drive()
    assert got == [b"x" * 100]


# ------------------------------------------------------------------------------------------------ _known_size


@pytest.mark.parametrize("size", [0, 1, 70_000])
def test_known_size_of_bytes_like(size: int) -> None:
    data = data_of(size)
    assert _known_size(data) == size
    assert _known_size(bytearray(data)) == size
    assert _known_size(memoryview(data)) == size
    assert _known_size(memoryview(data)[1:]) == max(0, size - 1)


def test_known_size_of_a_memoryview_counts_bytes_not_items() -> None:
    assert _known_size(memoryview(array.array("i", [1, 2, 3]))) == 3 * array.array("i").itemsize


def test_known_size_of_a_path(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"z" * 4321)
    assert _known_size(path) == 4321
    assert _known_size(str(path)) == 4321


def test_known_size_of_an_open_file_is_what_is_left_to_read(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"z" * 1000)
    with path.open("rb") as file:
        assert _known_size(file) == 1000
        file.seek(600)
        assert _known_size(file) == 400


def test_known_size_of_a_missing_path_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _known_size(tmp_path / "missing")


def test_known_size_of_a_pipe_is_unknown() -> None:
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(read_end, "rb") as file:
            assert _known_size(file) == -1
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "source",
    [io.BytesIO(b"abc"), [b"a", b"b"], (b"a",), iter([b"x"]), (b for b in [b"y"])],
    ids=["BytesIO", "list", "tuple", "iterator", "generator"],
)
def test_known_size_of_other_sources_is_unknown(source: object) -> None:
    assert _known_size(source) == -1


async def test_known_size_of_an_async_iterable_is_unknown() -> None:
    async def pieces() -> AsyncGenerator[bytes, None]:
        yield b"a"

    gen = pieces()
    assert _known_size(gen) == -1
    await gen.aclose()
