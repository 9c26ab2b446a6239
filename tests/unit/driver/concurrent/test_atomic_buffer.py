from __future__ import annotations

import mmap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer, align, is_power_of_two


def test_typed_access_is_little_endian() -> None:
    raw = bytearray(64)
    buf = AtomicBuffer(raw)
    buf.put_int(0, 0x01020304)
    buf.put_long(8, -2)
    buf.put_short(16, 0x0506)
    assert bytes(raw[0:4]) == b"\x04\x03\x02\x01"
    assert buf.get_long(8) == -2
    assert buf.get_ushort(16) == 0x0506
    assert buf.capacity == 64


def test_atomic_operations_on_mmap() -> None:
    with mmap.mmap(-1, 4096) as m:
        buf = AtomicBuffer(m, 128, 64)
        assert buf.capacity == 64
        assert buf.get_and_add_long(0, 5) == 0
        assert buf.get_and_add_long(0, 5) == 5
        assert buf.compare_and_set_long(0, 10, 42)
        assert not buf.compare_and_set_long(0, 10, 43)
        assert buf.get_long_volatile(0) == 42
        buf.put_int_ordered(8, -7)
        assert buf.get_int_volatile(8) == -7
        assert buf.compare_and_set_int(8, -7, 3)
        assert buf.get_and_add_int(8, 1) == 3
        assert int.from_bytes(m[128:136], "little") == 42
        buf.release()


def test_bounds_and_alignment_are_checked() -> None:
    buf = AtomicBuffer(bytearray(16))
    with pytest.raises(IndexError):
        buf.get_long(9)
    with pytest.raises(IndexError):
        buf.put_int(-1, 0)
    with pytest.raises(ValueError, match="aligned"):
        buf.get_long_volatile(4)
    buf.release()
    with pytest.raises(ValueError, match="released"):
        buf.get_int(0)


def test_bytes_view_and_fill() -> None:
    raw = bytearray(32)
    buf = AtomicBuffer(raw)
    buf.put_bytes(4, b"hello world", 6, 5)
    assert buf.get_bytes(4, 5) == b"world"
    view = buf.view(4, 5)
    view[0:1] = b"W"
    assert raw[4:9] == b"World"
    view.release()
    buf.set_memory(0, 32, 0xAB)
    assert raw == bytearray(b"\xab" * 32)


def test_read_only_buffer_is_refused() -> None:
    with pytest.raises(BufferError):
        AtomicBuffer(b"immutable")


@given(st.integers(0, 1 << 40), st.sampled_from([8, 32, 4096]))
def test_align(value: int, alignment: int) -> None:
    aligned = align(value, alignment)
    assert aligned % alignment == 0
    assert value <= aligned < value + alignment
    assert is_power_of_two(alignment)
