"""``run(main)``: run an end point program until it ends or is told to stop, and stop it gracefully.

Theory of operation: a supervisor (systemd, Kubernetes, a shell's Ctrl-C) stops a
process with SIGTERM or SIGINT. Python's default for SIGTERM is to die on the
spot: no disconnect reaches the clients (they wait out their peer timeout) and
the driver directory stays behind in shared memory. :func:`run` runs ``main()``
on a fresh event loop, as :func:`asyncio.run` does, with loop signal handlers
that cancel main's task instead. The cancellation unwinds main: its ``async
with server`` / ``async with client`` blocks exit, which tells every peer with
the normal disconnect message and closes the driver, removing its directory.

A second signal, or a shutdown that outlasts ``shutdown_timeout``, cancels main
again (a stuck close gives up its wait). The process's exit status comes back:
main's own int (None is 0), 0 after a stop by signal, 1 when main raised.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import traceback
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

__all__ = ["run"]

_log = logging.getLogger("endpoint")

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run(
    main: Callable[[], Coroutine[Any, Any, int | None]] | Coroutine[Any, Any, int | None],
    *,
    signals: Iterable[signal.Signals] = DEFAULT_SIGNALS,
    shutdown_timeout: float = 10.0,
    debug: bool | None = None,
) -> int:
    """Run ``main()`` (or the coroutine ``main``) until it returns, raises, or one of ``signals`` arrives;
    return the exit status.

    Example::

        async def main() -> None:
            async with Server(config) as server:
                await server.serve_forever()

        sys.exit(endpoint.run(main))

    A signal cancels main's task, so its ``async with`` exits close the end points gracefully (peers told,
    driver directory removed); the status is then 0. If that takes longer than ``shutdown_timeout`` seconds,
    or a second signal arrives, main is cancelled once more. An exception out of main is logged and gives 1.
    """
    if shutdown_timeout <= 0:
        raise ValueError(f"shutdown_timeout={shutdown_timeout!r} must be > 0")
    wanted = tuple(signals)
    return asyncio.run(_supervise(main, wanted, shutdown_timeout), debug=debug)


async def _supervise(
    main: Callable[[], Coroutine[Any, Any, int | None]] | Coroutine[Any, Any, int | None],
    signals: tuple[signal.Signals, ...],
    shutdown_timeout: float,
) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main if asyncio.iscoroutine(main) else main())
    received: list[int] = []
    overdue: list[asyncio.TimerHandle] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        if task.done():
            return
        if len(received) == 1:
            _log.info("%s: stopping gracefully", signal.Signals(signum).name)
            overdue.append(loop.call_later(shutdown_timeout, _hurry, task, shutdown_timeout))
        else:
            _log.warning("%s again: cutting the graceful stop short", signal.Signals(signum).name)
        task.cancel()

    installed: list[signal.Signals] = []
    for signum in signals:
        try:
            loop.add_signal_handler(signum, on_signal, int(signum))
        except (RuntimeError, ValueError) as exc:  # not the main thread, or a loop without signal support
            _log.debug("cannot handle %s on this loop: %s", signum.name, exc)
            continue
        installed.append(signum)
    try:
        try:
            result = await task
        except asyncio.CancelledError:
            if received and task.cancelled():
                return 0  # stopped by a signal, as asked
            raise  # cancelled from outside (the loop is shutting down): not ours to swallow
        return 0 if result is None else int(result)
    except Exception:
        if _has_handler(_log):
            _log.exception("main raised")
        else:  # nothing configured logging (the library's loggers only carry a NullHandler): do not hide it
            traceback.print_exc(file=sys.stderr)
        return 1
    finally:
        for handle in overdue:
            handle.cancel()
        for signum in installed:
            loop.remove_signal_handler(signum)


def _has_handler(logger: logging.Logger) -> bool:
    """Whether a record of ``logger``'s would reach a handler other than a NullHandler."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) for h in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


def _hurry(task: asyncio.Task[Any], shutdown_timeout: float) -> None:
    if not task.done():
        _log.warning("graceful stop still running after %.1f s: cancelling it", shutdown_timeout)
        task.cancel()
