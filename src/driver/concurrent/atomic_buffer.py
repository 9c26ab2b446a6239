"""Shared-memory access with Aeron's memory ordering.

``AtomicBuffer`` is a small C type (``_atomic.c``): Python has no portable way to
do a fetch-add or CAS on shared memory, and the pure-Python alternatives cost
microseconds per call. Plain reads and writes go through it too, because a C
method call is cheaper than ``struct.unpack_from``. What is done with frames in a
buffer lives with the log buffers (``driver.logbuffer._frames``).
"""

from __future__ import annotations

from driver.concurrent._atomic import AtomicBuffer, fence

__all__ = ["AtomicBuffer", "align", "fence", "is_power_of_two"]


def align(value: int, alignment: int) -> int:
    """Round ``value`` up to a multiple of ``alignment`` (a power of two)."""
    return (value + (alignment - 1)) & ~(alignment - 1)


def is_power_of_two(value: int) -> bool:
    return value > 0 and (value & (value - 1)) == 0
