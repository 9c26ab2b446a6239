"""The sender agent: sends every network publication's data and reads the receivers' feedback.

Each duty cycle it takes a few commands from the conductor, lets each
publication send (starting from a rotating index so none starves), and polls
the send endpoints for status messages and NAKs — on every cycle that sent
nothing, and otherwise every ``send_to_status_poll_ratio`` cycles, as Aeron's
sender does, so that feedback is never starved by a busy send path.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from driver.clock import NanoClock
from driver.core.network_publication import NetworkPublication
from driver.core.proxies import CommandQueue
from driver.media.endpoints import SendChannelEndpoint

__all__ = ["Sender"]


class Sender:
    role_name = "sender"

    def __init__(self, clock: NanoClock, commands: CommandQueue, status_poll_ratio: int) -> None:
        self._clock = clock
        self.commands = commands
        self._status_poll_ratio = max(1, status_poll_ratio)
        self.publications: list[NetworkPublication] = []
        self.endpoints: list[SendChannelEndpoint] = []
        self._round_robin = 0
        self._cycles = 0

    def on_start(self) -> None:
        pass

    def readable_sockets(self) -> list[socket.socket]:
        """What an idle park also waits on (data, setups and feedback arrive on these)."""
        return [endpoint.transport.socket for endpoint in self.endpoints]

    def do_work(self) -> int:
        now_ns = self._clock.nano_time()
        work = self.commands.drain()
        publications = self.publications
        count = len(publications)
        if count == 1:
            bytes_sent = publications[0].send(now_ns)
        else:
            bytes_sent = 0
            if count:
                start = self._round_robin = (self._round_robin + 1) % count
                for i in range(count):
                    bytes_sent += publications[(start + i) % count].send(now_ns)
        self._cycles += 1
        if bytes_sent == 0 or self._cycles >= self._status_poll_ratio:
            self._cycles = 0
            for endpoint in self.endpoints:
                work += endpoint.poll(now_ns)
                if endpoint.is_dynamic:
                    endpoint.expire_destinations(now_ns)
        return work + bytes_sent

    def on_close(self) -> None:
        pass

    # -- commands from the conductor (run on this agent's thread) --------------------------------

    def on_new_publication(self, publication: NetworkPublication, endpoint: SendChannelEndpoint) -> None:
        if endpoint not in self.endpoints:
            self.endpoints.append(endpoint)
        endpoint.publications[(publication.session_id, publication.stream_id)] = publication
        self.publications.append(publication)

    def on_remove_publication(
        self, publication: NetworkPublication, endpoint: SendChannelEndpoint, done: Callable[[], None]
    ) -> None:
        if publication in self.publications:
            self.publications.remove(publication)
        key = (publication.session_id, publication.stream_id)
        if endpoint.publications.get(key) is publication:
            del endpoint.publications[key]
        done()

    def on_close_endpoint(self, endpoint: SendChannelEndpoint, done: Callable[[], None]) -> None:
        if endpoint in self.endpoints:
            self.endpoints.remove(endpoint)
        done()
