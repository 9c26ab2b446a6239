"""A SETUP for a stream nobody subscribes to yet is kept: a subscription made just after connects at once.

A server publishes to a client as soon as it grants the connection; the client
subscribes on reading the grant, a moment after that publication's first SETUP
reached its driver. Publishers repeat a SETUP only every 100 ms (and a heartbeat
makes the receiver ask for one no sooner); the receiving endpoint keeps
unclaimed SETUPs for a second so the late subscription need not wait. Here both
intervals are made a minute long, so the stream can only connect through the
kept SETUP.
"""

from __future__ import annotations

import pytest
from udp_helpers import UdpDrivers, free_udp_port

import driver.core.network_publication as network_publication
from driver.media.endpoints import MAX_UNCLAIMED_SETUPS
from support.clients import wait_for_image
from support.waiting import execute_until


def test_a_subscription_after_the_setup_connects_without_its_repeat(
    udp: UdpDrivers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No repeated SETUP and no heartbeat (whose arrival would make the receiver elicit a SETUP) for a minute.
    monkeypatch.setattr(network_publication, "SETUP_INTERVAL_NS", 60_000_000_000)
    publisher_driver = udp.embedded("pub", publication_heartbeat_interval_ns=60_000_000_000)
    subscriber_driver = udp.embedded("sub")
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    subscriber.add_subscription(channel, 1)  # the port's endpoint exists (a client's reply stream, say)
    publication = publisher.add_exclusive_publication(channel, 2)
    (endpoint,) = subscriber_driver.conductor.receiver.endpoints
    execute_until(
        lambda: (publication.session_id, 2) in endpoint.unclaimed_setups,
        timeout_s=10,
        interval_s=0.001,
        description="the SETUP of stream 2 kept unclaimed",
    )
    late = subscriber.add_subscription(channel, 2)
    wait_for_image(late, timeout_s=10)
    execute_until(lambda: publication.is_connected, timeout_s=10, interval_s=0.001, description="publication connected")
    assert not endpoint.unclaimed_setups
    assert udp.errors.seen == []


def test_unclaimed_setups_are_bounded(udp: UdpDrivers) -> None:
    subscriber_driver = udp.embedded("sub")
    publisher_driver = udp.embedded("pub")
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    subscriber.add_subscription(channel, 1)
    count = MAX_UNCLAIMED_SETUPS + 8
    for stream_id in range(2, 2 + count):
        publisher.add_exclusive_publication(channel, stream_id)
    (endpoint,) = subscriber_driver.conductor.receiver.endpoints
    execute_until(
        lambda: {key[1] for key in endpoint.unclaimed_setups} >= set(range(2 + count - 8, 2 + count)),
        timeout_s=10,
        interval_s=0.001,
        description="the newest SETUPs kept",
    )
    assert len(endpoint.unclaimed_setups) <= MAX_UNCLAIMED_SETUPS


def test_a_channels_heartbeat_interval_overrides_the_drivers(udp: UdpDrivers) -> None:
    """``heartbeat-interval`` on a publication's channel spaces its idle heartbeats; others keep the driver's."""
    driver = udp.embedded("pub", publication_heartbeat_interval_ns=250_000_000)
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    spaced = client.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{port}|heartbeat-interval=2s", 1)
    plain = client.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", 2)
    by_session = {p.session_id: p for p in driver.conductor.network.publications}
    assert by_session[spaced.session_id].heartbeat_interval_ns == 2_000_000_000
    assert by_session[plain.session_id].heartbeat_interval_ns == 250_000_000
    with pytest.raises(Exception, match="heartbeat-interval"):
        client.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{port}|heartbeat-interval=0", 3)
