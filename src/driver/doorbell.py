"""A doorbell for a driver that an application runs itself (INVOKER mode).

Such a driver works only while its host runs it, and a host with nothing to do sleeps; a client in
another process that sends a command would wait out that sleep for its answer. The host therefore
publishes ``doorbell.dat`` in the driver directory: the UDP port (on 127.0.0.1) of a socket its sleep
watches, and a flag saying it sleeps. A client that wrote a command and sees the flag sends one
datagram to that port, which ends the sleep at once.

No wake-up is lost (Dekker's pattern): the host raises the flag, fences, then looks for commands not
yet read before it sleeps; a client writes its command, fences, then reads the flag. At least one of
them sees the other.

Layout (64 bytes): version (int32, 1) at 0, port (int32) at 4, parked flag (int64) at 8. Aeron has no
such file; clients that do not know it still work, at the host's sleep latency.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
from pathlib import Path

from driver.concurrent.atomic_buffer import AtomicBuffer, fence

__all__ = ["DOORBELL_FILE", "Doorbell", "DoorbellRinger"]

DOORBELL_FILE = "doorbell.dat"
_LENGTH = 64
_VERSION = 1
_VERSION_OFFSET = 0
_PORT_OFFSET = 4
_PARKED_OFFSET = 8
_HOST = "127.0.0.1"


class Doorbell:
    """The host's side: the socket its sleep watches and the flag it raises while sleeping."""

    def __init__(self, aeron_dir: Path) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.socket.setblocking(False)
            self.socket.bind((_HOST, 0))
            port = int(self.socket.getsockname()[1])
            path = Path(aeron_dir) / DOORBELL_FILE
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, _LENGTH)
                self._mmap = mmap.mmap(fd, _LENGTH)
            finally:
                os.close(fd)
        except BaseException:
            self.socket.close()
            raise
        self._buffer = AtomicBuffer(self._mmap, 0, _LENGTH)
        self._buffer.put_int(_PORT_OFFSET, port)
        self._buffer.put_int_ordered(_VERSION_OFFSET, _VERSION)  # last: a reader seeing the version sees the port
        self.port = port

    def park(self) -> None:
        """About to sleep: from now on clients ring. The caller then checks for unread commands."""
        self._buffer.put_long_ordered(_PARKED_OFFSET, 1)
        fence()

    def unpark(self) -> None:
        """Awake again: clients stop ringing; rings that came meanwhile are drained."""
        self._buffer.put_long_ordered(_PARKED_OFFSET, 0)
        receive = self.socket.recv
        for _ in range(1024):
            try:
                receive(64)
            except OSError:  # BlockingIOError: drained
                return

    def close(self) -> None:
        self.socket.close()
        self._buffer.release()
        with contextlib.suppress(BufferError):
            self._mmap.close()


class DoorbellRinger:
    """A client's side: rings the host of the driver when it sleeps. ``open`` returns None without a doorbell."""

    def __init__(self, mapping: mmap.mmap, port: int) -> None:
        self._mmap = mapping
        self._buffer = AtomicBuffer(mapping, 0, _LENGTH)
        self._address = (_HOST, port)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self.rings = 0

    @classmethod
    def open(cls, aeron_dir: Path) -> DoorbellRinger | None:
        try:
            fd = os.open(Path(aeron_dir) / DOORBELL_FILE, os.O_RDWR)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size < _LENGTH:
                return None
            mapping = mmap.mmap(fd, _LENGTH)
        finally:
            os.close(fd)
        header = AtomicBuffer(mapping, 0, _LENGTH)
        version, port = header.get_int_volatile(_VERSION_OFFSET), header.get_int(_PORT_OFFSET)
        header.release()
        if version != _VERSION or not 0 < port < 65536:
            mapping.close()
            return None
        return cls(mapping, port)

    def ring_if_parked(self) -> bool:
        """After writing a command: wake the host if it sleeps. True if it rang."""
        fence()
        if not self._buffer.get_long_volatile(_PARKED_OFFSET):
            return False
        try:
            self._socket.sendto(b"\x01", self._address)
        except OSError:  # the host is gone or its socket full: it wakes on its timer anyway
            return False
        self.rings += 1
        return True

    def close(self) -> None:
        self._socket.close()
        self._buffer.release()
        with contextlib.suppress(BufferError):
            self._mmap.close()
