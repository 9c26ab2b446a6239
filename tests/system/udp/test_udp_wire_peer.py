"""Our driver against a hand-driven peer: a raw UDP socket that speaks the frames itself.

The socket plays the other side of the protocol exactly, so each test checks what
goes over the wire: end-of-stream heartbeats (and the ``eos=false`` channel
parameter), round-trip measurements a receiver asks for, and dynamic
multi-destination-cast receivers being forgotten once they fall silent.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from udp_helpers import UdpDrivers, free_udp_port

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter
from driver.core.congestion import StaticWindowCongestionControl
from driver.logbuffer.frame import HDR_TYPE_DATA, HDR_TYPE_RTTM, HDR_TYPE_SETUP, HDR_TYPE_SM
from driver.media.endpoints import EndpointCounters, SendChannelEndpoint
from driver.media.udp_channel import UdpChannel
from driver.wire.data import HEARTBEAT_EOS_FLAGS, write_data_header
from driver.wire.rttm import REPLY_FLAG, RTTM, write_rttm
from driver.wire.setup import SETUP, write_setup
from driver.wire.status import write_sm
from support.clients import wait_for_image
from support.waiting import execute_until

STREAM_ID = 4004


class OneMeasurement(StaticWindowCongestionControl):
    """Congestion control that asks for a single RTT measurement (static never asks)."""

    __slots__ = ("asked",)

    def __init__(self, initial_window: int, term_length: int) -> None:
        super().__init__(initial_window, term_length)
        self.asked = False

    def should_measure_rtt(self, now_ns: int) -> bool:
        return not self.asked

    def on_rttm_sent(self, now_ns: int) -> None:
        self.asked = True


TERM_LENGTH = 64 * 1024


@pytest.fixture
def peer() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.05)
    try:
        yield sock
    finally:
        sock.close()


def _frames(sock: socket.socket, seconds: float) -> Iterator[tuple[bytes, tuple[str, int]]]:
    deadline = time.monotonic() + seconds
    for _ in range(100_000):
        if time.monotonic() > deadline:
            return
        try:
            yield sock.recvfrom(65536)
        except TimeoutError:
            continue


def _heartbeat_flags_after_close(
    udp: UdpDrivers, peer: socket.socket, channel_suffix: str, *, threading_mode: str = "", close_driver: bool = False
) -> set[int]:
    """The heartbeat flags the peer sees after the publication closes (or, ``close_driver``, its whole driver)."""
    port = peer.getsockname()[1]
    driver = udp.embedded("pub", threading_mode or "SHARED")
    client = udp.client(driver.aeron_dir)
    publication = client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}{channel_suffix}", STREAM_ID)
    setup = next((f, a) for f, a in _frames(peer, 5) if len(f) == 40 and f[6] == HDR_TYPE_SETUP)
    fields = SETUP.unpack_from(setup[0])
    session_id, active_term_id, term_offset = fields[5], fields[8], fields[4]
    sm = bytearray(36)
    write_sm(sm, 0, session_id, STREAM_ID, active_term_id, term_offset, 128 * 1024, 7)
    peer.sendto(sm, setup[1])
    execute_until(lambda: publication.is_connected, timeout_s=5, interval_s=0.01)
    if close_driver:
        driver.close()
    else:
        publication.close()
    return {
        frame[5]
        for frame, _ in _frames(peer, 1.5)
        if len(frame) == 32 and frame[6] == HDR_TYPE_DATA and frame[:4] == b"\x00\x00\x00\x00"
    }


def test_closing_publication_signals_end_of_stream(udp: UdpDrivers, peer: socket.socket) -> None:
    assert HEARTBEAT_EOS_FLAGS in _heartbeat_flags_after_close(udp, peer, "")


def test_eos_false_keeps_end_of_stream_off_the_wire(udp: UdpDrivers, peer: socket.socket) -> None:
    assert HEARTBEAT_EOS_FLAGS not in _heartbeat_flags_after_close(udp, peer, "|eos=false")


@pytest.mark.parametrize("threading_mode", ["SHARED", "DEDICATED"])
def test_closing_driver_signals_end_of_stream_of_its_publications(
    udp: UdpDrivers, peer: socket.socket, threading_mode: str
) -> None:
    """A stopping driver tells its receivers the stream ended rather than leaving them to time out the image."""
    flags = _heartbeat_flags_after_close(udp, peer, "", threading_mode=threading_mode, close_driver=True)
    assert HEARTBEAT_EOS_FLAGS in flags


def test_closing_driver_keeps_end_of_stream_off_the_wire_with_eos_false(udp: UdpDrivers, peer: socket.socket) -> None:
    assert HEARTBEAT_EOS_FLAGS not in _heartbeat_flags_after_close(udp, peer, "|eos=false", close_driver=True)


def test_receiver_measures_round_trip_when_congestion_control_asks(udp: UdpDrivers, peer: socket.socket) -> None:
    driver = udp.embedded("sub")
    port = free_udp_port()
    subscription = udp.client(driver.aeron_dir).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    setup = bytearray(40)
    write_setup(setup, 0, 0, 42, STREAM_ID, 5, 5, TERM_LENGTH, 1408, 0)
    execute_until(lambda: peer.sendto(setup, ("127.0.0.1", port)) and driver.conductor.network.images, timeout_s=5)
    image = driver.conductor.network.images[0]
    heartbeat = bytearray(32)
    write_data_header(heartbeat, 0, 0, 0xC0, HDR_TYPE_DATA, 0, 42, STREAM_ID, 5)
    peer.sendto(heartbeat, ("127.0.0.1", port))  # keeps the image alive
    wait_for_image(subscription, timeout_s=5)
    image.congestion_control = OneMeasurement(64 * 1024, TERM_LENGTH)
    request = next(f for f, _ in _frames(peer, 5) if len(f) == 40 and f[6] == HDR_TYPE_RTTM)
    _, _, flags, _, session_id, stream_id, echo_ns, _, receiver_id = RTTM.unpack_from(request)
    assert flags & REPLY_FLAG
    assert (session_id, stream_id) == (42, STREAM_ID)
    echo = bytearray(40)
    write_rttm(echo, 0, 42, STREAM_ID, echo_ns, 1_000, receiver_id, 0)
    peer.sendto(echo, ("127.0.0.1", port))
    rtt_ns = execute_until(lambda: image.rtt_ns if image.rtt_ns >= 0 else None, timeout_s=5)
    assert 0 <= rtt_ns < 5_000_000_000


def test_dynamic_destinations_are_forgotten_when_silent() -> None:
    values = AtomicBuffer(bytearray(1024))
    names = (
        "bytes_received",
        "invalid_packets",
        "status_messages_received",
        "naks_received",
        "status_messages_sent",
        "short_sends",
        "bytes_sent",
    )
    counters = EndpointCounters(**{name: AtomicCounter(values, i) for i, name in enumerate(names)})
    channel = UdpChannel.parse(f"aeron:udp?control-mode=dynamic|control=127.0.0.1:{free_udp_port()}")
    endpoint = SendChannelEndpoint(channel, counters, AtomicCounter(values, 7))
    try:
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        receiver.bind(("127.0.0.1", 0))
        sm = bytearray(36)
        write_sm(sm, 0, 1, STREAM_ID, 0, 0, 1024, 9)
        receiver.sendto(sm, ("127.0.0.1", channel.local_control[1]))
        execute_until(lambda: endpoint.poll(0) or endpoint.destinations, timeout_s=5)
        assert endpoint.destinations == [receiver.getsockname()]
        endpoint.expire_destinations(4_000_000_000)
        assert endpoint.destinations == [receiver.getsockname()]
        endpoint.expire_destinations(6_000_000_000)
        assert endpoint.destinations == []
        receiver.close()
    finally:
        endpoint.close()


def test_setup_for_an_unsubscribed_stream_is_ignored(udp: UdpDrivers, peer: socket.socket) -> None:
    driver = udp.embedded("sub")
    port = free_udp_port()
    udp.client(driver.aeron_dir).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    setup = bytearray(40)
    write_setup(setup, 0, 0, 43, STREAM_ID + 1, 5, 5, TERM_LENGTH, 1408, 0)
    peer.sendto(setup, ("127.0.0.1", port))
    assert not [f for f, _ in _frames(peer, 0.5) if f[6] == HDR_TYPE_SM]
    assert driver.conductor.network.images == []
