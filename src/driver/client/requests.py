"""A command sent to the driver and awaited, and what a waiter needs from whoever answers it.

The resources (publications, subscriptions, counters) and the async waiters sit
below the client conductor: they name the conductor only through the small
protocols they declare, so the conductor can import them and not the reverse.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["PendingRequest", "RequestService"]


class PendingRequest:
    """A command sent to the driver whose answer is awaited (by a thread or a task)."""

    __slots__ = ("abandoned", "correlation_id", "deadline_ns", "done", "error", "kind", "resource", "result")

    def __init__(self, correlation_id: int, kind: str, deadline_ns: int, resource: object = None) -> None:
        self.correlation_id = correlation_id
        self.kind = kind
        self.deadline_ns = deadline_ns
        self.resource = resource
        self.done = False
        self.abandoned = False
        self.result: object = None
        self.error: BaseException | None = None

    def complete(self, result: object) -> None:
        self.result = result
        self.done = True

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done = True

    def outcome(self) -> object:
        if self.error is not None:
            raise self.error
        return self.result


class RequestService(Protocol):
    """Who answers requests without blocking: an event loop polls it until the answer is in."""

    def try_service(self, request: PendingRequest) -> bool:
        """Serve the driver's answers if no other thread does; True once ``request`` is done."""
        ...

    def abandon(self, request: PendingRequest) -> None:
        """The waiter gave up (cancelled): the answer, when it comes, is cleaned up, not delivered."""
        ...
