"""The connection's protocol core with bytes and a fake clock: reassembly, routing, ordering, sealing, liveness.

No loop, no driver: fragments go in as a log would hand them over (payload and frame flags), and what the
core asks of its shell is recorded in order.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG
from endpoint.connection.core import ConnectionCore
from endpoint.connection.liveness import PEER_TIMED_OUT, Verdict
from endpoint.connection.sealing import Opener, Sealer
from endpoint.errors import SealError, SerializationError
from endpoint.messages import (
    CHUNK_EXT,
    Disconnect,
    Ping,
    Pong,
    RpcCall,
    StreamCancel,
    register_internal_messages,
)
from endpoint.serialization import Serialization

WHOLE = BEGIN_FRAG_FLAG | END_FRAG_FLAG
MS = 1_000_000
PING = 200 * MS
TIMEOUT = 1_000 * MS


@attrs.frozen
class Move:
    seq: int


class Shell:
    """Records what the core asks for, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.events.append((name, args[0] if len(args) == 1 else args))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


def serialization() -> Serialization:
    ser = Serialization()
    ser.register(Move)
    register_internal_messages(ser)
    return ser


def make(max_inbound: int = 1 << 16) -> tuple[ConnectionCore, Shell, Serialization]:
    ser = serialization()
    shell = Shell()
    core = ConnectionCore(
        decode=ser.decode,
        now_ns=0,
        ping_interval_ns=PING,
        peer_timeout_ns=TIMEOUT,
        max_inbound_length=max_inbound,
        deliver=shell.deliver,
        route=shell.route,
        chunk=shell.chunk,
        send_control=shell.send_control,
        pong=shell.pong,
        peer_closed=shell.peer_closed,
        malformed=shell.malformed,
        undecodable=shell.undecodable,
        malformed_call=shell.malformed_call,
        seal_failed=shell.seal_failed,
        report=shell.report,
    )
    return core, shell, ser


def feed(core: ConnectionCore, data: bytes, flags: int = WHOLE) -> None:
    """As the shell's poll does: through ``on_frame`` (on_message while unsealed, on_fragment once sealed)."""
    core.on_frame(memoryview(data), flags)


def test_the_frame_handler_is_the_message_reader_until_sealed() -> None:
    core, _, _ = make()
    assert core.on_frame == core.on_message
    core.open_with(Opener(b"k" * 32, connection_id=5, session_id=6, direction=1))
    assert core.on_frame == core.on_fragment


def test_user_messages_are_delivered_in_order_with_their_encoded_size() -> None:
    core, shell, ser = make()
    encoded = [ser.encode(Move(i)) for i in range(3)]
    for data in encoded:
        feed(core, data)
    assert shell.events == [("deliver", (Move(i), len(encoded[i]))) for i in range(3)]


def test_fragments_are_reassembled_and_a_reassembly_past_the_bound_is_malformed() -> None:
    core, shell, ser = make(max_inbound=64)
    data = ser.encode(Move(7))
    feed(core, data[:2], BEGIN_FRAG_FLAG)
    assert core.held_bytes == 2
    feed(core, data[2:4], 0)
    feed(core, data[4:], END_FRAG_FLAG)
    assert shell.events == [("deliver", (Move(7), len(data)))]
    assert core.held_bytes == 0

    feed(core, bytes(40), BEGIN_FRAG_FLAG)
    feed(core, bytes(40), 0)  # 80 > 64: longer than any publication of the peer's can send
    feed(core, bytes(4), END_FRAG_FLAG)  # the rest of it: no BEGIN held, dropped
    assert shell.kinds() == ["deliver", "malformed"]
    assert core.held_bytes == 0


def test_a_middle_fragment_without_a_beginning_is_dropped() -> None:
    core, shell, ser = make()
    feed(core, ser.encode(Move(1)), END_FRAG_FLAG)
    assert shell.events == []


def test_pings_are_answered_keepalives_are_not_work_and_pongs_go_to_the_shell() -> None:
    core, shell, ser = make()
    feed(core, ser.encode(Ping(0, 5)))  # a keepalive
    feed(core, ser.encode(Ping(3, 99)))
    feed(core, ser.encode(Pong(0, 1)))
    feed(core, ser.encode(Move(1)))
    assert shell.events[0] == ("send_control", Pong(3, 99))
    assert shell.events[1] == ("pong", Pong(0, 1))
    assert shell.kinds()[2] == "deliver"
    assert core.polled(4, 10 * MS) == 2  # the keepalive ping and pong are not work for the poller
    assert core.heard == 4
    assert core.polled(1, 20 * MS) == 1


def test_remote_call_and_stream_messages_are_routed_and_chunks_go_to_the_streams() -> None:
    core, shell, ser = make()
    call = RpcCall(1, 2, "m", [], None)
    feed(core, ser.encode(call))
    feed(core, ser.encode(StreamCancel(4, "no")))
    chunk = bytearray(12)
    chunk[0], chunk[5] = 0xC9, CHUNK_EXT
    feed(core, bytes(chunk))
    assert shell.kinds() == ["route", "route", "chunk"]
    assert shell.events[0][1] == call


def test_what_breaks_the_protocol_is_dropped_and_a_malformed_call_is_answered() -> None:
    core, shell, ser = make()
    feed(core, b"")
    feed(core, b"\xc1")  # never valid msgpack
    # Fields of the wrong type are refused by the codec itself (annotations are checked on arrival)...
    feed(core, ser.encode(Ping("x", None)))  # type: ignore[arg-type]
    feed(core, ser.encode(RpcCall(8, "obj", "m", [], None)))  # type: ignore[arg-type]
    # ... values out of range by the internal messages' own checks (a call with a usable id answered at once).
    feed(core, ser.encode(RpcCall(9, 1 << 40, "m", [], None)))
    kinds = shell.kinds()
    assert kinds == ["malformed", "undecodable", "undecodable", "undecodable", "malformed_call", "malformed"]
    assert isinstance(shell.events[1][1][1], SerializationError)
    assert shell.events[4][1][0] == 9


def test_nothing_after_the_peers_disconnect_is_read() -> None:
    core, shell, ser = make()
    feed(core, ser.encode(Disconnect("bye")))
    feed(core, ser.encode(Move(1)))
    assert shell.events == [("peer_closed", "bye")]
    assert core.closed_by_peer


def test_an_error_in_the_shell_is_reported_never_raised_to_the_log_reader() -> None:
    core, shell, ser = make()

    def boom(*args: object) -> None:
        raise RuntimeError("listener blew up")

    core._deliver = boom  # type: ignore[method-assign]
    feed(core, ser.encode(Move(1)))
    assert shell.kinds() == ["report"]
    assert isinstance(shell.events[0][1], RuntimeError)


def test_sealed_messages_are_opened_and_the_first_failure_stops_reading() -> None:
    core, shell, ser = make()
    key = os.urandom(32)
    sealer = Sealer(key, connection_id=5, session_id=6, direction=1)
    core.open_with(Opener(key, connection_id=5, session_id=6, direction=1))
    feed(core, sealer.seal(ser.encode(Move(1))))
    feed(core, ser.encode(Move(2)))  # plain: does not open
    feed(core, sealer.seal(ser.encode(Move(3))))  # after a failure nothing is believed
    assert shell.kinds() == ["deliver", "seal_failed"]
    assert isinstance(shell.events[1][1], SealError)
    assert core.seal_failures == 1


def test_a_peer_whose_stream_keeps_reaching_our_driver_is_alive_though_we_read_nothing() -> None:
    """Overloaded, or behind a gap waiting for a retransmit: its messages arrive (the high-water mark moves) but
    none is read. Judged by what it sent, it lives; once the mark stops, the timeout runs from the last move."""
    core, _, _ = make()
    step = TIMEOUT // 4
    now = 0
    for hwm in range(1, 13):  # three timeouts' worth of ticks, each seeing the mark a little further on
        now += step
        assert core.tick(now, sent=hwm, reading=True, peer_hwm=hwm * 64) is not Verdict.DEAD
    last_move = now
    while now - last_move <= TIMEOUT:
        assert core.tick(now, sent=99, reading=True, peer_hwm=12 * 64) is not Verdict.DEAD
        now += step
    assert core.tick(now, sent=99, reading=True, peer_hwm=12 * 64) is Verdict.DEAD


def test_time_this_end_was_held_up_is_not_the_peers_silence() -> None:
    """A tick that comes late by a stall moves the deadline on by the stall (never past now)."""
    core, _, _ = make()
    # Silent past two ping intervals: a probe (the peer is asked to answer), which is our keepalive too.
    assert core.tick(TIMEOUT // 2, sent=0, reading=True) is Verdict.PROBE
    # Held up for three timeouts: a peer heard at 0 is not dead for it.
    assert core.tick(3 * TIMEOUT, sent=1, reading=True, stall_ns=3 * TIMEOUT) is not Verdict.DEAD
    assert core.liveness.last_heard_ns == 3 * TIMEOUT  # capped at now
    # A stall shorter than the silence only shortens it.
    core, _, _ = make()
    assert core.tick(2 * TIMEOUT, sent=0, reading=True, stall_ns=TIMEOUT // 2) is Verdict.DEAD
    core, _, _ = make()
    assert core.tick(TIMEOUT + TIMEOUT // 2, sent=0, reading=True, stall_ns=TIMEOUT // 2) is not Verdict.DEAD
    assert core.tick(2 * TIMEOUT, sent=0, reading=True) is Verdict.DEAD


def test_the_first_look_at_the_mark_proves_nothing() -> None:
    """Only a move between two looks counts: a mark first seen at the deadline is no evidence."""
    core, _, _ = make()
    assert core.tick(TIMEOUT + 1, sent=0, reading=True, peer_hwm=4096) is Verdict.DEAD
    core, _, _ = make()
    assert core.tick(TIMEOUT // 2, sent=0, reading=True, peer_hwm=4096) is not Verdict.DEAD
    assert core.tick(TIMEOUT // 2 + 1, sent=0, reading=True) is not Verdict.DEAD  # not looked at: forgotten
    assert core.tick(TIMEOUT + 1, sent=0, reading=True, peer_hwm=8192) is Verdict.DEAD


def test_liveness_keepalive_when_quiet_dead_after_the_timeout_and_not_reading_is_ours() -> None:
    core, _, _ = make()
    assert core.tick(100 * MS, sent=0, reading=True) is Verdict.ALIVE
    assert core.tick(PING, sent=0, reading=True) is Verdict.KEEPALIVE
    core.kept_alive(PING, sent=1)
    assert core.tick(PING + 1, sent=1, reading=True) is Verdict.ALIVE
    assert core.tick(2 * PING, sent=5, reading=True) is Verdict.ALIVE  # we sent meanwhile: no keepalive due
    core.polled(1, 300 * MS)
    assert core.tick(1_300 * MS, sent=5, reading=False) is not Verdict.DEAD  # not reading: the silence is ours
    assert core.tick(2_300 * MS, sent=6, reading=True) is not Verdict.DEAD
    assert core.tick(2_300 * MS + 1, sent=7, reading=True) is Verdict.DEAD
    assert core.dead_reason(2_300 * MS + 1).startswith(PEER_TIMED_OUT)


def test_a_send_between_looks_counts_from_the_earlier_look_so_the_next_keepalive_is_not_put_off() -> None:
    """A message of ours that left between two looks (an RTT ping, an answer) left no earlier than the first look:
    counting it from the second would let an idle connection's next keepalive leave up to two windows after its
    last send, and two lost keepalives then look like a dead peer to the other end."""
    core, _, _ = make()
    assert core.tick(PING, sent=0, reading=True) is Verdict.KEEPALIVE
    core.kept_alive(PING, sent=1)
    # Something of ours left soon after (sent 1 -> 2), seen only at the next look a window and a half later (the
    # peer heard meanwhile: silent two ping intervals, it would be probed instead).
    core.liveness.heard(2 * PING)
    assert core.tick(PING + PING + PING // 2, sent=2, reading=True) is Verdict.KEEPALIVE
    core.kept_alive(PING + PING + PING // 2, sent=3)
    # Looks close together make it nearly exact: nothing is owed a moment after a send seen at once.
    assert core.tick(3 * PING, sent=3, reading=True) is Verdict.ALIVE
    assert core.tick(3 * PING + PING // 4, sent=4, reading=True) is Verdict.ALIVE


def _liveness_state(core: ConnectionCore) -> tuple[int, int, int, int, int, int | None]:
    lv = core.liveness
    return (lv.last_heard_ns, lv.last_sent_ns, lv.last_probe_ns, core._seen_sent, core._seen_at_ns, core._seen_hwm)


def test_a_quiet_look_does_what_the_tick_does_when_nothing_is_owed_and_declines_otherwise() -> None:
    """The end point's cheap look at an idle connection (nothing sent since the last look, the peer not overdue,
    no keepalive owed) leaves the same state as the full tick would, which says ALIVE; in every other case it
    declines and changes nothing, and the full tick decides."""
    quiet, _, _ = make()
    full, _, _ = make()
    for core in (quiet, full):
        core.tick(PING, sent=0, reading=True)
        core.kept_alive(PING, sent=1)
        core.liveness.heard(PING + PING // 2)
    at = PING + PING // 2 + 1
    assert quiet.tick_quiet(at, sent=1)
    assert full.tick(at, sent=1, reading=True) is Verdict.ALIVE
    assert _liveness_state(quiet) == _liveness_state(full)

    def declines(now_ns: int, sent: int) -> None:
        core, _, _ = make()
        core.tick(PING, sent=0, reading=True)
        core.kept_alive(PING, sent=1)
        before = _liveness_state(core)
        assert not core.tick_quiet(now_ns, sent)
        assert _liveness_state(core) == before

    declines(PING + 1, sent=2)  # something of ours left since the last look: when is the tick's to stamp
    declines(2 * PING, sent=1)  # a keepalive is owed
    declines(PING + 2 * PING + 1, sent=1)  # the peer is overdue (probe) ...
    declines(TIMEOUT + 1, sent=1)  # ... or dead


def test_session_frames_go_to_the_session_once_the_connection_carries_one() -> None:
    from endpoint.connection.session import ack_frame, data_frame

    core, shell, ser = make()
    frame = data_frame(1, ser.encode(Move(1)))
    feed(core, frame)  # no session: the frame is junk to the decoder, like any unknown ext value
    assert shell.kinds() == ["undecodable"]
    frames: list[bytes] = []
    core.on_session = lambda payload: frames.append(bytes(payload))
    feed(core, frame)
    feed(core, ack_frame(1))
    feed(core, ser.encode(Move(2)))  # plain messages still go straight to delivery
    assert frames == [frame, ack_frame(1)]
    assert shell.kinds() == ["undecodable", "deliver"]
