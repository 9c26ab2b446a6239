"""Multi-destination cast: one publication sent to several unicast subscribers.

``control-mode=manual``: the publisher adds and removes destinations with
``Publication.add_destination`` / ``remove_destination`` (ADD_DESTINATION /
REMOVE_DESTINATION).

``control-mode=dynamic``: the publication listens on ``control=``; subscribers name
the same control address and are added when their status messages arrive.
"""

from __future__ import annotations

import time

import pytest
from udp_helpers import Collector, UdpDrivers, driver_errors, free_udp_port, publish_checked

from driver.client import Publication, Subscription
from driver.errors import RegistrationError
from support.clients import wait_for_image
from support.waiting import execute_until

STREAM_ID = 3003


def _offer_for(publication: Publication, subscriptions: list[tuple[Subscription, Collector]], seconds: float) -> None:
    """Keep a trickle going for a while (image liveness needs traffic or heartbeats), draining everyone."""
    deadline = time.monotonic() + seconds
    for _ in range(1_000_000):
        if time.monotonic() > deadline:
            break
        for subscription, collector in subscriptions:
            collector.poll(subscription)
        time.sleep(0.001)


def test_manual_mdc_add_and_remove_destinations(udp: UdpDrivers) -> None:
    pub_dir = udp.embedded("pub").aeron_dir
    sub_dirs = [udp.embedded(f"sub{i}").aeron_dir for i in range(2)]
    sub_channels = [f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}" for _ in sub_dirs]
    subscriptions = [udp.client(d).add_subscription(c, STREAM_ID) for d, c in zip(sub_dirs, sub_channels, strict=True)]
    publisher = udp.client(pub_dir)
    publication = publisher.add_exclusive_publication(
        f"aeron:udp?control-mode=manual|fc=min|control=127.0.0.1:{free_udp_port()}", STREAM_ID
    )
    assert not publication.is_connected
    for channel in sub_channels:
        publication.add_destination(channel)
    for subscription in subscriptions:
        wait_for_image(subscription)
    collectors = [Collector(session_id=publication.session_id) for _ in subscriptions]
    pairs = list(zip(subscriptions, collectors, strict=True))
    publish_checked(publication, pairs, 1000, 64, timeout_s=20)
    publish_checked(publication, pairs, 4, 64 * 1024 - 16, timeout_s=20, start_seq=1000)

    # Without its destination the second subscriber's image goes away; the first keeps everything.
    publication.remove_destination(sub_channels[1])
    execute_until(
        lambda: not subscriptions[1].images,
        lambda: _offer_for(publication, pairs, 0.05),
        timeout_s=10,
        description="the removed destination's image to go",
    )
    publish_checked(publication, pairs[:1], 500, 64, timeout_s=20, start_seq=1004)
    assert len(collectors[1].seqs) == 1004

    for directory in (pub_dir, *sub_dirs):
        assert driver_errors(directory) == []

    # Unknown publications and non-manual channels are refused with typed errors.
    conductor = publisher.conductor
    with conductor.lock:
        request = conductor.begin_destination(-1, sub_channels[0], add=True, receive=False)
    with pytest.raises(RegistrationError, match="unknown publication"):
        conductor.await_response(request)
    unicast = publisher.add_publication(f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}", STREAM_ID)
    with pytest.raises(RegistrationError, match="manual"):
        unicast.add_destination(sub_channels[0])


def test_dynamic_mdc_subscribers_join_through_the_control_address(udp: UdpDrivers) -> None:
    pub_dir = udp.embedded("pub").aeron_dir
    sub_dirs = [udp.embedded(f"sub{i}").aeron_dir for i in range(2)]
    control = f"127.0.0.1:{free_udp_port()}"
    publication = udp.client(pub_dir).add_exclusive_publication(
        f"aeron:udp?control-mode=dynamic|fc=min|control={control}", STREAM_ID
    )
    subscriptions = [
        udp.client(d).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|control={control}", STREAM_ID)
        for d in sub_dirs
    ]
    for subscription in subscriptions:
        wait_for_image(subscription, timeout_s=10)
    collectors = [Collector(session_id=publication.session_id) for _ in subscriptions]
    pairs = list(zip(subscriptions, collectors, strict=True))
    publish_checked(publication, pairs, 1000, 64, timeout_s=20)
    for directory in (pub_dir, *sub_dirs):
        assert driver_errors(directory) == []
