"""``driver.media._net.DatagramSocket`` and the transport built on it: results the socket module would give,
without raising when nothing is waiting; errors mapped as before (ECONNREFUSED ignored, others raised)."""

from __future__ import annotations

import contextlib
import errno
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from driver.errors import ChannelEndpointError
from driver.media._net import DatagramSocket
from driver.media.faults import FaultSpec
from driver.media.transport import UdpTransport


def _bound(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind((host, 0))
    sock.setblocking(False)
    return sock


@contextlib.contextmanager
def _pair(family: int = socket.AF_INET, host: str = "127.0.0.1") -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = _bound(family, host), _bound(family, host)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _receive(io: DatagramSocket, buffer: memoryview) -> tuple[int, tuple[object, ...]]:
    """Poll until a datagram is there (loopback delivers at once; bounded)."""
    deadline = time.monotonic() + 2.0
    for _ in range(100_000):
        received = io.recvfrom_into(buffer)
        if received is not None:
            return received
        assert time.monotonic() < deadline, "nothing arrived"
    raise AssertionError("nothing arrived")


def _first_error(call: Callable[[], object]) -> OSError:
    """Call until it raises OSError (bounded); the error."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            call()
        except OSError as exc:
            return exc
    raise AssertionError("no error within 2 s")


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_nothing_waiting_is_none_not_an_exception() -> None:
    with _pair() as (a, _):
        io = DatagramSocket(a.fileno(), a.family)
        assert io.recvfrom_into(memoryview(bytearray(64))) is None


def test_a_blocking_socket_does_not_block_either() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))  # blocking: the calls still are not
    try:
        assert DatagramSocket(sock.fileno(), sock.family).recvfrom_into(bytearray(8)) is None
    finally:
        sock.close()


def test_round_trip_gives_the_socket_modules_address() -> None:
    with _pair() as (a, b):
        ia, ib = DatagramSocket(a.fileno(), a.family), DatagramSocket(b.fileno(), b.family)
        buffer = memoryview(bytearray(256))
        assert ib.sendto(b"hello", a.getsockname()) == 5
        length, address = _receive(ia, buffer)
        assert (length, bytes(buffer[:length])) == (5, b"hello")
        assert address == b.getsockname()
        assert isinstance(address, tuple)
        assert isinstance(address[0], str)
        assert isinstance(address[1], int)
        # The socket module's own view of the same kind of datagram.
        b.sendto(b"again", a.getsockname())
        deadline = time.monotonic() + 2.0
        while True:
            try:
                data, python_address = a.recvfrom(256)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline
        assert (data, python_address) == (b"again", address)


def test_a_known_source_gives_the_cached_tuple() -> None:
    with _pair() as (a, b):
        ia, ib = DatagramSocket(a.fileno(), a.family), DatagramSocket(b.fileno(), b.family)
        buffer = memoryview(bytearray(64))
        ib.sendto(b"1", a.getsockname())
        ib.sendto(b"2", a.getsockname())
        first, second = _receive(ia, buffer)[1], _receive(ia, buffer)[1]
        assert first == second == b.getsockname()
        assert first is second


def test_many_sources_each_get_their_own_address() -> None:
    senders = [_bound() for _ in range(12)]  # more than the cache holds
    receiver = _bound()
    try:
        io = DatagramSocket(receiver.fileno(), receiver.family)
        buffer = memoryview(bytearray(64))
        for _ in range(2):
            for index, sender in enumerate(senders):
                sender.sendto(bytes([index]), receiver.getsockname())
                length, address = _receive(io, buffer)
                assert (length, buffer[0]) == (1, index)
                assert address == sender.getsockname()
    finally:
        for sock in (*senders, receiver):
            sock.close()


def test_a_longer_datagram_is_truncated_to_the_buffer_and_the_rest_dropped() -> None:
    with _pair() as (a, b):
        io = DatagramSocket(a.fileno(), a.family)
        b.sendto(bytes(range(100)), a.getsockname())
        b.sendto(b"next", a.getsockname())
        small = memoryview(bytearray(10))
        length, address = _receive(io, small)
        assert (length, bytes(small), address) == (10, bytes(range(10)), b.getsockname())
        big = memoryview(bytearray(64))
        length, _ = _receive(io, big)
        assert bytes(big[:length]) == b"next"


def test_empty_datagram() -> None:
    with _pair() as (a, b):
        io = DatagramSocket(a.fileno(), a.family)
        assert DatagramSocket(b.fileno(), b.family).sendto(b"", a.getsockname()) == 0
        assert _receive(io, memoryview(bytearray(8)))[0] == 0


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_addresses_are_four_tuples_like_the_socket_modules() -> None:
    with _pair(socket.AF_INET6, "::1") as (a, b):
        ia, ib = DatagramSocket(a.fileno(), a.family), DatagramSocket(b.fileno(), b.family)
        buffer = memoryview(bytearray(64))
        assert ib.sendto(b"six", a.getsockname()) == 3  # a 4-tuple destination
        length, address = _receive(ia, buffer)
        assert (length, bytes(buffer[:3])) == (3, b"six")
        assert address == b.getsockname()
        assert len(address) == 4
        assert address[0] == "::1"
        assert ib.sendto(b"two", ("::1", a.getsockname()[1])) == 3  # (host, port) is enough
        assert _receive(ia, buffer)[1] == address
        b.sendto(b"py", a.getsockname())
        deadline = time.monotonic() + 2.0
        while True:
            try:
                assert a.recvfrom(64) == (b"py", address)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline


def test_a_host_name_is_left_to_the_socket_module() -> None:
    with _pair() as (a, b):
        io = DatagramSocket(b.fileno(), b.family)
        assert io.sendto(b"x", ("localhost", a.getsockname()[1])) == -2
        assert io.sendto(b"x", ("", a.getsockname()[1])) == -2


def test_bad_destinations_raise_like_the_socket_module() -> None:
    with _pair() as (_, b):
        io = DatagramSocket(b.fileno(), b.family)
        with pytest.raises(TypeError):
            io.sendto(b"x", "127.0.0.1:9")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            io.sendto(b"x", ("127.0.0.1",))  # type: ignore[arg-type]
        with pytest.raises(OverflowError):
            io.sendto(b"x", ("127.0.0.1", 70000))
        with pytest.raises(TypeError):
            io.sendto("text", ("127.0.0.1", 9))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="family"):
            DatagramSocket(b.fileno(), socket.AF_UNIX)


def test_connection_refused_is_raised_with_its_errno() -> None:
    with _pair() as (a, b):
        dead = b.getsockname()
        b.close()  # nothing listens on ``dead`` now
        a.connect(dead)  # a connected UDP socket is told of the ICMP port-unreachable
        a.send(b"anyone?")
        io = DatagramSocket(a.fileno(), a.family)
        error = _first_error(lambda: io.recvfrom_into(bytearray(16)))
        assert isinstance(error, ConnectionRefusedError)
        assert error.errno == errno.ECONNREFUSED


def test_detached_socket_raises_ebadf() -> None:
    with _pair() as (a, _):
        io = DatagramSocket(a.fileno(), a.family)
        assert io.fd == a.fileno()
        io.detach()
        assert io.fd == -1
        with pytest.raises(OSError) as raised:
            io.recvfrom_into(bytearray(8))
        assert raised.value.errno == errno.EBADF
        with pytest.raises(OSError) as raised:
            io.sendto(b"x", ("127.0.0.1", 9))
        assert raised.value.errno == errno.EBADF


def test_a_read_only_buffer_is_refused() -> None:
    with _pair() as (a, _), pytest.raises(BufferError):
        DatagramSocket(a.fileno(), a.family).recvfrom_into(b"read only")


# -- the transport -----------------------------------------------------------------------------


@contextlib.contextmanager
def _transport(**kwargs: object) -> Iterator[UdpTransport]:
    transport = UdpTransport(bind_address=("127.0.0.1", 0), **kwargs)  # type: ignore[arg-type]
    try:
        yield transport
    finally:
        transport.close()


def _transport_receive(transport: UdpTransport, buffer: memoryview) -> tuple[int, tuple[str, int]]:
    deadline = time.monotonic() + 2.0
    for _ in range(100_000):
        received = transport.receive_into(buffer)
        if received is not None:
            return received
        assert time.monotonic() < deadline, "nothing arrived"
    raise AssertionError("nothing arrived")


def test_transport_round_trip_and_empty_poll() -> None:
    with _transport() as a, _transport() as b:
        buffer = memoryview(bytearray(128))
        assert a.receive_into(buffer) is None
        assert b.send(b"data", a.local_address) == 4
        length, address = _transport_receive(a, buffer)
        assert (bytes(buffer[:length]), address) == (b"data", b.local_address)
        assert a.poll_receive(buffer) is None  # no faults: the native call itself


def test_transport_sends_to_a_host_name_through_the_socket_module() -> None:
    with _transport() as a, _transport() as b:
        assert b.send(b"named", ("localhost", a.local_address[1])) == 5
        length, _ = _transport_receive(a, memoryview(bytearray(64)))
        assert length == 5


def test_transport_ignores_connection_refused() -> None:
    with _transport() as a, _transport() as b:
        dead = b.local_address
        b.close()
        a.socket.connect(dead)
        a.socket.send(b"anyone?")
        buffer = memoryview(bytearray(16))
        error = _first_error(lambda: a.poll_receive(buffer))
        assert error.errno == errno.ECONNREFUSED
        a.receive_failed(error)  # swallowed: ECONNREFUSED means nothing to read
        a.socket.send(b"anyone?")
        for _ in range(1000):  # the same error through receive_into is "nothing waiting"
            assert a.receive_into(buffer) is None


def test_transport_raises_channel_endpoint_error_for_other_errors() -> None:
    with _transport() as a:
        a._io.detach()  # as if the descriptor were gone: EBADF
        a.status_indicator_id = 42
        with pytest.raises(ChannelEndpointError) as raised:
            a.receive_into(memoryview(bytearray(8)))
        assert raised.value.status_indicator_id == 42
        with pytest.raises(OSError) as os_error:
            a.poll_receive(memoryview(bytearray(8)))
        with pytest.raises(ChannelEndpointError):
            a.receive_failed(os_error.value)
        with pytest.raises(ChannelEndpointError):
            a.send(b"x", ("127.0.0.1", 9))


def test_transport_with_receive_faults_drops_and_keeps_the_rest_in_order() -> None:
    spec = FaultSpec(loss_rate=0.5, seed=3)
    with _transport(receive_faults=spec) as a, _transport() as b:
        assert a.poll_receive == a.receive_into  # faults go through the Python path
        buffer = memoryview(bytearray(64))
        got: list[int] = []
        for index in range(200):
            b.send(bytes([index]), a.local_address)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # one datagram in flight at a time: read it (or see it dropped)
                received = a.receive_into(buffer)
                if received is not None:
                    got.append(buffer[0])
                    break
                if a.fault_counts["receive_dropped"] + len(got) > index:
                    break
        dropped = a.fault_counts["receive_dropped"]
        assert 50 < dropped < 150
        assert len(got) + dropped == 200
        assert got == sorted(got)


def test_transport_with_send_faults_still_delivers() -> None:
    with _transport(send_faults=FaultSpec(duplicate_rate=1.0, seed=1)) as a, _transport() as b:
        assert a.send(b"twice", b.local_address) == 5
        buffer = memoryview(bytearray(64))
        assert _transport_receive(b, buffer)[0] == 5
        assert _transport_receive(b, buffer)[0] == 5
