"""Shared pieces of the frame codecs: bounds-checked views and field validators.

The cold-path classes (``encode``/``decode``) go through :func:`frame_view`,
which never trusts an offset or length; the hot-path writers and unpackers do
no checking at all and leave that to :mod:`driver.wire.datagram`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from driver.errors import MalformedFrameError
from driver.int32 import INT32_MAX, INT32_MIN

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "checked_header",
    "frame_view",
    "int32",
    "int64",
    "uint8",
]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def frame_view(frame: str, buf: Buffer, offset: int, length: int | None, minimum: int) -> memoryview:
    """A byte view of ``buf[offset:offset+length]`` holding at least ``minimum`` bytes, else MalformedFrameError."""
    whole = memoryview(buf)
    if whole.format != "B" or whole.ndim != 1:
        whole = whole.cast("B")
    capacity = len(whole)
    if length is None:
        length = capacity - offset
    if offset < 0 or length < 0 or offset + length > capacity:
        raise MalformedFrameError(f"{frame}: offset {offset} length {length} outside a buffer of {capacity} bytes")
    if length < minimum:
        raise MalformedFrameError(f"{frame}: {length} bytes is shorter than the {minimum}-byte frame")
    return whole[offset : offset + length]


_HEADER = struct.Struct("<iBBH")


def checked_header(frame: str, view: memoryview, frame_type: int, minimum: int) -> tuple[int, int]:
    """Check a control frame's common header against ``view``; returns (frame_length, flags).

    The frame must be version 0, of ``frame_type``, and state a length of at least
    ``minimum`` that the view holds; bytes after ``frame_length`` are ignored.
    """
    frame_length, version, flags, actual_type = _HEADER.unpack_from(view, 0)
    if version != 0:
        raise MalformedFrameError(f"{frame}: version {version} is not 0")
    if actual_type != frame_type:
        raise MalformedFrameError(f"{frame}: type 0x{actual_type:04x} is not 0x{frame_type:04x}")
    if frame_length < minimum:
        raise MalformedFrameError(f"{frame}: frame_length {frame_length} is shorter than {minimum}")
    if frame_length > len(view):
        raise MalformedFrameError(f"{frame}: frame_length {frame_length} exceeds the {len(view)} bytes given")
    return frame_length, flags


def _name(instance: object, attribute: Any) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def _check(instance: object, attribute: Any, value: int, low: int, high: int, kind: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{_name(instance, attribute)}={value!r} is not an int")
    if not low <= value <= high:
        raise ValueError(f"{_name(instance, attribute)}={value} is outside the {kind} range")


def int32(instance: object, attribute: Any, value: int) -> None:
    """attrs validator: a Java int."""
    _check(instance, attribute, value, INT32_MIN, INT32_MAX, "int32")


def int64(instance: object, attribute: Any, value: int) -> None:
    """attrs validator: a Java long."""
    _check(instance, attribute, value, INT64_MIN, INT64_MAX, "int64")


def uint8(instance: object, attribute: Any, value: int) -> None:
    """attrs validator: a flags byte."""
    _check(instance, attribute, value, 0, 0xFF, "uint8")
