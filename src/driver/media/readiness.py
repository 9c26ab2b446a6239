"""Which of many channel endpoints have datagrams waiting, found with one epoll call.

The sender reads feedback from every send endpoint and the receiver data from
every receive endpoint on each duty cycle. With a handful that is a handful of
``recvfrom`` calls; a server with a UDP connection per client has a send
endpoint (and socket) per client, and a try on each one would make every duty
cycle cost hundreds of system calls. Past a few endpoints an agent asks this
set instead (level-triggered: whatever a poll leaves unread is reported again).
"""

from __future__ import annotations

import contextlib
import select
import socket
from typing import Generic, Protocol, TypeVar

__all__ = ["FEW_ENDPOINTS", "ReadyEndpoints"]

FEW_ENDPOINTS = 4
"""Up to this many endpoints, trying each socket costs less than asking epoll first."""


class _Transport(Protocol):
    @property
    def socket(self) -> socket.socket: ...


class _Endpoint(Protocol):
    @property
    def transport(self) -> _Transport: ...


E = TypeVar("E", bound=_Endpoint)


class ReadyEndpoints(Generic[E]):
    """An epoll set over endpoints' sockets (only on its owner agent's thread)."""

    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        self._by_fd: dict[int, E] = {}

    def add(self, endpoint: E) -> None:
        fd = endpoint.transport.socket.fileno()
        if fd < 0 or not hasattr(select, "epoll"):
            return
        if self._epoll is None:
            self._epoll = select.epoll()
        if fd in self._by_fd:
            self._epoll.modify(fd, select.EPOLLIN)
        else:
            self._epoll.register(fd, select.EPOLLIN)
        self._by_fd[fd] = endpoint

    def remove(self, endpoint: E) -> None:
        for fd, known in list(self._by_fd.items()):
            if known is endpoint:
                del self._by_fd[fd]
                if self._epoll is not None:
                    with contextlib.suppress(OSError):  # already closed: the kernel dropped it from the set
                        self._epoll.unregister(fd)

    def covers(self, count: int) -> bool:
        """True when the set watches all ``count`` endpoints (an epoll set was available for each)."""
        return self._epoll is not None and len(self._by_fd) == count

    def ready(self) -> list[E]:
        """Endpoints with a datagram waiting (epoll, no wait)."""
        epoll = self._epoll
        if epoll is None:
            return []
        by_fd = self._by_fd
        return [by_fd[fd] for fd, _ in epoll.poll(0) if fd in by_fd]

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self._by_fd.clear()
