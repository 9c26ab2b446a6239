"""A UDP image whose publisher has ended stays available until its subscribers have read everything.

Aeron 1.15.1's PublicationImage goes INACTIVE on end of stream (or silence), but it only
tells clients the image is unavailable once every subscriber position has reached the
rebuild position (``isDrained``). Telling them earlier makes the client drop the image
with messages still unread in it.
"""

from __future__ import annotations

import socket
import time
from functools import partial

from driver.client import Aeron, Publication
from driver.core.media_driver import MediaDriver
from support.waiting import execute_until


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _offered(publication: Publication, message: bytes) -> bool:
    return publication.offer(message) >= 0


def test_slow_subscriber_reads_everything_after_the_publisher_closed(media_driver: MediaDriver) -> None:
    channel = f"aeron:udp?endpoint=127.0.0.1:{_free_udp_port()}"
    messages = [f"message {i}".encode() for i in range(5)]
    received: list[bytes] = []
    with Aeron.connect(aeron_dir=media_driver.aeron_dir) as aeron:
        subscription = aeron.add_subscription(channel, 77)
        publication = aeron.add_publication(channel, 77)
        execute_until(lambda: subscription.images, timeout_s=10, interval_s=0.005, description="the image")
        for message in messages:
            execute_until(partial(_offered, publication, message), timeout_s=10, interval_s=0.001)
        publication.close()
        # Not polling: the end of stream arrives and is processed while nothing has been read.
        time.sleep(1.0)
        execute_until(
            lambda: len(received) >= len(messages) or not subscription.images,
            lambda: subscription.poll(lambda payload, header: received.append(bytes(payload)), 10),
            timeout_s=10,
            interval_s=0.005,
        )
        assert received == messages
        execute_until(lambda: not subscription.images, timeout_s=30, interval_s=0.01, description="image gone")
