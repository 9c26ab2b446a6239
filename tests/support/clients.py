"""Helpers for tests that drive ``driver.client``: recorded errors and bounded publish/poll loops."""

from __future__ import annotations

import time
from collections.abc import Callable

from driver.client import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED, Header, Image, Publication, Subscription
from support.waiting import execute_until

__all__ = ["Errors", "offer_all", "poll_until", "wait_for_image"]


class Errors:
    """An error handler that records what the client reports."""

    def __init__(self) -> None:
        self.seen: list[BaseException] = []

    def __call__(self, error: BaseException) -> None:
        self.seen.append(error)


def wait_for_image(subscription: Subscription, count: int = 1, timeout_s: float = 10.0) -> tuple[Image, ...]:
    return execute_until(
        lambda: subscription.images if len(subscription.images) >= count else (),
        timeout_s=timeout_s,
        interval_s=0.001,
        description=f"{count} image(s) on {subscription!r}",
    )


def offer_all(
    publication: Publication,
    messages: list[bytes],
    drain: Callable[[], object],
    timeout_s: float = 30.0,
) -> list[int]:
    """Offer every message in order, draining the subscriber when back pressured; bounded in time."""
    positions: list[int] = []
    deadline = time.monotonic() + timeout_s
    for message in messages:
        while True:
            result = publication.offer(message)
            if result >= 0:
                positions.append(result)
                break
            assert result in (BACK_PRESSURED, ADMIN_ACTION, NOT_CONNECTED), result
            drain()
            assert time.monotonic() < deadline, f"offer stuck at {result}"
    return positions


def poll_until(
    subscription: Subscription,
    handler: Callable[[memoryview, Header], object],
    done: Callable[[], bool],
    timeout_s: float = 30.0,
) -> None:
    execute_until(
        done,
        lambda: subscription.poll(handler, 100),
        timeout_s=timeout_s,
        max_iterations=10_000_000,
        interval_s=0.0001,
        description="all messages polled",
    )
