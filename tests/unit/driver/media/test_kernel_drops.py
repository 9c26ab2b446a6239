"""A receive endpoint counts the datagrams the kernel dropped for its socket (its queue full: we read too late)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.media.endpoints import EndpointCounters, ReceiveChannelEndpoint
from driver.media.udp_channel import UdpChannel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the drop count is Linux's SO_MEMINFO")

FLOOD = 4000
"""Datagrams sent at an unread socket with a small receive buffer: far more than it holds."""


@pytest.fixture
def endpoint() -> Iterator[ReceiveChannelEndpoint]:
    manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
    sc = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
    counters = EndpointCounters.of(sc.__getitem__)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    opened = ReceiveChannelEndpoint(
        UdpChannel.parse(f"aeron:udp?endpoint=127.0.0.1:{port}"),
        counters,
        manager.new_counter("rcv-channel"),
        lambda _endpoint, _fields, _source: True,
        receiver_id=1,
        so_rcvbuf=4096,
    )
    try:
        yield opened
    finally:
        opened.close()


def _flood(endpoint: ReceiveChannelEndpoint) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for _ in range(FLOOD):
            sender.sendto(b"x" * 64, endpoint.transport.local_address)


def test_drops_are_counted_once_and_stamped_with_the_time_they_were_seen(endpoint: ReceiveChannelEndpoint) -> None:
    assert endpoint.count_kernel_drops(10) == 0
    never = endpoint.dropped_ns
    assert never < 0
    _flood(endpoint)
    first = endpoint.count_kernel_drops(20)
    assert 0 < first < FLOOD  # the queue held some: the rest never reached us
    assert endpoint.kernel_drops == first
    assert endpoint.dropped_ns == 20
    assert endpoint.count_kernel_drops(30) == 0
    assert endpoint.dropped_ns == 20
    _flood(endpoint)  # the queue is still full: all of these go
    assert endpoint.count_kernel_drops(40) == FLOOD
    assert endpoint.dropped_ns == 40


def test_a_closed_socket_reports_no_drops(endpoint: ReceiveChannelEndpoint) -> None:
    endpoint.transport.close()
    assert endpoint.transport.kernel_drops() is None
    assert endpoint.count_kernel_drops(10) == 0
