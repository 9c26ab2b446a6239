"""Dynamic control mode with private publications (``session-id=`` on a ``control-mode=dynamic`` channel), the
server half of clients behind a NAT: a publication sends only to the addresses whose status messages named its
session and stream, keeps a bounded set of them and forgets the silent ones; a subscriber that names the session
joins it; an image follows its publisher to a new source port (a rebinding NAT).

Raw sockets play the receivers here, so the test sees exactly which address each frame goes to."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from udp_helpers import UdpDrivers, free_udp_port

from driver.logbuffer.frame import HDR_TYPE_DATA, HDR_TYPE_SETUP, HDR_TYPE_SM
from driver.media.endpoints import MAX_DESTINATIONS_PER_PUBLICATION
from driver.wire.data import write_data_header
from driver.wire.setup import SETUP, write_setup
from driver.wire.status import SEND_SETUP_FLAG, SM, write_sm
from support.clients import wait_for_image
from support.waiting import execute_until

STREAM_ID = 4242
SESSION_ID = 0x2345_6789
TERM_LENGTH = 64 * 1024


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    for _ in range(MAX_DESTINATIONS_PER_PUBLICATION + 2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.05)
        made.append(s)
    yield made
    for s in made:
        s.close()


def _frames(sock: socket.socket, seconds: float) -> list[bytes]:
    """Every datagram ``sock`` gets for ``seconds``."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    for _ in range(100_000):
        if time.monotonic() > deadline:
            break
        try:
            got.append(sock.recvfrom(65536)[0])
        except TimeoutError:
            continue
    return got


def _setups(frames: list[bytes]) -> list[bytes]:
    return [f for f in frames if len(f) >= 40 and f[6] == HDR_TYPE_SETUP]


def _sm(session_id: int, stream_id: int, flags: int = SEND_SETUP_FLAG, receiver_id: int = 7) -> bytes:
    sm = bytearray(36)
    write_sm(sm, 0, session_id, stream_id, 0, 0, 64 * 1024, receiver_id, flags)
    return bytes(sm)


def test_a_private_publication_sends_only_to_those_who_name_it(udp: UdpDrivers, sockets: list[socket.socket]) -> None:
    driver = udp.embedded("pub")
    control = ("127.0.0.1", free_udp_port())
    publication = udp.client(driver.aeron_dir).add_exclusive_publication(
        f"aeron:udp?control={control[0]}:{control[1]}|control-mode=dynamic|session-id={SESSION_ID}"
        f"|term-length={TERM_LENGTH}",
        STREAM_ID,
    )
    named, stranger, *others = sockets
    # Asking every publication (0/0, as 1.15.1's subscribers do) or naming another session: nothing comes.
    stranger.sendto(_sm(0, 0), control)
    stranger.sendto(_sm(SESSION_ID + 1, STREAM_ID), control)
    stranger.sendto(_sm(SESSION_ID, STREAM_ID + 1), control)
    assert _frames(stranger, 0.5) == []
    # Naming it: SETUPs for that session come to that very socket.
    named.sendto(_sm(SESSION_ID, STREAM_ID), control)
    setup = _setups(_frames(named, 1.0))[0]
    assert SETUP.unpack_from(setup)[5:7] == (SESSION_ID, STREAM_ID)
    assert _frames(stranger, 0.2) == []

    # Bounded: while the first ones are alive, more than the limit are refused (and counted).
    refused = driver.conductor.network.endpoint_counters.destinations_refused
    assert refused is not None
    before = refused.get()
    members = [named, *others[: MAX_DESTINATIONS_PER_PUBLICATION - 1]]
    late = others[MAX_DESTINATIONS_PER_PUBLICATION - 1]
    for s in members:
        s.sendto(_sm(SESSION_ID, STREAM_ID), control)
    late.sendto(_sm(SESSION_ID, STREAM_ID), control)
    execute_until(lambda: refused.get() > before, timeout_s=5, description="the extra destination refused")
    for s in members:  # the members keep speaking; the late one hears nothing
        s.sendto(_sm(SESSION_ID, STREAM_ID), control)
    assert _setups(_frames(late, 0.3)) == []
    assert publication.session_id == SESSION_ID


def test_a_silent_destination_is_forgotten_and_gives_way(udp: UdpDrivers, sockets: list[socket.socket]) -> None:
    driver = udp.embedded("pub")
    control = ("127.0.0.1", free_udp_port())
    udp.client(driver.aeron_dir).add_exclusive_publication(
        f"aeron:udp?control={control[0]}:{control[1]}|control-mode=dynamic|session-id={SESSION_ID}"
        f"|term-length={TERM_LENGTH}",
        STREAM_ID,
    )
    first, rebound = sockets[0], sockets[1]
    first.sendto(_sm(SESSION_ID, STREAM_ID), control)
    assert _setups(_frames(first, 1.0))
    # The receiver's NAT rebinds: it now speaks from another port. Both are destinations until the old one expires
    # (5 s without a status message, as 1.15.1); from then on only the new one hears the publication.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rebound.sendto(_sm(SESSION_ID, STREAM_ID), control)
        _frames(rebound, 0.2)
        if not _frames(first, 0.05):
            break
    assert _frames(first, 0.5) == []
    rebound.sendto(_sm(SESSION_ID, STREAM_ID), control)
    assert _setups(_frames(rebound, 1.0))


def test_a_subscriber_naming_the_session_joins_and_one_naming_none_does_not(udp: UdpDrivers) -> None:
    pub_dir = udp.embedded("pub").aeron_dir
    sub_dir = udp.embedded("sub").aeron_dir
    control = f"127.0.0.1:{free_udp_port()}"
    publication = udp.client(pub_dir).add_exclusive_publication(
        f"aeron:udp?control={control}|control-mode=dynamic|session-id={SESSION_ID}|term-length={TERM_LENGTH}",
        STREAM_ID,
    )
    subscriber = udp.client(sub_dir)
    anyone = subscriber.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|control={control}", STREAM_ID)
    named = subscriber.add_subscription(
        f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|control={control}|session-id={SESSION_ID}", STREAM_ID
    )
    wait_for_image(named, timeout_s=10)
    execute_until(lambda: publication.is_connected, timeout_s=10, description="the publication connected")
    received: list[bytes] = []
    offered = 0
    deadline = time.monotonic() + 10
    while len(received) < 10 and time.monotonic() < deadline:
        if offered < 10 and publication.offer(b"x" * 32) > 0:
            offered += 1
        named.poll(lambda payload, header: received.append(bytes(payload)), 10)
        time.sleep(0.001)
    assert len(received) == 10
    time.sleep(0.3)
    assert not anyone.images


def test_an_image_follows_its_publisher_to_a_new_source_port(udp: UdpDrivers, sockets: list[socket.socket]) -> None:
    driver = udp.embedded("sub")
    port = free_udp_port()
    subscription = udp.client(driver.aeron_dir).add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    old, new = sockets[0], sockets[1]
    setup = bytearray(40)
    write_setup(setup, 0, 0, 51, STREAM_ID, 5, 5, TERM_LENGTH, 1408, 0)
    execute_until(lambda: old.sendto(setup, ("127.0.0.1", port)) and driver.conductor.network.images, timeout_s=5)
    wait_for_image(subscription, timeout_s=5)
    heartbeat = bytearray(32)
    write_data_header(heartbeat, 0, 0, 0xC0, HDR_TYPE_DATA, 0, 51, STREAM_ID, 5)
    old.sendto(heartbeat, ("127.0.0.1", port))
    assert any(f[6] == HDR_TYPE_SM for f in _frames(old, 0.6))
    # The publisher's NAT rebinds: its frames come from another port; status messages follow them there.
    for _ in range(3):
        new.sendto(heartbeat, ("127.0.0.1", port))
    sms = [f for f in _frames(new, 0.6) if f[6] == HDR_TYPE_SM]
    assert sms
    assert SM.unpack_from(sms[0])[4:6] == (51, STREAM_ID)
    _frames(old, 0.1)
    assert not [f for f in _frames(old, 0.5) if f[6] == HDR_TYPE_SM]


def test_receiver_host_keeps_receivers_elsewhere_out(udp: UdpDrivers) -> None:
    driver = udp.embedded("pub")
    control = ("127.0.0.1", free_udp_port())
    base = f"aeron:udp?control={control[0]}:{control[1]}|control-mode=dynamic|term-length={TERM_LENGTH}"
    client = udp.client(driver.aeron_dir)
    client.add_exclusive_publication(f"{base}|session-id={SESSION_ID}|receiver-host=127.0.0.2", STREAM_ID)
    client.add_exclusive_publication(f"{base}|session-id={SESSION_ID + 1}|receiver-host=127.0.0.3", STREAM_ID)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as here,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as there,
    ):
        here.bind(("127.0.0.2", 0))
        there.bind(("127.0.0.1", 0))
        here.settimeout(0.05)
        there.settimeout(0.05)
        there.sendto(_sm(SESSION_ID, STREAM_ID), control)  # knows the ids, but speaks from another host
        here.sendto(_sm(SESSION_ID + 1, STREAM_ID), control)  # the other publication's host is 127.0.0.3
        assert _frames(there, 0.5) == []
        assert _frames(here, 0.1) == []
        here.sendto(_sm(SESSION_ID, STREAM_ID), control)
        setups = _setups(_frames(here, 1.0))
        assert {SETUP.unpack_from(f)[5] for f in setups} == {SESSION_ID}
