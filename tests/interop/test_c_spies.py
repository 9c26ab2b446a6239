"""Spy subscriptions with today's Aeron (the C client and C media driver 1.53, through pyaeron).

Today's client spies on our driver (today's cnc.dat and commands), and our client spies on
the C driver with ``AERON_SPIES_SIMULATE_CONNECTION`` set, as a deployment would set it.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.client import Aeron, FragmentAssembler
from driver.cnc import CncGeneration
from support.aeron_c import AeronC
from support.clients import Errors, offer_all, wait_for_image
from support.driver_process import DriverProcess
from support.ports import free_udp_port
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.c_peer]

PEER = Path(__file__).parent / "c_peer" / "peer.py"
SEQ = struct.Struct("<q")
STREAM_ID = 1301


def _message(seq: int, size: int) -> bytes:
    """The peer's message: the sequence number, then bytes that follow from it."""
    body = bytes((seq + i) & 0xFF for i in range(max(0, size - SEQ.size)))
    return (SEQ.pack(seq) + body)[: max(size, SEQ.size)]


def _channel() -> str:
    return f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"


def _events(text: str, name: str) -> list[dict[str, object]]:
    decoder = json.JSONDecoder()
    found: list[dict[str, object]] = []
    for line in text.splitlines():
        index = 0
        while line.startswith("{", index):
            event, index = decoder.raw_decode(line, index)
            if event.get("event") == name:
                found.append(event)
    return found


@pytest.fixture
def our_driver(aeron_dir: Path, tmp_path: Path) -> Iterator[DriverProcess]:
    """Our ``python -m driver`` (today's generation), spies simulating a connection."""
    settings = {"timer_interval_ns": 50_000_000, "term_buffer_length": 1 << 16, "spies_simulate_connection": True}
    proc = DriverProcess.start(aeron_dir, tmp_path / "driver.log", settings)
    try:
        yield proc
    finally:
        proc.stop()


def test_today_s_c_client_spies_on_our_driver(aeron_c: AeronC, our_driver: DriverProcess, tmp_path: Path) -> None:
    channel = _channel()
    count, size = 3000, 200  # 3000 frames of 256 bytes: the 64 KiB terms rotate a dozen times
    log = tmp_path / "c-spy.log"
    with Aeron.connect(aeron_dir=our_driver.aeron_dir, error_handler=Errors()) as aeron:
        assert aeron.cnc_generation is CncGeneration.CURRENT
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        spy = aeron_c.start(
            PEER,
            "subscribe",
            str(our_driver.aeron_dir),
            f"aeron-spy:{channel}",
            str(STREAM_ID),
            str(count),
            log_path=log,
        )
        try:
            execute_until(lambda: publication.is_connected, timeout_s=60, description="connected by the C client's spy")
            offer_all(publication, [_message(seq, size) for seq in range(count)], lambda: None, timeout_s=60)
            received = execute_until(
                lambda: _events(log.read_text(), "received"), timeout_s=60, interval_s=0.05, description="C spy done"
            )
        finally:
            AeronC.stop(spy)
    assert received[-1]["errors"] == []
    assert received[-1]["counts"] == [count]
    assert our_driver.process.poll() is None


@pytest.fixture
def c_driver_with_spies(aeron_c: AeronC, aeron_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """The C media driver, told by its environment that spies simulate a connection."""
    c_dir = aeron_dir.with_name(aeron_dir.name + "-c")
    log = tmp_path / "c-driver.log"
    proc = aeron_c.start(PEER, "driver", str(c_dir), log_path=log, env={"AERON_SPIES_SIMULATE_CONNECTION": "true"})
    try:
        execute_until(
            lambda: proc.poll() is None and "driver-ready" in log.read_text(),
            timeout_s=60,
            interval_s=0.05,
            description="the C driver",
        )
        yield c_dir
    finally:
        AeronC.stop(proc)
        shutil.rmtree(c_dir, ignore_errors=True)


def test_our_spy_on_the_c_driver(c_driver_with_spies: Path) -> None:
    channel = _channel()
    with Aeron.connect(aeron_dir=c_driver_with_spies, error_handler=Errors()) as aeron:
        assert aeron.cnc_generation is CncGeneration.CURRENT
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        spy = aeron.add_subscription(f"aeron-spy:{channel}", STREAM_ID)
        (image,) = wait_for_image(spy, timeout_s=30)
        assert image.session_id == publication.session_id
        execute_until(lambda: publication.is_connected, timeout_s=30, description="connected by our spy")
        received: list[bytes] = []
        assembler = FragmentAssembler(lambda buffer, header: received.append(bytes(buffer)))
        messages = [_message(seq, 100 + (seq % 3) * 2000) for seq in range(1500)]  # some fragmented

        def drain() -> None:
            spy.poll(assembler, 100)

        offer_all(publication, messages, drain, timeout_s=60)
        execute_until(
            lambda: len(received) >= len(messages),
            drain,
            timeout_s=60,
            max_iterations=10_000_000,
            interval_s=0.0001,
            description="every message spied",
        )
        assert received == messages
