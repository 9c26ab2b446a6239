"""The asyncio side of a buffered session (endpoint.connection.buffered) over a connection that refuses offers
the way back pressure does: nothing is skipped, nothing goes twice, order holds; bounds and ending."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from endpoint.connection.buffered import Session
from endpoint.connection.session import DATA, SessionLog, SessionSync, ack_frame, parse_frame
from endpoint.errors import SessionBufferFullError, SessionExpiredError


class FakeOutbox:
    """Takes offers unless ``refuse`` says how many to turn down first (as a full log would)."""

    def __init__(self) -> None:
        self.taken: list[bytes] = []
        self.refuse = 0

    def offer_now(self, data: bytes, poke: bool = True, *, jump_queue: bool = False) -> bool:
        if self.refuse:
            self.refuse -= 1
            return False
        self.taken.append(bytes(data))
        return True


class FakeConnection:
    """What a session needs of its connection, recording what it delivers."""

    def __init__(self) -> None:
        self.id = 1
        self.outbox = FakeOutbox()
        self.remote_address = "test"
        self.is_closed = False
        self._closing = False
        self.max_message_length = 1024
        self.delivered: list[Any] = []
        self.malformed: list[str] = []

    def _decode(self, data: memoryview) -> Any:
        return bytes(data)

    def _dispatch(self, message: Any, size: int) -> None:
        self.delivered.append(message)

    def _malformed(self, problem: str) -> None:
        self.malformed.append(problem)

    def _on_undecodable(self, payload: memoryview, exc: Exception) -> None:
        raise AssertionError(exc)

    def _join_session(self, session: Session, resumed: bool) -> None:
        self.session = session

    def _lose(self, reason: str) -> None:
        self._closing = True


def make_session(max_messages: int = 100) -> Session:
    return Session(
        session_id=1,
        public_key=bytes(32),
        log=SessionLog(max_messages=max_messages, max_bytes=1 << 20),
        encode=lambda message: str(message).encode(),
        send_timeout=0.2,
        timeout=10.0,
    )


def seqs(frames: list[bytes]) -> list[int]:
    out = []
    for frame in frames:
        parsed = parse_frame(memoryview(frame))
        assert parsed is not None
        assert parsed[0] == DATA
        out.append(parsed[1])
    return out


async def test_refused_offers_are_retried_in_order_never_skipped() -> None:
    session = make_session()
    connection = FakeConnection()
    session.resume(SessionSync(7, 1, 0, 0), 0)
    session.attach(connection, resumed=False)  # type: ignore[arg-type]
    connection.outbox.refuse = 25
    for i in range(10):
        session.send_nowait(i)
    await asyncio.wait_for(_until(lambda: len(connection.outbox.taken) == 10), 5)
    assert seqs(connection.outbox.taken) == list(range(1, 11))
    await session.send(10)  # after the retries: straight out
    assert seqs(connection.outbox.taken) == list(range(1, 12))


async def test_frames_are_delivered_once_and_acks_free_room_for_a_waiting_sender() -> None:
    session = make_session(max_messages=2)
    connection = FakeConnection()
    session.resume(SessionSync(7, 1, 0, 0), 0)
    session.attach(connection, resumed=False)  # type: ignore[arg-type]
    await session.send("a")
    await session.send("b")
    waiting = asyncio.ensure_future(session.send("c"))  # at the bound: waits for an acknowledgement
    await asyncio.sleep(0.01)
    assert not waiting.done()
    session.on_frame(connection, memoryview(ack_frame(1)))  # type: ignore[arg-type]
    await asyncio.wait_for(waiting, 1)
    assert seqs(connection.outbox.taken) == [1, 2, 3]
    with pytest.raises(SessionBufferFullError):
        await session.send("d", timeout=0.05)  # nobody acknowledges: refused after the wait
    from endpoint.connection.session import data_frame

    for frame in (data_frame(1, b"x"), data_frame(1, b"x"), data_frame(2, b"y")):
        session.on_frame(connection, memoryview(frame))  # type: ignore[arg-type]
    assert connection.delivered == [b"x", b"y"]
    assert session.log.duplicates == 1
    session.on_frame(connection, memoryview(b"\xc9junk-junk-junk-junk"))  # type: ignore[arg-type]
    assert connection.malformed == ["a malformed session frame"]


async def test_detached_sends_are_kept_then_refused_at_the_bound_and_an_ended_session_refuses_all() -> None:
    session = make_session(max_messages=3)
    connection = FakeConnection()
    session.resume(SessionSync(7, 1, 0, 0), 0)
    session.attach(connection, resumed=False)  # type: ignore[arg-type]
    session.detach(connection, 0)  # type: ignore[arg-type]
    for i in range(3):
        await session.send(i)
    with pytest.raises(SessionBufferFullError):
        await session.send(3)  # at once: no connection to wait for
    assert connection.outbox.taken == []
    again = FakeConnection()
    session.resume(SessionSync(7, 1, session.log.incarnation, 0), 0)
    session.attach(again, resumed=True)  # type: ignore[arg-type]
    assert seqs(again.outbox.taken) == [1, 2, 3]
    assert session.resumes == 1
    assert session.end("test") == 3
    with pytest.raises(SessionExpiredError):
        session.send_nowait(4)


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.001)
