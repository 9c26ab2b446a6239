"""REJECT_IMAGE in today's generation: the receiver sends ERR instead of SMs, the sender tells the owner."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_conductor_current import Harness

from driver.cnc import CncGeneration
from driver.command.current import PublicationErrorResponse, RejectImageMessage
from driver.command.messages import PublicationMessage, SubscriptionMessage
from driver.command.responses import ImageReady, PublicationReady
from driver.command.types import CommandType, CurrentCommandType, ResponseType
from driver.core.flow_control import MinMulticastFlowControl, UnicastFlowControl
from driver.errors import CurrentErrorCode
from driver.wire.error import ErrorFrame


@pytest.fixture
def current(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "aeron", CncGeneration.CURRENT)
    yield h
    h.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_all(h: Harness, out: list[tuple[int, bytes]], until: int, seconds: float = 10.0) -> None:
    """Drive conductor, sender and receiver by hand until a response of type ``until`` arrives (bounded)."""
    deadline = time.monotonic() + seconds
    for _ in range(20_000):
        if any(kind == until for kind, _ in out) or time.monotonic() > deadline:
            return
        h.conductor.sender.do_work()
        h.conductor.receiver.do_work()
        out.extend(h.work(advance_ms=10, cycles=1))


def test_rejected_image_sends_err_and_the_publisher_s_client_hears_of_it(current: Harness) -> None:
    channel = f"aeron:udp?endpoint=127.0.0.1:{_free_port()}"
    out: list[tuple[int, bytes]] = []
    current.send(
        CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(current.client_id, current.cid(), 7, channel).encode()
    )
    pub_id = current.cid()
    current.send(
        CommandType.ADD_EXCLUSIVE_PUBLICATION, PublicationMessage(current.client_id, pub_id, 7, channel).encode()
    )
    _run_all(current, out, ResponseType.ON_AVAILABLE_IMAGE)
    [image] = [ImageReady.decode(body) for kind, body in out if kind == ResponseType.ON_AVAILABLE_IMAGE]
    [ready] = [
        PublicationReady.decode(body) for kind, body in out if kind == ResponseType.ON_EXCLUSIVE_PUBLICATION_READY
    ]
    out.clear()
    reject = current.cid()
    current.send(
        CurrentCommandType.REJECT_IMAGE,
        RejectImageMessage(current.client_id, reject, image.correlation_id, 0, "not wanted").encode(),
    )
    _run_all(current, out, CurrentCommandType.ON_PUBLICATION_ERROR)
    assert (ResponseType.ON_OPERATION_SUCCESS, reject.to_bytes(8, "little", signed=True)) in out
    [error] = [
        PublicationErrorResponse.decode(body) for kind, body in out if kind == CurrentCommandType.ON_PUBLICATION_ERROR
    ]
    assert error.registration_id == pub_id
    assert error.session_id == ready.session_id == image.session_id
    assert error.stream_id == 7
    assert error.error_code == CurrentErrorCode.IMAGE_REJECTED
    assert error.error_message == "not wanted"
    assert error.source.startswith("127.0.0.1:")
    # Told once, not once per ERR frame.
    out.clear()
    _run_all(current, out, CurrentCommandType.ON_PUBLICATION_ERROR, seconds=1.0)
    assert not [kind for kind, _ in out if kind == CurrentCommandType.ON_PUBLICATION_ERROR]


def test_flow_control_drops_a_rejecting_receiver() -> None:
    fc = MinMulticastFlowControl()
    fc.initialize(0, 64 * 1024)
    for receiver_id in (1, 2):
        fc.on_status_message(0, 0, 1024, receiver_id, 0, 0, 0, 16)
    fc.on_error(1)
    assert fc.on_status_message(0, 4096, 1024, 2, 1, 0, 0, 16) == 4096 + 1024
    unicast = UnicastFlowControl()
    unicast.on_error(5)
    assert not unicast.should_linger(0)


def test_err_frame_round_trip_matches_what_the_image_writes() -> None:
    frame = ErrorFrame(1, 2, 3, int(CurrentErrorCode.IMAGE_REJECTED), "x")
    assert ErrorFrame.decode(frame.encode()) == frame
