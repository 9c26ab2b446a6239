"""Remote objects over a connection: expose objects by id, call them through proxies typed by a Protocol.

Theory of operation. A call is one :class:`~endpoint.messages.RpcCall` carrying a correlation id from the
connection's bounded :class:`~endpoint.rpc.correlation.CorrelationPool`; the answer is an ``RpcReply`` or an
``RpcFailure`` with the same id, read by the poller, which completes the caller's future directly (answers
never wait behind listeners, so a method may call back into its caller mid-call without deadlock). The
callee starts every invocation as soon as it arrives, in arrival order, each in a context where
:func:`current_connection` is the caller: a method that finishes without suspending (a plain function, or
a coroutine that never awaits anything pending) is answered on the spot without a task; one that suspends
continues as a task of its own, which an ``RpcCancel`` (the caller timed out or was cancelled) cancels.

Calls with correlation id 0 are one-way (methods marked :func:`oneway`): nothing is answered and a
failure goes to the callee's ``on_error``.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextvars
import functools
import inspect
import traceback
import types
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final, Protocol, TypeVar

import msgpack  # type: ignore[import-untyped]

from endpoint.config import Configuration
from endpoint.connection.peer import Peer
from endpoint.errors import (
    BudgetExceededError,
    ConfigurationError,
    RemoteError,
    RpcError,
    RpcTimeoutError,
    SerializationError,
    UnknownMethodError,
    UnknownObjectError,
)
from endpoint.messages import INTERNAL_TYPE_IDS, RpcCall, RpcCancel, RpcFailure, RpcReply
from endpoint.rpc.correlation import CorrelationPool
from endpoint.serialization import ATTRS_EXT

__all__ = [
    "ConnectionRpc",
    "RpcPeer",
    "RpcRegistry",
    "current_connection",
    "oneway",
    "remote_error",
    "with_timeout",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

FAILED: Final = 0
"""Failure kinds carried by ``RpcFailure.kind``: the method raised."""
UNKNOWN_OBJECT: Final = 1
UNKNOWN_METHOD: Final = 2
UNSERIALIZABLE: Final = 3
UNDECODABLE: Final = 4
OVER_BUDGET: Final = 5
"""The callee already runs ``max_pending_calls`` calls of this connection's: the call was refused, not run."""
_CALL_TYPE_ID: Final = INTERNAL_TYPE_IDS[RpcCall]
_REPLY_TYPE_ID: Final = INTERNAL_TYPE_IDS[RpcReply]
"""The result (or the failure) could not be encoded by the callee."""

_TEXT_LIMIT: Final = 8000
"""Characters of a remote message or traceback sent back (an answer must fit one message)."""
_ONEWAY_ATTR: Final = "__endpoint_oneway__"
_OBJECT_ID_MAX: Final = 0x7FFF_FFFF


class RpcPeer(Peer, Protocol):
    """The connection a remote call runs for (:class:`endpoint.connection.shell.Connection`, seen from here): who
    called, how to answer, and its own remote objects (``current_connection().rpc.proxy(...)`` calls back)."""

    @property
    def rpc(self) -> ConnectionRpc: ...


_current: contextvars.ContextVar[RpcPeer] = contextvars.ContextVar("endpoint_rpc_connection")


def current_connection() -> RpcPeer:
    """The connection whose remote call is running here (in a method invoked through RPC)."""
    try:
        return _current.get()
    except LookupError:
        raise RpcError("current_connection() is only available inside a method called through RPC") from None


def oneway(method: F) -> F:
    """Mark a method of a remote interface fire-and-forget: awaiting its proxy call waits only for the send."""
    setattr(method, _ONEWAY_ATTR, True)
    return method


# ---------------------------------------------------------------------------------------------- exposing


def _remote_methods(obj: object, interface: type | None) -> frozenset[str]:
    """Names callable remotely: the interface's public functions, or the object's public methods."""
    source: object = interface if interface is not None else type(obj)
    names = frozenset(
        name
        for name, member in inspect.getmembers(source)
        if not name.startswith("_") and (inspect.isfunction(member) or inspect.ismethoddescriptor(member))
    )
    missing = sorted(name for name in names if not callable(getattr(obj, name, None)))
    if missing:
        raise ConfigurationError(f"{type(obj).__name__} lacks methods of {source!r}: {', '.join(missing)}")
    return names


class _Exposed:
    __slots__ = ("methods", "target")

    def __init__(self, target: object, methods: frozenset[str]) -> None:
        self.target = target
        self.methods = methods


class RpcRegistry:
    """Objects exposed under ids. ``server.rpc`` serves every connection; ``connection.rpc`` one connection."""

    def __init__(self) -> None:
        self._objects: dict[int, _Exposed] = {}

    def expose(self, target: T, object_id: int, *, interface: type | None = None) -> T:
        """Serve ``target``'s public methods (or only ``interface``'s) as object ``object_id``; returns it."""
        if type(object_id) is not int or not 0 <= object_id <= _OBJECT_ID_MAX:
            raise ConfigurationError(f"object_id={object_id!r} is not allowed: an int in 0..{_OBJECT_ID_MAX}")
        existing = self._objects.get(object_id)
        if existing is not None and existing.target is not target:
            raise ConfigurationError(f"object_id={object_id} is already exposed ({existing.target!r}); unexpose it")
        self._objects[object_id] = _Exposed(target, _remote_methods(target, interface))
        return target

    def unexpose(self, object_id: int) -> bool:
        return self._objects.pop(object_id, None) is not None

    def exposed(self, object_id: int) -> object | None:
        entry = self._objects.get(object_id)
        return None if entry is None else entry.target


# ---------------------------------------------------------------------------------------------- proxies


class _Proxy:
    __slots__ = ("_object_id", "_rpc", "_timeout")

    _interface: type

    def __init__(self, rpc: ConnectionRpc, object_id: int, timeout: float | None) -> None:
        self._rpc = rpc
        self._object_id = object_id
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"<{self._interface.__name__} proxy of object {self._object_id} on {self._rpc.connection!r}>"


def _proxy_method(name: str, is_oneway: bool) -> Callable[..., Coroutine[Any, Any, Any]]:
    if is_oneway:

        def call_oneway(self: _Proxy, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
            return self._rpc._send_oneway(self._object_id, name, args, kwargs)

        call_oneway.__name__ = name
        return call_oneway

    def call(self: _Proxy, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        return self._rpc._call(self._object_id, name, args, kwargs, self._timeout)

    call.__name__ = name
    return call


_proxy_classes: weakref.WeakKeyDictionary[type, type[_Proxy]] = weakref.WeakKeyDictionary()


def _proxy_class(interface: type) -> type[_Proxy]:
    cls = _proxy_classes.get(interface)
    if cls is None:
        namespace: dict[str, Any] = {"__slots__": (), "_interface": interface}
        for name, member in inspect.getmembers(interface, inspect.isfunction):
            if not name.startswith("_"):
                namespace[name] = _proxy_method(name, bool(getattr(member, _ONEWAY_ATTR, False)))
        if len(namespace) == 2:
            raise ConfigurationError(f"{interface!r} has no public methods to call remotely")
        cls = type(f"{interface.__name__}Proxy", (_Proxy,), namespace)
        _proxy_classes[interface] = cls
    return cls


def with_timeout(proxy: T, timeout: float) -> T:
    """A copy of ``proxy`` whose calls time out after ``timeout`` seconds."""
    if not isinstance(proxy, _Proxy):
        raise TypeError(f"{proxy!r} is not an RPC proxy")
    if not timeout > 0:
        raise ConfigurationError(f"timeout={timeout!r} is not allowed: seconds > 0")
    return type(proxy)(proxy._rpc, proxy._object_id, timeout)


# ---------------------------------------------------------------------------------------------- failures


def _type_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


_remote_builtin: dict[str, type[RemoteError]] = {}


def remote_error(type_name: str, message: str, remote_traceback: str) -> RemoteError:
    """The local face of a remote exception; a built-in type also becomes a base (``except ValueError``)."""
    cls = _remote_builtin.get(type_name)
    if cls is None:
        cls = RemoteError
        base = getattr(builtins, type_name, None) if "." not in type_name else None
        if (
            isinstance(base, type)
            and issubclass(base, Exception)
            # raised out of an awaited future these would end the caller's await as a return, not an error
            and not issubclass(base, (StopIteration, StopAsyncIteration))
        ):
            try:
                candidate = type(f"Remote{type_name}", (RemoteError, base), {"__module__": __name__})
                candidate(type_name, message, remote_traceback)
            except TypeError:  # a built-in whose constructor wants more than a message
                pass
            else:
                cls = candidate
        _remote_builtin[type_name] = cls
    return cls(type_name, message, remote_traceback)


def _failure_error(failure: RpcFailure, object_id: int, method: str) -> Exception:
    kind = failure.kind
    if kind == UNKNOWN_OBJECT:
        return UnknownObjectError(f"the peer exposes no object {object_id} (calling {method!r})")
    if kind == UNKNOWN_METHOD:
        return UnknownMethodError(f"object {object_id} on the peer has no remote method {method!r}")
    if kind == UNSERIALIZABLE:
        return SerializationError(f"the peer could not encode the answer of {method!r}: {failure.message}")
    if kind == UNDECODABLE:
        return SerializationError(f"the peer could not decode the call of {method!r}: {failure.message}")
    if kind == OVER_BUDGET:
        return BudgetExceededError(f"the peer refused the call of {method!r}: {failure.message}", "max_pending_calls")
    return remote_error(failure.type_name, failure.message, failure.traceback)


def _peek_internal(payload: memoryview) -> tuple[int, int] | None:
    """``(type id, call_id field)`` of a registered-class message, decoding nothing else; None if it is not one."""
    try:
        outer = msgpack.unpackb(payload, ext_hook=msgpack.ExtType, raw=False)
        if isinstance(outer, msgpack.ExtType) and outer.code == ATTRS_EXT:
            unpacker = msgpack.Unpacker(ext_hook=msgpack.ExtType, raw=False, strict_map_key=False)
            unpacker.feed(outer.data)
            type_id, fields = next(unpacker), next(unpacker)
            if type(type_id) is int and type(fields) is dict and type(fields.get("call_id")) is int:
                return type_id, fields["call_id"]
    except Exception:
        return None
    return None


# ---------------------------------------------------------------------------------------------- invocation


class _Resumed:
    """Continues a coroutine that has already run up to its first suspension, inside a task."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self.coro, self.first
        while True:
            try:
                value = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # CancelledError thrown into the task goes on to the method
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(value)
                except StopIteration as stop:
                    return stop.value


async def _resume(coro: Coroutine[Any, Any, Any], first: Any) -> Any:
    return await _Resumed(coro, first)


def _start(connection: RpcPeer, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any] | None) -> Any:
    """Run in the invocation's own context: call ``fn`` and step a coroutine to its first suspension.

    Returns ``(True, result)`` when done, ``(False, (coro, yielded))`` when suspended.
    """
    _current.set(connection)
    result = fn(*args, **kwargs) if kwargs else fn(*args)
    if type(result) is types.CoroutineType or inspect.isawaitable(result):
        coro = result if type(result) is types.CoroutineType else _awaited(result)
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return True, stop.value
        return False, (coro, yielded)
    return True, result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class ConnectionRpc(RpcRegistry):
    """One connection's remote objects (``connection.rpc.expose``) and calls (``connection.rpc.proxy``)."""

    def __init__(
        self,
        connection: RpcPeer,
        shared: RpcRegistry,
        *,
        config: Configuration,
        report: Callable[[BaseException], None],
    ) -> None:
        """``report`` takes errors for the connection's ``on_error``."""
        super().__init__()
        self.connection = connection
        self._report = report
        self._outbox = connection.outbox
        self._shared = shared
        self._default_timeout: float = config.rpc_timeout
        self._pool: CorrelationPool[tuple[asyncio.Future[Any], int, str]] = CorrelationPool(config.max_pending_calls)
        self._slot_waiters: list[asyncio.Future[None]] = []
        self._running: dict[int, asyncio.Task[Any]] = {}
        self._running_oneway = 0
        self._max_running: int = config.max_pending_calls
        # Deadlines of our calls, one FIFO per timeout value (so each is in deadline order); answered calls
        # are left in place and skipped, and a queue is compacted when it outgrows the calls in flight.
        self._deadlines: dict[float, collections.deque[tuple[float, int]]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._tracked = 0
        """Entries in all deadline queues together."""
        self._encode = config.serialization.encode
        self.calls_made = 0
        self.calls_served = 0
        self.calls_refused = 0
        """Calls of the peer's refused because ``max_pending_calls`` of its calls were running here already."""

    @property
    def pending(self) -> int:
        """Calls of ours awaiting answers."""
        return len(self._pool)

    @property
    def running(self) -> int:
        """Calls from the peer still running here (suspended in a task)."""
        return len(self._running)

    @property
    def late_answers(self) -> int:
        """Answers that came after their call had ended (timed out or cancelled): dropped."""
        return self._pool.stale

    def proxy(self, interface: Callable[..., T], object_id: int, *, timeout: float | None = None) -> T:
        """A stand-in for the peer's object ``object_id``: each method of ``interface`` returns an awaitable.

        ``interface`` is typed as a callable rather than ``type[T]`` so a ``Protocol`` (abstract) is accepted.
        """
        if not isinstance(interface, type):
            raise TypeError(f"interface must be a class (a Protocol), got {interface!r}")
        if timeout is not None and not timeout > 0:
            raise ConfigurationError(f"timeout={timeout!r} is not allowed: seconds > 0, or None for rpc_timeout")
        return _proxy_class(interface)(self, object_id, timeout)  # type: ignore[return-value]

    # ------------------------------------------------------------------ calling

    async def _call(
        self, object_id: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float | None
    ) -> Any:
        outbox = self._outbox
        outbox.ensure_open()
        if timeout is None:
            timeout = self._default_timeout
        loop = asyncio.get_running_loop()
        pool = self._pool
        window = timeout
        if pool.full:  # the wait for a slot counts against the call's timeout
            window = max(await self._wait_for_slot(loop, timeout) - loop.time(), 0.0)
        future: asyncio.Future[Any] = loop.create_future()
        call_id = pool.acquire((future, object_id, method))
        self._track_deadline(loop, window, call_id)
        try:
            await outbox.send_bytes(self._encode(RpcCall(call_id, object_id, method, list(args), kwargs or None)), None)
            self.calls_made += 1
            return await future
        except BaseException:
            if pool.discard(call_id) is not None:  # still ours: the peer should stop working on it
                self._cancel_remote(call_id)
                self._wake_slot_waiter()
            raise

    async def _send_oneway(self, object_id: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._outbox.ensure_open()
        await self._outbox.send_bytes(self._encode(RpcCall(0, object_id, method, list(args), kwargs or None)), None)
        self.calls_made += 1

    async def _wait_for_slot(self, loop: asyncio.AbstractEventLoop, timeout: float) -> float:
        """Wait until a call slot is free; returns the call's deadline."""
        deadline = loop.time() + timeout
        while self._pool.full:
            waiter: asyncio.Future[None] = loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise RpcTimeoutError(
                    f"no call slot freed within {timeout:g} s: {self._pool.capacity} calls already pending"
                ) from None
            except BaseException:
                if waiter.done() and not waiter.cancelled():  # granted a slot, then cancelled: pass it on
                    self._wake_slot_waiter()
                raise
            finally:
                if waiter in self._slot_waiters:
                    self._slot_waiters.remove(waiter)
            self._outbox.ensure_open()
        return deadline

    def _cancel_remote(self, call_id: int) -> None:
        """Tell the peer to stop a call, never ahead of the call itself (it may still wait in the send queue)."""
        outbox = self._outbox
        if outbox.backlogged:
            outbox.send_later(self._encode(RpcCancel(call_id)))
        else:
            outbox.send_control(RpcCancel(call_id), must_arrive=True)

    def _wake_slot_waiter(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    def _track_deadline(self, loop: asyncio.AbstractEventLoop, timeout: float, call_id: int) -> None:
        """One deque append per call instead of a timer each (a timer costs a heap push and a cancel)."""
        queue = self._deadlines.get(timeout)
        if queue is None:
            queue = self._deadlines[timeout] = collections.deque()
        deadline = loop.time() + timeout
        queue.append((deadline, call_id))
        self._tracked += 1
        if self._tracked > 2 * len(self._pool) + 1024:
            self._compact_deadlines()
        sweeper = self._sweeper
        if sweeper is None or deadline < sweeper.when():  # a shorter timeout than any so far
            if sweeper is not None:
                sweeper.cancel()
            self._sweeper = loop.call_at(deadline, self._sweep)

    def _compact_deadlines(self) -> None:
        """Drop the deadlines of answered calls from every queue (and the queues left empty)."""
        get = self._pool.get
        kept = {
            timeout: collections.deque(item for item in queue if get(item[1]) is not None)
            for timeout, queue in self._deadlines.items()
        }
        self._deadlines = {timeout: queue for timeout, queue in kept.items() if queue}
        self._tracked = sum(len(queue) for queue in self._deadlines.values())

    def _sweep(self) -> None:
        """Expire the calls whose deadline has passed; wake again at the next deadline still pending."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        get = self._pool.get
        following = float("inf")
        for timeout, queue in list(self._deadlines.items()):
            while queue:
                deadline, call_id = queue[0]
                if get(call_id) is None:
                    queue.popleft()
                    self._tracked -= 1
                elif deadline <= now:
                    queue.popleft()
                    self._tracked -= 1
                    self._expire(call_id, timeout)
                else:
                    following = min(following, deadline)
                    break
            if not queue:
                del self._deadlines[timeout]
        if following != float("inf"):
            self._sweeper = loop.call_at(following, self._sweep)

    def _expire(self, call_id: int, timeout: float) -> None:
        entry = self._pool.discard(call_id)
        if entry is None:
            return
        future, object_id, method = entry
        if not future.done():
            future.set_exception(
                RpcTimeoutError(f"{method!r} of object {object_id} got no answer within {timeout:g} s")
            )
        self._cancel_remote(call_id)
        self._wake_slot_waiter()

    def _answered(self, call_id: int) -> tuple[asyncio.Future[Any], int, str] | None:
        entry = self._pool.release(call_id)
        if entry is not None and self._slot_waiters:
            self._wake_slot_waiter()
        return entry

    # ------------------------------------------------------------------ answers (poller)

    def _on_reply(self, reply: RpcReply) -> None:
        entry = self._answered(reply.call_id)
        if entry is not None and not entry[0].done():
            entry[0].set_result(reply.value)

    def _on_failure(self, failure: RpcFailure) -> None:
        entry = self._answered(failure.call_id)
        if entry is not None and not entry[0].done():
            future, object_id, method = entry
            future.set_exception(_failure_error(failure, object_id, method))

    # ------------------------------------------------------------------ serving (poller)

    def on_undecodable(self, payload: memoryview, error: Exception) -> None:
        """A message that failed to decode may be a call or an answer: end it now rather than at its timeout.

        Only the outer layers are read (no registered classes needed): the type id and the call id.
        """
        peeked = _peek_internal(payload)
        if peeked is None:
            return
        type_id, call_id = peeked
        if type_id == _CALL_TYPE_ID and call_id:
            self._fail(call_id, UNDECODABLE, _type_name(type(error)), str(error)[:_TEXT_LIMIT], "")
        elif type_id == _REPLY_TYPE_ID:
            entry = self._answered(call_id)
            if entry is not None and not entry[0].done():
                future, object_id, method = entry
                future.set_exception(
                    SerializationError(f"the answer to {method!r} of object {object_id} does not decode: {error}")
                )

    def on_malformed_call(self, call_id: int, problem: str) -> None:
        """A call whose fields are malformed: fail it at once rather than leave the caller to its timeout."""
        self._fail(call_id, UNDECODABLE, "endpoint.errors.MalformedMessageError", problem[:_TEXT_LIMIT], "")

    def _on_call(self, call: RpcCall) -> None:
        call_id = call.call_id
        if len(self._running) + self._running_oneway >= self._max_running:
            self._refuse(call)
            return
        exposed = self._objects.get(call.object_id) or self._shared._objects.get(call.object_id)
        if exposed is None:
            self._fail(call_id, UNKNOWN_OBJECT, "", f"no object {call.object_id}", "")
            return
        if call.method not in exposed.methods:
            self._fail(call_id, UNKNOWN_METHOD, "", f"no remote method {call.method!r}", "")
            return
        self.calls_served += 1
        fn = getattr(exposed.target, call.method)
        context = contextvars.copy_context()
        try:
            done, value = context.run(_start, self.connection, fn, call.args, call.kwargs)
        except Exception as exc:
            self._raised(call_id, exc)
            return
        except BaseException as exc:  # CancelledError or worse from the method: report, never unwind the poller
            self._raised(call_id, exc)
            return
        if done:
            self._answer(call_id, value)
            return
        coro, yielded = value
        task = asyncio.get_running_loop().create_task(_resume(coro, yielded), context=context)
        if call_id:
            self._running[call_id] = task
        else:
            self._running_oneway += 1
        task.add_done_callback(functools.partial(self._finished, call_id))

    def _refuse(self, call: RpcCall) -> None:
        """One call too many of the peer's running here: refuse it (both sides hear of it); the others go on."""
        self.calls_refused += 1
        detail = f"{self._max_running} calls of this connection's are running (max_pending_calls)"
        self._report(
            BudgetExceededError(
                f"{self.connection!r}: refused a call of {call.method!r} on object {call.object_id}: {detail}",
                "max_pending_calls",
            )
        )
        if call.call_id:
            self._send(self._encode(RpcFailure(call.call_id, OVER_BUDGET, "", detail, "")))

    def _finished(self, call_id: int, task: asyncio.Task[Any]) -> None:
        if not call_id:
            self._running_oneway -= 1
        ours = self._running.pop(call_id, None) is not None
        if task.cancelled():
            if ours:  # cancelled by something of the method's own, not by the caller or a close: say so
                self._raised(call_id, asyncio.CancelledError(f"the invoked method was cancelled: {task!r}"))
            return
        exc = task.exception()
        if exc is not None:
            self._raised(call_id, exc)
        else:
            self._answer(call_id, task.result())

    def _on_cancel(self, cancel: RpcCancel) -> None:
        task = self._running.pop(cancel.call_id, None)
        if task is not None:
            task.cancel()

    def _answer(self, call_id: int, value: Any) -> None:
        if not call_id:
            return
        try:
            data = self._encode(RpcReply(call_id, value))
        except SerializationError as exc:
            self._fail(call_id, UNSERIALIZABLE, _type_name(type(value)), str(exc), "")
            return
        self._send(data)

    def _raised(self, call_id: int, exc: BaseException) -> None:
        if not call_id:
            self._report(exc)
            return
        text = "".join(traceback.format_exception(exc))
        self._fail(call_id, FAILED, _type_name(type(exc)), str(exc)[:_TEXT_LIMIT], text[-_TEXT_LIMIT:])

    def _fail(self, call_id: int, kind: int, type_name: str, message: str, trace: str) -> None:
        if not call_id:
            error = UnknownObjectError(message) if kind == UNKNOWN_OBJECT else UnknownMethodError(message)
            self._report(error)
            return
        self._send(self._encode(RpcFailure(call_id, kind, type_name, message, trace)))

    def _send(self, data: bytes) -> None:
        self._outbox.send_answer(data)

    # ------------------------------------------------------------------ closing

    def _close(self) -> None:
        """The connection closed: fail our pending calls and cancel the peer's running ones."""
        error = self._outbox.closed_error()
        for future, _, _ in self._pool.drain():
            if not future.done():
                future.set_exception(error)
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._slot_waiters.clear()
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        self._deadlines.clear()
        self._tracked = 0
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
