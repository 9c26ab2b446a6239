"""Which async library runs the caller: end points need asyncio's event loop.

Under anyio, end points work on its asyncio backend (anyio runs an asyncio loop). Under trio (directly or as
anyio's backend) there is no asyncio loop, and what an end point does (a poller task, futures, loop callbacks
from the driver's threads) has no trio equivalent here; constructing or starting one there raises
:class:`~endpoint.errors.UnsupportedEventLoopError` at once instead of failing later in asyncio's internals.
"""

from __future__ import annotations

import asyncio
import sys

from endpoint.errors import UnsupportedEventLoopError

__all__ = ["check_construction", "require_asyncio", "running_async_library"]


def running_async_library() -> str | None:
    """``"asyncio"``, the name another library gives itself (``"trio"``, ...), or None outside any.

    Other libraries are told apart by ``sniffio``, which trio (and anything anyio runs on) imports and keeps
    current; when no module imported it, no such library can be running.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return "asyncio"
    sniffio = sys.modules.get("sniffio")
    if sniffio is None:
        return None
    try:
        return str(sniffio.current_async_library())
    except sniffio.AsyncLibraryNotFoundError:
        return None


def _unsupported(library: str | None, what: str) -> UnsupportedEventLoopError:
    running = f"under {library}" if library is not None else "with no event loop running"
    return UnsupportedEventLoopError(
        f"{what} needs asyncio's event loop, but was called {running}: run it with asyncio.run(), endpoint.run(), "
        f"or anyio.run(..., backend='asyncio')",
        library,
    )


def check_construction(what: str) -> None:
    """Constructing is fine outside any loop (it starts nothing); inside another library's, it is refused."""
    library = running_async_library()
    if library is not None and library != "asyncio":
        raise _unsupported(library, what)


def require_asyncio(what: str) -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or UnsupportedEventLoopError naming what runs instead."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise _unsupported(running_async_library(), what) from None
