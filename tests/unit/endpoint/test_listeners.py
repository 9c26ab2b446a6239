"""ListenerManager: registration, most-specific-type dispatch, removal, cache invalidation and error fan-out."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import pytest

from endpoint import listeners as listeners_module
from endpoint.listeners import (
    ListenerManager,
    add_global_error_listener,
    call_listener,
    is_async_callable,
    remove_global_error_listener,
)

Calls = list[tuple[str, Any, BaseException]]


class Move:
    pass


class Jump(Move):
    pass


class HighJump(Jump):
    pass


class Chat:
    pass


class Both(Chat, Move):
    """Chat comes first in its MRO, so Chat's listeners win over Move's."""


class Conn:
    def __repr__(self) -> str:
        return "Conn#1"


@pytest.fixture(autouse=True)
def isolated_global_listeners(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every test starts with no global error listeners and leaves none behind, whatever others registered."""
    fresh: list[Any] = []
    monkeypatch.setattr(listeners_module, "_global_error_listeners", fresh)
    return fresh


@pytest.fixture
def lm() -> ListenerManager[Conn]:
    return ListenerManager("test server")


def on_move(conn: Conn, msg: Any) -> None:
    pass


def on_move_too(conn: Conn, msg: Any) -> None:
    pass


def on_jump(conn: Conn, msg: Any) -> None:
    pass


def on_any(conn: Conn, msg: Any) -> None:
    pass


def on_chat(conn: Conn, msg: Any) -> None:
    pass


async def on_move_async(conn: Conn, msg: Any) -> None:
    pass


class AsyncCallable:
    async def __call__(self, conn: Conn, msg: Any) -> None:
        pass


class SyncCallable:
    def __call__(self, conn: Conn, msg: Any) -> None:
        pass


class Handler:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_message(self, conn: Conn, msg: Any) -> None:
        self.seen.append(msg)


def recorder(calls: Calls, name: str) -> Any:
    def listener(conn: Any, error: BaseException) -> None:
        calls.append((name, conn, error))

    return listener


async def settle(predicate: Any, rounds: int = 50) -> None:
    """Let the loop run scheduled tasks until ``predicate()`` holds (bounded)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    assert predicate()


# ---------------------------------------------------------------------------------------------- registration


def test_a_new_manager_has_no_listeners(lm: ListenerManager[Conn]) -> None:
    assert lm.connect == lm.disconnect == lm.error == ()
    assert lm.message_listeners(Move) == ((), False)
    assert lm.message_listeners(object) == ((), False)


def test_add_returns_the_listener_so_it_works_as_a_decorator(lm: ListenerManager[Conn]) -> None:
    def a(conn: Conn) -> None:
        pass

    def b(conn: Conn) -> None:
        pass

    assert lm.add_connect(a) is a
    assert lm.add_connect(b) is b
    assert lm.add_disconnect(b) is b
    assert lm.add_error(on_any) is on_any
    assert lm.add_message(Move, on_move) is on_move
    assert lm.connect == (a, b)
    assert lm.disconnect == (b,)
    assert lm.error == (on_any,)


def test_registration_replaces_the_tuple_so_a_running_dispatch_is_unaffected(lm: ListenerManager[Conn]) -> None:
    lm.add_connect(on_any)
    snapshot = lm.connect
    lm.add_connect(on_move)
    assert snapshot == (on_any,)
    assert lm.connect == (on_any, on_move)
    listeners, _ = lm.message_listeners(Move)
    lm.add_message(Move, on_move)
    assert listeners == ()


@pytest.mark.parametrize("not_a_class", [Move(), "Move", None, 3])
def test_on_message_needs_a_class(lm: ListenerManager[Conn], not_a_class: Any) -> None:
    with pytest.raises(TypeError, match="on_message needs a class"):
        lm.add_message(not_a_class, on_move)
    assert lm.message_listeners(Move) == ((), False)


# ---------------------------------------------------------------------------------------------- dispatch


def test_listeners_of_one_type_run_in_registration_order(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    lm.add_message(Move, on_move_too)
    assert lm.message_listeners(Move) == ((on_move, on_move_too), False)


def test_subclass_messages_reach_the_base_class_listeners(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    assert lm.message_listeners(Jump) == ((on_move,), False)
    assert lm.message_listeners(HighJump) == ((on_move,), False)
    assert lm.message_listeners(Chat) == ((), False)


def test_only_the_most_specific_registered_class_is_used(lm: ListenerManager[Conn]) -> None:
    lm.add_message(object, on_any)
    lm.add_message(Move, on_move)
    lm.add_message(Jump, on_jump)
    assert lm.message_listeners(Move) == ((on_move,), False)
    assert lm.message_listeners(Jump) == ((on_jump,), False)
    assert lm.message_listeners(HighJump) == ((on_jump,), False)


def test_object_is_the_catch_all(lm: ListenerManager[Conn]) -> None:
    lm.add_message(object, on_any)
    lm.add_message(Move, on_move)
    for cls in (Chat, int, str, dict, type(None)):
        assert lm.message_listeners(cls) == ((on_any,), False)


def test_multiple_inheritance_follows_the_mro(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    assert lm.message_listeners(Both) == ((on_move,), False)
    lm.add_message(Chat, on_chat)
    assert lm.message_listeners(Both) == ((on_chat,), False)
    assert lm.message_listeners(Move) == ((on_move,), False)


@pytest.mark.parametrize(
    ("listeners", "any_async"),
    [
        ((on_move,), False),
        ((SyncCallable(),), False),
        ((on_move_async,), True),
        ((on_move, on_move_async), True),
        ((on_move_async, on_move), True),
        ((AsyncCallable(),), True),
        ((functools.partial(on_move_async),), True),
    ],
)
def test_resolution_says_whether_any_listener_is_async(
    lm: ListenerManager[Conn], listeners: tuple[Any, ...], any_async: bool
) -> None:
    for fn in listeners:
        lm.add_message(Move, fn)
    assert lm.message_listeners(Jump) == (listeners, any_async)


def test_async_flag_is_per_resolved_type(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    lm.add_message(Jump, on_move_async)
    assert lm.message_listeners(Move)[1] is False
    assert lm.message_listeners(HighJump)[1] is True


def test_resolution_is_cached(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    first = lm.message_listeners(HighJump)
    assert lm.message_listeners(HighJump) is first


# ---------------------------------------------------------------------------------------------- cache invalidation


def test_adding_a_more_specific_listener_invalidates_cached_resolutions(lm: ListenerManager[Conn]) -> None:
    lm.add_message(object, on_any)
    assert lm.message_listeners(HighJump) == ((on_any,), False)
    assert lm.message_listeners(Chat) == ((on_any,), False)
    lm.add_message(Move, on_move)
    assert lm.message_listeners(HighJump) == ((on_move,), False)
    lm.add_message(Jump, on_move_async)
    assert lm.message_listeners(HighJump) == ((on_move_async,), True)
    assert lm.message_listeners(Chat) == ((on_any,), False)


def test_adding_to_the_resolved_type_invalidates_it(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    assert lm.message_listeners(Jump) == ((on_move,), False)
    lm.add_message(Move, on_move_async)
    assert lm.message_listeners(Jump) == ((on_move, on_move_async), True)


def test_an_empty_resolution_is_invalidated_too(lm: ListenerManager[Conn]) -> None:
    assert lm.message_listeners(Jump) == ((), False)
    lm.add_message(Move, on_move)
    assert lm.message_listeners(Jump) == ((on_move,), False)


def test_removal_invalidates_cached_resolutions(lm: ListenerManager[Conn]) -> None:
    lm.add_message(object, on_any)
    lm.add_message(Move, on_move)
    lm.add_message(Jump, on_jump)
    assert lm.message_listeners(HighJump) == ((on_jump,), False)
    assert lm.remove(on_jump)
    assert lm.message_listeners(HighJump) == ((on_move,), False)
    assert lm.remove(on_move)
    assert lm.message_listeners(HighJump) == ((on_any,), False)
    assert lm.remove(on_any)
    assert lm.message_listeners(HighJump) == ((), False)


def test_clear_removes_everything_and_invalidates(lm: ListenerManager[Conn]) -> None:
    lm.add_connect(on_any)
    lm.add_disconnect(on_any)
    lm.add_error(on_any)
    lm.add_message(Move, on_move)
    assert lm.message_listeners(Jump) == ((on_move,), False)
    lm.clear()
    assert lm.connect == lm.disconnect == lm.error == ()
    assert lm.message_listeners(Jump) == ((), False)
    lm.add_message(Jump, on_jump)
    assert lm.message_listeners(HighJump) == ((on_jump,), False)


# ---------------------------------------------------------------------------------------------- removal


def test_remove_finds_a_listener_in_every_list(lm: ListenerManager[Conn]) -> None:
    lm.add_connect(on_any)
    lm.add_connect(on_move)
    lm.add_disconnect(on_any)
    lm.add_error(on_any)
    lm.add_message(Move, on_any)
    lm.add_message(Chat, on_any)
    lm.add_message(Chat, on_chat)
    assert lm.remove(on_any) is True
    assert lm.connect == (on_move,)
    assert lm.disconnect == ()
    assert lm.error == ()
    assert lm.message_listeners(Move) == ((), False)
    assert lm.message_listeners(Chat) == ((on_chat,), False)


def test_remove_drops_every_registration_of_the_listener(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    lm.add_message(Move, on_move_too)
    lm.add_message(Move, on_move)
    assert lm.remove(on_move)
    assert lm.message_listeners(Move) == ((on_move_too,), False)


def test_remove_of_an_unknown_listener_is_false_and_changes_nothing(lm: ListenerManager[Conn]) -> None:
    lm.add_connect(on_any)
    lm.add_message(Move, on_move)
    resolved = lm.message_listeners(Jump)
    assert lm.remove(on_jump) is False
    assert lm.connect == (on_any,)
    assert lm.message_listeners(Jump) == resolved


def test_remove_matches_bound_methods_by_equality(lm: ListenerManager[Conn]) -> None:
    handler = Handler()
    lm.add_message(Move, handler.on_message)
    assert lm.remove(Handler().on_message) is False
    assert lm.remove(handler.on_message) is True
    assert lm.message_listeners(Move) == ((), False)


def test_removing_the_async_listener_clears_the_async_flag(lm: ListenerManager[Conn]) -> None:
    lm.add_message(Move, on_move)
    lm.add_message(Move, on_move_async)
    assert lm.message_listeners(Move) == ((on_move, on_move_async), True)
    lm.remove(on_move_async)
    assert lm.message_listeners(Move) == ((on_move,), False)


# ---------------------------------------------------------------------------------------------- errors


def test_notify_error_tells_local_listeners_then_global_ones(lm: ListenerManager[Conn]) -> None:
    calls: Calls = []
    add_global_error_listener(recorder(calls, "global"))
    lm.add_error(recorder(calls, "local1"))
    lm.add_error(recorder(calls, "local2"))
    conn, error = Conn(), RuntimeError("boom")
    lm.notify_error(conn, error)
    assert calls == [("local1", conn, error), ("local2", conn, error), ("global", conn, error)]


def test_notify_error_passes_none_for_end_point_errors(lm: ListenerManager[Conn]) -> None:
    calls: Calls = []
    lm.add_error(recorder(calls, "local"))
    error = OSError("driver gone")
    lm.notify_error(None, error)
    assert calls == [("local", None, error)]


def test_global_listeners_hear_every_manager() -> None:
    calls: Calls = []
    add_global_error_listener(recorder(calls, "global"))
    a: ListenerManager[Conn] = ListenerManager("a")
    b: ListenerManager[Conn] = ListenerManager("b")
    e1, e2 = ValueError("1"), ValueError("2")
    a.notify_error(None, e1)
    b.notify_error(None, e2)
    assert calls == [("global", None, e1), ("global", None, e2)]


def test_a_failing_sync_listener_is_logged_and_the_rest_still_run(
    lm: ListenerManager[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    calls: Calls = []

    def broken(conn: Any, error: BaseException) -> None:
        raise KeyError("listener bug")

    lm.add_error(broken)
    lm.add_error(recorder(calls, "local"))
    add_global_error_listener(broken)
    add_global_error_listener(recorder(calls, "global"))
    error = RuntimeError("boom")
    with caplog.at_level(logging.ERROR, logger="endpoint"):
        lm.notify_error(None, error)
    assert calls == [("local", None, error), ("global", None, error)]
    failures = [r for r in caplog.records if "on_error listener" in r.getMessage()]
    assert len(failures) == 2
    assert all("listener bug" in r.getMessage() and r.exc_info is not None for r in failures)


def test_with_no_listener_at_all_the_error_is_logged(
    lm: ListenerManager[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    error = RuntimeError("nobody listens")
    with caplog.at_level(logging.ERROR, logger="endpoint"):
        lm.notify_error(Conn(), error)
        lm.notify_error(None, error)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["test server error on Conn#1: nobody listens", "test server error: nobody listens"]
    assert all(r.exc_info is not None and r.exc_info[1] is error for r in caplog.records)


def test_a_global_listener_alone_suppresses_the_fallback_log(
    lm: ListenerManager[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    calls: Calls = []
    add_global_error_listener(recorder(calls, "global"))
    with caplog.at_level(logging.DEBUG, logger="endpoint"):
        lm.notify_error(None, RuntimeError("x"))
    assert len(calls) == 1
    assert caplog.records == []


def test_global_registration_is_idempotent_and_removable(lm: ListenerManager[Conn]) -> None:
    calls: Calls = []
    listener = recorder(calls, "global")
    assert add_global_error_listener(listener) is listener
    assert add_global_error_listener(listener) is listener
    lm.notify_error(None, RuntimeError("once"))
    assert len(calls) == 1
    assert remove_global_error_listener(listener) is True
    assert remove_global_error_listener(listener) is False
    lm.add_error(recorder(calls, "local"))
    lm.notify_error(None, RuntimeError("twice"))
    assert [c[0] for c in calls] == ["global", "local"]


def test_global_listener_works_as_a_decorator(isolated_global_listeners: list[Any]) -> None:
    @add_global_error_listener
    def listener(conn: Any, error: BaseException) -> None:
        pass

    assert callable(listener)
    assert isolated_global_listeners == [listener]


def test_remove_also_drops_local_error_listeners_but_not_global_ones(lm: ListenerManager[Conn]) -> None:
    calls: Calls = []
    listener = recorder(calls, "both")
    lm.add_error(listener)
    add_global_error_listener(listener)
    assert lm.remove(listener)
    lm.notify_error(None, RuntimeError("x"))
    assert [c[0] for c in calls] == ["both"]


# ---------------------------------------------------------------------------------------------- async listeners


async def test_async_error_listeners_run_as_tasks_in_order(lm: ListenerManager[Conn]) -> None:
    calls: Calls = []

    async def local(conn: Any, error: BaseException) -> None:
        calls.append(("local-async", conn, error))

    async def global_(conn: Any, error: BaseException) -> None:
        calls.append(("global-async", conn, error))

    lm.add_error(local)
    lm.add_error(recorder(calls, "local-sync"))
    add_global_error_listener(global_)
    conn, error = Conn(), RuntimeError("boom")
    lm.notify_error(conn, error)
    # Sync listeners run inline; async ones once the loop gets to them, in the order they were started.
    assert calls == [("local-sync", conn, error)]
    await settle(lambda: len(calls) == 3)
    assert calls == [("local-sync", conn, error), ("local-async", conn, error), ("global-async", conn, error)]


async def test_a_failing_async_error_listener_is_logged(
    lm: ListenerManager[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    done = asyncio.Event()

    async def broken(conn: Any, error: BaseException) -> None:
        done.set()
        raise KeyError("async listener bug")

    lm.add_error(broken)
    with caplog.at_level(logging.ERROR, logger="endpoint"):
        lm.notify_error(None, RuntimeError("boom"))
        await asyncio.wait_for(done.wait(), 5)
        await settle(lambda: any("async listener bug" in r.getMessage() for r in caplog.records))
    failures = [r for r in caplog.records if "on_error listener failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert isinstance(failures[0].exc_info[1], KeyError)


async def test_a_cancelled_async_error_listener_is_not_reported(
    lm: ListenerManager[Conn], caplog: pytest.LogCaptureFixture
) -> None:
    started = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []

    async def slow(conn: Any, error: BaseException) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        started.set()
        await asyncio.Event().wait()

    lm.add_error(slow)
    with caplog.at_level(logging.DEBUG, logger="endpoint"):
        lm.notify_error(None, RuntimeError("boom"))
        await asyncio.wait_for(started.wait(), 5)
        tasks[0].cancel()
        await settle(tasks[0].done)
        await asyncio.sleep(0)
    assert tasks[0].cancelled()
    assert caplog.records == []


def test_call_listener_calls_a_sync_listener_at_once() -> None:
    seen: list[tuple[Any, ...]] = []
    assert call_listener(lambda *args: seen.append(args), 1, "two") is None
    assert seen == [(1, "two")]


async def test_call_listener_runs_an_async_listener_as_a_task() -> None:
    seen: list[tuple[Any, ...]] = []

    async def listener(*args: Any) -> str:
        seen.append(args)
        return "done"

    task = call_listener(listener, 1, "two")
    assert isinstance(task, asyncio.Task)
    assert seen == []
    assert await asyncio.wait_for(task, 5) == "done"
    assert seen == [(1, "two")]


async def test_call_listener_wraps_any_awaitable_result() -> None:
    async def work() -> int:
        return 7

    task = call_listener(lambda: work())
    assert task is not None
    assert await asyncio.wait_for(task, 5) == 7


def test_call_listener_lets_a_sync_failure_through() -> None:
    def broken() -> None:
        raise KeyError("sync")

    with pytest.raises(KeyError, match="sync"):
        call_listener(broken)


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (on_move, False),
        (on_move_async, True),
        (AsyncCallable(), True),
        (SyncCallable(), False),
        (functools.partial(on_move_async, Conn()), True),
        (functools.partial(on_move, Conn()), False),
        (Handler().on_message, False),
        (lambda conn, msg: None, False),
    ],
)
def test_is_async_callable(fn: Any, expected: bool) -> None:
    assert is_async_callable(fn) is expected
