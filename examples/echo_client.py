"""Echo client: sends lines to ``examples/echo_server.py``, prints each echo and the round-trip time.

::

    python examples/echo_server.py --port 24011
    python examples/echo_client.py --port 24011 --count 5
    python examples/echo_client.py --port 24011 --text "hello" --text "world"

With the server's ``--aeron-dir`` (the default for both) the client attaches to
the server's driver and connects over IPC; ``--udp`` (or a different
``--aeron-dir``) makes it go over UDP. After each echo it measures the
round-trip time with ``await conn.ping()``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence

from messages import Line, make_serialization

import endpoint
from endpoint import (
    Client,
    ClientConfiguration,
    ClientRejectedError,
    ClientTimeoutError,
    Connection,
    ConnectionClosedError,
    EndpointError,
)

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Send lines to the echo server and time the round trips.")
    p.add_argument("--host", default="127.0.0.1", help="the server's address (default: %(default)s)")
    p.add_argument("--port", type=int, default=24011, help="the server's port (default: %(default)s)")
    p.add_argument("--aeron-dir", default=None, help="driver directory; the server's one gives IPC (default: shared)")
    p.add_argument("--udp", action="store_true", help="use UDP even when IPC would be possible")
    p.add_argument("--count", type=int, default=5, help="lines to send when no --text is given (default: %(default)s)")
    p.add_argument("--text", action="append", default=[], help="a line to send (repeat for several)")
    p.add_argument("--interval", type=float, default=0.0, help="seconds between lines (default: %(default)s)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to find the server")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each echo (default: %(default)s)")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    lines = args.text or [f"hello #{i}" for i in range(1, args.count + 1)]
    config = ClientConfiguration(
        aeron_dir=args.aeron_dir,
        serialization=make_serialization(),
        prefer_ipc=not args.udp,
        connect_timeout=args.connect_timeout,
    )
    client = Client(config)

    # Echoes arrive on the client's poller; a queue hands them to the code below, which waits for each in turn.
    echoes: asyncio.Queue[Line] = asyncio.Queue()
    client.on_message(Line, lambda conn, line: echoes.put_nowait(line))

    @client.on_disconnect
    def disconnected(conn: Connection) -> None:
        if conn.closed_by_peer or conn.lost:
            print(f"echo client: server went away: {conn.close_reason}", flush=True)

    async with client:  # leaving the block closes the connection gracefully and releases the driver
        try:
            conn = await client.connect(args.host, args.port)
        except ClientRejectedError as exc:  # the server said no (full, filtered, different messages...)
            print(f"echo client: rejected: {exc.reason.name}: {exc.detail}", flush=True)
            return 1
        except ClientTimeoutError:
            print(f"echo client: no server at {args.host}:{args.port} (within {args.connect_timeout:g} s)", flush=True)
            return 1
        except EndpointError as exc:  # anything else that kept us out, in one line rather than a traceback
            print(f"echo client: cannot connect: {type(exc).__name__}: {exc}", flush=True)
            return 1
        transport = "ipc" if conn.is_ipc else "udp"
        print(f"echo client: connected over {transport} as {conn.id} to {conn.remote_address}", flush=True)

        echoed = 0
        rtts: list[float] = []
        try:
            for seq, text in enumerate(lines, 1):
                await conn.send(Line(seq, text))
                try:
                    echo = await asyncio.wait_for(echoes.get(), args.timeout)
                except TimeoutError:
                    print(f"echo client: no echo of line {seq} within {args.timeout:g} s", flush=True)
                    break
                echoed += 1
                try:
                    rtt = await conn.ping(timeout=args.timeout)  # an end point Ping/Pong, answered by the server
                except TimeoutError:
                    print(f"echo {echo.seq}: {echo.text!r}  rtt=? (no pong within {args.timeout:g} s)", flush=True)
                else:
                    rtts.append(rtt)
                    print(f"echo {echo.seq}: {echo.text!r}  rtt={rtt * 1e3:.3f} ms", flush=True)
                if args.interval:
                    await asyncio.sleep(args.interval)
        except ConnectionClosedError as exc:
            print(f"echo client: connection closed: {exc.reason or exc}", flush=True)
        await conn.close("done")  # the server's on_disconnect sees close_reason == "done"

    summary = f"echo client: {echoed} of {len(lines)} lines echoed"
    if rtts:
        summary += f"; rtt ms mean={statistics.fmean(rtts) * 1e3:.3f} max={max(rtts) * 1e3:.3f}"
    print(summary, flush=True)
    return 0 if echoed == len(lines) else 1


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C or SIGTERM cancels run(): leaving ``async with client`` then closes the connection gracefully.
    args = parse_args(argv)
    return endpoint.run(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
