"""Chat rooms: one server, any number of clients in any number of rooms; what one says, the others in its room see.

::

    python examples/chat.py server --port 24012
    python examples/chat.py client --name alice --port 24012          # interactive: type lines, Ctrl-D leaves
    python examples/chat.py client --name bob --port 24012 --say "hi" --say "bye" --duration 2
    python examples/chat.py client --name carol --room games --port 24012   # another room: hears nothing of lobby's

The protocol (classes in ``examples/messages.py``):

- a client sends ``Join(name, room)`` as soon as it is connected (from its
  ``on_connect`` listener); the server puts the connection in the room's group
  (``server.group(room)``), answers ``Welcome(name, users)``, with the name made
  unique and the users of that room, and tells the room ``Announce("* alice joined")``;
- ``Say(text)`` from a client is relayed as ``Said(name, text)`` to its room:
  ``await room.send(...)`` encodes it once for every member and waits out each
  one's back pressure (the speaker skips its own line);
- when a client goes (gracefully or not) it leaves its room's group by itself,
  and the server's ``on_disconnect`` tells the room ``Announce("* alice left")``.

A client with ``--say`` and/or ``--duration`` runs without stdin: it sends the
``--say`` lines, keeps printing what arrives until ``--duration`` seconds (1 by
default) have passed, and leaves. Without either it is interactive: each line typed is said,
``/quit`` or end of input leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence

from messages import Announce, Join, Said, Say, Welcome, make_serialization

import endpoint
from endpoint import (
    Client,
    ClientConfiguration,
    ClientRejectedError,
    ClientTimeoutError,
    Connection,
    ConnectionClosedError,
    EndpointError,
    Server,
    ServerConfiguration,
    ServerError,
)

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A chat room over end points.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--host", default="127.0.0.1", help="server address (default: %(default)s)")
    common.add_argument("--port", type=int, default=24012, help="server port (default: %(default)s)")
    common.add_argument("--aeron-dir", default=None, help="driver directory; the same for server and client gives IPC")
    roles = p.add_subparsers(dest="role", required=True)
    roles.add_parser("server", parents=[common], help="run the chat room")
    client = roles.add_parser("client", parents=[common], help="join the chat room")
    client.add_argument("--name", required=True, help="what the others see you as")
    client.add_argument("--room", default="lobby", help="the room to join (default: %(default)s)")
    client.add_argument("--say", action="append", default=[], help="a line to say (repeat for several); no stdin")
    client.add_argument("--duration", type=float, default=None, help="stay this many seconds, then leave; no stdin")
    client.add_argument("--udp", action="store_true", help="use UDP even when IPC would be possible")
    client.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to get into the room")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- server


async def run_server(args: argparse.Namespace) -> int:
    server = Server(
        ServerConfiguration(
            port=args.port, listen_address=args.host, aeron_dir=args.aeron_dir, serialization=make_serialization()
        )
    )
    names: dict[int, str] = {}  # connection id -> name, for connections that have joined
    rooms: dict[int, str] = {}  # connection id -> the room it joined

    def unique(name: str) -> str:
        taken = set(names.values())
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}{n}"
        return candidate

    @server.on_connect
    def connected(conn: Connection) -> None:
        print(f"chat server: connection {conn.id} from {conn.remote_address}, waiting for Join", flush=True)

    @server.on_message(Join)
    async def join(conn: Connection, message: Join) -> None:
        if conn.id in names:
            return  # joined already
        name = names[conn.id] = unique(message.name.strip() or "anonymous")
        room_name = rooms[conn.id] = message.room.strip()[:32] or "lobby"
        # A group per room: its members are connections, which leave it by themselves when they close.
        room = server.group(room_name)
        room.add(conn)
        await conn.send(Welcome(name, sorted(names[c.id] for c in room)))
        # broadcast() hands the message to every member without waiting (a slow client is skipped, not
        # waited for), encoded once for all of them: fine for notices. It returns how many took it.
        room.broadcast(Announce(f"* {name} joined"))
        print(f"chat server: {name} joined ({len(room)} here) in {room_name}", flush=True)

    @server.on_message(Say)
    async def say(conn: Connection, message: Say) -> None:
        name = names.get(conn.id)
        if name is None:
            return  # Say before Join: ignore
        print(f"chat server: [{name}] {message.text}", flush=True)
        room = server.group(rooms[conn.id])
        # Encoded once, sent to every member of the room side by side, waiting out each one's back pressure; a
        # member closing meanwhile or stalling past send_timeout is skipped (and counted), not a failure.
        refused = room.refused
        await room.send(Said(name, message.text))
        if room.refused > refused:
            print(f"chat server: {room.refused - refused} in {room.name} did not get [{name}]'s line", flush=True)

    @server.on_disconnect
    def disconnected(conn: Connection) -> None:
        name = names.pop(conn.id, None)
        room_name = rooms.pop(conn.id, None)
        if name is None or room_name is None:
            return
        how = "" if conn.closed_by_peer else f" ({conn.close_reason})"
        room = server.group(room_name)  # the connection has left it already
        room.broadcast(Announce(f"* {name} left{how}"))
        print(f"chat server: {name} left{how} ({len(room)} here) in {room_name}", flush=True)
        if not room:
            room.close()  # an empty room is forgotten (server.group() makes it anew)

    @server.on_error
    def error(conn: Connection | None, exc: BaseException) -> None:
        print(f"chat server: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    try:
        await server.bind()
    except ServerError as exc:
        print(f"chat server: {exc}", flush=True)
        return 1
    print(f"chat server: room open on {args.host}:{args.port}; Ctrl-C stops", flush=True)
    try:
        await server.serve_forever()  # until Ctrl-C or SIGTERM: endpoint.run cancels us then
    finally:
        await server.close()  # every client is told the room closed
        print("chat server: closed", flush=True)
    return 0


# --------------------------------------------------------------------------- client


async def stdin_lines() -> AsyncIterator[str]:
    """Lines typed on stdin, read without blocking the event loop (the connection keeps being served meanwhile).

    A blocking ``input()`` would freeze the loop, and with it every listener and the keepalive pings;
    ``connect_read_pipe`` lets the loop wake us when a line is there instead.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    fd = sys.stdin.fileno()
    was_blocking = os.get_blocking(fd)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:
        # stdin is a regular file (``< file``): reading it never blocks for long, so a thread is fine.
        while line := await asyncio.to_thread(sys.stdin.readline):
            yield line.rstrip("\n")
        return
    try:
        while line_bytes := await reader.readline():
            yield line_bytes.decode(errors="replace").rstrip("\n")
    finally:
        os.set_blocking(fd, was_blocking)  # the pipe transport made it non-blocking; the shell shares it
        transport.close()


async def run_client(args: argparse.Namespace) -> int:
    client = Client(
        ClientConfiguration(
            aeron_dir=args.aeron_dir,
            serialization=make_serialization(),
            prefer_ipc=not args.udp,
            connect_timeout=args.connect_timeout,
        )
    )
    me = args.name
    welcomed = asyncio.Event()

    @client.on_connect
    async def connected(conn: Connection) -> None:
        # The first thing a chat client does: say who it is. (on_connect runs before any message is dispatched.)
        await conn.send(Join(args.name, args.room))

    @client.on_message(Welcome)
    def welcome(conn: Connection, message: Welcome) -> None:
        nonlocal me
        me = message.name
        print(f"* you are {message.name}; here: {', '.join(message.users)}", flush=True)
        welcomed.set()

    @client.on_message(Said)
    def said(conn: Connection, message: Said) -> None:
        if message.name != me:  # the room's relay reaches the speaker too: its own lines are printed as said
            print(f"[{message.name}] {message.text}", flush=True)

    @client.on_message(Announce)
    def announce(conn: Connection, message: Announce) -> None:
        print(message.text, flush=True)

    # Lines to say, from stdin or nowhere; None means "leave now" (end of input, Ctrl-C, the room closed).
    to_say: asyncio.Queue[str | None] = asyncio.Queue()
    leave = asyncio.Event()

    def leave_now() -> None:
        leave.set()
        to_say.put_nowait(None)

    @client.on_disconnect
    def disconnected(conn: Connection) -> None:
        if conn.closed_by_peer or conn.lost:
            print(f"* the room closed: {conn.close_reason}", flush=True)
            leave_now()

    async with client:
        try:
            conn = await client.connect(args.host, args.port)
            await asyncio.wait_for(welcomed.wait(), args.connect_timeout)
        except ClientRejectedError as exc:
            print(f"chat client: rejected: {exc.reason.name}: {exc.detail}", flush=True)
            return 1
        except (ClientTimeoutError, TimeoutError):
            print(f"chat client: no chat server at {args.host}:{args.port}", flush=True)
            return 1
        except EndpointError as exc:  # anything else that kept us out, in one line rather than a traceback
            print(f"chat client: cannot connect: {type(exc).__name__}: {exc}", flush=True)
            return 1
        try:
            if args.say or args.duration is not None:
                for text in args.say:
                    await conn.send(Say(text))
                    print(f"[{me}] {text}", flush=True)
                # Stay (printing what others say) until the time is up, Ctrl-C, or the room closes.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(leave.wait(), args.duration if args.duration is not None else 1.0)
            else:
                print("* type to chat; /quit or Ctrl-D leaves", flush=True)
                reader = asyncio.create_task(read_stdin(to_say))
                try:
                    while (text := await to_say.get()) is not None and text.strip() != "/quit":
                        if text.strip():
                            await conn.send(Say(text))
                finally:
                    reader.cancel()
        except ConnectionClosedError as exc:
            print(f"* connection closed: {exc.reason or exc}", flush=True)
        finally:
            # Also after Ctrl-C or SIGTERM (endpoint.run cancels us): leave the room with a goodbye.
            if not conn.is_closed:
                await conn.close("bye")
            print(f"chat client: {me} left", flush=True)
    return 0


async def read_stdin(lines: asyncio.Queue[str | None]) -> None:
    """Queue each line typed, then None at the end of input."""
    try:
        async for line in stdin_lines():
            lines.put_nowait(line)
    finally:
        lines.put_nowait(None)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # endpoint.run: asyncio.run plus Ctrl-C/SIGTERM handling that cancels the coroutine, so its clean-up runs.
    return endpoint.run(lambda: run_server(args) if args.role == "server" else run_client(args))


if __name__ == "__main__":
    sys.exit(main())
