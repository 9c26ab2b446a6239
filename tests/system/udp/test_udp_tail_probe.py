"""A stream's last message lost on the way is asked for again soon when its publication has a tail probe.

A reliable stream reveals a lost datagram to its receiver only by what follows it: the next message, or a
heartbeat at the sender's position. With a long heartbeat interval (the end point's 2 s) a lone message lost at
the end of a burst waited for the next message; ``tail-probe`` sends one heartbeat that long after data. Here a
relay between the two drivers drops the data datagram that carries one message, once; the heartbeat interval is a
minute, so only the probe can reveal the loss (the receiver then NAKs and the sender resends through the relay).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from udp_helpers import UdpDrivers, free_udp_port

from driver.concurrent.system_counters import SystemCounterId
from support.clients import wait_for_image
from support.waiting import execute_until

MARK = b"LOST-ONCE"


class _Relay:
    """Forwards datagrams between a publisher and a subscriber's port on 127.0.0.1, both ways, dropping the first
    data datagram that carries ``MARK``."""

    def __init__(self, target_port: int) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self.port: int = self._sock.getsockname()[1]
        self._target = ("127.0.0.1", target_port)
        self._publisher: tuple[str, int] | None = None
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, source = self._sock.recvfrom(65536)
            except TimeoutError:
                continue
            if source == self._target:  # the subscriber's status messages and NAKs
                if self._publisher is not None:
                    self._sock.sendto(data, self._publisher)
                continue
            self._publisher = source
            if not self.dropped and MARK in data:
                self.dropped += 1
                continue
            self._sock.sendto(data, self._target)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


@pytest.fixture
def relay_to() -> Iterator[list[_Relay]]:
    made: list[_Relay] = []
    yield made
    for relay in made:
        relay.close()


@pytest.mark.parametrize("probe", [True, False], ids=["tail_probe", "none"])
def test_a_lost_last_message_is_asked_for_again_after_the_probe(
    udp: UdpDrivers, relay_to: list[_Relay], probe: bool
) -> None:
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub")
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    port = free_udp_port()
    relay = _Relay(port)
    relay_to.append(relay)
    subscription = subscriber.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 1)
    params = "|heartbeat-interval=60s" + ("|tail-probe=50ms" if probe else "")
    publication = publisher.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{relay.port}{params}", 1)
    wait_for_image(subscription)
    received: list[bytes] = []

    def read() -> bool:
        subscription.poll(lambda payload, header: received.append(bytes(payload)), 10)
        return MARK in received

    # One message read first (so the lost datagram holds the second alone), then the one the relay drops.
    execute_until(lambda: publication.offer(b"first") >= 0, timeout_s=10, description="an offer taken")
    execute_until(lambda: read() or received == [b"first"], timeout_s=10, interval_s=0.005, description="the first")
    execute_until(lambda: publication.offer(MARK) >= 0, timeout_s=10, description="an offer taken")
    if probe:
        # The probe (50 ms after the data) shows the receiver what it missed: it NAKs, and the resend gets through.
        execute_until(read, timeout_s=10, interval_s=0.005, description="the lost message resent and read")
        assert received == [b"first", MARK]
        assert relay.dropped == 1
        assert publisher_driver.conductor.system_counters.get(SystemCounterId.RETRANSMITS_SENT).get() >= 1
    else:
        # Nothing follows the lost datagram for a minute: the receiver cannot know of it (a second polled here).
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert not read()
            time.sleep(0.005)
        assert received == [b"first"]
        assert relay.dropped == 1
