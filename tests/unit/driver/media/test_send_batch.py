"""The sender's native step (``send_publications``) on real mmap'd terms and real sockets: what it puts on the wire
is byte for byte what the Python path (``NetworkPublication.send``) sends, and it leaves positions, times and counters
as that path does."""

from __future__ import annotations

import array
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.command_queues import CommandQueue
from driver.core.sender import FEEDBACK_BATCH, Sender
from driver.logbuffer.frame import QUIET_RESERVED_VALUE
from driver.media._net import QUIET_RESERVED_VALUE as NATIVE_QUIET_RESERVED_VALUE
from driver.media._net import SendSlot, send_publications
from driver.media.endpoints import EndpointCounters, SendChannelEndpoint
from driver.media.faults import FaultSpec
from driver.media.udp_channel import UdpChannel
from driver.wire.status import write_sm
from support.send_rig import INITIAL_TERM_ID, MS, MTU, TERM_LENGTH, Rig

HEARTBEAT_NS = 100 * MS


def _receiver() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind(("127.0.0.1", 0))
    return sock


def _sender() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def _drain(sock: socket.socket, expected: int, timeout_s: float = 5.0) -> list[bytes]:
    """The datagrams waiting on ``sock``: ``expected`` of them (bounded wait), then whatever else is there."""
    received: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    sock.settimeout(0.05)
    while time.monotonic() < deadline:
        try:
            received.append(sock.recv(65536))
        except TimeoutError:
            if len(received) >= expected:
                break
    return received


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def _native(rigs: list[Rig], now_ns: int, due: list[int] | None = None) -> tuple[int, list[int] | None]:
    slots = [rig.publication.native for rig in rigs]
    deadlines = array.array("q", [0] * len(rigs))
    result = send_publications(slots, due if due is not None else list(range(len(rigs))), 0, now_ns, deadlines)
    for rig, deadline in zip(rigs, deadlines, strict=True):
        rig.deadline = deadline  # type: ignore[attr-defined]
    return result


def _python_until_idle(rig: Rig, now_ns: int, cycles: int = 64) -> None:
    for _ in range(cycles):
        if rig.publication.send(now_ns) == 0:
            return


def _native_until_idle(rig: Rig, now_ns: int, cycles: int = 64) -> None:
    for _ in range(cycles):
        sent, python = _native([rig], now_ns)
        assert python is None
        if sent == 0:
            return


def _pair(tmp_path: Path, sockets: list[socket.socket]) -> tuple[Rig, Rig, socket.socket]:
    """The same publication twice: one for the Python path, one sent natively to a real receiver."""
    python = Rig(tmp_path, "python")
    native = Rig(tmp_path, "native")
    receiver, sender = _receiver(), _sender()
    sockets += [receiver, sender]
    native.bind(sender, [receiver.getsockname()])
    return python, native, receiver


def _write_both(rigs: tuple[Rig, Rig], lengths: list[int], reserved: int | None = None) -> None:
    """The messages of ``lengths`` into both rigs' logs; ``reserved``: their reserved value (else their index)."""
    for rig in rigs:
        for i, length in enumerate(lengths):
            rig.write(length, fill=i if reserved is None else reserved)


def test_data_frames_are_byte_identical_to_the_python_paths_within_the_mtu(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    python, native, receiver = _pair(tmp_path, sockets)
    lengths = [0, 1, 100, 500, 1376, 700, 31, 33, 64, 1000, 1000, 1000, 8, 1300, 200, 90] * 3
    _write_both((python, native), lengths)
    for rig in (python, native):
        rig.set_limit(10 * TERM_LENGTH)
    now = 1_000 * MS
    _python_until_idle(python, now)
    _native_until_idle(native, now)
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent
    assert all(len(datagram) <= MTU for datagram in received)
    assert any(len(datagram) > 1000 and datagram.count(b"\x01\x00", 0, 8) for datagram in received)  # batched frames
    assert native.sender_position.get() == python.sender_position.get() == python.position
    for counter in (SystemCounterId.BYTES_SENT, SystemCounterId.SHORT_SENDS, SystemCounterId.HEARTBEATS_SENT):
        assert native.counter(counter) == python.counter(counter)
    assert native.publication.native.last_send_ns == python.publication.native.last_send_ns == now
    assert native.deadline == now + HEARTBEAT_NS + 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("segmented", [True, False], ids=["segmented", "one_by_one"])
def test_runs_of_same_sized_datagrams_arrive_as_the_python_paths_datagrams(
    tmp_path: Path, sockets: list[socket.socket], segmented: bool
) -> None:
    """Small frames of one size fill datagrams of one length: the native step hands each run to the kernel as one
    message to cut (UDP_SEGMENT), and the receiver gets the very datagrams the Python path sends one by one (a
    shorter last one and a term's end included). ``no_segmentation`` (what a refusing kernel sets) sends them
    one by one, the same again."""
    python, native, receiver = _pair(tmp_path, sockets)
    native.io.no_segmentation = not segmented
    # 96-byte frames, 14 to a datagram; one long frame breaks a run; a pad ends the term, the next goes on.
    _write_both((python, native), [36] * 600 + [1000, 36, 36])
    for rig in (python, native):
        rig.pad_to_end()
    _write_both((python, native), [36] * 100)
    for rig in (python, native):
        rig.set_limit(10 * TERM_LENGTH)
    now = 1_000 * MS
    _python_until_idle(python, now)
    _native_until_idle(native, now)
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent
    assert sum(1 for datagram in received if len(datagram) == 14 * 96) >= 40
    assert native.sender_position.get() == python.sender_position.get() == python.position
    for counter in (SystemCounterId.BYTES_SENT, SystemCounterId.SHORT_SENDS):
        assert native.counter(counter) == python.counter(counter)
    if segmented:
        assert native.io.segmented_sends > 0
        assert not native.io.no_segmentation
    else:
        assert native.io.segmented_sends == 0


def test_padding_and_term_rotation_through_the_int32_term_id_wrap(tmp_path: Path, sockets: list[socket.socket]) -> None:
    python, native, receiver = _pair(tmp_path, sockets)
    for rig in (python, native):
        rig.set_limit(10 * TERM_LENGTH)
    now = 5_000 * MS
    for _term in range(3):  # three terms: ids INITIAL, INITIAL + 1 (int32 max), then the wrap to int32 min
        _write_both((python, native), [1000] * 60)
        for rig in (python, native):
            rig.pad_to_end()
        _python_until_idle(python, now)
        _native_until_idle(native, now)
    _write_both((python, native), [300, 300])
    _python_until_idle(python, now)
    _native_until_idle(native, now)
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent
    pad = (TERM_LENGTH - 60 * 1056).to_bytes(4, "little")
    pads = [d for d in received if d[-32:-28] == pad and d[-26:-24] == b"\0\0" and d[-20:-16] == b"\x07\0\0\0"]
    assert len(pads) == 3  # a PAD ends its datagram, only its header sent
    term_ids = {int.from_bytes(d[20:24], "little", signed=True) for d in received}
    assert {INITIAL_TERM_ID, 2**31 - 1, -(2**31), -(2**31) + 1} == term_ids
    assert native.sender_position.get() == python.position == 3 * TERM_LENGTH + 2 * 352


def test_the_sender_limit_stops_sends_and_a_stall_is_counted_once(tmp_path: Path, sockets: list[socket.socket]) -> None:
    python, native, receiver = _pair(tmp_path, sockets)
    _write_both((python, native), [1000] * 10)
    limit = 3 * 1056 + 500  # mid frame: the frame that does not fit waits
    for rig in (python, native):
        rig.set_limit(limit)
    now = 2_000 * MS
    for _ in range(3):
        python.publication.send(now)
        _native([native], now)
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent
    assert native.sender_position.get() == python.sender_position.get() == 3 * 1056
    assert native.counter(SystemCounterId.SENDER_FLOW_CONTROL_LIMITS) == 0  # window open, frame too long for it
    for rig in (python, native):
        rig.set_limit(4 * 1056)
    for _ in range(3):
        python.publication.send(now)
        _native([native], now)
    assert native.sender_position.get() == python.sender_position.get() == 4 * 1056
    assert native.counter(SystemCounterId.SENDER_FLOW_CONTROL_LIMITS) == 1
    assert python.counter(SystemCounterId.SENDER_FLOW_CONTROL_LIMITS) == 1
    assert _drain(receiver, 1) == python.recorder.sent[len(received) :]


def test_heartbeats_when_idle_are_byte_identical_and_timed_as_the_python_paths(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    python, native, receiver = _pair(tmp_path, sockets)
    _write_both((python, native), [100, 100])
    for rig in (python, native):
        rig.set_limit(10 * TERM_LENGTH)
    start = 3_000 * MS
    for now in range(start, start + 1_000 * MS, 10 * MS):  # a second idle after the data, 10 ms cycles
        python.publication.send(now)
        _native([native], now)
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent
    heartbeats = [d for d in received if len(d) == 32 and d[:4] == b"\0\0\0\0"]
    assert 8 <= len(heartbeats) <= 10
    assert native.counter(SystemCounterId.HEARTBEATS_SENT) == python.counter(SystemCounterId.HEARTBEATS_SENT)
    assert heartbeats[0][8:12] == (320).to_bytes(4, "little")  # at the sender position
    assert native.deadline == native.publication.native.last_send_ns + HEARTBEAT_NS + 1  # type: ignore[attr-defined]


def test_a_tail_probe_heartbeats_once_soon_after_data_on_both_paths(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    """``tail-probe``: one heartbeat that long after data (a receiver that lost the last datagram learns of it from
    it and asks again), then the interval again; the native step as the Python path, byte for byte, deadlines too."""
    python, native, receiver = _pair(tmp_path, sockets)
    for rig in (python, native):
        rig.publication.native.probe_ns = 30 * MS
        rig.set_limit(10 * TERM_LENGTH)
    _write_both((python, native), [100])
    start = 3_000 * MS
    beats: dict[str, list[int]] = {"python": [], "native": []}
    deadlines: list[int] = []
    for now in range(start, start + 500 * MS, 10 * MS):
        python.publication.send(now)
        _native([native], now)
        deadlines.append(native.deadline)  # type: ignore[attr-defined]
        for name, rig in (("python", python), ("native", native)):
            if rig.counter(SystemCounterId.HEARTBEATS_SENT) > len(beats[name]):
                beats[name].append((now - start) // MS)
    assert beats["python"] == beats["native"] == [40, 150, 260, 370, 480]  # after data: 30 ms, then every 100
    assert deadlines[0] == start + 30 * MS + 1  # the agenda visits it when the probe is due
    assert python.publication.next_send_ns() == native.deadline  # type: ignore[attr-defined]
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent
    assert received[1][8:12] == (160).to_bytes(4, "little")  # the probe: at the sender position, past the data
    # Data again: one more probe 30 ms after it, then the interval.
    _write_both((python, native), [100])
    before = {
        name: rig.counter(SystemCounterId.HEARTBEATS_SENT) for name, rig in (("python", python), ("native", native))
    }
    beats = {"python": [], "native": []}
    for now in range(start + 500 * MS, start + 700 * MS, 10 * MS):
        python.publication.send(now)
        _native([native], now)
        for name, rig in (("python", python), ("native", native)):
            if rig.counter(SystemCounterId.HEARTBEATS_SENT) > before[name] + len(beats[name]):
                beats[name].append((now - start) // MS)
    assert beats["python"] == beats["native"] == [540, 650]


def test_a_quiet_message_alone_asks_for_no_tail_probe_on_both_paths(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    """A whole message alone in its datagram with ``QUIET_RESERVED_VALUE`` (an end point's keepalive) is followed by
    no tail probe, only the interval's heartbeats; one sent while a probe is owed for data before it leaves that
    probe owed; in one datagram with other data it is data like any other. Both paths alike, byte for byte."""
    assert NATIVE_QUIET_RESERVED_VALUE == QUIET_RESERVED_VALUE  # (the C step's own copy of the constant)
    python, native, receiver = _pair(tmp_path, sockets)
    for rig in (python, native):
        rig.publication.native.probe_ns = 30 * MS
        rig.set_limit(10 * TERM_LENGTH)
    start = 3_000 * MS
    rigs = (("python", python), ("native", native))

    def beats_between(begin_ms: int, end_ms: int, then: tuple[int, list[int]] | None = None) -> list[int]:
        """Heartbeats (ms from ``start``) of both paths, alike, over the steps of 10 ms from ``begin_ms``; ``then``:
        at that step, write these lengths (quiet) first."""
        before = {name: rig.counter(SystemCounterId.HEARTBEATS_SENT) for name, rig in rigs}
        beats: dict[str, list[int]] = {"python": [], "native": []}
        for at in range(begin_ms, end_ms, 10):
            if then is not None and at == then[0]:
                _write_both((python, native), then[1], QUIET_RESERVED_VALUE)
            now = start + at * MS
            python.publication.send(now)
            _native([native], now)
            for name, rig in rigs:
                if rig.counter(SystemCounterId.HEARTBEATS_SENT) > before[name] + len(beats[name]):
                    beats[name].append(at)
        assert beats["python"] == beats["native"]
        return beats["python"]

    _write_both((python, native), [100], QUIET_RESERVED_VALUE)
    assert beats_between(0, 250) == [110, 220]  # no probe: the interval's heartbeats only
    _write_both((python, native), [100])
    assert beats_between(300, 500) == [340, 450]  # data: the probe 30 ms after it
    _write_both((python, native), [100])
    assert beats_between(600, 720, then=(610, [100])) == [650]  # still owed after the quiet one (sent at 610)
    _write_both((python, native), [100, 100], QUIET_RESERVED_VALUE)  # two quiet ones in one datagram
    assert beats_between(800, 900) == [840]
    received = _drain(receiver, len(python.recorder.sent))
    assert received == python.recorder.sent


def test_several_publications_sockets_and_destinations_in_one_call(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    first, second, third = _receiver(), _receiver(), _receiver()
    out_a, out_b = _sender(), _sender()
    sockets += [first, second, third, out_a, out_b]
    shared = [first.getsockname(), second.getsockname()]
    rigs = [Rig(tmp_path, f"p{i}", session_id=100 + i) for i in range(4)]
    rigs[0].bind(out_a, shared)  # a shared endpoint's destinations
    rigs[1].bind(out_a, shared)
    rigs[2].bind(out_b, [third.getsockname(), first.getsockname()], all_destinations=True)  # a private publication's
    rigs[3].bind(out_b, [])  # no destination yet: counted as sent, as the Python path does
    for i, rig in enumerate(rigs):
        for _ in range(20):
            rig.write(200, fill=i)
        rig.set_limit(10 * TERM_LENGTH)
    now = 4_000 * MS
    sent, python = _native(rigs, now)
    assert python is None
    assert sent == sum(rig.sender_position.get() for rig in rigs) > 0
    per_call = [rig.sender_position.get() for rig in rigs]
    assert all(0 < position <= 16 * MTU for position in per_call)
    for _ in range(8):
        _native(rigs, now)
    assert [rig.sender_position.get() for rig in rigs] == [20 * 256] * 4

    def sessions(datagrams: list[bytes]) -> dict[int, int]:
        counts: dict[int, int] = {}
        for datagram in datagrams:
            session = int.from_bytes(datagram[12:16], "little")
            counts[session] = counts.get(session, 0) + len(datagram)
        return counts

    assert sessions(_drain(first, 3)) == {100: 20 * 256, 101: 20 * 256, 102: 20 * 256}
    assert sessions(_drain(second, 2)) == {100: 20 * 256, 101: 20 * 256}
    assert sessions(_drain(third, 1)) == {102: 20 * 256}
    assert [rig.counter(SystemCounterId.BYTES_SENT) for rig in rigs] == [20 * 256] * 4


def test_python_is_handed_what_it_must_do(tmp_path: Path, sockets: list[socket.socket]) -> None:
    receiver, sender = _receiver(), _sender()
    sockets += [receiver, sender]
    rigs = [Rig(tmp_path, f"p{i}", session_id=200 + i) for i in range(5)]
    rigs[0].bind(sender, [receiver.getsockname()])
    rigs[1].bind(sender, [receiver.getsockname()])
    rigs[1].publication.should_send_setup = True  # SETUP is the Python path's
    rigs[2].bind(sender, [("localhost", receiver.getsockname()[1])])  # not numeric
    rigs[3].bind(sender, [receiver.getsockname()] * 17)  # more destinations than a slot keeps
    # rigs[4] is not bound (faults injected on its socket, or a test's own end point)
    for rig in rigs:
        rig.write(64)
        rig.set_limit(TERM_LENGTH)
    sent, python = _native(rigs, 5_000 * MS)
    assert python == [1, 2, 3, 4]
    assert sent == 96
    assert rigs[0].sender_position.get() == 96
    assert [rig.sender_position.get() for rig in rigs[1:]] == [0, 0, 0, 0]
    assert rigs[1].publication.sends_natively() is False
    rigs[1].publication.should_send_setup = False
    assert rigs[1].publication.sends_natively() is True
    assert not rigs[4].publication.sends_natively()


def test_a_destination_the_kernel_rejects_goes_to_the_python_path_which_reports_it(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    sender = _sender()
    sockets.append(sender)
    rig = Rig(tmp_path)
    rig.bind(sender, [("127.0.0.1", 0)])  # port 0: the kernel refuses it (not a full socket)
    rig.write(64)
    rig.write(64)
    rig.set_limit(TERM_LENGTH)
    sent, python = _native([rig], 6_000 * MS)
    assert (sent, python) == (0, [0])
    assert rig.sender_position.get() == 0
    assert rig.counter(SystemCounterId.SHORT_SENDS) == 0


def test_slots_are_checked(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    with pytest.raises(TypeError):
        send_publications([object()], [0], 0, 0, array.array("q", [0]))  # type: ignore[list-item]
    with pytest.raises(IndexError):
        send_publications([rig.publication.native], [1], 0, 0, array.array("q", [0]))
    with pytest.raises(TypeError):
        send_publications([rig.publication.native], [0], 0, 0, array.array("i", [0]))
    with pytest.raises(TypeError):
        rig.publication.native.bind(object(), [], False)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SendSlot(
            terms=rig.log.terms,
            session_id=1,
            stream_id=1,
            initial_term_id=0,
            position_bits=8,
            mtu=1408,
            sender_position=rig.sender_position.location(),
            sender_limit=rig.sender_position.location(),
            bytes_sent=rig.sender_position.location(),
            heartbeats_sent=rig.sender_position.location(),
            short_sends=rig.sender_position.location(),
            sender_flow_control_limits=rig.sender_position.location(),
            heartbeat_interval_ns=1,
            last_send_ns=0,
        )


_FULL_SOCKET_CHILD = r"""
import array, json, socket, sys, tempfile, time
from pathlib import Path
from driver.concurrent.system_counters import SystemCounterId
from driver.media._net import send_publications
from support.send_rig import Rig

receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
receiver.bind(("127.0.0.1", 0))
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
sender.bind(("127.0.0.1", 0))
sender.setblocking(False)
with tempfile.TemporaryDirectory() as directory:
    rigs = [Rig(Path(directory), f"p{i}", session_id=300 + i) for i in range(2)]
    for i, rig in enumerate(rigs):
        rig.bind(sender, [receiver.getsockname()])
        for n in range(16):
            rig.write(1344, fill=n)
        rig.set_limit(65536)
    slots = [rig.publication.native for rig in rigs]
    first = send_publications(slots, [0, 1], 0, 10**9, array.array("q", [0, 0]))
    after_first = [rig.sender_position.get() for rig in rigs]
    shorts = sum(rig.counter(SystemCounterId.SHORT_SENDS) for rig in rigs)
    calls = 1
    deadline = time.monotonic() + 20
    while any(rig.sender_position.get() < 16 * 1376 for rig in rigs) and time.monotonic() < deadline:
        time.sleep(0.02)
        send_publications(slots, [0, 1], 0, 10**9, array.array("q", [0, 0]))
        calls += 1
    receiver.settimeout(0.5)
    received = []
    try:
        while len(received) < 64:
            received.append(receiver.recv(65536))
    except TimeoutError:
        pass
    print(json.dumps({
        "first": first[0], "after_first": after_first, "shorts_first": shorts,
        "final": [rig.sender_position.get() for rig in rigs],
        "bytes_sent": [rig.counter(SystemCounterId.BYTES_SENT) for rig in rigs], "calls": calls,
        "frames": [[int.from_bytes(d[12:16], "little"), int.from_bytes(d[8:12], "little")] for d in received],
    }))
"""


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or shutil.which("tc") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs a network namespace of its own (unshare -n) and tc")
def test_a_full_socket_stops_each_publication_at_the_refused_datagram_and_counts_it() -> None:
    """A slow link (a token bucket on the loopback of a namespace of its own) and a small send buffer: the kernel
    takes a few datagrams and refuses the rest with EAGAIN. Each publication's position stays at the first
    refused datagram (one short send each), and later calls send the rest, in order, nothing lost or repeated."""
    root = Path(__file__).resolve().parents[4]
    env = dict(os.environ, PYTHONPATH=f"{root / 'src'}{os.pathsep}{root / 'tests'}")
    script = 'ip link set lo up && tc qdisc add dev lo root tbf rate 2mbit burst 1600 latency 10s && exec "$0" -c "$1"'
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, sys.executable, _FULL_SOCKET_CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    total = 2 * 16 * 1376
    assert 0 < result["first"] < total
    assert result["after_first"][0] % 1376 == 0
    assert result["after_first"][1] % 1376 == 0
    assert 1 <= result["shorts_first"] <= 2  # one per publication stopped
    assert result["final"] == [16 * 1376, 16 * 1376]
    assert result["bytes_sent"] == [16 * 1376, 16 * 1376]
    assert result["calls"] > 1
    for session in (300, 301):
        offsets = [offset for s, offset in result["frames"] if s == session]
        assert offsets == [n * 1376 for n in range(16)]


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_destinations_and_an_ipv4_one_left_to_python(tmp_path: Path, sockets: list[socket.socket]) -> None:
    receiver = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    receiver.bind(("::1", 0))
    sender = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sender.bind(("::1", 0))
    sender.setblocking(False)
    sockets += [receiver, sender]
    python, native = Rig(tmp_path, "python"), Rig(tmp_path, "native")
    native.bind(sender, [receiver.getsockname()[:2]])
    _write_both((python, native), [100, 200, 300])
    for rig in (python, native):
        rig.set_limit(TERM_LENGTH)
    _python_until_idle(python, 7_000 * MS)
    _native_until_idle(native, 7_000 * MS)
    assert _drain(receiver, len(python.recorder.sent)) == python.recorder.sent
    mismatched = Rig(tmp_path, "v4")
    mismatched.bind(sender, [("127.0.0.1", 40000)])  # an IPv4 address on an IPv6 socket: the Python path's to judge
    mismatched.write(64)
    mismatched.set_limit(TERM_LENGTH)
    assert _native([mismatched], 7_000 * MS) == (0, [0])


class _Clock:
    def __init__(self) -> None:
        self.now_ns = 9_000 * MS

    def nano_time(self) -> int:
        return self.now_ns


def _endpoint(receiver: socket.socket, faults: tuple[FaultSpec, FaultSpec] | None = None) -> SendChannelEndpoint:
    manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
    sc = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
    return SendChannelEndpoint(
        UdpChannel.parse(f"aeron:udp?endpoint=127.0.0.1:{receiver.getsockname()[1]}"),
        EndpointCounters.of(sc.__getitem__),
        manager.new_counter("status"),
        faults=faults,
    )


def _sender_agent(clock: _Clock) -> Sender:
    manager = CountersManager(AtomicBuffer(bytearray(4 * 1024)), AtomicBuffer(bytearray(1024)))
    return Sender(clock, CommandQueue(manager.new_counter("fails")), 4)


def test_a_sender_agent_sends_natively_and_keeps_its_publications_straight_as_they_come_and_go(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    receiver = _receiver()
    sockets.append(receiver)
    endpoint = _endpoint(receiver)
    clock = _Clock()
    sender = _sender_agent(clock)
    rigs = [Rig(tmp_path, f"p{i}", session_id=400 + i, now_ns=clock.now_ns) for i in range(6)]
    try:
        for rig in rigs:
            rig.set_limit(TERM_LENGTH)
            sender.on_new_publication(rig.publication, endpoint)
        sender.do_work()  # first visits, through Python: each is found able to send natively
        assert all(rig.publication.native.python is False for rig in rigs)
        for gone in (rigs[1], rigs[4], rigs[0]):
            sender.on_remove_publication(gone.publication, endpoint, lambda: None)
        kept = [rigs[2], rigs[3], rigs[5]]
        assert [slot for slot in sender._slots] == [item.native for item in sender._agenda.items]
        assert {id(slot) for slot in sender._slots} == {id(rig.publication.native) for rig in kept}
        for rig in kept:
            rig.write(100, fill=rig.session_id)
        clock.now_ns += MS
        for _ in range(5):
            sender.do_work()
        assert [rig.sender_position.get() for rig in kept] == [160, 160, 160]
        sessions = sorted(int.from_bytes(d[12:16], "little") for d in _drain(receiver, 3) if len(d) == 160)
        assert sessions == [402, 403, 405]
        assert all(not rig.recorder.sent or all(len(d) == 32 for d in rig.recorder.sent) for rig in kept)
    finally:
        endpoint.close()


def test_with_a_fault_injector_on_its_socket_every_datagram_goes_through_the_python_path_and_the_injector(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    receiver = _receiver()
    sockets.append(receiver)
    endpoint = _endpoint(receiver, (FaultSpec(duplicate_rate=1.0), FaultSpec()))
    clock = _Clock()
    sender = _sender_agent(clock)
    rigs = [Rig(tmp_path, f"f{i}", session_id=500 + i, now_ns=clock.now_ns, endpoint=endpoint) for i in range(4)]
    try:
        for rig in rigs:
            rig.set_limit(TERM_LENGTH)
            sender.on_new_publication(rig.publication, endpoint)
        sender.do_work()  # first visits: heartbeats, through Python and the injector
        assert not any(rig.publication.sends_natively() for rig in rigs)
        for rig in rigs:
            rig.write(100)
            rig.write(100)
        clock.now_ns += MS
        for _ in range(5):
            sender.do_work()
        assert [rig.sender_position.get() for rig in rigs] == [320] * 4
        received = _drain(receiver, 4 * 2 * 2)
        data = [d for d in received if len(d) > 32]
        heartbeats = [d for d in received if len(d) == 32]
        assert len(data) == 2 * len(set(data)) == 8  # every data datagram duplicated by the injector
        assert len(heartbeats) == 2 * len(set(heartbeats)) == 8
        assert endpoint.transport.fault_counts["send_duplicated"] == 8
    finally:
        endpoint.close()


def test_a_status_poll_reads_a_few_dozen_waiting_status_messages_at_once(
    tmp_path: Path, sockets: list[socket.socket]
) -> None:
    """A host that lets feedback wait while idle (the end point's poller) finds a few dozen status messages in
    the socket when it runs the sender: one cycle takes them all (a batch of up to ``FEEDBACK_BATCH``)."""
    receiver = _receiver()
    sockets.append(receiver)
    endpoint = _endpoint(receiver)
    clock = _Clock()
    sender = _sender_agent(clock)
    rig = Rig(tmp_path, "fb", session_id=700, now_ns=clock.now_ns)
    feedback = _sender()
    sockets.append(feedback)
    try:
        sender.on_new_publication(rig.publication, endpoint)
        assert sender.feedback_sockets() == sender.readable_sockets() == [endpoint.transport.socket]
        sender.do_work()
        frame = bytearray(64)
        length = write_sm(frame, 0, 700, rig.publication.stream_id, INITIAL_TERM_ID, 0, 65536, 1, 0)
        waiting = FEEDBACK_BATCH - 24  # more than one 16-datagram batch
        address = endpoint.transport.socket.getsockname()
        for _ in range(waiting):
            feedback.sendto(frame[:length], address)
        received = endpoint.counters.status_messages_received
        deadline = time.monotonic() + 5.0
        read = 0
        while read < waiting and time.monotonic() < deadline:
            before = received.get()
            sender.do_work()  # the first status message opens the stream: nothing to send, so feedback is read
            read += received.get() - before
            if read == 0:
                time.sleep(0.01)  # not arrived yet
            else:
                break
        assert read == waiting
    finally:
        endpoint.close()
