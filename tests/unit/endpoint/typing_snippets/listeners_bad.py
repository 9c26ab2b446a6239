"""Listeners a type checker must reject (see test_public_api.py).

Each line with the rejection marker is one error; for a decorator mypy reports it on the decorator's line.
"""

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


@server.on_message(Chat)  # rejected: registered for Chat, annotated for Move
def on_chat(connection: Connection, message: Move) -> None:
    print(message.x)


@server.on_message(Move)  # rejected: a plain Move arrives too
def on_only_fast(connection: Connection, message: FastMove) -> None:
    print(message.speed)


def on_move(connection: Connection, message: Move) -> None:
    print(message.x)


server.on_message(Chat, on_move)  # rejected: the direct form checks the same


@server.on_message()  # rejected: a catch-all gets any object
def on_any(connection: Connection, message: Chat) -> None:
    print(message.text)


@server.on_connect  # rejected: on_connect passes the connection alone
def hello(connection: Connection, extra: int) -> None:
    print(connection.id)


@server.on_error  # rejected: on_error passes (connection or None, error)
def oops(error: BaseException) -> None:
    print(error)
