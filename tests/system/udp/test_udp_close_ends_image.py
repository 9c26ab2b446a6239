"""A publication its last client closes ends its subscribers' images now, not at a timer step.

Aeron flags the end of stream when the last client lets go of a publication that has sent everything
(``decRef``); the driver's timer (a second by default) only finishes what is left. Both drivers here run
that timer once a minute, so every step below that completes within seconds did so without it: the end
of stream goes out on close, and at a per-source limit an image whose publisher ended gives its place to
the next publisher from that host at once (a host of many client processes closing and opening handshake
routes waited out the timer in turns).
"""

from __future__ import annotations

from test_udp_forged_setups import _driver_view
from udp_helpers import UdpDrivers, free_udp_port

from driver.concurrent.system_counters import DriverSystemCounterId
from support.clients import wait_for_image
from support.waiting import execute_until

STREAM_ID = 7301
_MINUTE_NS = 60 * 10**9


def test_a_closed_publication_ends_its_image_without_a_timer_step(udp: UdpDrivers) -> None:
    pub_driver = udp.embedded("pub", timer_interval_ns=_MINUTE_NS)
    sub_driver = udp.embedded("sub")
    port = free_udp_port()
    subscriber = udp.client(sub_driver.aeron_dir)
    subscription = subscriber.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    publication = udp.client(pub_driver.aeron_dir).add_exclusive_publication(
        f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID
    )
    (image,) = wait_for_image(subscription)
    publication.close()
    execute_until(lambda: image.is_end_of_stream, timeout_s=10, description="end of stream on close")
    execute_until(lambda: subscription.images == (), timeout_s=10, description="the ended image gone")


def test_at_the_per_source_limit_an_ended_image_gives_its_place_at_once(udp: UdpDrivers) -> None:
    pub_driver = udp.embedded("pub", timer_interval_ns=_MINUTE_NS)
    sub_driver = udp.embedded("sub", timer_interval_ns=_MINUTE_NS)
    port = free_udp_port()
    subscriber = udp.client(sub_driver.aeron_dir)
    subscription = subscriber.add_subscription(
        f"aeron:udp?endpoint=127.0.0.1:{port}|max-images-per-source=1", STREAM_ID
    )
    publisher = udp.client(pub_driver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    first = publisher.add_exclusive_publication(channel, STREAM_ID)
    wait_for_image(subscription)
    with _driver_view(sub_driver.aeron_dir) as view:
        second = publisher.add_exclusive_publication(channel, STREAM_ID)
        execute_until(
            lambda: view.value(DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT) >= 1,
            timeout_s=10,
            description="the second publisher refused at the per-source limit",
        )
        first.close()
        execute_until(
            lambda: [i.session_id for i in subscription.images] == [second.session_id],
            timeout_s=10,
            description="the second publisher's image in the first's place",
        )
