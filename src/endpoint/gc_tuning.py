"""``tune_gc()``: garbage collector settings for a process that makes connections by the hundred.

CPython collects its youngest generation every 700 net allocations of container objects; what survives is
promoted, and once the promoted objects reach a quarter of those already held a full collection walks everything
the process holds (every connection's objects, every log's buffers' owners). A handshake allocates objects that
live a few milliseconds (futures, tasks, packets on their way, driver commands and their answers): at 700
allocations between collections many are caught alive, promoted, and bring on full collections one after another
while a connect storm lasts. A larger youngest threshold lets them die young; freezing what start-up made (imports,
the driver, the end point) leaves it out of every later collection.

Measured (docs/performance.md, "Connect storms and the collector"): 1,000 clients of one process on one route
spent 0.39-0.47 s of their ~2 s storm in the collector, 0.06-0.11 s with ``tune_gc(freeze=True)``; the handshake
rate rose by a quarter to a half. A steady game server is not helped: its per-tick objects die before any
collection.

The settings are the process's, not an end point's: the application decides, once, at start-up.
"""

from __future__ import annotations

import gc

__all__ = ["DEFAULT_YOUNG_THRESHOLD", "tune_gc"]

DEFAULT_YOUNG_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation (CPython's default: 700)."""


def tune_gc(young_threshold: int = DEFAULT_YOUNG_THRESHOLD, *, freeze: bool = False) -> tuple[int, int, int]:
    """Raise the collector's youngest threshold to ``young_threshold`` (never lower it); with ``freeze``, collect
    once and move everything alive now out of later collections (call it after start-up: what is frozen is never
    freed, even once unused, until :func:`gc.unfreeze`). Returns the thresholds before, for
    :func:`gc.set_threshold`."""
    if young_threshold < 1:
        raise ValueError(f"young_threshold={young_threshold!r} must be >= 1")
    before = gc.get_threshold()
    if young_threshold > before[0]:
        gc.set_threshold(young_threshold, before[1], before[2])
    if freeze:
        gc.collect()
        gc.freeze()
    return before
