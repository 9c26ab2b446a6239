"""Spy subscriptions (``aeron-spy:``): a local subscriber reads a UDP publication's own log on our driver.

A spy gets an image over the publication's log file with a subscriber position
of its own (labelled as Aeron labels it), holds the publisher back like any
subscriber while the publication is connected, and, with
``spies_simulate_connection``, makes the publication connected on its own. Its
image goes when the spy or the publication goes, and its counter with it.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from udp_helpers import (
    Collector,
    UdpDrivers,
    allocated_counters,
    counters_of,
    driver_errors,
    free_udp_port,
    make_message,
    publish_checked,
)

from driver.client import NOT_CONNECTED, Aeron, Image
from driver.cnc import CncGeneration
from driver.concurrent.system_counters import SUBSCRIBER_POSITION_TYPE_ID, DriverSystemCounterId
from driver.logbuffer.frame import HDR_TYPE_SETUP
from support.clients import wait_for_image
from support.waiting import execute_until

STREAM_ID = 1101
TERM = 64 * 1024
SMALL_BODY = 16  # 32-byte messages: 64-byte frames, a term rotation every 1024 of them
LARGE_BODY = 5000  # fragmented at the 1408-byte MTU


def _channel(port: int = 0) -> str:
    return f"aeron:udp?endpoint=127.0.0.1:{port or free_udp_port()}|term-length={TERM}"


def _spy(channel: str) -> str:
    return "aeron-spy:" + channel.split("|")[0]


def _sub_positions(aeron_dir: Path) -> dict[int, str]:
    with counters_of(aeron_dir) as (_, reader):
        return {
            cid: label for cid, type_id, label in allocated_counters(reader) if type_id == SUBSCRIBER_POSITION_TYPE_ID
        }


def _driver_counter(aeron_dir: Path, counter: DriverSystemCounterId) -> int:
    """One of this driver's own system counters, found by its label (its id differs by generation)."""
    with counters_of(aeron_dir) as (_, reader):
        found = [cid for cid, _, label in allocated_counters(reader) if label == counter.label]
        return reader.get_counter_value(found[0])


def _count_setups(port: int, count: int) -> None:
    """Listen where the publication sends (never answering) until ``count`` SETUPs came: its sender ran that long
    (one every 100 ms) with nobody connected."""
    seen = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.settimeout(5.0)
        for _ in range(10_000):
            data = sock.recv(2048)
            if len(data) >= 8 and struct.unpack_from("<H", data, 6)[0] == HDR_TYPE_SETUP:
                seen += 1
                if seen == count:
                    return
    raise AssertionError(f"{seen} SETUPs in 10,000 datagrams")


def _publish_small_and_large(publication: object, readers: list[tuple[object, Collector]]) -> None:
    """Small messages over three term rotations, then fragmented ones over more."""
    publish_checked(publication, readers, 3200, SMALL_BODY)  # type: ignore[arg-type]
    publish_checked(publication, readers, 60, LARGE_BODY, start_seq=3200)  # type: ignore[arg-type]


def _driver_dir(udp: UdpDrivers, how: str, **settings: object) -> Path:
    """Our driver, embedded (SHARED or DEDICATED threads) or as its own process; its directory."""
    if how == "process":
        return udp.process("spy", **settings).aeron_dir
    return udp.embedded("spy", threading_mode=how.upper(), **settings).aeron_dir


@pytest.mark.parametrize(
    ("how", "generation"),
    [
        ("shared", CncGeneration.CURRENT),
        ("shared", CncGeneration.V15),
        ("dedicated", CncGeneration.CURRENT),
        pytest.param("process", CncGeneration.CURRENT, marks=pytest.mark.process),
    ],
)
def test_spy_alone_reads_everything_in_order_when_spies_simulate_connection(
    udp: UdpDrivers, how: str, generation: CncGeneration
) -> None:
    aeron_dir = _driver_dir(udp, how, spies_simulate_connection=True, cnc_generation=generation)
    client = udp.client(aeron_dir)
    channel = _channel()
    spy = client.add_subscription(_spy(channel), STREAM_ID)
    publication = client.add_exclusive_publication(channel, STREAM_ID)
    (image,) = wait_for_image(spy)
    assert image.source_identity == "aeron:ipc"  # as Aeron names a spy's image
    assert image.session_id == publication.session_id
    execute_until(lambda: publication.is_connected, timeout_s=10, description="a spy alone connects the publication")
    [label] = _sub_positions(aeron_dir).values()
    assert label == f"sub-pos: {spy.registration_id} {publication.session_id} {STREAM_ID} {_spy(channel)} @0"
    collector = Collector(session_id=publication.session_id)
    _publish_small_and_large(publication, [(spy, collector)])
    assert publication.position > 3 * TERM  # the log rotated through every term more than once
    assert driver_errors(aeron_dir) == []
    assert udp.errors.seen == []


def test_spy_without_simulated_connection_waits_for_a_receiver_then_reads_beside_it(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=False)
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    channel = _channel(port)
    publication = client.add_publication(channel, STREAM_ID)
    spy = client.add_subscription(_spy(channel), STREAM_ID)
    wait_for_image(spy)
    # A spy alone is no receiver: the publication stays unconnected while its sender asks for one again and
    # again (a SETUP each 100 ms, the driver's timers running meanwhile), and offers are refused.
    _count_setups(port, 4)
    assert not publication.is_connected
    assert publication.offer(make_message(0, 0, SMALL_BODY)) == NOT_CONNECTED
    receiver = client.add_subscription(channel, STREAM_ID)
    wait_for_image(receiver)
    execute_until(lambda: publication.is_connected, timeout_s=10, description="a receiver connects the publication")
    from_spy, from_receiver = Collector(), Collector()
    _publish_small_and_large(publication, [(spy, from_spy), (receiver, from_receiver)])
    assert driver_errors(driver.aeron_dir) == []


def _offer_until_back_pressured(publication: object, drain: object, limit: int = 100_000) -> int:
    """Offer small messages (draining the others) until the publication refuses one; how many it took."""
    for taken in range(limit):
        if publication.offer(make_message(0, taken, SMALL_BODY)) < 0:  # type: ignore[attr-defined]
            return taken
        drain()  # type: ignore[operator]
    raise AssertionError(f"{limit} offers taken: nothing held the publisher back")


@pytest.mark.parametrize("simulate", [False, True])
def test_a_spy_that_does_not_read_holds_the_publisher_back(udp: UdpDrivers, simulate: bool) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=simulate)
    client = udp.client(driver.aeron_dir)
    channel = _channel()
    publication = client.add_exclusive_publication(channel, STREAM_ID)
    receiver = client.add_subscription(channel, STREAM_ID)
    spy = client.add_subscription(_spy(channel), STREAM_ID)
    wait_for_image(receiver)
    (spy_image,) = wait_for_image(spy)
    execute_until(lambda: publication.is_connected, timeout_s=10, description="connected")
    from_receiver = Collector()

    def drain_receiver() -> None:
        from_receiver.poll(receiver)

    # The receiver keeps up; the spy reads nothing: the publisher may run a term window past the spy, no more.
    taken = _offer_until_back_pressured(publication, drain_receiver)
    window = TERM // 2
    assert spy_image.position == 0
    assert 0 < publication.position <= window + 64
    assert taken == publication.position // 64
    # Once the spy reads, the publisher goes on; both readers see every message.
    from_spy = Collector()
    execute_until(
        lambda: publication.offer(make_message(0, taken, SMALL_BODY)) >= 0,
        lambda: from_spy.poll(spy),
        timeout_s=10,
        interval_s=0.001,
        description="the publisher let go by the spy",
    )
    publish_checked(publication, [(spy, from_spy), (receiver, from_receiver)], 2000, SMALL_BODY, start_seq=taken + 1)
    assert driver_errors(driver.aeron_dir) == []


def test_spy_removed_frees_its_counter_and_unconnects_a_simulated_publication(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=True)
    client = udp.client(driver.aeron_dir)
    channel = _channel()
    publication = client.add_publication(channel, STREAM_ID)
    spy = client.add_subscription(_spy(channel), STREAM_ID)
    wait_for_image(spy)
    execute_until(lambda: publication.is_connected, timeout_s=10, description="connected by the spy")
    publish_checked(publication, [(spy, Collector())], 100, SMALL_BODY)
    assert len(_sub_positions(driver.aeron_dir)) == 1
    spy.close()
    execute_until(lambda: not _sub_positions(driver.aeron_dir), timeout_s=10, description="the spy's counter freed")
    execute_until(lambda: not publication.is_connected, timeout_s=10, description="unconnected without the spy")
    assert publication.offer(make_message(0, 100, SMALL_BODY)) == NOT_CONNECTED
    # A new spy joins where the stream has got to, and connects it again.
    again = client.add_subscription(_spy(channel), STREAM_ID)
    (image,) = wait_for_image(again)
    assert image.join_position == publication.position
    execute_until(lambda: publication.is_connected, timeout_s=10, description="connected by the new spy")
    assert driver_errors(driver.aeron_dir) == []


def test_publication_closed_ends_the_spy_image_once_read_and_frees_everything(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=True)
    client = udp.client(driver.aeron_dir)
    channel = _channel()
    gone: list[Image] = []
    spy = client.add_subscription(_spy(channel), STREAM_ID, unavailable_image_handler=gone.append)
    publication = client.add_publication(channel, STREAM_ID)
    (image,) = wait_for_image(spy)
    log_path = Path(driver.aeron_dir) / "publications" / f"{publication.registration_id}.logbuffer"
    assert log_path.exists()
    publish_checked(publication, [(spy, Collector())], 200, SMALL_BODY)
    for seq in range(200, 300):  # the last hundred are still unread when the publication closes
        assert publication.offer(make_message(0, seq, SMALL_BODY)) >= 0
    end = publication.position
    publication.close()
    tail = Collector()
    tail.seqs = list(range(200))
    execute_until(lambda: gone, lambda: tail.poll(spy), timeout_s=10, description="the spy's image to go")
    tail.check(300)  # the spy read the stream to its end before its image went
    assert gone == [image]
    assert image.position == end
    execute_until(lambda: not _sub_positions(driver.aeron_dir), timeout_s=10, description="spy counter freed")
    execute_until(lambda: not log_path.exists(), timeout_s=10, description="the publication's log deleted")
    assert spy.images == ()
    assert driver_errors(driver.aeron_dir) == []


def test_spies_match_channel_stream_and_session_and_see_publications_added_later(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=True)
    client = udp.client(driver.aeron_dir)
    channel, other_channel = _channel(), _channel()
    first = client.add_exclusive_publication(channel, STREAM_ID)
    second = client.add_exclusive_publication(channel, STREAM_ID)
    client.add_exclusive_publication(channel, STREAM_ID + 1)
    client.add_exclusive_publication(other_channel, STREAM_ID)
    every = client.add_subscription(_spy(channel), STREAM_ID)
    one = client.add_subscription(f"{_spy(channel)}|session-id={second.session_id}", STREAM_ID)
    images = wait_for_image(every, 2)
    assert {i.session_id for i in images} == {first.session_id, second.session_id}
    (only,) = wait_for_image(one)
    assert only.session_id == second.session_id
    # a publication added after the spies finds them
    third = client.add_exclusive_publication(channel, STREAM_ID)
    wait_for_image(every, 3)
    assert len(one.images) == 1
    collector = Collector(session_id=third.session_id)
    publish_checked(third, [(every, collector)], 500, SMALL_BODY)
    assert len(_sub_positions(driver.aeron_dir)) == 4
    assert driver_errors(driver.aeron_dir) == []


def test_spy_subscription_added_async(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=True)
    client = udp.client(driver.aeron_dir)
    channel = _channel()

    async def main() -> None:
        publication = await client.add_publication_async(channel, STREAM_ID)
        spy = await client.add_subscription_async(_spy(channel), STREAM_ID)
        for _ in range(1000):
            if spy.images:
                break
            await asyncio.sleep(0.01)
        assert [i.session_id for i in spy.images] == [publication.session_id]
        publish_checked(publication, [(spy, Collector())], 300, SMALL_BODY)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_spy_holds_at_most_max_images_and_says_so(udp: UdpDrivers) -> None:
    """Spies are bounded as other subscriptions are: ``max-images`` (or the driver's setting) caps the images
    one holds; a publication beyond that is refused (counted, logged once), not linked."""
    driver = udp.embedded("spy", spies_simulate_connection=True, receiver_max_images_per_subscription=3)
    client = udp.client(driver.aeron_dir)
    channel = _channel()
    publications = [client.add_exclusive_publication(channel, STREAM_ID) for _ in range(5)]
    capped = client.add_subscription(f"{_spy(channel)}|max-images=2", STREAM_ID)
    default = client.add_subscription(_spy(channel), STREAM_ID)
    wait_for_image(capped, 2)
    wait_for_image(default, 3)
    refused = DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT
    execute_until(lambda: _driver_counter(driver.aeron_dir, refused) == 3 + 2, timeout_s=10, description="refusals")
    assert (len(capped.images), len(default.images)) == (2, 3)
    assert len(_sub_positions(driver.aeron_dir)) == 5
    errors = driver_errors(driver.aeron_dir)
    assert len(errors) == 2
    assert all("the subscription holds as many images as it may" in e for e in errors)
    assert len(publications) == 5


def test_a_closed_clients_spies_are_freed(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=True)
    client = udp.client(driver.aeron_dir)
    channel = _channel()
    publication = client.add_publication(channel, STREAM_ID)
    spying = Aeron.connect(aeron_dir=driver.aeron_dir, error_handler=udp.errors)
    try:
        spy = spying.add_subscription(_spy(channel), STREAM_ID)
        wait_for_image(spy)
        execute_until(lambda: publication.is_connected, timeout_s=10, description="connected")
    finally:
        spying.close()
    execute_until(lambda: not _sub_positions(driver.aeron_dir), timeout_s=15, description="spy counter freed")
    execute_until(lambda: not publication.is_connected, timeout_s=10, description="unconnected")
    assert driver_errors(driver.aeron_dir) == []


def _tools(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "driver.tools", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tools_show_spies_with_the_publication_they_read(udp: UdpDrivers) -> None:
    driver = udp.embedded("spy", spies_simulate_connection=True)
    client = udp.client(driver.aeron_dir)
    channel = _channel()
    publication = client.add_exclusive_publication(channel, STREAM_ID)
    spy = client.add_subscription(_spy(channel), STREAM_ID)
    wait_for_image(spy)
    publish_checked(publication, [(spy, Collector())], 100, SMALL_BODY)  # the spy has read 6,400 bytes
    aeron_dir = str(driver.aeron_dir)
    label = f"sub-pos: {spy.registration_id} {publication.session_id} {STREAM_ID} {_spy(channel)} @0"
    # AeronStat's line for the spy's position, and the table's (type 4, sub-pos) with the same label
    stat = _tools("stat", "-d", aeron_dir, "--once", "--format", "aeronstat")
    assert re.search(rf"^\s*\d+:\s+6,400 - {re.escape(label)}$", stat, re.M), stat
    table = _tools("stat", "-d", aeron_dir, "--once", "--type", "sub-pos")
    assert re.search(rf"^\s*\d+\s+6,400\s+4 sub-pos\s+{re.escape(label)}$", table, re.M), table

    def spied() -> dict[str, object] | None:
        found = json.loads(_tools("streams", "-d", aeron_dir, "--json"))["streams"]
        mine = [s for s in found if s["session_id"] == publication.session_id]
        return mine[0] if len(mine) == 1 and mine[0]["publisher_position"] == 6400 else None

    stream = execute_until(spied, timeout_s=20, interval_s=0.1, description="streams with the publisher at 6,400")
    assert stream["channel"] == channel
    assert stream["spy_positions"] == {str(spy.registration_id): 6400}
    assert stream["subscriber_positions"] == {}
    assert stream["lags"]["publisher_to_spy"] == 0  # type: ignore[index]
    text = _tools("streams", "-d", aeron_dir)
    assert re.search(rf"^  spy         sub-pos\s+6,400   subscription {spy.registration_id}$", text, re.M), text
    # StreamStat's own format groups by channel text, as Java's StreamStat does: the spy is a line of its own.
    streamstat = _tools("streams", "-d", aeron_dir, "--format", "streamstat")
    spy_line = f"sessionId={publication.session_id} streamId={STREAM_ID} channel={_spy(channel)} :"
    assert f"{spy_line} sub-pos:{spy.registration_id}:6400" in streamstat, streamstat
