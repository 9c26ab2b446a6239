"""The queues between the driver's agents: a full one refuses and counts; what the conductor sends waits, in order."""

from __future__ import annotations

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.core.command_queues import Backlog, CommandQueue


def _counters(n: int = 2) -> list[AtomicCounter]:
    manager = CountersManager(AtomicBuffer(bytearray(n * 512)), AtomicBuffer(bytearray(n * 128)), lambda: 0)
    return [AtomicCounter(manager.values_buffer, manager.allocate(f"c{i}"), manager) for i in range(n)]


def test_full_queue_refuses_and_counts_but_takes_a_teardown_completion() -> None:
    fails, _ = _counters()
    queue = CommandQueue(fails, capacity=2)
    ran: list[int] = []
    assert queue.offer(lambda: ran.append(1))
    assert queue.offer(lambda: ran.append(2))
    assert not queue.offer(lambda: ran.append(3))
    assert fails.get() == 1
    queue.put(lambda: ran.append(4))  # a completion is never refused
    assert len(queue) == 3
    assert queue.drain() == 3
    assert ran == [1, 2, 4]


def test_backlog_keeps_commands_in_order_and_offers_them_again_first() -> None:
    fails, deferred = _counters()
    queue = CommandQueue(fails, capacity=1)
    backlog = Backlog(queue, deferred)
    ran: list[int] = []
    for i in range(5):
        backlog.send(lambda i=i: ran.append(i))
    assert len(queue) == 1
    assert len(backlog) == 4
    assert deferred.get() == 4
    for _ in range(10):
        queue.drain()
        backlog.flush()
        backlog.send(lambda: ran.append(99)) if len(ran) == 2 else None
    assert ran == [0, 1, 2, 3, 4, 99]
    assert len(backlog) == 0
    assert len(queue) == 0
