"""Many UDP streams between two drivers: what a server with a connection per client looks like to its driver.

Past a few publications, images and endpoints the sender and receiver visit
only what is due (an agenda of deadlines, native scans for new frames and moved
subscribers, epoll for sockets with datagrams). These tests run enough streams
to take those paths: data under loss must still arrive exactly once and in
order on every stream, idle streams must stay connected on heartbeats and
status messages alone, and a closed publication must still be seen to end.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from udp_helpers import (
    Collector,
    UdpDrivers,
    driver_errors,
    free_udp_port,
    make_message,
    offer_retrying,
    system_counter,
)

import driver.core.network as network_module
import driver.core.receiver as receiver_module
import driver.core.sender as sender_module
from driver.client import ExclusivePublication, Subscription
from driver.concurrent.system_counters import SystemCounterId
from driver.core.publication_image import ImageState
from support.clients import wait_for_image
from support.waiting import execute_until

STREAMS = 8  # each on its own port: 8 send and 8 receive endpoints, 8 publications, 8 images
STREAM_ID = 2002
BODY = 200
FAULTS = {
    "receive_loss_rate": 0.05,
    "receive_reorder_rate": 0.05,
    "receive_duplicate_rate": 0.05,
    "receive_fault_seed": 29,
}


def _streams(
    udp: UdpDrivers, count: int, **subscriber_settings: object
) -> tuple[list[Subscription], list[ExclusivePublication], list[Path]]:
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub", **subscriber_settings)
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    channels = [f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=65536" for _ in range(count)]
    subscriptions = [subscriber.add_subscription(channel, STREAM_ID) for channel in channels]
    publications = [publisher.add_exclusive_publication(channel, STREAM_ID) for channel in channels]
    for subscription in subscriptions:
        wait_for_image(subscription)
    return subscriptions, publications, [publisher_driver.aeron_dir, subscriber_driver.aeron_dir]


def _send_round_robin(
    publications: list[ExclusivePublication],
    subscriptions: list[Subscription],
    collectors: list[Collector],
    count: int,
    timeout_s: float,
    start: int = 0,
) -> None:
    """Checked messages ``start`` .. ``start + count - 1`` on every stream, interleaved, draining meanwhile."""
    deadline = time.monotonic() + timeout_s

    def drain() -> None:
        for subscription, collector in zip(subscriptions, collectors, strict=True):
            collector.poll(subscription)

    total = start + count
    for seq in range(start, total):
        message = make_message(0, seq, BODY)
        for publication in publications:
            offer_retrying(publication, message, drain, deadline, f"offer of {seq}")
    execute_until(
        lambda: all(len(c.seqs) >= total or c.problems for c in collectors),
        drain,
        timeout_s=max(1.0, deadline - time.monotonic()),
        max_iterations=10_000_000,
        interval_s=0.0001,
        description=f"{total} messages on each of {len(collectors)} streams",
    )
    for collector in collectors:
        collector.check(total)


def test_many_streams_exactly_once_in_order_under_loss(udp: UdpDrivers) -> None:
    subscriptions, publications, (publisher_dir, subscriber_dir) = _streams(udp, STREAMS, **FAULTS)
    assert max(sender_module.FEW_PUBLICATIONS, receiver_module.FEW_IMAGES, sender_module.FEW_ENDPOINTS) < STREAMS
    collectors = [Collector(session_id=p.session_id) for p in publications]
    _send_round_robin(publications, subscriptions, collectors, 400, timeout_s=60)
    assert system_counter(subscriber_dir, SystemCounterId.NAK_MESSAGES_SENT) > 0
    assert system_counter(publisher_dir, SystemCounterId.RETRANSMITS_SENT) > 0
    for aeron_dir in (publisher_dir, subscriber_dir):
        assert driver_errors(aeron_dir) == []
    assert udp.errors.seen == []


def test_idle_streams_stay_connected_and_a_closed_one_ends(udp: UdpDrivers) -> None:
    subscriptions, publications, _ = _streams(udp, STREAMS)
    collectors = [Collector(session_id=p.session_id) for p in publications]
    _send_round_robin(publications, subscriptions, collectors, 20, timeout_s=30)
    # Longer than image liveness and publication connection timeouts (1 s each in UDP_SETTINGS): only heartbeats
    # and status messages, sent when their agenda deadlines come, keep the streams up.
    time.sleep(2.5)
    assert all(p.is_connected for p in publications)
    assert all(len(s.images) == 1 for s in subscriptions)
    publications[3].close()
    execute_until(
        lambda: not subscriptions[3].images,
        lambda: subscriptions[3].poll(lambda *_: None, 10),
        timeout_s=10,
        max_iterations=1_000_000,
        interval_s=0.001,
        description="the closed stream's image to go",
    )
    assert all(len(s.images) == 1 for i, s in enumerate(subscriptions) if i != 3)
    assert all(p.is_connected for i, p in enumerate(publications) if i != 3)
    survivors = [i for i in range(STREAMS) if i != 3]
    _send_round_robin(
        [publications[i] for i in survivors],
        [subscriptions[i] for i in survivors],
        [collectors[i] for i in survivors],
        40,
        timeout_s=30,
        start=20,
    )
    assert udp.errors.seen == []


@pytest.mark.parametrize("count", [3, 5])
def test_streams_just_past_the_thresholds(udp: UdpDrivers, count: int) -> None:
    """3 streams: agenda for publications and images, sockets still tried one by one; 5: epoll for them too."""
    subscriptions, publications, _ = _streams(udp, count)
    collectors = [Collector(session_id=p.session_id) for p in publications]
    _send_round_robin(publications, subscriptions, collectors, 200, timeout_s=30)
    assert udp.errors.seen == []


def test_publications_coming_and_going_keep_their_limits_moving(
    udp: UdpDrivers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server opens and closes a publication per connection; its driver's publisher-limit watch appends
    newcomers and skips the ones gone until enough piled up (a small allowance here, so that a rebuild happens
    between newcomers). Every live publication then sends more than its term window: its limit must follow its
    sender, whether it was watched from a rebuild or appended."""
    monkeypatch.setattr(network_module, "_LIMITS_DEAD", 2)
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub")
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=65536|linger=0"
    count = 24
    subscriptions = [subscriber.add_subscription(channel, STREAM_ID + i) for i in range(count)]
    first = [publisher.add_exclusive_publication(channel, STREAM_ID + i) for i in range(count // 2)]
    for subscription in subscriptions[: count // 2]:
        wait_for_image(subscription)
    network = publisher_driver.conductor.network
    for publication in first[: count // 4]:
        publication.close()
    execute_until(
        lambda: len(network.publications) == count // 2 - count // 4,
        timeout_s=15,
        description="the closed publications gone from the driver",
    )
    second = [publisher.add_exclusive_publication(channel, STREAM_ID + i) for i in range(count // 2, count)]
    for subscription in subscriptions[count // 2 :]:
        wait_for_image(subscription)
    live = first[count // 4 :] + second
    collectors = [Collector(session_id=p.session_id) for p in live]
    # 200-byte bodies: 160 of them are more than the 32 KiB window of a 64 KiB term.
    _send_round_robin(live, subscriptions[count // 4 :], collectors, 160, timeout_s=60)
    assert udp.errors.seen == []


def test_an_image_outlives_all_but_the_last_subscription_of_its_stream(udp: UdpDrivers) -> None:
    """The driver finds a stream's subscriptions by endpoint and stream (not by scanning them all): closing one
    of two subscriptions of a stream leaves the image to the other, closing the last ends it, and another
    stream on the same port is untouched throughout."""
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub")
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=65536"
    one, two = (subscriber.add_subscription(channel, STREAM_ID) for _ in range(2))
    other = subscriber.add_subscription(channel, STREAM_ID + 1)
    publications = [publisher.add_exclusive_publication(channel, s) for s in (STREAM_ID, STREAM_ID + 1)]
    for subscription in (one, two, other):
        wait_for_image(subscription)
    network = subscriber_driver.conductor.network

    def active(stream_id: int) -> int:
        return sum(1 for i in network.images if i.stream_id == stream_id and i.state is ImageState.ACTIVE)

    one.close()
    collectors = [Collector(session_id=p.session_id) for p in publications]
    _send_round_robin(publications, [two, other], collectors, 20, timeout_s=30)
    assert active(STREAM_ID) == 1
    two.close()
    execute_until(lambda: active(STREAM_ID) == 0, timeout_s=10, description="the image of the closed stream ended")
    assert active(STREAM_ID + 1) == 1
    _send_round_robin(publications[1:], [other], collectors[1:], 20, timeout_s=30, start=20)
    assert udp.errors.seen == []


def test_the_subscriber_position_watch_follows_images_as_they_come_and_go(udp: UdpDrivers) -> None:
    """The receiver takes images into its native watch of subscriber positions one at a time (a storm of connects
    must not walk every image per new one): after images come, go and gain a subscriber, it watches exactly the
    positions of the images it has, and data still flows on the streams left."""
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub")
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    channels = [f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=65536" for _ in range(STREAMS)]
    subscriptions = [subscriber.add_subscription(channel, STREAM_ID) for channel in channels]
    publications = [publisher.add_exclusive_publication(channel, STREAM_ID) for channel in channels]
    for subscription in subscriptions:
        wait_for_image(subscription)
    receiver = subscriber_driver.conductor.receiver

    def watched() -> list[int]:
        return sorted(id(image) for image in receiver._positions_of)

    def present() -> list[int]:
        return sorted(id(image) for image in receiver._agenda.items for _ in image.subscriber_positions)

    def settled(count: int) -> bool:
        # The receiver runs on the driver's thread: a read that meets it changing its dicts is tried again.
        try:
            return len(present()) == count and watched() == present()
        except RuntimeError:
            return False

    execute_until(lambda: settled(STREAMS), timeout_s=10, max_iterations=100_000, interval_s=0.001)
    for publication in publications[:3]:
        publication.close()
    execute_until(lambda: settled(STREAMS - 3), timeout_s=15, max_iterations=1_000_000, interval_s=0.001)
    # A second subscriber on a stream left: its image has two positions to watch.
    extra = subscriber.add_subscription(channels[5], STREAM_ID)
    wait_for_image(extra)
    execute_until(lambda: settled(STREAMS - 2), timeout_s=10, max_iterations=100_000, interval_s=0.001)
    left = list(range(3, STREAMS))
    collectors = [Collector(session_id=publications[i].session_id) for i in left]
    _send_round_robin([publications[i] for i in left], [subscriptions[i] for i in left], collectors, 50, timeout_s=30)
