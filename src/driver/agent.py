"""Agents and the runners that drive them.

An agent owns its state and does bounded work in ``do_work()`` (returning how
much it did, 0 when idle). Runners only decide which thread calls it: an
``AgentRunner`` gives it a thread, an ``AgentInvoker`` lets the caller drive it,
and a ``CompositeAgent`` puts several agents on one duty cycle. An exception in
a duty cycle goes to the error handler and the loop carries on;
``AgentTerminationError`` stops it.
"""

from __future__ import annotations

import ctypes
import select
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Protocol

from driver.errors import AgentTerminationError
from driver.idle import IdleStrategy

__all__ = ["Agent", "AgentInvoker", "AgentRunner", "CompositeAgent", "ErrorHandler"]

ErrorHandler = Callable[[BaseException], None]


_PR_SET_TIMERSLACK = 29
_TIMER_SLACK_NS = 1_000


def tighten_timer_slack() -> None:
    """Let this thread's short parks end on time (Linux): the default 50 µs slack stretches a 1 µs park to ~60 µs.

    Only the calling thread changes; elsewhere, or if the call fails, nothing happens.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        # prctl is variadic: every argument must be passed at its full width (unsigned long), or the upper
        # half of a register is whatever was there, and the slack may become seconds.
        ulong = ctypes.c_ulong
        ctypes.CDLL(None, use_errno=True).prctl(
            ctypes.c_int(_PR_SET_TIMERSLACK), ulong(_TIMER_SLACK_NS), ulong(0), ulong(0), ulong(0)
        )
    except (OSError, AttributeError):
        pass


class Agent(Protocol):
    role_name: str

    def on_start(self) -> None: ...

    def do_work(self) -> int: ...

    def on_close(self) -> None: ...


class SocketParker:
    """A park that also ends as soon as one of the agent's sockets is readable.

    An idle receiver (or a sender waiting for status messages) then answers a datagram at once instead of
    after the rest of a millisecond park, while still costing nothing when nothing arrives. Parks shorter
    than a millisecond stay plain sleeps: ``epoll`` counts whole milliseconds.
    """

    def __init__(self, sockets_of: Callable[[], Sequence[socket.socket]]) -> None:
        self._sockets_of = sockets_of
        self._epoll: select.epoll | None = None
        self._watched: tuple[socket.socket, ...] = ()

    def __call__(self, seconds: float) -> None:
        if seconds < 0.001 or not hasattr(select, "epoll"):
            time.sleep(seconds)
            return
        sockets = tuple(self._sockets_of())
        if not sockets:
            time.sleep(seconds)
            return
        try:
            if self._epoll is None:
                self._epoll = select.epoll()
            if sockets != self._watched:
                self._watch(self._epoll, sockets)
            self._epoll.poll(seconds)
        except (OSError, ValueError):  # a socket closed under us: this once, just sleep
            self._watched = ()
            time.sleep(seconds)

    def _watch(self, epoll: select.epoll, sockets: tuple[socket.socket, ...]) -> None:
        for old in self._watched:
            try:
                epoll.unregister(old)
            except (OSError, ValueError, KeyError):
                pass
        self._watched = ()
        for sock in sockets:
            epoll.register(sock, select.EPOLLIN)
        self._watched = sockets

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self._watched = ()


def _readable_sockets_of(agent: object) -> Callable[[], Sequence[socket.socket]] | None:
    return getattr(agent, "readable_sockets", None)


class CompositeAgent:
    """Several agents run one after the other in a single duty cycle."""

    def __init__(self, agents: Sequence[Agent]) -> None:
        if not agents:
            raise ValueError("CompositeAgent needs at least one agent")
        self._agents = tuple(agents)
        self.role_name = "[" + ",".join(a.role_name for a in agents) + "]"

    def on_start(self) -> None:
        for agent in self._agents:
            agent.on_start()

    def do_work(self) -> int:
        work = 0
        for agent in self._agents:
            work += agent.do_work()
        return work

    @property
    def sockets_version(self) -> int:
        """Changes whenever ``readable_sockets`` would answer differently (agents without one count 0)."""
        return sum(getattr(agent, "sockets_version", 0) for agent in self._agents)

    def readable_sockets(self) -> list[socket.socket]:
        found: list[socket.socket] = []
        for agent in self._agents:
            sockets_of = _readable_sockets_of(agent)
            if sockets_of is not None:
                found.extend(sockets_of())
        return found

    def feedback_sockets(self) -> list[socket.socket]:
        """The agents' sockets that carry only feedback (see ``Sender.feedback_sockets``)."""
        found: list[socket.socket] = []
        for agent in self._agents:
            sockets_of = getattr(agent, "feedback_sockets", None)
            if sockets_of is not None:
                found.extend(sockets_of())
        return found

    def on_close(self) -> None:
        """Last started, first closed: later agents use what earlier ones own (the driver's sender and receiver
        use the conductor's sockets), as separate runners are closed in reverse too."""
        errors: list[BaseException] = []
        for agent in reversed(self._agents):
            try:
                agent.on_close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


class AgentInvoker:
    """Drives an agent from the caller's thread (INVOKER threading mode).

    Any thread may invoke; one duty cycle runs at a time, and an invoke that finds another thread in one
    returns 0 at once instead of waiting (that thread is doing the work).
    """

    def __init__(self, agent: Agent, error_handler: ErrorHandler) -> None:
        self.agent = agent
        self._error_handler = error_handler
        self._started = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def is_running(self) -> bool:
        return self._started and not self._closed

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.agent.on_start()

    def invoke(self) -> int:
        if not self._started or self._closed or not self._lock.acquire(blocking=False):
            return 0
        try:
            if self._closed:
                return 0
            return self.agent.do_work()
        except AgentTerminationError:
            self._close_locked()
        except Exception as exc:
            self._error_handler(exc)
        finally:
            self._lock.release()
        return 0

    def close(self) -> None:
        """Stop invoking (waiting for a duty cycle running on another thread) and close the agent once."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if not self._closed:
            self._closed = True
            if self._started:
                self.agent.on_close()


class AgentRunner:
    """Runs an agent's duty cycle on a dedicated daemon thread."""

    def __init__(
        self,
        agent: Agent,
        idle_strategy: IdleStrategy,
        error_handler: ErrorHandler,
        error_counter: Callable[[], object] | None = None,
    ) -> None:
        self.agent = agent
        self._idle = idle_strategy
        self._error_handler = error_handler
        self._error_counter = error_counter
        self._running = False
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.park_on_sockets = False
        """Opt-in: park on the agent's sockets (off by default: a lossy multicast test stalls with it, not yet
        understood)."""

    @property
    def is_running(self) -> bool:
        return self._running

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.agent.role_name} already started")
        self._running = True
        self._thread = threading.Thread(target=self._run, name=self.agent.role_name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        agent = self.agent
        idle = self._idle.idle
        tighten_timer_slack()
        sockets_of = _readable_sockets_of(agent)
        wanted = self.park_on_sockets and sockets_of is not None and hasattr(self._idle, "park")
        parker = SocketParker(sockets_of) if wanted and sockets_of is not None else None
        if parker is not None:
            self._idle.park = parker  # type: ignore[attr-defined]
        try:
            agent.on_start()
            do_work = agent.do_work
            while self._running:
                try:
                    idle(do_work())
                except AgentTerminationError:
                    break
                except Exception as exc:
                    if self._error_counter is not None:
                        self._error_counter()
                    self._error_handler(exc)
                    idle(0)
        except Exception as exc:
            self._error_handler(exc)
        finally:
            self._running = False
            if parker is not None:
                parker.close()
            try:
                agent.on_close()
            except Exception as exc:
                self._error_handler(exc)
            self._stopped.set()

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop the loop and wait for the thread; False (and a warning) if it did not stop in time."""
        self._running = False
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout_s)
        if thread.is_alive():
            warnings.warn(f"agent {self.agent.role_name} did not stop within {timeout_s}s", stacklevel=2)
            return False
        return True
