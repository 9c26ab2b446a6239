"""Free UDP ports for tests to bind later, picked where nothing else is given them meanwhile.

A port picked by binding port 0 is one the kernel may hand to the next socket that asks (a driver's send
endpoint, a client route's, another test's) before the test binds it, which then fails with "address already in
use" (seen in full runs: a server's port, a channel a test subscribes to in rounds). These are picked from the
ports the kernel never assigns itself, outside its ephemeral range (``ip_local_port_range``), when there is room.
Under pytest-xdist each worker picks from its own share of those ports: two workers could otherwise pick the same
port, both see it free, and the second to bind it fail.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

__all__ = ["distinct_free_udp_ports", "free_server_port", "free_udp_port"]


def _unassigned_range() -> tuple[int, int] | None:
    """Ports the kernel never picks itself (for a bind to port 0, or an outgoing socket): those below or above its
    ephemeral range; None when neither side has room."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return None
    if low > 12_000:
        return _worker_share(10_000, low - 2)
    if high < 63_000:
        return _worker_share(high + 1, 65_533)
    return None


def _worker_share(first: int, last: int) -> tuple[int, int]:
    """This pytest-xdist worker's slice of ``first..last`` (all of it outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        index = int(worker.removeprefix("gw"))
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    except (KeyError, ValueError):
        return (first, last)
    if not 0 <= index < count:
        return (first, last)
    size = (last - first) // count
    return (first + index * size, first + (index + 1) * size - 1)


def _bound(host: str, port: int) -> socket.socket | None:
    """A UDP socket bound to ``host:port``, or None when the port is taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError):  # (OverflowError: past 65535)
        sock.close()
        return None
    return sock


def _free_ports(host: str, count: int, *, consecutive: bool = False) -> list[int]:
    """``count`` different UDP ports free on ``host`` right now (in a row with ``consecutive``), from the ports
    the kernel does not pick itself when there are such (see :func:`_unassigned_range`)."""
    unassigned = _unassigned_range()
    held: list[socket.socket] = []
    try:
        for _ in range(64 * count):
            if len(held) == count:
                break
            if consecutive and held:
                port = int(held[-1].getsockname()[1]) + 1
            elif unassigned is not None:
                port = secrets.randbelow(unassigned[1] - unassigned[0]) + unassigned[0]
            else:
                port = 0
            sock = _bound(host, port)
            if sock is not None:
                held.append(sock)
            elif consecutive:  # start the run again elsewhere
                for taken in held:
                    taken.close()
                held.clear()
        if len(held) < count:
            raise AssertionError(f"no {count} free UDP ports on {host} in {64 * count} tries")
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port free on ``host`` right now."""
    return _free_ports(host, 1)[0]


def distinct_free_udp_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` UDP ports free on ``host`` right now, all different (held together while they are picked)."""
    return _free_ports(host, count)


def free_server_port(host: str = "127.0.0.1") -> int:
    """A UDP port free on ``host`` right now whose next one (the server's control port) is free too."""
    return _free_ports(host, 2, consecutive=True)[0]
