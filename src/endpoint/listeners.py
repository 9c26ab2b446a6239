"""Listeners of an end point, and running them without a task per message.

``on_message(Move)`` receives ``Move`` and its subclasses; a message goes to the
listeners of the most specific registered class in its MRO (``object`` is the
catch-all). Sync and async listeners mix freely: a connection calls sync listeners inline
from its poller and hands messages with async listeners to its own worker task,
in order (see :mod:`endpoint.connection.shell`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = [
    "ErrorListener",
    "ListenerManager",
    "add_global_error_listener",
    "call_listener",
    "is_async_callable",
    "remove_global_error_listener",
]

_log = logging.getLogger("endpoint")

C = TypeVar("C")
F = TypeVar("F", bound=Callable[..., Any])

ErrorListener = Callable[[Any, BaseException], Any]
"""``(connection_or_None, error)``; sync or async."""

_global_error_listeners: list[ErrorListener] = []


def add_global_error_listener(listener: F) -> F:
    """Tell ``listener`` about errors of every end point in this process (driver errors included)."""
    if listener not in _global_error_listeners:
        _global_error_listeners.append(listener)
    return listener


def remove_global_error_listener(listener: ErrorListener) -> bool:
    try:
        _global_error_listeners.remove(listener)
    except ValueError:
        return False
    return True


def call_listener(listener: Callable[..., Any], *args: Any) -> asyncio.Task[Any] | None:
    """Call a sync or async listener; an async one runs as a task (returned), a sync one at once."""
    result = listener(*args)
    if inspect.isawaitable(result):
        return asyncio.ensure_future(result)
    return None


class ListenerManager(Generic[C]):
    """Listeners of one end point; registration copies lists so dispatch never sees a half-made change."""

    def __init__(self, owner: str = "end point") -> None:
        self._owner = owner
        self.connect: tuple[Callable[[C], Any], ...] = ()
        self.disconnect: tuple[Callable[[C], Any], ...] = ()
        self.error: tuple[ErrorListener, ...] = ()
        self.stream: tuple[Callable[[C, Any], Any], ...] = ()
        self.reconnecting: tuple[Callable[[Any], Any], ...] = ()
        """A client's ``on_reconnecting`` listeners (told a :class:`~endpoint.reconnect.Reconnecting`)."""
        self.reconnected: tuple[Callable[[C], Any], ...] = ()
        """A client's ``on_reconnected`` listeners (told the new connection)."""
        self.session_expired: tuple[Callable[[Any], Any], ...] = ()
        """A server's ``on_session_expired`` listeners (told the :class:`~endpoint.Session` dropped)."""
        self._by_type: dict[type, tuple[Callable[[C, Any], Any], ...]] = {}
        self._resolved: dict[type, tuple[tuple[Callable[[C, Any], Any], ...], bool]] = {}

    # ------------------------------------------------------------------ registration

    def add_connect(self, listener: F) -> F:
        self.connect = (*self.connect, listener)
        return listener

    def add_disconnect(self, listener: F) -> F:
        self.disconnect = (*self.disconnect, listener)
        return listener

    def add_error(self, listener: F) -> F:
        self.error = (*self.error, listener)
        return listener

    def add_stream(self, listener: F) -> F:
        self.stream = (*self.stream, listener)
        return listener

    def add_reconnecting(self, listener: F) -> F:
        self.reconnecting = (*self.reconnecting, listener)
        return listener

    def add_reconnected(self, listener: F) -> F:
        self.reconnected = (*self.reconnected, listener)
        return listener

    def add_session_expired(self, listener: F) -> F:
        self.session_expired = (*self.session_expired, listener)
        return listener

    def add_message(self, message_type: type, listener: F) -> F:
        if not isinstance(message_type, type):
            raise TypeError(f"on_message needs a class, got {message_type!r}")
        self._by_type[message_type] = (*self._by_type.get(message_type, ()), listener)
        self._resolved = {}
        return listener

    def remove(self, listener: Callable[..., Any]) -> bool:
        """Remove ``listener`` wherever it is registered; True if it was."""
        found = False
        for name in ("connect", "disconnect", "error", "stream", "reconnecting", "reconnected", "session_expired"):
            current = getattr(self, name)
            if listener in current:
                setattr(self, name, tuple(x for x in current if x != listener))
                found = True
        for message_type, listeners in list(self._by_type.items()):
            if listener in listeners:
                kept = tuple(x for x in listeners if x != listener)
                if kept:
                    self._by_type[message_type] = kept
                else:
                    del self._by_type[message_type]
                found = True
        if found:
            self._resolved = {}
        return found

    def clear(self) -> None:
        self.connect = self.disconnect = self.error = self.stream = ()
        self.reconnecting = self.reconnected = self.session_expired = ()
        self._by_type.clear()
        self._resolved = {}

    # ------------------------------------------------------------------ dispatch

    def message_listeners(self, message_type: type) -> tuple[tuple[Callable[[C, Any], Any], ...], bool]:
        """Listeners of the most specific registered class in ``message_type``'s MRO, and whether any is async."""
        try:
            return self._resolved[message_type]
        except KeyError:
            pass
        found: tuple[Callable[[C, Any], Any], ...] = ()
        for cls in message_type.__mro__:
            listeners = self._by_type.get(cls)
            if listeners:
                found = listeners
                break
        resolved = self._resolved[message_type] = (found, any(is_async_callable(fn) for fn in found))
        return resolved

    def notify_error(self, connection: C | None, error: BaseException) -> None:
        """Tell local listeners, then global ones; an error inside a listener is logged, never raised."""
        listeners = (*self.error, *_global_error_listeners)
        if not listeners:
            _log.error(
                "%s error%s: %s",
                self._owner,
                f" on {connection!r}" if connection is not None else "",
                error,
                exc_info=error,
            )
            return
        for listener in listeners:
            try:
                task = call_listener(listener, connection, error)
            except Exception as exc:  # an error listener must not take the end point down
                _log.exception("on_error listener %r failed: %s", listener, exc)
                continue
            if task is not None:
                task.add_done_callback(_log_listener_failure)

    def has_error_listeners(self) -> bool:
        """Whether an error would reach a listener (local or global) rather than only the log."""
        return bool(self.error or _global_error_listeners)


def _log_listener_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("on_error listener failed: %s", task.exception(), exc_info=task.exception())


def is_async_callable(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
