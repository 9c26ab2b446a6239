"""The pure parts of remote calls: remote errors, proxy classes, with_timeout, exposing objects, current_connection.

No connection, driver or event loop is involved except where a proxy's call is checked against a recording stand-in
for a connection's RPC half.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Protocol, cast

import pytest

from endpoint.errors import ConfigurationError, EndpointError, RemoteError, RpcError
from endpoint.rpc.calls import (
    ConnectionRpc,
    RpcRegistry,
    _Proxy,
    _proxy_class,
    current_connection,
    oneway,
    remote_error,
    with_timeout,
)

TRACE = "Traceback (most recent call last):\n  File \"svc.py\", line 3, in lookup\nKeyError: 'k'\n"


# ------------------------------------------------------------------------------------------------ remote_error


@pytest.mark.parametrize(
    ("type_name", "builtin"),
    [
        ("KeyError", KeyError),
        ("ValueError", ValueError),
        ("ZeroDivisionError", ZeroDivisionError),
        ("FileNotFoundError", FileNotFoundError),
        ("TimeoutError", TimeoutError),
        ("AttributeError", AttributeError),
        ("RuntimeError", RuntimeError),
    ],
)
def test_builtin_remote_types_subclass_the_builtin(type_name: str, builtin: type[Exception]) -> None:
    error = remote_error(type_name, "the message", TRACE)
    assert isinstance(error, RemoteError)
    assert isinstance(error, RpcError)
    assert isinstance(error, EndpointError)
    assert isinstance(error, builtin)
    assert type(error).__name__ == f"Remote{type_name}"
    assert type(error).__module__ == "endpoint.rpc.calls"
    assert error.remote_type == type_name
    assert error.remote_message == "the message"
    assert error.remote_traceback == TRACE
    with pytest.raises(builtin):  # ``except KeyError`` catches the remote one
        raise error


def test_the_remote_class_of_a_builtin_is_made_once() -> None:
    first = remote_error("LookupError", "a", "")
    second = remote_error("LookupError", "b", "")
    assert type(first) is type(second)
    assert first is not second
    assert (first.remote_message, second.remote_message) == ("a", "b")


def test_a_remote_key_error_is_also_caught_by_its_builtin_bases() -> None:
    error = remote_error("KeyError", "missing", "")
    assert isinstance(error, LookupError)
    assert isinstance(error, Exception)


@pytest.mark.parametrize(
    "type_name",
    [
        "myapp.errors.OutOfStock",  # a dotted name is never looked up in builtins
        "builtins.KeyError",  # ... not even this one
        "OutOfStock",  # no such builtin
        "print",  # a builtin, but not a type
        "object",  # a type, but not an exception
        "KeyboardInterrupt",  # a BaseException, not an Exception
        "SystemExit",
        "GeneratorExit",
        "RemoteError",  # not a builtin either
        "",
    ],
)
def test_non_builtin_or_non_exception_names_give_a_plain_remote_error(type_name: str) -> None:
    error = remote_error(type_name, "msg", "tb text")
    assert type(error) is RemoteError
    assert error.remote_type == type_name
    assert error.remote_message == "msg"
    assert error.remote_traceback == "tb text"


@pytest.mark.parametrize("type_name", ["StopIteration", "StopAsyncIteration"])
def test_iteration_stoppers_are_not_subclassed(type_name: str) -> None:
    error = remote_error(type_name, "", "")
    assert isinstance(error, RemoteError)
    assert not isinstance(error, (StopIteration, StopAsyncIteration))


@pytest.mark.parametrize("type_name", ["ValueError", "KeyError", "myapp.Boom", "StopIteration"])
async def test_a_remote_error_set_on_an_awaited_future_is_raised_by_the_await(type_name: str) -> None:
    """What a caller does with a failure answer: the poller sets it on the future its task awaits."""
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    async def call() -> object:
        return await future

    task = asyncio.get_running_loop().create_task(call())
    await asyncio.sleep(0)  # the task now waits on the future, as a caller waits for its answer
    future.set_exception(remote_error(type_name, "", ""))
    with pytest.raises(RemoteError):
        await task


@pytest.mark.parametrize("type_name", ["UnicodeDecodeError", "UnicodeEncodeError", "UnicodeTranslateError"])
def test_builtins_whose_constructor_wants_more_arguments_fall_back_to_remote_error(type_name: str) -> None:
    error = remote_error(type_name, "bad byte", TRACE)
    assert type(error) is RemoteError
    assert error.remote_type == type_name
    assert error.remote_message == "bad byte"
    assert error.remote_traceback == TRACE
    again = remote_error(type_name, "second", "")  # the fallback is remembered, and still works
    assert type(again) is RemoteError
    assert again.remote_message == "second"


def test_str_has_the_type_the_message_and_the_remote_traceback() -> None:
    error = remote_error("KeyError", "'k'", TRACE)
    text = str(error)
    assert text.startswith("KeyError: 'k'")
    assert "Remote traceback:" in text
    assert "in lookup" in text
    assert text.rstrip().endswith("KeyError: 'k'")


def test_str_without_message_or_traceback() -> None:
    assert str(remote_error("myapp.Boom", "", "")) == "myapp.Boom"
    assert str(remote_error("myapp.Boom", "why", "")) == "myapp.Boom: why"
    assert "Remote traceback" not in str(remote_error("ValueError", "x", ""))


# ------------------------------------------------------------------------------------------------ proxy classes


class Shop(Protocol):
    greeting: str

    async def buy(self, item: str, count: int = 1) -> int: ...

    def sync_price(self, item: str) -> float: ...

    @oneway
    async def note(self, text: str) -> None: ...

    async def _private(self) -> None: ...

    def __secret__(self) -> None: ...

    @property
    def label(self) -> str: ...


class OnlyAttributes(Protocol):
    name: str
    size: int


class OnlyPrivate(Protocol):
    async def _hidden(self) -> None: ...

    def __dunder__(self) -> None: ...


class RecordingRpc:
    """Stands in for a connection's ConnectionRpc: records what proxy methods ask of it."""

    connection = "<test connection>"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str, tuple[Any, ...], dict[str, Any], float | None]] = []

    async def _call(
        self, object_id: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
    ) -> str:
        self.calls.append(("call", object_id, method, args, kwargs, timeout))
        return f"answer of {method}"

    async def _send_oneway(self, object_id: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append(("oneway", object_id, method, args, kwargs, None))


def make_proxy(interface: type, object_id: int = 7, timeout: float | None = None) -> tuple[Any, RecordingRpc]:
    rpc = RecordingRpc()
    return _proxy_class(interface)(cast(ConnectionRpc, rpc), object_id, timeout), rpc


def test_proxy_class_has_only_the_public_functions_of_the_protocol() -> None:
    cls = _proxy_class(Shop)
    assert issubclass(cls, _Proxy)
    assert cls.__name__ == "ShopProxy"
    own = {name for name in vars(cls) if not name.startswith("__")}
    assert own == {"buy", "sync_price", "note", "_interface"}
    assert cls._interface is Shop
    proxy, _ = make_proxy(Shop)
    assert not hasattr(proxy, "_private")
    assert not hasattr(proxy, "greeting")
    assert not hasattr(proxy, "label")
    assert "__secret__" not in vars(cls)


def test_proxy_class_is_made_once_per_interface() -> None:
    assert _proxy_class(Shop) is _proxy_class(Shop)


@pytest.mark.parametrize("interface", [OnlyAttributes, OnlyPrivate])
def test_an_interface_without_public_methods_is_a_configuration_error(interface: type) -> None:
    with pytest.raises(ConfigurationError, match="no public methods"):
        _proxy_class(interface)


def test_proxy_objects_have_no_instance_dict() -> None:
    proxy, _ = make_proxy(Shop)
    with pytest.raises(AttributeError):
        proxy.anything = 1


async def test_calls_go_through_the_rpc_with_args_kwargs_and_the_proxy_timeout() -> None:
    proxy, rpc = make_proxy(Shop, object_id=11, timeout=2.5)
    assert await proxy.buy("sword", count=3) == "answer of buy"
    assert await proxy.sync_price("axe") == "answer of sync_price"  # every proxy method is awaitable
    assert rpc.calls == [
        ("call", 11, "buy", ("sword",), {"count": 3}, 2.5),
        ("call", 11, "sync_price", ("axe",), {}, 2.5),
    ]


async def test_oneway_methods_are_sent_without_waiting_for_an_answer() -> None:
    proxy, rpc = make_proxy(Shop, object_id=3)
    assert await proxy.note("hello", extra=1) is None
    assert rpc.calls == [("oneway", 3, "note", ("hello",), {"extra": 1}, None)]


def test_oneway_marks_the_function_and_returns_it() -> None:
    async def fire(self: object) -> None: ...

    assert oneway(fire) is fire
    assert fire.__endpoint_oneway__ is True  # type: ignore[attr-defined]


def test_proxy_repr_names_the_interface_and_object() -> None:
    proxy, _ = make_proxy(Shop, object_id=42)
    assert repr(proxy) == "<Shop proxy of object 42 on '<test connection>'>"


# ------------------------------------------------------------------------------------------------ with_timeout


async def test_with_timeout_copies_the_proxy_with_its_own_timeout() -> None:
    proxy, rpc = make_proxy(Shop, object_id=5, timeout=None)
    quick = with_timeout(proxy, 0.25)
    assert type(quick) is type(proxy)
    assert quick is not proxy
    await quick.buy("x")
    await proxy.buy("y")
    assert [(c[2], c[1], c[5]) for c in rpc.calls] == [("buy", 5, 0.25), ("buy", 5, None)]


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -0.5, math.nan])
def test_with_timeout_refuses_a_timeout_that_is_not_positive(timeout: float) -> None:
    proxy, _ = make_proxy(Shop)
    with pytest.raises(ConfigurationError, match="timeout"):
        with_timeout(proxy, timeout)


@pytest.mark.parametrize("not_a_proxy", [object(), "proxy", None, Shop])
def test_with_timeout_refuses_what_is_not_a_proxy(not_a_proxy: object) -> None:
    with pytest.raises(TypeError, match="not an RPC proxy"):
        with_timeout(not_a_proxy, 1.0)


# ------------------------------------------------------------------------------------------------ RpcRegistry.expose


class ShopImpl:
    greeting = "hi"

    def __init__(self) -> None:
        self.bought = 0

    async def buy(self, item: str, count: int = 1) -> int:
        self.bought += count
        return self.bought

    def sync_price(self, item: str) -> float:
        return 1.5

    async def note(self, text: str) -> None:
        pass

    def refund(self, item: str) -> None:
        pass

    def _internal(self) -> None:
        pass

    @property
    def label(self) -> str:
        return "shop"


class Narrow(Protocol):
    def sync_price(self, item: str) -> float: ...


def methods_of(registry: RpcRegistry, object_id: int) -> frozenset[str]:
    return registry._objects[object_id].methods


def test_expose_serves_the_public_methods_of_the_object() -> None:
    registry = RpcRegistry()
    impl = ShopImpl()
    assert registry.expose(impl, 1) is impl
    assert registry.exposed(1) is impl
    assert methods_of(registry, 1) == {"buy", "sync_price", "note", "refund"}


def test_an_interface_limits_the_methods_served() -> None:
    registry = RpcRegistry()
    registry.expose(ShopImpl(), 2, interface=Narrow)
    assert methods_of(registry, 2) == {"sync_price"}
    registry.expose(ShopImpl(), 3, interface=Shop)
    assert methods_of(registry, 3) == {"buy", "sync_price", "note"}


@pytest.mark.parametrize("object_id", [-1, 2**31, 2**40, 1.0, "1", None, True, False])
def test_expose_refuses_bad_object_ids(object_id: Any) -> None:
    registry = RpcRegistry()
    with pytest.raises(ConfigurationError, match="object_id"):
        registry.expose(ShopImpl(), object_id)
    assert registry._objects == {}


@pytest.mark.parametrize("object_id", [0, 1, 2**31 - 1])
def test_expose_accepts_the_limits_of_the_id_range(object_id: int) -> None:
    registry = RpcRegistry()
    impl = ShopImpl()
    registry.expose(impl, object_id)
    assert registry.exposed(object_id) is impl


def test_a_second_object_under_a_taken_id_is_refused_until_unexposed() -> None:
    registry = RpcRegistry()
    first, second = ShopImpl(), ShopImpl()
    registry.expose(first, 9)
    with pytest.raises(ConfigurationError, match="already exposed"):
        registry.expose(second, 9)
    assert registry.exposed(9) is first
    registry.expose(first, 9, interface=Narrow)  # the same object again: allowed (here: narrowed)
    assert methods_of(registry, 9) == {"sync_price"}
    assert registry.unexpose(9) is True
    assert registry.unexpose(9) is False
    assert registry.exposed(9) is None
    registry.expose(second, 9)
    assert registry.exposed(9) is second


def test_one_object_may_be_exposed_under_several_ids() -> None:
    registry = RpcRegistry()
    impl = ShopImpl()
    registry.expose(impl, 1)
    registry.expose(impl, 2, interface=Narrow)
    assert registry.exposed(1) is registry.exposed(2) is impl


class Lacking:
    sync_price = "not callable"

    async def buy(self, item: str, count: int = 1) -> int:
        return 0


def test_an_object_missing_interface_methods_is_a_configuration_error_naming_them() -> None:
    registry = RpcRegistry()
    with pytest.raises(ConfigurationError, match="lacks methods") as caught:
        registry.expose(Lacking(), 1, interface=Shop)
    assert "note" in str(caught.value)
    assert "sync_price" in str(caught.value)  # an attribute of that name that is not callable does not count
    assert "buy" not in str(caught.value)
    assert registry.exposed(1) is None


def test_an_object_with_no_public_methods_serves_nothing() -> None:
    class Empty:
        def _hidden(self) -> None:
            pass

    registry = RpcRegistry()
    registry.expose(Empty(), 4)
    assert methods_of(registry, 4) == frozenset()


# ------------------------------------------------------------------------------------------------ current_connection


def test_current_connection_outside_a_call_is_an_rpc_error() -> None:
    with pytest.raises(RpcError, match="only available inside a method called through RPC"):
        current_connection()


async def test_current_connection_in_a_task_outside_a_call_is_an_rpc_error() -> None:
    async def probe() -> None:
        current_connection()

    with pytest.raises(RpcError):
        await asyncio.get_running_loop().create_task(probe())
