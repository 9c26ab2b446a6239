"""Message classes shared by the end point examples (echo, chat, game state).

Both ends of a connection register the classes under the same type ids. The
handshake compares the two sides' classes field by field: a field added or
removed with a default is fine (the older side ignores it or fills it in), a
field whose type changed, or one without a default on one side only, turns the
client away with ``RejectReason.SERIALIZATION_MISMATCH`` (a
``SchemaMismatchError`` naming the class and field). Keeping every message in
one module that both programs import, and registering them in one function,
is the simplest way to keep them in step.

Messages are plain attrs classes. They travel as msgpack maps of their fields
by name; annotate the fields with concrete types (``int``, ``list[float]``...)
and they are encoded and decoded natively, and checked on arrival. They hold
msgpack types: ints, floats, str, bytes, bool, None, lists, tuples, dicts, or
other attrs classes.

The examples run as ``python examples/<name>.py``, which puts ``examples/`` on
``sys.path``: this module is then ``messages`` in every process.
"""

from __future__ import annotations

import attrs

from endpoint import Serialization

__all__ = [
    "Announce",
    "GameOver",
    "Join",
    "Line",
    "Move",
    "PlayerState",
    "Report",
    "Said",
    "Say",
    "Snapshot",
    "Welcome",
    "make_serialization",
]


# --------------------------------------------------------------------------- echo


@attrs.define
class Line:
    """One line of text; the echo server sends it straight back."""

    seq: int
    text: str


# --------------------------------------------------------------------------- chat


@attrs.define
class Join:
    """First message of a chat client: the name it wants to be known by, and the room it wants to be in."""

    name: str
    room: str = "lobby"


@attrs.define
class Welcome:
    """The server's answer to Join: the name granted (made unique) and who is in its room."""

    name: str
    users: list[str]


@attrs.define
class Say:
    """A client says something to the room."""

    text: str


@attrs.define
class Said:
    """The server relays a Say to the speaker's room, naming who said it (the speaker skips its own)."""

    name: str
    text: str


@attrs.define
class Announce:
    """A notice from the room itself: someone joined or left."""

    text: str


# --------------------------------------------------------------------------- game state


@attrs.define
class Move:
    """A bot's input: the direction it wants to move in (each component -1.0 .. 1.0).

    The server applies the latest input of each player at every tick (the client
    sends intent, the server owns the state).
    """

    seq: int
    dx: float
    dy: float


@attrs.define
class Snapshot:
    """The world at one tick, pushed to every player.

    Positions travel as three parallel lists (ids, xs, ys) rather than a list of
    small registered objects: msgpack decodes plain lists in C, while every
    nested attrs object costs a Python constructor call on decode (about 10x
    slower for 100 players, and a bot process decodes thousands per second).
    ``sent_ns`` is the server's ``time.time_ns()`` when the snapshot was sent,
    so a bot on the same machine can tell how old it is when it arrives.
    """

    tick: int
    sent_ns: int
    ids: list[int]
    xs: list[float]
    ys: list[float]


@attrs.define
class Report:
    """A bot's statistics since its previous report (sent every second, and once more at game over)."""

    received: int
    missed: int
    age_sum_ns: int
    age_max_ns: int
    final: bool


@attrs.define
class GameOver:
    """The server stops ticking; ``last_tick`` lets a bot count the snapshots it missed at the end."""

    last_tick: int


# --------------------------------------------------------------------------- recorded game state


@attrs.define
class PlayerState:
    """One player at one tick, as a game server publishes it for recording and later analysis."""

    tick: int
    player: int
    x: float
    y: float
    score: int


def make_serialization() -> Serialization:
    """A fresh Serialization with every example message registered under a fixed type id.

    Fixed ids (rather than registration order) keep the wire format stable when
    classes are added or reordered. The first end point to start freezes it
    (no more registrations); end points on one event loop may share it.
    """
    serialization = Serialization()
    classes = (Line, Join, Welcome, Say, Said, Announce, Move, Snapshot, Report, GameOver, PlayerState)
    for type_id, cls in enumerate(classes, 1):
        serialization.register(cls, type_id=type_id)
    return serialization
