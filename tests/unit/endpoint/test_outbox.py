"""The outbox on its own: one guard, one offer, an ordered queue behind back pressure, bounded internal answers.

The offer here is a scripted function (what a publication's offer returns is all the outbox sees), so each
case is exact and needs no driver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from driver.client.publication import ADMIN_ACTION, BACK_PRESSURED, CLOSED
from endpoint.connection.outbox import Outbox
from endpoint.errors import ConnectionClosedError, TransmitError


class Log:
    """A stand-in log: takes what is offered while open, refuses with ``refuse`` while it is set."""

    def __init__(self) -> None:
        self.accepted: list[bytes] = []
        self.refuse: int | None = None
        self.once: list[int] = []
        """Results returned once each, first (then the normal behaviour)."""

    def offer(self, data: object) -> int:
        if self.once:
            return self.once.pop(0)
        if self.refuse is not None:
            return self.refuse
        self.accepted.append(bytes(data))  # type: ignore[call-overload]
        return len(self.accepted) * 64


def make(log: Log, *, later_limit: int = 4, send_timeout: float = 5.0) -> tuple[Outbox, list[BaseException], list[int]]:
    reported: list[BaseException] = []
    pokes: list[int] = []
    outbox = Outbox(
        offer=log.offer,
        encode=lambda message: repr(message).encode(),
        poke=lambda: pokes.append(1),
        send_timeout=send_timeout,
        later_limit=later_limit,
        closed_error=lambda: ConnectionClosedError("closed", "test"),
        report=reported.append,
        name=lambda: "<test>",
    )
    return outbox, reported, pokes


def run(body: Callable[[], object]) -> None:
    asyncio.run(asyncio.wait_for(body(), 10))  # type: ignore[arg-type]


def test_offer_now_counts_pokes_and_retries_once_after_admin_action() -> None:
    log = Log()
    outbox, _, pokes = make(log)
    log.once = [ADMIN_ACTION]
    assert outbox.offer_now(b"a")
    assert outbox.offer_now(b"b", poke=False)
    assert log.accepted == [b"a", b"b"]
    assert outbox.sent == 2
    assert len(pokes) == 1
    log.refuse = BACK_PRESSURED
    assert not outbox.offer_now(b"c")
    assert outbox.sent == 2


def test_the_guard_and_a_closed_log_raise_the_connections_error() -> None:
    log = Log()
    outbox, _, _ = make(log)
    outbox.ensure_open()
    log.refuse = CLOSED
    with pytest.raises(ConnectionClosedError):
        outbox.offer_now(b"x")
    outbox.closing = True
    with pytest.raises(ConnectionClosedError):
        outbox.ensure_open()

    async def body() -> None:
        with pytest.raises(ConnectionClosedError):
            await outbox.send_message("late", None)

    run(body)


def test_sends_behind_back_pressure_go_out_in_order_and_nothing_overtakes_them() -> None:
    async def body() -> None:
        log = Log()
        outbox, _, _ = make(log)
        log.refuse = BACK_PRESSURED
        senders = [asyncio.create_task(outbox.send_bytes(bytes([i]), None)) for i in range(5)]
        await asyncio.sleep(0.01)
        assert outbox.backlogged
        assert not log.accepted
        assert not outbox.offer_now(b"later")  # would overtake the queue
        assert not outbox.send_control("keepalive")  # refused too; one that need not arrive is not queued
        log.refuse = None
        assert outbox.send_control("ping")  # control messages jump the queue
        await asyncio.gather(*senders)
        assert log.accepted == [b"'ping'", *(bytes([i]) for i in range(5))]
        assert not outbox.backlogged
        assert outbox.sent == 6

    run(body)


def test_back_pressure_past_the_timeout_fails_the_send_with_a_transmit_error() -> None:
    async def body() -> None:
        log = Log()
        outbox, _, _ = make(log, send_timeout=0.05)
        log.refuse = BACK_PRESSURED
        with pytest.raises(TransmitError):
            await outbox.send_bytes(b"x", None)
        assert not outbox.backlogged

    run(body)


def test_answers_queued_behind_back_pressure_are_bounded_and_the_excess_counted() -> None:
    async def body() -> None:
        log = Log()
        outbox, reported, _ = make(log, later_limit=3)
        log.refuse = BACK_PRESSURED
        for i in range(5):
            outbox.send_answer(bytes([i]))
        assert outbox.queued_later == 3
        assert outbox.dropped_answers == 2
        log.refuse = None
        for _ in range(100):
            if not outbox.queued_later:
                break
            await asyncio.sleep(0.005)
        assert log.accepted == [b"\x00", b"\x01", b"\x02"]
        assert not reported

    run(body)


def test_control_messages_never_raise_and_must_arrive_ones_queue() -> None:
    async def body() -> None:
        log = Log()
        outbox, _, _ = make(log)

        class Unencodable:
            def __repr__(self) -> str:
                raise ValueError("no")

        assert not outbox.send_control(Unencodable())
        log.refuse = BACK_PRESSURED
        assert not outbox.send_control("cancel", must_arrive=True)
        assert not outbox.send_control("keepalive")
        assert outbox.queued_later == 1
        log.refuse = None
        for _ in range(100):
            if not outbox.queued_later:
                break
            await asyncio.sleep(0.005)
        assert log.accepted == [b"'cancel'"]

    run(body)


def test_closing_fails_every_queued_send() -> None:
    async def body() -> None:
        log = Log()
        outbox, _, _ = make(log)
        log.refuse = BACK_PRESSURED
        senders = [asyncio.create_task(outbox.send_bytes(b"x", None)) for _ in range(3)]
        await asyncio.sleep(0.01)
        outbox.closing = True
        outbox.fail_backlog()
        results = await asyncio.gather(*senders, return_exceptions=True)
        assert all(isinstance(r, ConnectionClosedError) for r in results)
        with pytest.raises(ConnectionClosedError):
            outbox.ensure_open()
        outbox.send_answer(b"dropped quietly once closing")
        assert not outbox.backlogged

    run(body)


def test_offer_until_gives_up_with_a_timeout() -> None:
    async def body() -> None:
        log = Log()
        outbox, _, _ = make(log)
        log.refuse = BACK_PRESSURED
        with pytest.raises(TimeoutError):
            await outbox.offer_until(b"bye", 0.02)
        log.refuse = None
        await outbox.offer_until(b"bye", 1.0)
        assert log.accepted == [b"bye"]

    run(body)
