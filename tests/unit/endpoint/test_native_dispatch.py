"""The native poll-and-dispatch (``Codec.dispatch``) against the Python path it stands in for, with bytes in a term.

A term is laid out as a log would hold it (a 32-byte header before each payload, frames 32-byte aligned) and the
same fragments go once through ``ConnectionCore.on_frame`` one by one, as the shell's Python poll does, and once
through one ``dispatch`` call: what the listeners and the shell see must be the same, in the same order.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG
from endpoint.connection.core import ConnectionCore
from endpoint.messages import CHUNK_EXT, Disconnect, Ping, register_internal_messages
from endpoint.serialization import Serialization

WHOLE = BEGIN_FRAG_FLAG | END_FRAG_FLAG


@attrs.frozen
class Move:
    seq: int
    x: float


@attrs.frozen
class Chat:
    text: str


class Recorder:
    """The shell's side: records, in order, what the core or the native loop hands it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.inbox: collections.deque[Any] = collections.deque()
        self.resolved: dict[type, tuple[tuple[Callable[[Any, Any], Any], ...], bool]] = {}

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.events.append((name, args[0] if len(args) == 1 else args))

    def deliver(self, message: Any, size: int) -> None:
        """As the shell's ``_dispatch``: sync listeners now, unless listeners are async or the inbox holds some."""
        entry = self.resolved.get(type(message))
        if entry is None or not entry[0]:
            self.events.append(("unhandled", message))
        elif entry[1] or self.inbox:
            self.events.append(("enqueued", message))
        else:
            for listener in entry[0]:
                try:
                    listener(self, message)
                except Exception as exc:
                    self.events.append(("listener_error", str(exc)))


def serialization() -> Serialization:
    ser = Serialization()
    ser.register(Move)
    ser.register(Chat)
    register_internal_messages(ser)
    return ser


def make(ser: Serialization, shell: Recorder) -> ConnectionCore:
    return ConnectionCore(
        decode=ser.decode,
        now_ns=0,
        ping_interval_ns=10**9,
        peer_timeout_ns=5 * 10**9,
        max_inbound_length=1 << 16,
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


def term_of(payloads: list[tuple[bytes, int]]) -> tuple[memoryview, list[tuple[int, int, int]]]:
    """A term holding the payloads, and their (frame offset, frame length, flags) as ``scan_frames`` gives them."""
    term = bytearray()
    frames = []
    for payload, flags in payloads:
        frames.append((len(term), 32 + len(payload), flags))
        term += bytes(32) + payload
        term += bytes(-len(term) % 32)
    return memoryview(bytes(term)), frames


def both_ways(
    payloads: list[tuple[bytes, int]], setup: Callable[[Recorder], None]
) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """What the shell saw through the Python path, and through the native one."""
    seen = []
    for native in (False, True):
        ser = serialization()
        shell = Recorder()
        setup(shell)
        core = make(ser, shell)
        view, frames = term_of(payloads)
        if native:
            assert ser.native_dispatch is not None
            ser.native_dispatch(
                view,
                frames,
                shell.resolved,
                shell.inbox,
                shell,
                core.on_frame,
                core.on_decoded,
                shell.result,
                shell.error,
                core,
            )
        else:
            for offset, length, flags in frames:
                core.on_frame(view[offset + 32 : offset + length], flags)
        seen.append(shell.events)
    return seen[0], seen[1]


def listening(shell: Recorder) -> None:
    shell.resolved[Move] = ((lambda c, m: c.events.append(("listener", m)),), False)


def test_every_kind_of_fragment_reaches_the_same_place_in_the_same_order() -> None:
    ser = serialization()
    chunk = bytearray(12)
    chunk[0], chunk[5] = 0xC9, CHUNK_EXT
    big = ser.encode(Move(7, 0.5))
    broken = ser.encode(Move(2, 2.0))[3:4] + b"\xc1"
    payloads = [
        (ser.encode(Move(1, 1.0)), WHOLE),
        (ser.encode(Ping(0, 0)), WHOLE),  # a keepalive
        (ser.encode(Ping(3, 99)), WHOLE),  # answered
        (ser.encode(Chat("nobody listens")), WHOLE),
        (big[:5], BEGIN_FRAG_FLAG),
        (big[5:], END_FRAG_FLAG),
        (bytes(chunk), WHOLE),
        (b"\xc1", WHOLE),  # never valid msgpack
        (b"", WHOLE),
        (bytes([0xC7, len(broken), 1]) + broken, WHOLE),  # Move's header and type id over a broken body
        (ser.encode(Move(3, 3.0)), WHOLE),
        (ser.encode(Disconnect("bye")), WHOLE),
        (ser.encode(Move(4, 4.0)), WHOLE),  # after the peer's Disconnect: never read
    ]
    python, native = both_ways(payloads, listening)
    assert [kind for kind, _ in native] == [kind for kind, _ in python]
    assert native[0] == ("listener", Move(1, 1.0))
    assert [kind for kind, _ in native] == [
        "listener",
        "send_control",
        "unhandled",
        "listener",
        "chunk",
        "undecodable",
        "malformed",
        "undecodable",
        "listener",
        "peer_closed",
    ]
    assert [event for event in native if event[0] == "listener"] == [
        event for event in python if event[0] == "listener"
    ]


@pytest.mark.parametrize("why", ["inbox", "async"])
def test_a_message_behind_the_inbox_or_for_async_listeners_goes_to_the_shell(why: str) -> None:
    def setup(shell: Recorder) -> None:
        listening(shell)
        if why == "inbox":
            shell.inbox.append("a message still waiting")
        else:
            shell.resolved[Move] = (shell.resolved[Move][0], True)

    ser = serialization()
    python, native = both_ways([(ser.encode(Move(i, 0.0)), WHOLE) for i in range(3)], setup)
    assert native == python == [("enqueued", Move(i, 0.0)) for i in range(3)]


def test_a_listener_that_raises_is_reported_and_the_rest_still_run() -> None:
    def failing(c: Recorder, m: Move) -> None:
        raise RuntimeError(f"no {m.seq}")

    def setup(shell: Recorder) -> None:
        shell.resolved[Move] = ((failing, lambda c, m: c.events.append(("listener", m))), False)

    ser = serialization()
    _, native = both_ways([(ser.encode(Move(i, 0.0)), WHOLE) for i in range(2)], setup)
    assert [kind for kind, _ in native] == ["error", "listener", "error", "listener"]
    assert str(native[0][1]) == "no 0"


def test_what_a_sync_listener_returns_is_handed_back() -> None:
    def setup(shell: Recorder) -> None:
        shell.resolved[Move] = ((lambda c, m: m.seq,), False)

    ser = serialization()
    _, native = both_ways([(ser.encode(Move(5, 0.0)), WHOLE), (ser.encode(Move(6, 0.0)), WHOLE)], setup)
    assert native == [("result", (Move(5, 0.0), 5)), ("result", (Move(6, 0.0), 6))]
