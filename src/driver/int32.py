"""Java's int arithmetic, once: Aeron's ids, term ids, offsets and lengths are int32 and wrap as Java's do."""

from __future__ import annotations

from typing import Final

__all__ = ["INT32_MAX", "INT32_MIN", "U32_MASK", "int32", "int64"]

INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
U32_MASK: Final = 0xFFFF_FFFF


def int32(value: int) -> int:
    """Wrap ``value`` to a signed 32-bit int, as Java's int arithmetic does."""
    return ((value + 0x8000_0000) & U32_MASK) - 0x8000_0000


def int64(value: int) -> int:
    """Wrap ``value`` to a signed 64-bit int, as Java's long arithmetic does."""
    return ((value + (1 << 63)) & 0xFFFF_FFFF_FFFF_FFFF) - (1 << 63)
