"""The receiver agent: reads data from the receive endpoints and keeps every image moving.

Each duty cycle it takes a few commands from the conductor, polls each receive
endpoint (bounded per endpoint), and lets each image track its rebuild — loss
detection, NAKs and status messages. Elicited setups that got no answer, and
cooldowns after an image was removed, expire on the same cycle.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from driver.clock import NanoClock
from driver.concurrent.counters import AtomicCounter
from driver.core.proxies import CommandQueue
from driver.core.publication_image import PublicationImage
from driver.media.endpoints import ReceiveChannelEndpoint

__all__ = ["Receiver"]

PENDING_SETUP_TIMEOUT_NS = 1_000_000_000
IMAGE_COOLDOWN_NS = 5_000_000_000


class Receiver:
    role_name = "receiver"

    def __init__(self, clock: NanoClock, commands: CommandQueue) -> None:
        self._clock = clock
        self.commands = commands
        self.endpoints: list[ReceiveChannelEndpoint] = []
        self.images: list[PublicationImage] = []
        self._next_expiry_ns = 0

    def on_start(self) -> None:
        pass

    def readable_sockets(self) -> list[socket.socket]:
        """What an idle park also waits on (data, setups and feedback arrive on these)."""
        return [endpoint.transport.socket for endpoint in self.endpoints]

    def do_work(self) -> int:
        now_ns = self._clock.nano_time()
        work = self.commands.drain()
        for endpoint in self.endpoints:
            work += endpoint.poll(now_ns)
        for image in self.images:
            work += image.track_rebuild(now_ns)
        if now_ns >= self._next_expiry_ns:
            self._next_expiry_ns = now_ns + 100_000_000
            for endpoint in self.endpoints:
                endpoint.expire_pending(now_ns, PENDING_SETUP_TIMEOUT_NS)
                endpoint.elicit_from_control(now_ns, PENDING_SETUP_TIMEOUT_NS)
        return work

    def on_close(self) -> None:
        pass

    # -- commands from the conductor --------------------------------------------------------------

    def on_add_subscription(self, endpoint: ReceiveChannelEndpoint, stream_id: int) -> None:
        if endpoint not in self.endpoints:
            self.endpoints.append(endpoint)
        endpoint.stream_ref_counts[stream_id] = endpoint.stream_ref_counts.get(stream_id, 0) + 1

    def on_remove_subscription(self, endpoint: ReceiveChannelEndpoint, stream_id: int) -> None:
        count = endpoint.stream_ref_counts.get(stream_id, 0) - 1
        if count > 0:
            endpoint.stream_ref_counts[stream_id] = count
        else:
            endpoint.stream_ref_counts.pop(stream_id, None)

    def on_new_image(self, endpoint: ReceiveChannelEndpoint, image: PublicationImage) -> None:
        key = (image.session_id, image.stream_id)
        endpoint.pending_setups.pop(key, None)
        endpoint.images[key] = image
        self.images.append(image)
        image.send_status_message(image.join_position, image.window, self._clock.nano_time())

    def on_image_creation_failed(self, endpoint: ReceiveChannelEndpoint, session_id: int, stream_id: int) -> None:
        endpoint.pending_setups.pop((session_id, stream_id), None)

    def on_update_subscribers(
        self, image: PublicationImage, positions: tuple[AtomicCounter, ...], done: Callable[[], None]
    ) -> None:
        image.subscriber_positions = positions
        done()

    def on_remove_image(
        self, endpoint: ReceiveChannelEndpoint, image: PublicationImage, done: Callable[[], None]
    ) -> None:
        key = (image.session_id, image.stream_id)
        if endpoint.images.get(key) is image:
            del endpoint.images[key]
        endpoint.cooldowns[key] = self._clock.nano_time() + IMAGE_COOLDOWN_NS
        if image in self.images:
            self.images.remove(image)
        done()

    def on_close_endpoint(self, endpoint: ReceiveChannelEndpoint, done: Callable[[], None]) -> None:
        if endpoint in self.endpoints:
            self.endpoints.remove(endpoint)
        done()
