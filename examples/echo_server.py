"""Echo server: sends every Line it receives straight back to whoever sent it.

Run it, then one or more ``examples/echo_client.py``::

    python examples/echo_server.py --port 24011
    python examples/echo_client.py --port 24011 --count 5

The server listens on UDP ``--host:--port`` and, on the same port number, over
IPC for clients on this machine that share its driver directory
(``--aeron-dir``); a client picks IPC by itself when it can. Ctrl-C (or SIGTERM)
closes every connection gracefully and stops.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from messages import Line, make_serialization

import endpoint
from endpoint import Connection, Server, ServerConfiguration, ServerError

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Echo every Line back to its sender.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 for all (default: %(default)s)")
    p.add_argument("--port", type=int, default=24011, help="UDP port, also names the IPC stream (default: %(default)s)")
    p.add_argument(
        "--aeron-dir",
        default=None,
        help="driver directory; clients using the same one connect over IPC (default: the end point default)",
    )
    p.add_argument("--max-clients", type=int, default=0, help="refuse clients beyond this many; 0 = no limit")
    p.add_argument("--no-ipc", action="store_true", help="accept UDP clients only")
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    config = ServerConfiguration(
        port=args.port,
        listen_address=args.host,
        aeron_dir=args.aeron_dir,
        serialization=make_serialization(),  # the same registrations as the client's
        max_clients=args.max_clients,
        enable_ipc=not args.no_ipc,
    )
    server = Server(config)
    echoed = 0

    # Listeners may be plain functions or coroutines. Sync ones run inline in the
    # poller (cheapest); async ones run in order on the connection's own task, so
    # awaiting inside one never reorders that connection's messages.
    @server.on_connect
    def connected(conn: Connection) -> None:
        transport = "ipc" if conn.is_ipc else "udp"
        print(f"echo server: client {conn.id} connected over {transport} from {conn.remote_address}", flush=True)

    @server.on_disconnect
    def disconnected(conn: Connection) -> None:
        how = "left" if conn.closed_by_peer else "was lost" if conn.lost else "was closed"
        print(f"echo server: client {conn.id} {how}: {conn.close_reason or 'no reason given'}", flush=True)

    @server.on_message(Line)
    async def echo(conn: Connection, line: Line) -> None:
        nonlocal echoed
        # send() waits out back pressure (up to send_timeout) instead of dropping the message.
        await conn.send(line)
        echoed += 1

    @server.on_error
    def error(conn: Connection | None, exc: BaseException) -> None:
        print(f"echo server: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    try:
        await server.bind()
    except ServerError as exc:
        print(f"echo server: {exc}", flush=True)
        return 1
    transports = "udp" if args.no_ipc else "ipc+udp"
    print(f"echo server: listening on {args.host}:{args.port} ({transports}); Ctrl-C stops", flush=True)
    try:
        await server.serve_forever()  # until Ctrl-C or SIGTERM: endpoint.run cancels us then
    finally:
        # close() says goodbye to every client (their on_disconnect sees the reason) and stops the driver,
        # removing its directory.
        await server.close()
        print(f"echo server: stopped, {echoed} lines echoed", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    # endpoint.run is asyncio.run plus SIGINT/SIGTERM handling: a signal cancels serve(), whose finally
    # closes the server gracefully, and the exit status is 0.
    args = parse_args(argv)
    return endpoint.run(lambda: serve(args))


if __name__ == "__main__":
    sys.exit(main())
