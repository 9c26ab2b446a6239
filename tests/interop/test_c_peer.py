"""Today's Aeron — the C media driver and C client 1.53, through pyaeron — against ours.

* the C client publishes and subscribes on our driver (IPC and UDP; small and
  fragmented messages; exclusive publications; several subscribers);
* our client does the same on the C driver, and uses today's commands there;
* the C driver and ours exchange a stream over UDP in both directions while our
  fault injector drops 5% of the datagrams on our side: every message arrives
  exactly once and in order;
* our client refuses a cnc.dat version it does not know.

Peer scripts run in the pyaeron venv (CPython >= 3.12) that ``support.aeron_c`` keeps
in a cache; without such a CPython these tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from driver.client import Aeron, FragmentAssembler, Header
from driver.cnc import CncFile, CncGeneration, semantic_version
from driver.errors import CncVersionError, RegistrationError
from support.aeron_c import AeronC
from support.driver_process import DriverProcess
from support.ports import free_udp_port
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.c_peer]

PEER = Path(__file__).parent / "c_peer" / "peer.py"
SEQ = struct.Struct("<q")
OUR_DRIVER_SETTINGS: dict[str, object] = {
    "timer_interval_ns": 50_000_000,
    "client_liveness_timeout_ns": 5_000_000_000,
    "publication_linger_timeout_ns": 1_000_000_000,
    "term_buffer_length": 1 << 20,
    "ipc_term_buffer_length": 1 << 20,
}
SHORT_CLIENT_LIVENESS_NS = 2_000_000_000
LOSS_SETTINGS: dict[str, object] = {
    "send_loss_rate": 0.05,
    "send_fault_seed": 31,
    "receive_loss_rate": 0.05,
    "receive_fault_seed": 32,
}


def message(seq: int, size: int) -> bytes:
    body = bytes((seq + i) & 0xFF for i in range(max(0, size - SEQ.size)))
    return (SEQ.pack(seq) + body)[: max(size, SEQ.size)]


def events(output: str) -> list[dict[str, object]]:
    """The JSON objects the peer printed; two threads' lines may run together, so decode objects one by one."""
    decoder = json.JSONDecoder()
    found: list[dict[str, object]] = []
    for line in output.splitlines():
        index = 0
        while line.startswith("{", index):
            event, index = decoder.raw_decode(line, index)
            found.append(event)
    return found


def last(output: str, name: str) -> dict[str, object]:
    found = [e for e in events(output) if e.get("event") == name]
    assert found, f"peer never reported {name!r}; output:\n{output}"
    return found[-1]


@pytest.fixture
def our_driver(aeron_dir: Path, tmp_path: Path) -> Iterator[DriverProcess]:
    """Our ``python -m driver``, writing today's cnc.dat (the default generation)."""
    proc = DriverProcess.start(aeron_dir, tmp_path / "driver.log", OUR_DRIVER_SETTINGS)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def c_dir(aeron_dir: Path) -> Iterator[Path]:
    path = aeron_dir.with_name(aeron_dir.name + "-c")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def running_c_driver(aeron_c: AeronC, c_dir: Path, log: Path, env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """The C media driver (SHARED threading) in a peer process on ``c_dir``, configured by Aeron's environment
    variables in ``env``; stopped by its group id."""
    proc = aeron_c.start(PEER, "driver", str(c_dir), log_path=log, env=env)
    try:
        execute_until(
            lambda: proc.poll() is None and "driver-ready" in log.read_text(),
            timeout_s=60,
            interval_s=0.05,
            description=f"the C driver on {c_dir}",
        )
        yield c_dir
    finally:
        AeronC.stop(proc)


@pytest.fixture
def c_driver(aeron_c: AeronC, c_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """The C media driver with its defaults on ``c_dir``."""
    with running_c_driver(aeron_c, c_dir, tmp_path / "c-driver.log") as path:
        yield path


def check_received(output: str, count: int, subscribers: int) -> None:
    received = last(output, "received")
    assert received["errors"] == [], output
    assert received["counts"] == [count] * subscribers, output


# ---------------------------------------------------------------------------------- C client on our driver


@pytest.mark.parametrize(
    ("channel", "count", "size", "options"),
    [
        pytest.param("aeron:ipc", 5000, 32, ["--subscribers", "3"], id="ipc-small-3subs"),
        pytest.param("aeron:ipc", 60, 20_000, ["--exclusive"], id="ipc-fragmented-exclusive"),
        pytest.param("aeron:ipc", 60, 20_000, ["--subscribers", "2"], id="ipc-fragmented-2subs"),
        pytest.param("udp", 3000, 32, ["--subscribers", "2"], id="udp-small-2subs"),
        pytest.param("udp", 40, 20_000, ["--exclusive"], id="udp-fragmented-exclusive"),
    ],
)
def test_c_client_publishes_and_subscribes_on_our_driver(
    aeron_c: AeronC, our_driver: DriverProcess, channel: str, count: int, size: int, options: list[str]
) -> None:
    if channel == "udp":
        channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    subscribers = int(options[options.index("--subscribers") + 1]) if "--subscribers" in options else 1
    result = aeron_c.run(
        PEER, "pubsub", str(our_driver.aeron_dir), channel, "10", str(count), str(size), *options, timeout_s=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert last(result.stdout, "published")["count"] == count
    check_received(result.stdout, count, subscribers)
    assert our_driver.process.poll() is None


def test_c_publisher_to_our_subscriber_and_back_over_ipc(
    aeron_c: AeronC, our_driver: DriverProcess, tmp_path: Path
) -> None:
    """Our client and the C client sharing our driver: each reads what the other wrote."""
    count, size = 2000, 200
    done = tmp_path / "consumed"
    with Aeron.connect(aeron_dir=our_driver.aeron_dir, driver_timeout_ms=10_000) as aeron:
        assert aeron.cnc_generation is CncGeneration.CURRENT
        subscription = aeron.add_subscription("aeron:ipc", 21)
        got: list[int] = []

        def on_message(payload: memoryview, header: Header) -> None:
            data = bytes(payload)
            (seq,) = SEQ.unpack_from(data, 0)
            assert data == message(seq, size)
            got.append(seq)

        publisher = aeron_c.start(
            PEER,
            "publish",
            str(our_driver.aeron_dir),
            "aeron:ipc",
            "21",
            str(count),
            str(size),
            "--until-file",
            str(done),
            log_path=tmp_path / "c-pub.log",
        )
        try:
            deadline = time.monotonic() + 90
            while len(got) < count and time.monotonic() < deadline:
                if subscription.poll(on_message, 100) == 0:
                    time.sleep(0.0005)
            assert got == list(range(count))
        finally:
            done.touch()
            assert publisher.wait(60) == 0, (tmp_path / "c-pub.log").read_text()

        # and back: our publisher, the C client subscribing
        sub_log = tmp_path / "c-sub.log"
        subscriber = aeron_c.start(
            PEER, "subscribe", str(our_driver.aeron_dir), "aeron:ipc", "22", str(count), str(size), log_path=sub_log
        )
        try:
            execute_until(lambda: "subscribed" in sub_log.read_text(), timeout_s=60, interval_s=0.02)
            publication = aeron.add_exclusive_publication("aeron:ipc", 22)
            execute_until(lambda: publication.is_connected, timeout_s=30, interval_s=0.01)
            seq = 0
            deadline = time.monotonic() + 90
            while seq < count and time.monotonic() < deadline:
                if publication.offer(message(seq, size)) > 0:
                    seq += 1
            assert subscriber.wait(90) == 0, sub_log.read_text()
        finally:
            AeronC.stop(subscriber)
        check_received(sub_log.read_text(), count, 1)


def test_today_s_commands_from_our_client_on_our_driver(our_driver: DriverProcess) -> None:
    with Aeron.connect(aeron_dir=our_driver.aeron_dir) as aeron:
        _exercise_today_s_commands(aeron)


# ---------------------------------------------------------------------------------- our client on the C driver


def _exercise_today_s_commands(aeron: Aeron) -> None:
    first = aeron.add_static_counter(1234, 777, b"key", "a static counter")
    again = aeron.add_static_counter(1234, 777, b"key", "a static counter")
    assert first == again
    session_a = aeron.next_available_session_id(50)
    session_b = aeron.next_available_session_id(50)
    assert session_a != session_b
    counter = aeron.add_counter(1001, b"k", "an owned counter")
    with pytest.raises(RegistrationError, match="GENERIC_ERROR"):
        aeron.add_static_counter(1001, counter.registration_id, b"", "clash")
    counter.close()


def _exchange(
    aeron: Aeron, channel: str, stream_id: int, count: int, size: int, subscribers: int, exclusive: bool
) -> None:
    subs = [aeron.add_subscription(channel, stream_id) for _ in range(subscribers)]
    publication = (
        aeron.add_exclusive_publication(channel, stream_id) if exclusive else aeron.add_publication(channel, stream_id)
    )
    execute_until(lambda: publication.is_connected and all(s.is_connected for s in subs), timeout_s=30, interval_s=0.01)
    received: list[list[int]] = [[] for _ in subs]
    handlers = []
    for index in range(subscribers):

        def on_message(payload: memoryview, header: Header, index: int = index) -> None:
            data = bytes(payload)
            (seq,) = SEQ.unpack_from(data, 0)
            assert data == message(seq, size)
            received[index].append(seq)

        handlers.append(FragmentAssembler(on_message))
    seq = 0
    deadline = time.monotonic() + 90
    while min(len(r) for r in received) < count and time.monotonic() < deadline:
        if seq < count and publication.offer(message(seq, size)) > 0:
            seq += 1
        for sub, handler in zip(subs, handlers, strict=True):
            sub.poll(handler, 64)
    for got in received:
        assert got == list(range(count))
    publication.close()
    for sub in subs:
        sub.close()


@pytest.mark.parametrize(
    ("channel", "count", "size", "subscribers", "exclusive"),
    [
        pytest.param("aeron:ipc", 3000, 32, 3, False, id="ipc-small-3subs"),
        pytest.param("aeron:ipc", 50, 20_000, 1, True, id="ipc-fragmented-exclusive"),
        pytest.param("udp", 2000, 32, 2, False, id="udp-small-2subs"),
        pytest.param("udp", 40, 20_000, 1, True, id="udp-fragmented-exclusive"),
    ],
)
def test_our_client_publishes_and_subscribes_on_the_c_driver(
    c_driver: Path, channel: str, count: int, size: int, subscribers: int, exclusive: bool
) -> None:
    if channel == "udp":
        channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    with Aeron.connect(aeron_dir=c_driver) as aeron:
        assert aeron.cnc_generation is CncGeneration.CURRENT
        _exchange(aeron, channel, 10, count, size, subscribers, exclusive)


def test_our_client_uses_today_s_commands_and_error_codes_on_the_c_driver(c_driver: Path) -> None:
    with Aeron.connect(aeron_dir=c_driver) as aeron:
        _exercise_today_s_commands(aeron)
        with pytest.raises(RegistrationError, match="INVALID_CHANNEL"):
            aeron.add_publication("aeron:bogus", 1)


def test_our_client_stays_alive_on_the_c_driver_past_its_liveness_timeout(
    aeron_c: AeronC, c_dir: Path, tmp_path: Path
) -> None:
    """Today's drivers time clients out by the heartbeat counter, which our client must stamp. The driver's
    liveness timeout is set to 2 s (its default is 10 s) so that waiting past it is short."""
    env = {"AERON_CLIENT_LIVENESS_TIMEOUT": str(SHORT_CLIENT_LIVENESS_NS)}
    with (
        running_c_driver(aeron_c, c_dir, tmp_path / "c-driver.log", env) as c_driver,
        Aeron.connect(aeron_dir=c_driver) as aeron,
    ):
        subscription = aeron.add_subscription("aeron:ipc", 77)
        liveness_ns = CncFile.map_existing(c_driver).client_liveness_timeout_ns
        assert liveness_ns == SHORT_CLIENT_LIVENESS_NS  # the driver took the setting: the wait below is past it
        time.sleep(liveness_ns / 1e9 + 1.0)
        assert not aeron.is_closed
        publication = aeron.add_publication("aeron:ipc", 77)
        execute_until(lambda: subscription.is_connected and publication.is_connected, timeout_s=30, interval_s=0.01)


# ---------------------------------------------------------------------------------- UDP between the drivers


def _our_lossy_driver(aeron_dir: Path, tmp_path: Path) -> DriverProcess:
    return DriverProcess.start(aeron_dir, tmp_path / "lossy-driver.log", {**OUR_DRIVER_SETTINGS, **LOSS_SETTINGS})


@pytest.mark.slow
@pytest.mark.parametrize(("count", "size"), [(5000, 32), (60, 20_000)], ids=["32B", "20KB"])
def test_c_driver_to_our_lossy_driver_over_udp(
    aeron_c: AeronC, c_driver: Path, aeron_dir: Path, tmp_path: Path, count: int, size: int
) -> None:
    ours = _our_lossy_driver(aeron_dir, tmp_path)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    done = tmp_path / "consumed"
    try:
        with Aeron.connect(aeron_dir=aeron_dir) as aeron:
            subscription = aeron.add_subscription(channel, 40)
            got: list[int] = []

            def on_message(payload: memoryview, header: Header) -> None:
                data = bytes(payload)
                (seq,) = SEQ.unpack_from(data, 0)
                assert data == message(seq, size)
                got.append(seq)

            assembler = FragmentAssembler(on_message)
            log = tmp_path / "c-pub.log"
            publisher = aeron_c.start(
                PEER, "publish", str(c_driver), channel, "40", str(count), str(size), "--until-file", str(done),
                log_path=log,
            )
            try:
                deadline = time.monotonic() + 120
                while len(got) < count and time.monotonic() < deadline:
                    if subscription.poll(assembler, 100) == 0:
                        time.sleep(0.0005)
                assert got == list(range(count)), log.read_text()
            finally:
                done.touch()
                assert publisher.wait(60) == 0, log.read_text()
    finally:
        ours.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("count", "size"), [(5000, 32), (60, 20_000)], ids=["32B", "20KB"])
def test_our_lossy_driver_to_the_c_driver_over_udp(
    aeron_c: AeronC, c_driver: Path, aeron_dir: Path, tmp_path: Path, count: int, size: int
) -> None:
    ours = _our_lossy_driver(aeron_dir, tmp_path)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    sub_log = tmp_path / "c-sub.log"
    subscriber = aeron_c.start(PEER, "subscribe", str(c_driver), channel, "41", str(count), str(size), log_path=sub_log)
    try:
        execute_until(lambda: "subscribed" in sub_log.read_text(), timeout_s=60, interval_s=0.02)
        with Aeron.connect(aeron_dir=aeron_dir) as aeron:
            publication = aeron.add_publication(channel, 41)
            execute_until(lambda: publication.is_connected, timeout_s=30, interval_s=0.01)
            seq = 0
            deadline = time.monotonic() + 120
            while seq < count and time.monotonic() < deadline:
                if publication.offer(message(seq, size)) > 0:
                    seq += 1
                else:
                    time.sleep(0.0001)
            assert seq == count
            assert subscriber.wait(120) == 0, sub_log.read_text()
        check_received(sub_log.read_text(), count, 1)
    finally:
        AeronC.stop(subscriber)
        ours.stop()


# ---------------------------------------------------------------------------------- versions


def test_our_client_refuses_a_cnc_version_it_does_not_know(c_driver: Path, tmp_path: Path) -> None:
    """A copy of the C driver's cnc.dat with major version 1: our client names both versions."""
    fake = tmp_path / "future"
    fake.mkdir()
    data = bytearray((c_driver / "cnc.dat").read_bytes())
    future = semantic_version(1, 0, 0)
    data[0:4] = future.to_bytes(4, "little")
    (fake / "cnc.dat").write_bytes(bytes(data))
    with pytest.raises(CncVersionError) as refused:
        Aeron.connect(aeron_dir=fake, driver_timeout_ms=2000)
    text = str(refused.value)
    assert str(future) in text
    assert "1.0.0" in text
    assert "15 (Aeron 1.15.x)" in text
    assert "512" in text


def test_peer_runs_the_current_aeron(aeron_c: AeronC) -> None:
    out = subprocess.run(
        [str(aeron_c.python), "-c", "import pyaeron; print(pyaeron.aeron_version)"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "1.53" in out
