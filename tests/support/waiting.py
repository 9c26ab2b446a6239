"""Bounded polling for tests that wait on another process.

Every wait in the suite goes through :func:`execute_until` so that none can hang:
it stops after ``max_iterations`` polls or ``timeout_s`` seconds, whichever comes
first, and fails with a message saying what was awaited and what was last seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["WaitTimeoutError", "execute_until"]

T = TypeVar("T")


class WaitTimeoutError(AssertionError, TimeoutError):
    """A bounded wait ran out; pytest reports it as a test failure, callers may catch TimeoutError."""


def execute_until(
    condition: Callable[[], T],
    action: Callable[[], object] | None = None,
    *,
    timeout_s: float = 10.0,
    max_iterations: int = 100_000,
    interval_s: float = 0.01,
    description: str = "",
) -> T:
    """Run ``action`` then test ``condition`` until it returns something truthy, and return that.

    Raises :class:`WaitTimeoutError` (an AssertionError and a TimeoutError) when the
    time or iteration budget is spent; the last value the condition returned and the
    last exception it raised, if any, are part of the message.
    """
    if timeout_s <= 0 or max_iterations < 1 or interval_s < 0:
        raise ValueError(f"bad bounds: timeout_s={timeout_s}, max_iterations={max_iterations}, interval_s={interval_s}")
    started = time.monotonic()
    deadline = started + timeout_s
    last: object = None
    last_error: BaseException | None = None
    iterations = 0
    while iterations < max_iterations:
        iterations += 1
        if action is not None:
            action()
        try:
            result = condition()
        except Exception as exc:  # a condition polling a file that is not there yet, say
            last_error = exc
        else:
            last_error = None
            if result:
                return result
            last = result
        now = time.monotonic()
        if now >= deadline:
            break
        if interval_s:
            time.sleep(min(interval_s, deadline - now))
    what = description or getattr(condition, "__qualname__", repr(condition))
    message = (
        f"gave up waiting for {what} after {iterations} iteration(s) in {time.monotonic() - started:.2f} s "
        f"(limits: {max_iterations} iterations, {timeout_s} s); last value: {last!r}"
    )
    if last_error is not None:
        message += f"; last error: {last_error!r}"
    raise WaitTimeoutError(message) from last_error
