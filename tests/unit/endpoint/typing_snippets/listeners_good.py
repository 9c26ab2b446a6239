"""Listeners a type checker must accept (see test_public_api.py)."""

from __future__ import annotations

import attrs

from endpoint import Connection, Server, ServerConfiguration


@attrs.define
class Chat:
    text: str


@attrs.define
class Move:
    x: int


@attrs.define
class FastMove(Move):
    speed: int = 0


server = Server(ServerConfiguration())


@server.on_message(Chat)
def on_chat(connection: Connection, message: Chat) -> None:
    print(message.text)


@server.on_message(FastMove)
async def on_fast(connection: Connection, message: Move) -> None:  # a base class accepts it too
    print(message.x)


@server.on_message()
def on_any(connection: Connection, message: object) -> None:
    print(message)


def on_move(connection: Connection, message: Move) -> None:
    print(message.x)


server.on_message(Move, on_move)
server.on_message(Move, lambda connection, message: print(message.x))


@server.on_connect
def hello(connection: Connection) -> None:
    print(connection.id)


@server.on_error
def oops(connection: Connection | None, error: BaseException) -> None:
    print(error)


assert server.remove_listener(on_chat)
