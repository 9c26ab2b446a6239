"""UDP sockets for the sender and receiver agents: non-blocking, one per channel endpoint.

A transport owns one socket. ``send`` never blocks: a datagram the kernel will not
take now is reported as a short send (the sender retries from the same position or
the receiver's feedback repeats). ``receive_into`` returns ``(length, address)`` or
``None`` when nothing is waiting. Multicast transports join the group on the
configured interface and loop datagrams back so several processes on one host can
take part. Optional fault injectors sit on both directions.

Datagrams go through ``driver.media._net.DatagramSocket`` rather than the socket
module's methods: an empty receive returns None instead of raising and catching
``BlockingIOError`` (the receiver and sender poll empty sockets on most duty
cycles), the GIL is kept over these never-blocking calls (releasing it lets another
thread take it and keeps the driver waiting for its turn), and address tuples are
converted once and cached.
"""

from __future__ import annotations

import collections
import errno
import socket
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.errors import ChannelEndpointError
from driver.media._net import DatagramSocket
from driver.media.faults import FaultInjector, FaultSpec

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["Address", "UdpTransport"]

Address = tuple[str, int]
_WOULD_BLOCK = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)
_RECEIVE_NOTHING = (*_WOULD_BLOCK, errno.ECONNREFUSED)  # ECONNREFUSED: an ICMP error for an earlier send
_NOT_NUMERIC = -2  # DatagramSocket.sendto: not a numeric address, the socket module resolves it (-1: would block)
_SO_MEMINFO = 55
"""Linux's SO_MEMINFO (not in the socket module): the socket's memory figures, the last of nine its drop count."""
_MEMINFO = struct.Struct("9I")


class UdpTransport:
    def __init__(
        self,
        *,
        bind_address: Address,
        multicast_group: str | None = None,
        interface_address: str | None = None,
        multicast_ttl: int = 0,
        so_rcvbuf: int = 0,
        so_sndbuf: int = 0,
        send_faults: FaultSpec | None = None,
        receive_faults: FaultSpec | None = None,
        description: str = "",
        family: socket.AddressFamily = socket.AF_INET,
    ) -> None:
        """``family``: the channel's (its endpoint's); an IPv6 ``bind_address`` makes it IPv6 whatever it says,
        and an IPv6 socket asked to bind the IPv4 wildcard binds IPv6's (``::``)."""
        self.description = description or f"udp {bind_address[0]}:{bind_address[1]}"
        if ":" in bind_address[0]:
            family = socket.AF_INET6
        elif family == socket.AF_INET6 and bind_address[0] == "0.0.0.0":
            bind_address = ("::", bind_address[1])
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if multicast_group is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if hasattr(socket, "SO_REUSEPORT"):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if so_rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, so_rcvbuf)
            if so_sndbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, so_sndbuf)
            sock.bind(bind_address)
            if multicast_group is not None:
                iface = interface_address or "0.0.0.0"
                membership = struct.pack("4s4s", socket.inet_aton(multicast_group), socket.inet_aton(iface))
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
                if multicast_ttl:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, multicast_ttl)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ChannelEndpointError(f"{self.description}: cannot open socket on {bind_address}: {exc}") from exc
        self.socket = sock
        self.local_address: Address = sock.getsockname()
        self._sendto = sock.sendto
        self._io = DatagramSocket(sock.fileno(), sock.family)
        self._native_send = self._io.sendto
        self._native_receive = self._io.recvfrom_into
        self._send_faults: FaultInjector[tuple[bytes, Address]] | None = (
            FaultInjector(send_faults) if send_faults and send_faults.enabled else None
        )
        self._receive_faults: FaultInjector[tuple[bytes, Address]] | None = (
            FaultInjector(receive_faults) if receive_faults and receive_faults.enabled else None
        )
        self._pending: collections.deque[tuple[bytes, Address]] = collections.deque()
        self.poll_receive: Callable[[memoryview], tuple[int, Address] | None] = (
            self._native_receive if self._receive_faults is None else self.receive_into
        )
        """For the endpoints' poll loops: ``receive_into`` minus a call when no faults are injected, but it
        may raise OSError: give that to :meth:`receive_failed`."""
        self.receive_batch: Callable[..., tuple[int, int]] | None = (
            self._io.receive_batch if self._receive_faults is None else None
        )
        """``DatagramSocket.receive_batch`` (recvmmsg; data for known images inserted natively) when no faults are
        injected on receive, else None: the endpoints then read one datagram at a time, so the injector sees
        every one. May raise OSError: give that to :meth:`receive_failed`."""
        self.sends_natively = self._send_faults is None
        """No faults injected on send: native code may send on this socket (the injector would not see it)."""
        self.datagram_socket = self._io
        """The socket's native I/O (the sender's batched send takes it when ``sends_natively``; the receiver sends
        its images' due status messages through it)."""
        self.short_sends = 0
        self._meminfo = sys.platform.startswith("linux")
        self.status_indicator_id: int | None = None
        """The owning endpoint's channel status counter, carried by the errors this transport raises."""

    def send(self, data: Buffer, address: Address) -> int:
        """Send one datagram; returns the bytes sent, or 0 when the kernel would block."""
        if self._send_faults is not None:
            return self._send_with_faults(bytes(data), address)
        try:
            sent: int = self._native_send(data, address)
            if sent >= 0:
                return sent
            if sent == _NOT_NUMERIC:
                return self._sendto(data, address)
        except OSError as exc:
            if exc.errno not in _WOULD_BLOCK:
                raise ChannelEndpointError(
                    f"{self.description}: send to {address} failed: {exc}", self.status_indicator_id
                ) from exc
        self.short_sends += 1
        return 0

    def _send_with_faults(self, data: bytes, address: Address) -> int:
        assert self._send_faults is not None
        for datagram, destination in self._send_faults.process((data, address)):
            try:
                if self._native_send(datagram, destination) == _NOT_NUMERIC:
                    self._sendto(datagram, destination)
            except OSError as exc:
                if exc.errno not in _WOULD_BLOCK:
                    raise ChannelEndpointError(
                        f"{self.description}: send to {address} failed: {exc}", self.status_indicator_id
                    ) from exc
        return len(data)

    def receive_into(self, buffer: memoryview) -> tuple[int, Address] | None:
        """Receive one datagram into ``buffer``; None when nothing is waiting."""
        if self._receive_faults is not None:
            return self._receive_with_faults(buffer)
        try:
            return self._native_receive(buffer)
        except OSError as exc:
            self.receive_failed(exc)
            return None

    def receive_failed(self, exc: OSError) -> None:
        """What ``receive_into`` does with an error from the socket: ignore it, or raise ChannelEndpointError."""
        if exc.errno in _RECEIVE_NOTHING:
            return
        raise ChannelEndpointError(f"{self.description}: receive failed: {exc}", self.status_indicator_id) from exc

    def _receive_with_faults(self, buffer: memoryview) -> tuple[int, Address] | None:
        faults = self._receive_faults
        assert faults is not None
        if not self._pending:
            try:
                received = self._native_receive(buffer)
            except OSError as exc:
                if exc.errno not in _RECEIVE_NOTHING:
                    raise ChannelEndpointError(
                        f"{self.description}: receive failed: {exc}", self.status_indicator_id
                    ) from exc
                received = None
            if received is None:
                self._pending.extend(faults.release_held())
            else:
                length, address = received
                self._pending.extend(faults.process((bytes(buffer[:length]), address)))
        if not self._pending:
            return None
        datagram, address = self._pending.popleft()
        buffer[: len(datagram)] = datagram
        return len(datagram), address

    @property
    def fault_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, injector in (("send", self._send_faults), ("receive", self._receive_faults)):
            if injector is not None:
                counts.update(
                    {
                        f"{name}_dropped": injector.dropped,
                        f"{name}_reordered": injector.reordered,
                        f"{name}_duplicated": injector.duplicated,
                    }
                )
        return counts

    def kernel_drops(self) -> int | None:
        """Datagrams the kernel dropped for this socket since it opened (its receive queue was full when they came),
        or None where the kernel does not say (not Linux, or the socket closed). One system call."""
        if not self._meminfo:
            return None
        try:
            drops: int = _MEMINFO.unpack(self.socket.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO.size))[8]
        except (OSError, ValueError, struct.error):
            self._meminfo = False
            return None
        return drops

    def close(self) -> None:
        self._io.detach()  # before the descriptor number can be reused
        self.socket.close()
