"""The OS's default and maximum UDP socket buffer lengths, as today's log metadata records them.

Probed once per process (as the C driver does at start): a throw-away UDP
socket's SO_SNDBUF/SO_RCVBUF give the defaults, ``/proc/sys/net/core/[wr]mem_max``
the maxima (the default where those files do not exist).
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path

__all__ = ["os_socket_buffer_lengths"]


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
