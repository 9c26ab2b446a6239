"""Message classes of the game server example (``examples/game_server.py``): one module both ends import.

Two kinds of traffic, as in most real-time games:

- **Events** that must arrive, once and in order: a player's ``Hello``, the
  server's ``Welcome``, and the room's ``Joined``, ``Left``, ``ChatLine`` and
  ``Scored``. They go on the connection's reliable stream (``send``,
  ``send_nowait``, ``group.broadcast``).
- **State** that is stale a tick later: the server's ``Snapshot`` and the
  player's ``Input``. They go newest-wins (``send_unreliable``, or a class
  registered ``unreliable=True``): never waited for, never repaired, never
  delivered after a newer one.

Fields are plain msgpack types; positions travel as parallel lists (decoded in
C) rather than lists of small objects.
"""

from __future__ import annotations

import attrs

from endpoint import Serialization

__all__ = [
    "ChatLine",
    "Hello",
    "Input",
    "Joined",
    "Left",
    "Say",
    "Scored",
    "Snapshot",
    "Stats",
    "Welcome",
    "make_serialization",
]


@attrs.define
class Hello:
    """A player's first message: the name it wants to be shown as."""

    name: str


@attrs.define
class Welcome:
    """The server's answer to Hello: the player's id, the room it was put in and who is there."""

    player_id: int
    room: str
    members: list[str]


@attrs.define
class Joined:
    """Room event: someone joined the room."""

    name: str


@attrs.define
class Left:
    """Room event: someone left the room (gracefully or not)."""

    name: str


@attrs.define
class Say:
    """A player says something to its room."""

    text: str


@attrs.define
class ChatLine:
    """Room event: a line someone said, relayed to the whole room."""

    name: str
    text: str


@attrs.define
class Scored:
    """Room event: a player scored; ``score`` is its new total."""

    name: str
    score: int


@attrs.define
class Input:
    """A player's input, 20 times a second: the direction it wants to move in (-1.0 .. 1.0 each).

    Newest-wins (registered ``unreliable=True``): the server only ever applies the
    latest one, so an older one arriving late is worth nothing.
    """

    seq: int
    dx: float
    dy: float


@attrs.define
class Snapshot:
    """What one player sees at one tick: itself and the players nearest to it, newest-wins.

    ``ack`` is the last input the server applied (a client predicting its own
    movement replays the inputs after it). ``sent_ns`` is the server's
    ``time.time_ns()``: a bot on the same machine can tell how stale it is.
    """

    tick: int
    sent_ns: int
    ack: int
    x: float
    y: float
    ids: list[int]
    xs: list[float]
    ys: list[float]


@attrs.define
class Stats:
    """A bot's figures for the past second (the example's own instrumentation, not part of a game)."""

    received: int
    ages_us: list[int]


def make_serialization() -> Serialization:
    """Every game message under a fixed type id; ``Input`` newest-wins by class, ``Snapshot`` by call."""
    serialization = Serialization()
    for type_id, cls in enumerate((Hello, Welcome, Joined, Left, Say, ChatLine, Scored, Snapshot, Stats), 1):
        serialization.register(cls, type_id=type_id)
    serialization.register(Input, type_id=20, unreliable=True)
    return serialization
