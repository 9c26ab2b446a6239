"""Shared pieces of the command codecs: bounds-checked reads, strings, field validators.

Every message is little-endian and packed to 4 bytes. A string is an int32 byte
count followed by the bytes, without terminator; when another field follows a
string, the next field starts at the string's end rounded up to 4. Decoding
never trusts a length read from the buffer: each read is checked against the
message length first, and a failure names the message and the field.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import MalformedCommandError
from driver.int32 import INT32_MAX, INT32_MIN

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "SIZE_OF_INT",
    "SIZE_OF_LONG",
    "Reader",
    "ascii_text",
    "encode_string",
    "int32",
    "int64",
    "string_length",
]

SIZE_OF_INT = 4
SIZE_OF_LONG = 8
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_INT = struct.Struct("<i")
_LONG = struct.Struct("<q")


def _align4(value: int) -> int:
    return (value + 3) & ~3


class Reader:
    """A bounds-checked little-endian view of one message body."""

    __slots__ = ("_length", "_message", "_view", "_whole")

    def __init__(self, message: str, buf: Buffer | AtomicBuffer, offset: int, length: int | None) -> None:
        self._message = message
        if isinstance(buf, AtomicBuffer):
            capacity = buf.capacity
            if length is None:
                length = capacity - offset
            if offset < 0 or length < 0 or offset + length > capacity:
                raise MalformedCommandError(
                    f"{message}: offset {offset} length {length} outside a buffer of {capacity} bytes"
                )
            view = buf.view(offset, length)
            whole = view
        else:
            whole = memoryview(buf)
            if whole.format != "B" or whole.ndim != 1:
                whole = whole.cast("B")
            capacity = len(whole)
            if length is None:
                length = capacity - offset
            if offset < 0 or length < 0 or offset + length > capacity:
                raise MalformedCommandError(
                    f"{message}: offset {offset} length {length} outside a buffer of {capacity} bytes"
                )
            view = whole[offset : offset + length]
        self._view = view
        self._whole = whole
        self._length = length

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def length(self) -> int:
        return self._length

    def _need(self, end: int, field: str) -> None:
        if end > self._length:
            raise MalformedCommandError(
                f"{self._message}: message of {self._length} bytes is too short for {field} (needs {end})"
            )

    def int32(self, offset: int, field: str) -> int:
        self._need(offset + SIZE_OF_INT, field)
        value: int = _INT.unpack_from(self._view, offset)[0]
        return value

    def int64(self, offset: int, field: str) -> int:
        self._need(offset + SIZE_OF_LONG, field)
        value: int = _LONG.unpack_from(self._view, offset)[0]
        return value

    def raw(self, offset: int, field: str) -> tuple[bytes, int]:
        """Length-prefixed bytes at ``offset``; returns them and the offset just past them."""
        count = self.int32(offset, f"{field} length")
        start = offset + SIZE_OF_INT
        if count < 0:
            raise MalformedCommandError(f"{self._message}: {field} length {count} is negative")
        if start + count > self._length:
            raise MalformedCommandError(
                f"{self._message}: {field} length {count} exceeds the {self._length - start} bytes left"
            )
        return bytes(self._view[start : start + count]), start + count

    def ascii(self, offset: int, field: str) -> tuple[str, int]:
        data, end = self.raw(offset, field)
        try:
            return data.decode("ascii"), end
        except UnicodeDecodeError as exc:
            raise MalformedCommandError(
                f"{self._message}: {field} is not ASCII (byte {exc.start} is 0x{data[exc.start]:02x})"
            ) from None

    def utf8(self, offset: int, field: str) -> tuple[str, int]:
        data, end = self.raw(offset, field)
        return data.decode("utf-8", "replace"), end

    def release(self) -> None:
        """Drop the buffer exports at once, so an mmap under them can close."""
        self._view.release()
        self._whole.release()


def encode_string(data: bytes, pad: bool = False) -> bytes:
    """int32 length + bytes; ``pad`` zero-fills to a multiple of 4 for a field that follows."""
    out = _INT.pack(len(data)) + data
    if pad:
        out += b"\0" * (_align4(len(data)) - len(data))
    return out


def string_length(data_length: int, pad: bool = False) -> int:
    return SIZE_OF_INT + (_align4(data_length) if pad else data_length)


def _name(instance: object, attribute: Any) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def int32(instance: object, attribute: Any, value: int) -> None:
    """attrs validator: a Java int."""
    if not isinstance(value, int):
        raise MalformedCommandError(f"{_name(instance, attribute)}={value!r} is not an int")
    if not INT32_MIN <= value <= INT32_MAX:
        raise MalformedCommandError(f"{_name(instance, attribute)}={value} is outside the int32 range")


def int64(instance: object, attribute: Any, value: int) -> None:
    """attrs validator: a Java long."""
    if not isinstance(value, int):
        raise MalformedCommandError(f"{_name(instance, attribute)}={value!r} is not an int")
    if not INT64_MIN <= value <= INT64_MAX:
        raise MalformedCommandError(f"{_name(instance, attribute)}={value} is outside the int64 range")


def ascii_text(instance: object, attribute: Any, value: str) -> None:
    """attrs validator: text sent with Agrona's putStringAscii must be ASCII to survive the trip."""
    if not isinstance(value, str):
        raise MalformedCommandError(f"{_name(instance, attribute)}={value!r} is not a str")
    if not value.isascii():
        raise MalformedCommandError(f"{_name(instance, attribute)}={value!r} is not ASCII")
