"""A subscription on port 0: the driver binds a port the kernel picks and says which (no pick-then-bind race).

The bound address is published in a local socket address counter (type 14, as later Aerons do) that
``Subscription.local_socket_addresses`` reads; later subscriptions naming that port share the endpoint, and a
publication to it reaches them.
"""

from __future__ import annotations

import socket

import pytest
from udp_helpers import UdpDrivers, allocated_counters, counters_of, driver_errors

from driver.concurrent.system_counters import LOCAL_SOCKET_ADDRESS_TYPE_ID
from support.clients import poll_until, wait_for_image
from support.waiting import execute_until

STREAM_ID = 1001


def _port_of(address: str) -> int:
    host, _, port = address.rpartition(":")
    assert host == "127.0.0.1"
    return int(port)


def test_port_zero_binds_a_port_that_other_subscriptions_and_publications_use(udp: UdpDrivers) -> None:
    driver = udp.embedded("sub")
    aeron = udp.client(driver.aeron_dir)
    first = aeron.add_subscription("aeron:udp?endpoint=127.0.0.1:0", STREAM_ID)
    addresses = first.local_socket_addresses()
    assert len(addresses) == 1
    port = _port_of(addresses[0])
    assert port != 0
    # The port is really taken (by the driver's socket).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, pytest.raises(OSError):
        probe.bind(("127.0.0.1", port))
    # A subscription on the bound port shares the endpoint (a second bind would fail) and hears a publisher.
    second = aeron.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}|session-id=77", STREAM_ID + 1)
    assert second.channel_status == 1
    assert second.channel_status_id == first.channel_status_id
    assert second.local_socket_addresses() == addresses
    publisher = udp.client(udp.embedded("pub").aeron_dir)
    publication = publisher.add_exclusive_publication(
        f"aeron:udp?endpoint=127.0.0.1:{port}|session-id=77", STREAM_ID + 1
    )
    wait_for_image(second)
    execute_until(lambda: publication.offer(b"hello") > 0, timeout_s=10, description="offer accepted")
    got: list[bytes] = []
    poll_until(second, lambda payload, _h: got.append(bytes(payload)), lambda: bool(got), timeout_s=10)
    assert got == [b"hello"]
    assert driver_errors(driver.aeron_dir) == []


def test_each_port_zero_subscription_gets_its_own_port_and_counter_until_closed(udp: UdpDrivers) -> None:
    driver = udp.embedded("sub")
    aeron = udp.client(driver.aeron_dir)
    subscriptions = [aeron.add_subscription("aeron:udp?endpoint=127.0.0.1:0", STREAM_ID) for _ in range(3)]
    ports = [_port_of(s.local_socket_addresses()[0]) for s in subscriptions]
    assert len(set(ports)) == 3
    with counters_of(driver.aeron_dir) as (_, reader):
        labels = [label for _, type_id, label in allocated_counters(reader) if type_id == LOCAL_SOCKET_ADDRESS_TYPE_ID]
    assert sorted(labels) == sorted(
        f"rcv-local-sockaddr: {s.channel_status_id} 127.0.0.1:{p}" for s, p in zip(subscriptions, ports, strict=True)
    )
    for subscription in subscriptions:
        subscription.close()
        assert subscription.local_socket_addresses() == []

    def counters_left() -> list[str]:
        with counters_of(driver.aeron_dir) as (_, reader):
            return [
                label for _, type_id, label in allocated_counters(reader) if type_id == LOCAL_SOCKET_ADDRESS_TYPE_ID
            ]

    execute_until(lambda: not counters_left(), timeout_s=10, description="local address counters freed")
    # The ports are free again: the endpoints' sockets are closed.
    for port in ports:
        execute_until(lambda port=port: _bindable(port), timeout_s=10, description=f"port {port} released")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_standalone_driver_process_reports_the_bound_port_too(udp: UdpDrivers) -> None:
    driver = udp.process("sub")
    subscription = udp.client(driver.aeron_dir).add_subscription("aeron:udp?endpoint=127.0.0.1:0", STREAM_ID)
    addresses = subscription.local_socket_addresses()
    assert len(addresses) == 1
    assert _port_of(addresses[0]) > 0
