"""Remote calls over a Server/Client connection in one process, on real drivers, over IPC and UDP.

The server exposes a :class:`Service` as object 1 to every connection (and a per-connection :class:`Session` as
object 5, from ``on_connect``); the client exposes a :class:`Back` as object 10, which the server calls back mid-call.
Cancellation of a callee's invocation is observed through an ``asyncio.Event`` its method sets when it sees
``CancelledError``. Every wait is bounded.
"""

# Protocol classes are what proxy() is for, though its ``type[T]`` parameter makes mypy ask for concrete ones.

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import attrs
import pytest

from endpoint import Client, Connection, Server
from endpoint.errors import (
    ConfigurationError,
    ConnectionClosedError,
    RemoteError,
    RpcError,
    RpcTimeoutError,
    SerializationError,
    UnknownMethodError,
    UnknownObjectError,
)
from endpoint.rpc.calls import current_connection, oneway, with_timeout
from support.endpoints import (
    TRANSPORTS,
    client_config,
    connected_client,
    make_serialization,
    running_server,
    server_config,
    wait_until,
)

SERVICE = 1
SESSION = 5
BACK = 10
BOUND = 20.0
"""Bound on any single wait in these tests (far above what any of them needs)."""


# ------------------------------------------------------------------------------------------------ the interfaces


@attrs.define
class Item:
    name: str
    count: int = 1
    tags: list[str] = attrs.field(factory=list)


@attrs.define
class Positive:
    """Its validator runs again at the receiver, so an instance smuggled past it does not decode there."""

    value: int = attrs.field(validator=attrs.validators.gt(0))


EXTRA = (Item, Positive)


class OutOfStockError(Exception):
    def __init__(self, item: str, wanted: int) -> None:
        super().__init__(f"only {wanted - 1} {item} left")
        self.item = item


class Calc(Protocol):
    async def add(self, item: Item, count: int) -> Item: ...
    async def total(self, *items: Item, bonus: int = 0) -> int: ...
    async def echo(self, value: Any) -> Any: ...
    async def slow_echo(self, value: Any) -> Any: ...
    async def fail(self, kind: str) -> None: ...
    async def fail_sync(self, kind: str) -> None: ...
    async def stall(self) -> None: ...
    async def stubborn(self) -> str: ...
    async def whoami(self) -> int: ...
    async def ask_back(self, x: int) -> int: ...
    async def chain(self, n: int) -> list[str]: ...
    async def unencodable(self) -> Any: ...
    async def undecodable(self) -> Any: ...
    async def gated(self, i: int) -> int: ...
    async def busy(self, i: int) -> int: ...
    async def first_of(self, values: list[int]) -> int: ...
    async def cancelled_inside(self) -> None: ...
    @oneway
    async def note(self, text: str) -> None: ...
    @oneway
    async def note_fail(self, text: str) -> None: ...


class NotServed(Protocol):
    async def missing(self) -> None: ...
    async def _private_looking(self) -> None: ...


class Back(Protocol):
    async def double(self, x: int) -> int: ...
    async def chain(self, n: int) -> list[str]: ...
    async def conn_id(self) -> int: ...


class SessionApi(Protocol):
    async def owner(self) -> int: ...


class Narrow(Protocol):
    async def echo(self, value: Any) -> Any: ...


def _raise_for(kind: str) -> None:
    if kind == "key":
        raise KeyError("no such key")
    if kind == "value":
        raise ValueError("bad value")
    if kind == "custom":
        raise OutOfStockError("sword", 3)
    if kind == "unicode":
        b"\xff".decode("utf-8")
    raise RuntimeError(kind)


class Service:
    """Object 1 on the server: every method a test calls."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.swallowed = asyncio.Event()
        self.notes: list[str] = []
        self.gate = asyncio.Event()
        self.gate_at = 0
        self.arrived = 0
        self.now = 0
        self.peak = 0
        self.cancels = 0

    async def add(self, item: Item, count: int) -> Item:
        return attrs.evolve(item, count=item.count + count, tags=[*item.tags, "added"])

    def total(self, *items: Item, bonus: int = 0) -> int:  # a plain function: answered on the spot
        return sum(item.count for item in items) + bonus

    def echo(self, value: Any) -> Any:
        return value

    async def undecodable(self) -> Positive:
        smuggled = object.__new__(Positive)
        object.__setattr__(smuggled, "value", -1)  # past the validator: encodes, but does not decode at the caller
        return smuggled

    async def slow_echo(self, value: Any) -> Any:
        await asyncio.sleep(0.001)
        return value

    async def fail(self, kind: str) -> None:
        await asyncio.sleep(0)
        _raise_for(kind)

    def fail_sync(self, kind: str) -> None:
        _raise_for(kind)

    async def stall(self) -> None:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancels += 1
            self.cancelled.set()
            raise

    async def stubborn(self) -> str:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.swallowed.set()
        return "too late"

    async def whoami(self) -> int:
        await asyncio.sleep(0)
        return current_connection().id

    async def ask_back(self, x: int) -> int:
        back = current_connection().rpc.proxy(Back, BACK, timeout=BOUND)
        return await back.double(x) + 1

    async def chain(self, n: int) -> list[str]:
        if n == 0:
            return ["server"]
        back = current_connection().rpc.proxy(Back, BACK, timeout=BOUND)
        return ["server", *await back.chain(n - 1)]

    def unencodable(self) -> Any:
        return object()

    async def gated(self, i: int) -> int:
        self.arrived += 1
        if self.arrived >= self.gate_at:
            self.gate.set()
        await self.gate.wait()
        return i * 2

    async def busy(self, i: int) -> int:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(0.001)
        finally:
            self.now -= 1
        return -i

    def first_of(self, values: list[int]) -> int:
        return next(iter(values))  # StopIteration for an empty list

    async def cancelled_inside(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.cancel)  # something else cancels what the method awaits
        await future

    async def note(self, text: str) -> None:
        self.notes.append(text)

    async def note_fail(self, text: str) -> None:
        raise ValueError(f"cannot note {text}")


class BackImpl:
    """Object 10 on the client: what the server calls back."""

    async def double(self, x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def chain(self, n: int) -> list[str]:
        if n == 0:
            return ["client"]
        calc = current_connection().rpc.proxy(Calc, SERVICE, timeout=BOUND)
        return ["client", *await calc.chain(n - 1)]

    def conn_id(self) -> int:
        return current_connection().id


class Session:
    """Object 5, exposed per connection by the server's on_connect."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def owner(self) -> int:
        return self.connection.id


# ------------------------------------------------------------------------------------------------ the pair


@attrs.define
class Pair:
    server: Server
    client: Client
    conn: Connection
    server_conn: Connection
    service: Service
    errors: list[BaseException]

    def calc(self, timeout: float | None = BOUND) -> Calc:
        return self.conn.rpc.proxy(Calc, SERVICE, timeout=timeout)

    def counts(self) -> tuple[int, int, int, int]:
        """Calls pending and running at the client, then at the server."""
        client, server = self.conn.rpc, self.server_conn.rpc
        return client.pending, client.running, server.pending, server.running

    async def settled(self) -> None:
        """No call pending and nothing running on either side."""
        await wait_until(lambda: self.counts() == (0, 0, 0, 0), BOUND, what=f"no calls in flight ({self.counts()})")


@asynccontextmanager
async def open_pair(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, *, server: dict[str, Any], client: dict[str, Any]
) -> AsyncIterator[Pair]:
    service = Service()
    errors: list[BaseException] = []
    config = server_config(aeron_dir, port, serialization=make_serialization(EXTRA), **server)
    async with running_server(config) as srv:
        srv.rpc.expose(service, SERVICE)
        srv.on_connect(lambda c: c.rpc.expose(Session(c), SESSION))
        srv.on_error(lambda c, e: errors.append(e))
        cconfig = client_config(transport, aeron_dir, client_dir, serialization=make_serialization(EXTRA), **client)
        async with connected_client(cconfig, port) as (cli, conn):
            cli.rpc.expose(BackImpl(), BACK)
            server_conn = await wait_until(
                lambda: next((c for c in srv.connections if c.id == conn.id), None), BOUND, what="server connection"
            )
            yield Pair(srv, cli, conn, server_conn, service, errors)


@pytest.fixture(params=TRANSPORTS)
async def pair(request: pytest.FixtureRequest, aeron_dir: Path, client_dir: Path, port: int) -> AsyncIterator[Pair]:
    async with open_pair(request.param, aeron_dir, client_dir, port, server={}, client={}) as opened:
        yield opened


# ------------------------------------------------------------------------------------------------ calls and answers


async def test_call_and_return_with_registered_attrs_arguments(pair: Pair) -> None:
    calc = pair.calc()
    async with asyncio.timeout(BOUND):
        assert await calc.add(Item("sword", 2, ["sharp"]), 3) == Item("sword", 5, ["sharp", "added"])
        assert await calc.add(item=Item("shield"), count=1) == Item("shield", 2, ["added"])  # by keyword
        assert await calc.total(Item("a", 1), Item("b", 2), bonus=10) == 13  # *args and a keyword-only argument
        nested = {"items": [Item("x"), Item("y", 4)], "ok": True, "n": None, "raw": b"\x00\xff"}
        assert await calc.echo(nested) == nested
        assert await calc.slow_echo([1, 2.5, "three"]) == [1, 2.5, "three"]
    assert pair.conn.rpc.calls_made == 5
    assert pair.server_conn.rpc.calls_served == 5
    await pair.settled()


async def test_sync_and_async_implementations_interleave(pair: Pair) -> None:
    calc = pair.calc()
    async with asyncio.timeout(BOUND):
        results = await asyncio.gather(*(calc.echo(i) if i % 2 else calc.slow_echo(i) for i in range(200)))
    assert results == list(range(200))
    await pair.settled()


async def test_current_connection_is_the_callers(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        assert await pair.calc().whoami() == pair.conn.id
        assert await pair.server_conn.rpc.proxy(Back, BACK).conn_id() == pair.conn.id


# ------------------------------------------------------------------------------------------------ failures


@pytest.mark.parametrize("method", ["fail", "fail_sync"])
async def test_builtin_exceptions_arrive_as_remote_subclasses_with_the_traceback(pair: Pair, method: str) -> None:
    calc = pair.calc()
    call = getattr(calc, method)
    async with asyncio.timeout(BOUND):
        with pytest.raises(KeyError) as key_error:
            await call("key")
        with pytest.raises(ValueError, match="bad value") as value_error:
            await call("value")
    for caught, type_name in ((key_error.value, "KeyError"), (value_error.value, "ValueError")):
        assert isinstance(caught, RemoteError)
        assert type(caught).__name__ == f"Remote{type_name}"
        assert caught.remote_type == type_name
        assert f"in {method}" in caught.remote_traceback
        assert "in _raise_for" in caught.remote_traceback
        assert f"in {method}" in str(caught)
    assert isinstance(key_error.value, RemoteError)
    assert key_error.value.remote_message == "'no such key'"
    await pair.settled()


async def test_custom_exception_types_arrive_as_remote_errors_naming_them(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        with pytest.raises(RemoteError) as caught:
            await pair.calc().fail("custom")
    error = caught.value
    assert type(error) is RemoteError
    assert error.remote_type == f"{OutOfStockError.__module__}.OutOfStockError"
    assert error.remote_message == "only 2 sword left"
    assert "in fail" in error.remote_traceback
    assert "OutOfStockError: only 2 sword left" in error.remote_traceback


async def test_a_builtin_whose_constructor_needs_more_arguments_arrives_as_a_plain_remote_error(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        with pytest.raises(RemoteError) as caught:
            await pair.calc().fail("unicode")
    assert type(caught.value) is RemoteError
    assert caught.value.remote_type == "UnicodeDecodeError"
    assert "in fail" in caught.value.remote_traceback


async def test_an_unencodable_result_is_a_serialization_error_at_the_caller(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        with pytest.raises(SerializationError, match="unencodable"):
            await pair.calc().unencodable()
        assert await pair.calc().echo("still fine") == "still fine"
    await pair.settled()


async def test_an_unencodable_argument_fails_locally_and_frees_its_slot(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        with pytest.raises(SerializationError):
            await pair.calc().echo(object())
        assert await pair.calc().echo(1) == 1
    assert pair.server_conn.rpc.calls_served == 1
    await pair.settled()


async def test_unknown_object_and_unknown_method_are_typed_errors_not_timeouts(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):  # the proxies' own timeouts are longer than this bound
        with pytest.raises(UnknownObjectError, match="no object 999"):
            await pair.conn.rpc.proxy(Calc, 999, timeout=3 * BOUND).echo(1)
        with pytest.raises(UnknownMethodError, match="missing"):
            await pair.conn.rpc.proxy(NotServed, SERVICE, timeout=3 * BOUND).missing()
        # Per-connection objects of one connection are unknown to the other side's registry too.
        with pytest.raises(UnknownObjectError):
            await pair.server_conn.rpc.proxy(SessionApi, SESSION, timeout=3 * BOUND).owner()
    assert isinstance(UnknownObjectError("x"), LookupError)
    assert isinstance(UnknownMethodError("x"), AttributeError)
    await pair.settled()


async def test_private_names_and_attributes_are_not_callable_remotely(pair: Pair) -> None:
    """Hand-made calls (no proxy would make them) naming dunders, private names or data attributes."""
    async with asyncio.timeout(BOUND):
        for name in ("__init__", "__class__", "__reduce__", "_raise_for", "notes", "gate", ""):
            with pytest.raises(UnknownMethodError):
                await pair.conn.rpc._call(SERVICE, name, (), {}, BOUND)
    assert pair.server_conn.rpc.calls_served == 0
    await pair.settled()


async def test_an_interface_limits_what_a_caller_may_call(pair: Pair) -> None:
    pair.server.rpc.expose(pair.service, 2, interface=Narrow)
    try:
        narrow = pair.conn.rpc.proxy(Calc, 2, timeout=BOUND)
        async with asyncio.timeout(BOUND):
            assert await narrow.echo("ok") == "ok"
            with pytest.raises(UnknownMethodError):
                await narrow.total(Item("a"))
    finally:
        pair.server.rpc.unexpose(2)


async def test_a_stop_iteration_raised_remotely_arrives_as_a_remote_error(pair: Pair) -> None:
    """``next()`` on an empty iterator in a remote method must not turn into the caller's own StopIteration."""
    async with asyncio.timeout(BOUND):
        with pytest.raises(RemoteError) as caught:
            await pair.calc().first_of([])
        assert await pair.calc().first_of([7]) == 7
    assert caught.value.remote_type == "StopIteration"
    assert "in first_of" in caught.value.remote_traceback


async def test_a_method_ending_in_its_own_cancelled_error_is_answered(pair: Pair) -> None:
    async with asyncio.timeout(3.0):  # the proxy's timeout is far longer: a typed error must come first
        with pytest.raises(RpcError):
            await pair.calc(timeout=3 * BOUND).cancelled_inside()


# ------------------------------------------------------------------------------------------------ timeouts, cancelling


async def assert_invocation_cancelled(pair: Pair) -> None:
    await asyncio.wait_for(pair.service.cancelled.wait(), BOUND)
    await pair.settled()
    assert pair.service.cancels == 1


async def test_a_proxy_timeout_raises_and_cancels_the_invocation(pair: Pair) -> None:
    for bad in (0, -1.0):
        with pytest.raises(ConfigurationError, match="timeout"):
            pair.conn.rpc.proxy(Calc, SERVICE, timeout=bad)
    slow = pair.calc(timeout=0.3)
    async with asyncio.timeout(BOUND):
        with pytest.raises(RpcTimeoutError, match="stall") as caught:
            await slow.stall()
    assert isinstance(caught.value, TimeoutError)
    await assert_invocation_cancelled(pair)
    async with asyncio.timeout(BOUND):
        assert await pair.calc().echo("next call fine") == "next call fine"


async def test_with_timeout_raises_and_cancels_the_invocation(pair: Pair) -> None:
    calc = pair.calc(timeout=3 * BOUND)
    async with asyncio.timeout(BOUND):
        with pytest.raises(RpcTimeoutError):
            await with_timeout(calc, 0.3).stall()
    await assert_invocation_cancelled(pair)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_configured_rpc_timeout_applies_to_proxies_without_one(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={"rpc_timeout": 0.3}) as p:
        async with asyncio.timeout(BOUND):
            with pytest.raises(RpcTimeoutError):
                await p.calc(timeout=None).stall()
        await assert_invocation_cancelled(p)


async def test_cancelling_the_calling_task_cancels_the_invocation(pair: Pair) -> None:
    task = asyncio.get_running_loop().create_task(pair.calc().stall())
    await asyncio.wait_for(pair.service.started.wait(), BOUND)
    assert pair.conn.rpc.pending == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, BOUND)
    await assert_invocation_cancelled(pair)


async def test_asyncio_timeout_around_a_call_cancels_the_invocation(pair: Pair) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await pair.calc().stall()
    await assert_invocation_cancelled(pair)


async def test_an_answer_after_the_timeout_is_counted_late_and_dropped(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        with pytest.raises(RpcTimeoutError):
            await pair.calc(timeout=0.3).stubborn()  # swallows the cancellation and answers anyway
    await asyncio.wait_for(pair.service.swallowed.wait(), BOUND)
    await wait_until(lambda: pair.conn.rpc.late_answers == 1, BOUND, what="the late answer")
    await pair.settled()
    async with asyncio.timeout(BOUND):
        assert await pair.calc().echo("after") == "after"


async def test_timeouts_of_different_lengths_expire_independently(pair: Pair) -> None:
    """A short timeout after a long one still expires on time; answered calls in between do not get in the way."""
    long_call = asyncio.get_running_loop().create_task(pair.calc(timeout=3 * BOUND).stall())
    await asyncio.wait_for(pair.service.started.wait(), BOUND)
    async with asyncio.timeout(BOUND):
        with pytest.raises(RpcTimeoutError):
            await pair.calc(timeout=0.5).stall()
        assert pair.conn.rpc.pending == 1  # the long one is still waiting
        calc = pair.calc(timeout=3 * BOUND)
        answers = await asyncio.gather(*(calc.echo(i) for i in range(3000)))  # deadlines left behind, answered
        assert answers == list(range(3000))
        with pytest.raises(RpcTimeoutError):
            await with_timeout(calc, 0.3).stall()
    assert not long_call.done()
    await wait_until(lambda: pair.service.cancels == 2, BOUND, what="the two timed-out calls cancelled")
    long_call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(long_call, BOUND)
    await wait_until(lambda: pair.service.cancels == 3, BOUND, what="the long call cancelled")
    await pair.settled()


# ------------------------------------------------------------------------------------------------ one-way calls


async def test_oneway_calls_return_at_once_and_run_in_order(pair: Pair) -> None:
    calc = pair.calc()
    async with asyncio.timeout(BOUND):
        for i in range(50):
            await calc.note(f"n{i}")  # returns once sent
    await wait_until(lambda: len(pair.service.notes) == 50, BOUND, what="the notes")
    assert pair.service.notes == [f"n{i}" for i in range(50)]
    assert pair.conn.rpc.pending == 0  # nothing awaits an answer


async def test_a_failing_oneway_call_goes_to_the_callees_on_error(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        await pair.calc().note_fail("x")
        await pair.conn.rpc.proxy(Calc, 999).note("to nobody")
    await wait_until(lambda: len(pair.errors) == 2, BOUND, what="two errors at the server")
    value_error, unknown = pair.errors
    assert isinstance(value_error, ValueError)
    assert str(value_error) == "cannot note x"
    assert isinstance(unknown, UnknownObjectError)


# ------------------------------------------------------------------------------------------------ exposure


async def test_per_connection_objects_exposed_in_on_connect(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        assert await pair.conn.rpc.proxy(SessionApi, SESSION).owner() == pair.conn.id
    assert pair.server_conn.rpc.exposed(SESSION) is not None
    assert pair.server.rpc.exposed(SESSION) is None


async def test_a_per_connection_object_shadows_the_global_one_for_that_connection(pair: Pair) -> None:
    class Other:
        def echo(self, value: Any) -> Any:
            return ("other", value)

    pair.server_conn.rpc.expose(Other(), SERVICE)
    async with asyncio.timeout(BOUND):
        assert await pair.calc().echo(1) == ["other", 1]
        pair.server_conn.rpc.unexpose(SERVICE)
        assert await pair.calc().echo(1) == 1  # the global one again


async def test_objects_exposed_after_connecting_are_callable_and_unexposed_ones_are_not(pair: Pair) -> None:
    pair.server.rpc.expose(Session(pair.server_conn), 77)
    async with asyncio.timeout(BOUND):
        assert await pair.conn.rpc.proxy(SessionApi, 77).owner() == pair.conn.id
        pair.server.rpc.unexpose(77)
        with pytest.raises(UnknownObjectError):
            await pair.conn.rpc.proxy(SessionApi, 77).owner()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_per_connection_exposure_is_per_connection(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={}) as p:
        second_config = client_config(transport, aeron_dir, client_dir, serialization=make_serialization(EXTRA))
        async with connected_client(second_config, port) as (_, second):
            async with asyncio.timeout(BOUND):
                ids = await asyncio.gather(
                    p.conn.rpc.proxy(SessionApi, SESSION).owner(), second.rpc.proxy(SessionApi, SESSION).owner()
                )
                assert await second.rpc.proxy(Calc, SERVICE).whoami() == second.id
        assert list(ids) == [p.conn.id, second.id]
        assert p.conn.id != second.id


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_right_after_connecting_waits_for_an_async_on_connect_that_exposes(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    config = server_config(aeron_dir, port, serialization=make_serialization(EXTRA))
    async with running_server(config) as server:
        exposed: list[int] = []

        async def on_connect(conn: Connection) -> None:
            await asyncio.sleep(0.3)  # e.g. loading the session from a database
            conn.rpc.expose(Session(conn), SESSION)
            exposed.append(conn.id)

        server.on_connect(on_connect)
        cconfig = client_config(transport, aeron_dir, client_dir, serialization=make_serialization(EXTRA))
        async with connected_client(cconfig, port) as (_, conn):
            async with asyncio.timeout(BOUND):
                owners = await asyncio.gather(*(conn.rpc.proxy(SessionApi, SESSION).owner() for _ in range(20)))
        assert owners == [conn.id] * 20
        assert exposed == [conn.id]


# ------------------------------------------------------------------------------------------------ both directions


async def test_calls_in_both_directions_at_once(pair: Pair) -> None:
    calc = pair.calc()
    back = pair.server_conn.rpc.proxy(Back, BACK, timeout=BOUND)
    async with asyncio.timeout(BOUND):
        results = await asyncio.gather(*(c for i in range(100) for c in (calc.echo(i), back.double(i))))
    assert results == [v for i in range(100) for v in (i, 2 * i)]
    assert pair.server_conn.rpc.calls_made == 100
    assert pair.conn.rpc.calls_served == 100
    await pair.settled()


async def test_a_method_calls_back_into_its_caller_mid_call(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        assert await pair.calc().ask_back(20) == 41
        assert await asyncio.gather(*(pair.calc().ask_back(i) for i in range(50))) == [2 * i + 1 for i in range(50)]
    await pair.settled()


@pytest.mark.parametrize("depth", [3, 12])
async def test_nested_reentrant_calls_do_not_deadlock(pair: Pair, depth: int) -> None:
    """client -> server -> client -> server ...: each side waits on the other while serving it."""
    async with asyncio.timeout(BOUND):
        chain = await pair.calc().chain(depth)
    assert chain == ["server" if level % 2 == 0 else "client" for level in range(depth + 1)]
    await pair.settled()


# ------------------------------------------------------------------------------------------------ many calls


async def test_ten_thousand_concurrent_pending_calls_all_answered(pair: Pair) -> None:
    """The server holds every call until all 10,000 have arrived: they are pending at the same time."""
    count = 10_000
    pair.service.gate_at = count
    calc = pair.calc(timeout=90)
    async with asyncio.timeout(100):
        results = await asyncio.gather(*(calc.gated(i) for i in range(count)))
    assert results == [2 * i for i in range(count)]
    assert pair.service.arrived == count
    assert pair.conn.rpc.late_answers == 0
    await pair.settled()


def deadline_entries(rpc: Any) -> int:
    """Deadlines the caller's side keeps (white box: what its memory for call timeouts holds)."""
    return len(rpc._deadlines) + sum(len(queue) for queue in rpc._deadlines.values())


@pytest.mark.parametrize(
    "distinct",
    [pytest.param(False, id="one_timeout"), pytest.param(True, id="distinct_timeouts")],
)
async def test_answered_calls_leave_bounded_deadline_bookkeeping(pair: Pair, distinct: bool) -> None:
    """However many calls were answered, what is kept for their timeouts stays bounded by the calls in flight
    (plus slack), also when every call has a timeout of its own (say, the remainder of a request's budget)."""
    calc = pair.calc(timeout=3 * BOUND)
    async with asyncio.timeout(3 * BOUND):
        for batch in range(30):
            timeouts = [3 * BOUND + (batch * 100 + i) * 1e-6 for i in range(100)]
            proxies = [with_timeout(calc, timeout) if distinct else calc for timeout in timeouts]
            assert await asyncio.gather(*(proxy.echo(i) for i, proxy in enumerate(proxies))) == list(range(100))
    assert pair.conn.rpc.pending == 0
    assert deadline_entries(pair.conn.rpc) <= 2 * 1024 + 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_small_max_pending_calls_bounds_concurrency_and_every_call_completes(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={"max_pending_calls": 8}) as p:
        calc = p.calc()
        peak_pending = 0

        async def sample() -> None:
            nonlocal peak_pending
            while True:
                peak_pending = max(peak_pending, p.conn.rpc.pending)
                await asyncio.sleep(0)

        sampler = asyncio.get_running_loop().create_task(sample())
        try:
            async with asyncio.timeout(BOUND):
                results = await asyncio.gather(*(calc.busy(i) for i in range(100)))
        finally:
            sampler.cancel()
        assert results == [-i for i in range(100)]
        assert 1 <= p.service.peak <= 8
        assert 1 <= peak_pending <= 8
        await p.settled()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_waiting_for_a_slot_times_out_unsent_and_the_slot_frees_later(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={"max_pending_calls": 1}) as p:
        holder = asyncio.get_running_loop().create_task(p.calc(timeout=3 * BOUND).stall())
        await asyncio.wait_for(p.service.started.wait(), BOUND)
        async with asyncio.timeout(BOUND):
            with pytest.raises(RpcTimeoutError, match="no call slot"):
                await p.calc(timeout=0.3).echo("never sent")
        assert p.server_conn.rpc.calls_served == 1  # only the stall reached the server
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(holder, BOUND)
        async with asyncio.timeout(BOUND):
            assert await p.calc().echo("now") == "now"
        await p.settled()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_wait_for_a_slot_counts_against_the_calls_timeout(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={"max_pending_calls": 1}) as p:
        loop = asyncio.get_running_loop()
        holder = loop.create_task(p.calc(timeout=3 * BOUND).stall())
        await asyncio.wait_for(p.service.started.wait(), BOUND)
        waiter = loop.create_task(p.calc(timeout=BOUND).echo("late"))
        await wait_until(lambda: len(p.conn.rpc._slot_waiters) == 1, BOUND, what="a call waiting for a slot")
        await asyncio.sleep(1.0)
        holder.cancel()
        await wait_until(lambda: p.conn.rpc._slot_waiters == [], BOUND, what="the waiter to take the slot")
        # The waiter's deadline is kept under what was left of its timeout, not a fresh one.
        windows = [w for w in p.conn.rpc._deadlines if w != 3 * BOUND]
        assert windows
        assert all(w <= BOUND - 1.0 for w in windows), windows
        assert await asyncio.wait_for(waiter, BOUND) == "late"
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(holder, BOUND)
        await p.settled()


async def test_a_call_whose_arguments_do_not_decode_at_the_callee_fails_at_once(pair: Pair) -> None:
    smuggled = object.__new__(Positive)
    object.__setattr__(smuggled, "value", -1)  # past the validator: encodes, but Positive(-1) raises at the callee
    async with asyncio.timeout(BOUND / 2):  # far below the call's own timeout
        with pytest.raises(SerializationError, match="could not decode the call of 'echo'"):
            await pair.calc(timeout=3 * BOUND).echo(smuggled)
    assert any(isinstance(e, SerializationError) for e in pair.errors)
    assert pair.conn.rpc.pending == 0
    async with asyncio.timeout(BOUND):
        assert await pair.calc().echo(Positive(2)) == Positive(2)


async def test_an_answer_that_does_not_decode_at_the_caller_fails_the_call_at_once(pair: Pair) -> None:
    async with asyncio.timeout(BOUND / 2):  # far below the call's own timeout
        with pytest.raises(SerializationError, match="answer to 'undecodable' of object 1 does not decode"):
            await pair.calc(timeout=3 * BOUND).undecodable()
    assert pair.conn.rpc.pending == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancelling_a_call_waiting_for_a_slot_as_the_slot_frees(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """The slot freed goes to the first waiter; if that waiter is being cancelled in the same breath, the
    cancellation must still win, and the slot must go on to the next waiter."""
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={"max_pending_calls": 1}) as p:
        loop = asyncio.get_running_loop()
        holder = loop.create_task(p.calc(timeout=3 * BOUND).stall())
        await asyncio.wait_for(p.service.started.wait(), BOUND)
        first = loop.create_task(p.calc(timeout=3 * BOUND).echo("first"))
        second = loop.create_task(p.calc(timeout=BOUND / 2).echo("second"))
        await wait_until(lambda: len(p.conn.rpc._slot_waiters) == 2, BOUND, what="two calls waiting for a slot")
        holder.cancel()  # frees the slot: the first waiter is woken ...
        first.cancel()  # ... while it is being cancelled
        done, _ = await asyncio.wait([holder, first, second], timeout=BOUND)
        assert len(done) == 3
        assert holder.cancelled()
        assert first.cancelled(), f"the cancelled call went ahead: {first.result()!r}"
        assert second.result() == "second"
        await p.settled()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_calls_waiting_for_a_slot_fail_when_the_connection_closes(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={}, client={"max_pending_calls": 1}) as p:
        loop = asyncio.get_running_loop()
        holder = loop.create_task(p.calc().stall())
        await asyncio.wait_for(p.service.started.wait(), BOUND)
        waiting = [loop.create_task(p.calc().echo(i)) for i in range(3)]
        await wait_until(lambda: len(p.conn.rpc._slot_waiters) == 3, BOUND, what="three calls waiting for a slot")
        await asyncio.wait_for(p.conn.close("bye"), BOUND)
        done, _ = await asyncio.wait([holder, *waiting], timeout=BOUND)
        assert len(done) == 4
        for task in (holder, *waiting):
            assert isinstance(task.exception(), ConnectionClosedError), repr(task.exception())
        assert p.conn.rpc._slot_waiters == []
        await wait_until(lambda: p.service.cancels == 1, BOUND, what="the stall cancelled at the server")


# ------------------------------------------------------------------------------------------------ closing


@pytest.mark.parametrize("closer", ["caller", "callee"])
async def test_connection_closed_mid_call_fails_pending_calls_and_cancels_the_invocation(
    pair: Pair, closer: str
) -> None:
    calls = [asyncio.get_running_loop().create_task(pair.calc().stall()) for _ in range(3)]
    await asyncio.wait_for(pair.service.started.wait(), BOUND)
    await wait_until(lambda: pair.server_conn.rpc.running == 3, BOUND, what="three invocations running")
    closing = pair.conn if closer == "caller" else pair.server_conn
    await asyncio.wait_for(closing.close("bye"), BOUND)
    done, _ = await asyncio.wait(calls, timeout=BOUND)
    assert len(done) == 3
    for call in calls:
        error = call.exception()
        assert isinstance(error, ConnectionClosedError), repr(error)
    await wait_until(lambda: pair.service.cancels == 3, BOUND, what="the three invocations cancelled")
    assert pair.conn.rpc.pending == 0
    assert pair.server_conn.rpc.running == 0
    async with asyncio.timeout(BOUND):
        with pytest.raises(ConnectionClosedError):
            await pair.calc().echo(1)
        with pytest.raises(ConnectionClosedError):
            await pair.calc().note("closed")
