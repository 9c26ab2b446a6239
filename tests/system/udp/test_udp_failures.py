"""UDP failures: a side killed mid-stream, a port someone else holds, and the stream counters.

Killed sides are real processes — an application with its own embedded driver,
spawned and SIGKILLed by pid — so nothing of theirs says goodbye: the surviving
driver must notice by its timers (image liveness on the subscriber's side,
connection timeout on the publisher's side), both set short here.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from udp_helpers import (
    UDP_SETTINGS,
    Collector,
    UdpDrivers,
    allocated_counters,
    counters_of,
    driver_errors,
    free_udp_port,
    make_message,
    publish_checked,
    publish_with_embedded_driver,
    subscribe_with_embedded_driver,
)

from driver.client import BACK_PRESSURED, NOT_CONNECTED, Image
from driver.concurrent.system_counters import (
    PUBLISHER_LIMIT_TYPE_ID,
    RECEIVE_CHANNEL_STATUS_TYPE_ID,
    RECEIVER_HWM_TYPE_ID,
    RECEIVER_POS_TYPE_ID,
    SEND_CHANNEL_STATUS_TYPE_ID,
    SENDER_LIMIT_TYPE_ID,
    SENDER_POSITION_TYPE_ID,
    SUBSCRIBER_POSITION_TYPE_ID,
)
from driver.errors import CurrentErrorCode, RegistrationError
from support.clients import wait_for_image
from support.waiting import execute_until

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

STREAM_ID = 4004
SPAWN = multiprocessing.get_context("spawn")


@contextlib.contextmanager
def _child(target: object, *args: object) -> Iterator[tuple[SpawnProcess, object]]:
    """A spawned child and its ready event; SIGKILLed by pid and reaped afterwards if still alive."""
    ready = SPAWN.Event()
    child = SPAWN.Process(target=target, args=(*args, ready), daemon=True)  # type: ignore[arg-type]
    child.start()
    try:
        yield child, ready
    finally:
        if child.pid is not None and child.exitcode is None:
            os.kill(child.pid, signal.SIGKILL)
        child.join(10)


@pytest.mark.process
def test_publisher_process_killed_mid_stream_makes_the_image_unavailable(udp: UdpDrivers) -> None:
    subscriber_dir = udp.embedded("sub").aeron_dir
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    unavailable: list[Image] = []
    subscription = udp.client(subscriber_dir).add_subscription(
        channel, STREAM_ID, unavailable_image_handler=unavailable.append
    )
    publisher_dir = udp.directory("pub")
    with _child(publish_with_embedded_driver, str(publisher_dir), channel, STREAM_ID, UDP_SETTINGS) as (child, ready):
        (image,) = wait_for_image(subscription, timeout_s=30)
        collector = Collector(session_id=image.session_id)
        execute_until(
            lambda: len(collector.seqs) >= 200,
            lambda: collector.poll(subscription),
            timeout_s=30,
            interval_s=0.001,
            description="200 messages from the publisher process",
        )
        assert ready.wait(10)  # type: ignore[attr-defined]
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
    # Image liveness (1 s here) runs out: the image goes, having delivered an unbroken prefix.
    execute_until(
        lambda: not subscription.images and unavailable,
        lambda: collector.poll(subscription),
        timeout_s=15,
        interval_s=0.005,
        description="the dead publisher's image to become unavailable",
    )
    assert collector.problems == []
    assert collector.seqs == list(range(len(collector.seqs)))
    assert unavailable[0].session_id == image.session_id
    assert driver_errors(subscriber_dir) == []


@pytest.mark.process
def test_a_subscriber_driver_stalled_past_image_liveness_keeps_its_image_and_loses_nothing(udp: UdpDrivers) -> None:
    # A whole-process stall (SIGSTOP here; a starved CPU or a VM pause alike) longer than image liveness (1 s): on
    # resuming, the driver's conductor may run before its receiver has read what waited in the socket meanwhile.
    # That is no silence: the image must stay, and the reliable stream deliver every message once, in order.
    subscriber = udp.process("sub")
    publisher_dir = udp.embedded("pub").aeron_dir
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    unavailable: list[Image] = []
    subscription = udp.client(subscriber.aeron_dir).add_subscription(
        channel, STREAM_ID, unavailable_image_handler=unavailable.append
    )
    publication = udp.client(publisher_dir).add_exclusive_publication(channel, STREAM_ID)
    (image,) = wait_for_image(subscription, timeout_s=30)
    collector = Collector(session_id=publication.session_id)
    body = 1000
    publish_checked(publication, [(subscription, collector)], 100, body, timeout_s=30)
    seq = 100
    os.kill(subscriber.process.pid, signal.SIGSTOP)
    try:
        # Offer on while it is stopped: what the window takes is sent and waits in the stopped driver's socket.
        stop_until = time.monotonic() + 1.5 * UDP_SETTINGS["image_liveness_timeout_ns"] / 1e9  # type: ignore[operator]
        while time.monotonic() < stop_until:
            if publication.offer(make_message(0, seq, body)) > 0:
                seq += 1
            else:
                time.sleep(0.001)
    finally:
        os.kill(subscriber.process.pid, signal.SIGCONT)
    publish_checked(publication, [(subscription, collector)], 100, body, timeout_s=30, start_seq=seq)
    assert unavailable == []
    assert subscription.images == (image,)
    assert driver_errors(subscriber.aeron_dir) == []


@pytest.mark.process
def test_subscriber_process_killed_disconnects_the_publication_which_is_reclaimed_on_close(
    udp: UdpDrivers,
) -> None:
    publisher_driver = udp.embedded("pub")
    publisher = udp.client(publisher_driver.aeron_dir)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    publication = publisher.add_exclusive_publication(channel, STREAM_ID)
    registration_id = publication.registration_id
    log_path = publication.log_buffers.path
    subscriber_dir = udp.directory("sub")
    with _child(subscribe_with_embedded_driver, str(subscriber_dir), channel, STREAM_ID, UDP_SETTINGS) as (
        child,
        ready,
    ):
        execute_until(lambda: publication.is_connected, timeout_s=30, description="the subscriber process to connect")
        execute_until(
            lambda: ready.is_set(),  # type: ignore[attr-defined]
            lambda: publication.offer(b"x" * 64),
            timeout_s=30,
            interval_s=0.001,
            description="the subscriber process to consume 100 messages",
        )
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    # No more status messages: after the connection timeout (1 s here) the publication has no receivers.
    results: list[int] = []
    execute_until(
        lambda: not publication.is_connected,
        lambda: results.append(publication.offer(b"y" * 64)),
        timeout_s=15,
        interval_s=0.005,
        description="the publication to lose its receiver",
    )
    for _ in range(5):
        assert publication.offer(b"z" * 64) in (NOT_CONNECTED, BACK_PRESSURED)
    # Close: the driver drains, lingers and frees the log and the stream counters.
    publication.close()
    with counters_of(publisher_driver.aeron_dir) as (_, reader):
        execute_until(
            lambda: (
                not log_path.exists()
                and not any(
                    label.startswith(("snd-pos", "snd-lmt", "pub-lmt")) and f": {registration_id} " in label
                    for _, _, label in allocated_counters(reader)
                )
            ),
            timeout_s=15,
            interval_s=0.02,
            description="the closed publication's log and counters to be reclaimed",
        )
    assert driver_errors(publisher_driver.aeron_dir) == []


def test_port_held_by_another_socket_is_a_clear_registration_error(udp: UdpDrivers) -> None:
    client = udp.client(udp.embedded("d").aeron_dir)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        port = squatter.getsockname()[1]
        with pytest.raises(RegistrationError) as caught:
            client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    # As Aeron 1.15.1 answers a socket that cannot open while adding: GENERIC_ERROR, "channel error - ..."
    # (today's generation, the default, numbers GENERIC_ERROR 11)
    assert caught.value.error_code == CurrentErrorCode.GENERIC_ERROR
    assert "channel error" in caught.value.driver_message
    assert f"127.0.0.1:{port}" in caught.value.driver_message or f"('127.0.0.1', {port})" in str(caught.value)
    # The driver is fine afterwards: the same port works once it is free.
    subscription = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    assert subscription.channel_status == 1  # ACTIVE


def test_stream_counters_carry_aerons_types_and_labels(udp: UdpDrivers) -> None:
    pub_dir = udp.embedded("pub").aeron_dir
    sub_dir = udp.embedded("sub").aeron_dir
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    subscription = udp.client(sub_dir).add_subscription(channel, STREAM_ID)
    publication = udp.client(pub_dir).add_exclusive_publication(channel, STREAM_ID)
    (image,) = wait_for_image(subscription)
    publish_checked(publication, [(subscription, Collector(session_id=publication.session_id))], 50, 32)
    stream = f"{publication.session_id} {STREAM_ID} {channel}"
    publication_counters = {
        SENDER_POSITION_TYPE_ID: f"snd-pos: {publication.registration_id} {stream}",
        SENDER_LIMIT_TYPE_ID: f"snd-lmt: {publication.registration_id} {stream}",
        PUBLISHER_LIMIT_TYPE_ID: f"pub-lmt: {publication.registration_id} {stream}",
        SEND_CHANNEL_STATUS_TYPE_ID: f"snd-channel: {channel}",
    }
    with counters_of(pub_dir) as (_, reader):
        found = {type_id: label for _, type_id, label in allocated_counters(reader)}
        for type_id, label in publication_counters.items():
            assert found.get(type_id) == label
        position = next(i for i, t, _ in allocated_counters(reader) if t == SENDER_POSITION_TYPE_ID)
        # The sender stores its position after the datagrams of a cycle are out, so the subscriber may have the
        # messages a moment before the counter moves (as in Aeron): wait for it, bounded.
        execute_until(
            lambda: reader.get_counter_value(position) == publication.position,
            timeout_s=10,
            interval_s=0.01,
            description="the sender position counter to reach the publication's position",
        )
    with counters_of(sub_dir) as (_, reader):
        found = {type_id: label for _, type_id, label in allocated_counters(reader)}
        assert re.fullmatch(rf"rcv-hwm: \d+ {re.escape(stream)}", found[RECEIVER_HWM_TYPE_ID])
        assert re.fullmatch(rf"rcv-pos: \d+ {re.escape(stream)}", found[RECEIVER_POS_TYPE_ID])
        assert found[SUBSCRIBER_POSITION_TYPE_ID] == f"sub-pos: {subscription.registration_id} {stream} @0"
        assert found[RECEIVE_CHANNEL_STATUS_TYPE_ID] == f"rcv-channel: {channel}"
        sub_pos = next(i for i, t, _ in allocated_counters(reader) if t == SUBSCRIBER_POSITION_TYPE_ID)
        assert reader.get_counter_value(sub_pos) == image.position


def test_send_failure_on_an_open_endpoint_reaches_the_client_as_channel_endpoint_error(aeron_dir: Path) -> None:
    """Sending to the broadcast address without SO_BROADCAST fails with EACCES on every datagram.

    As Aeron does, the driver marks the endpoint's channel status ERRORED and sends
    ON_ERROR(CHANNEL_ENDPOINT_ERROR) keyed by that status counter (at most once a
    second, however often the send fails); the client closes the publication and
    hands a ChannelEndpointError to its error handler.
    """
    from driver.client import Aeron
    from driver.concurrent.system_counters import CHANNEL_STATUS_ERRORED
    from driver.core.media_driver import MediaDriver
    from driver.errors import ChannelEndpointError

    errors: list[BaseException] = []
    with (
        MediaDriver.launch(aeron_dir=aeron_dir, dir_delete_on_shutdown=True) as driver,
        Aeron.connect(aeron_dir=driver.aeron_dir, error_handler=errors.append) as aeron,
    ):
        publication = aeron.add_publication(f"aeron:udp?endpoint=255.255.255.255:{free_udp_port()}", STREAM_ID)
        execute_until(lambda: bool(errors), timeout_s=10.0, description="the channel endpoint error")
        assert isinstance(errors[0], ChannelEndpointError)
        assert "Permission denied" in str(errors[0])
        assert publication.channel_status == CHANNEL_STATUS_ERRORED
        assert publication.is_closed
