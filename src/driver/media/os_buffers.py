"""The OS's default and maximum UDP socket buffer lengths, as today's log metadata records them, and whether the
lengths a driver asks for are granted.

Probed once per process (as the C driver does at start): a throw-away UDP
socket's SO_SNDBUF/SO_RCVBUF give the defaults, ``/proc/sys/net/core/[wr]mem_max``
the maxima (the default where those files do not exist).

The kernel caps a socket's buffer at its maximum without an error, so a driver asking for more than the machine
allows would run with less and drop, in its own kernel, whatever arrives while it is late to read. Aeron's drivers
warn at start when that happens; :func:`refused_buffer_lengths` says what to warn of.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path

__all__ = ["os_socket_buffer_lengths", "refused_buffer_lengths"]


def _read_int(path: str, default: int) -> int:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return default


@functools.cache
def os_socket_buffer_lengths() -> tuple[int, int, int, int]:
    """(default sndbuf, max sndbuf, default rcvbuf, max rcvbuf) in bytes."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sndbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    except OSError:
        sndbuf = rcvbuf = 0
    max_sndbuf = _read_int("/proc/sys/net/core/wmem_max", sndbuf)
    max_rcvbuf = _read_int("/proc/sys/net/core/rmem_max", rcvbuf)
    return sndbuf, max_sndbuf, rcvbuf, max_rcvbuf


def refused_buffer_lengths(sndbuf: int, rcvbuf: int) -> list[str]:
    """A line for each of the asked lengths (0: the OS default, not asked) past what the kernel grants (its
    maximum: it grants ``min(asked, maximum)``), naming the setting that allows it; empty when both are granted."""
    _, max_sndbuf, _, max_rcvbuf = os_socket_buffer_lengths()
    asked = (
        ("SO_SNDBUF", sndbuf, max_sndbuf, "net.core.wmem_max"),
        ("SO_RCVBUF", rcvbuf, max_rcvbuf, "net.core.rmem_max"),
    )
    return [
        f"{name}: asked for {requested} bytes, the kernel grants {granted}: raise {setting} to at least "
        f"{requested}, else datagrams that arrive while the process is late to read are dropped"
        for name, requested, granted, setting in asked
        if 0 < granted < requested
    ]
