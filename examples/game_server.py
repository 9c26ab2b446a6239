"""A real-time game server over UDP and a crowd of bots to load it: rooms, reliable events, newest-wins snapshots.

::

    python examples/game_server.py server --port 24020                    # Ctrl-C stops
    python examples/game_server.py bots --port 24020 --bots 1000 --processes 4 --duration 30

The server (classes in ``examples/game_messages.py``, walkthrough in ``docs/games.md``):

- a player says ``Hello(name)``; the server puts it in a **room** (a
  ``server.group``, ``--room-size`` players each, filled in turn), answers
  ``Welcome`` and tells the room ``Joined``; when it goes the room hears
  ``Left`` (a connection leaves its groups by itself when it closes);
- **room events** are reliable and never waited for: ``room.broadcast`` encodes
  a message once and offers it to every member (``Joined``, ``Left``,
  ``ChatLine`` relayed from ``Say``, ``Scored`` once a second per room);
- the **tick loop** runs at ``--rate`` (20 Hz): it applies each player's latest
  ``Input`` and sends every player a ``Snapshot`` of itself and its
  ``--nearby`` (16) nearest players in its room with ``conn.send_unreliable``:
  newest-wins, now or never. Nothing in the tick awaits: a player whose pipe is
  full misses that snapshot (the next one replaces it), the others do not wait;
- once a second it prints the figures: players, rooms, ticks/s, snapshots/s per
  player (as the bots received them), their staleness p50/p99 (from the tick to
  the bot's listener), and the server's CPU.

The bots: ``bots`` starts ``--processes`` child processes, each with a driver of
its own and ``--bots``/``--processes`` clients over UDP; every bot sends an
``Input`` at ``--input-rate`` (20 Hz, newest-wins by class), chats now and then,
and reports once a second what it received. A client behind a NAT needs nothing
special: the server answers from its control port (``--port`` + 1) to wherever
the client's packets come from, so open UDP ``--port`` and ``--port`` + 1 on the
server's side only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import math
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
from game_messages import (
    ChatLine,
    Hello,
    Input,
    Joined,
    Left,
    Say,
    Scored,
    Snapshot,
    Stats,
    Welcome,
    make_serialization,
)

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

ROOM_SIZE = 100.0
"""Each room is a square world, 0 .. ROOM_SIZE on each axis."""
CELL = 25.0
"""Players in one cell of a room share the list of nearest players (computed once per cell per tick)."""
SPEED = 10.0
"""World units per second at full input."""
CONNECTS_AT_ONCE = 4
"""Handshakes a bot process runs side by side: enough to fill a server quickly, few enough not to swamp it."""
STOP_BOTS_WITHIN = 20.0
"""Seconds the bot processes get to close their clients (gracefully, so the server sees them leave) when stopped."""
RETRY = frozenset({"SERVER_BUSY", "SERVER_FULL", "TOO_MANY_FROM_ADDRESS"})
"""Rejections a bot tries again after (a busy server); the others (a mismatch, a filter) are for good."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A 20 Hz game server over UDP, and bots to play on it.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--host", default="127.0.0.1", help="server address (default: %(default)s)")
    common.add_argument("--port", type=int, default=24020, help="server port; UDP port + 1 too (default: %(default)s)")
    common.add_argument("--aeron-dir", default=None, help="driver directory (bots: the prefix of one per process)")
    common.add_argument("--duration", type=float, default=0.0, help="seconds to run; 0: until Ctrl-C or SIGTERM")
    roles = p.add_subparsers(dest="role", required=True)
    server = roles.add_parser("server", parents=[common], help="run the game server")
    server.add_argument("--rate", type=float, default=20.0, help="ticks (snapshots) per second (default: %(default)s)")
    server.add_argument("--room-size", type=int, default=50, help="players per room (default: %(default)s)")
    server.add_argument("--nearby", type=int, default=16, help="players in a snapshot (default: %(default)s)")
    bots = roles.add_parser("bots", parents=[common], help="run bot players")
    bots.add_argument("--bots", type=int, default=100, help="bot players in all (default: %(default)s)")
    bots.add_argument("--processes", type=int, default=4, help="bot processes (default: %(default)s)")
    bots.add_argument("--input-rate", type=float, default=20.0, help="inputs per bot per second (default: %(default)s)")
    bots.add_argument("--chat-every", type=float, default=20.0, help="mean seconds between a bot's chat lines")
    bots.add_argument("--connect-timeout", type=float, default=60.0, help="seconds for a bot to connect")
    bots.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    bots.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.duration < 0:
        p.error("--duration must not be negative")
    if args.role == "server" and (args.rate <= 0 or args.room_size < 1 or args.nearby < 1):
        p.error("--rate, --room-size and --nearby must be positive")
    if args.role == "bots" and args.worker is None and not (1 <= args.processes <= args.bots and args.input_rate > 0):
        p.error("--processes must be from 1 to --bots, and --input-rate positive")
    return args


def percentile(sorted_values: Sequence[int], fraction: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))] if sorted_values else 0


# =========================================================================== server


def count_reason(counts: dict[str, int], reason: str) -> None:
    """Why connections were lost, for the final lines: the reason with its figures left out, counted."""
    why = re.sub(r"\d+(\.\d+)?", "#", reason)[:80]
    counts[why] = counts.get(why, 0) + 1


@attrs.define
class Player:
    conn: Connection
    name: str
    room: Room
    x: float
    y: float
    dx: float = 0.0
    dy: float = 0.0
    ack: int = 0
    score: int = 0


@attrs.define
class Room:
    name: str
    group: endpoint.Group
    players: dict[int, Player] = attrs.Factory(dict)  # connection id -> player


class Game:
    """The server side: rooms, players, the tick loop, and the figures the bots send in."""

    def __init__(self, args: argparse.Namespace, config: ServerConfiguration | None = None) -> None:
        """``config`` (a test's, say) must carry :func:`make_serialization`'s messages; by default from ``args``."""
        self.args = args
        if config is None:
            config = ServerConfiguration(
                port=args.port,
                listen_address=args.host,
                aeron_dir=args.aeron_dir,
                serialization=make_serialization(),
                max_clients=20_000,
            )
        self.server = Server(config)
        self.rooms: dict[str, Room] = {}
        self.players: dict[int, Player] = {}  # connection id -> player, once it said Hello
        self.rng = random.Random(1)
        self.rooms_made = 0
        self.tick = 0
        self.late_ticks = 0
        self.events = 0  # room events broadcast
        self.received = 0  # snapshots the bots reported this second
        self.ages_us: list[int] = []
        self.errors = 0
        self.why_lost: dict[str, int] = {}  # close reason (figures left out) -> connections lost
        s = self.server
        s.on_message(Hello, self.on_hello)
        s.on_message(Input, self.on_input)
        s.on_message(Say, self.on_say)
        s.on_message(Stats, self.on_stats)
        s.on_disconnect(self.on_disconnect)
        s.on_error(self.on_error)

    # -- listeners: plain functions, run inline in the server's poller (no task per message)

    def room_for_newcomer(self) -> Room:
        for room in self.rooms.values():
            if len(room.players) < self.args.room_size:
                return room
        self.rooms_made += 1
        name = f"room-{self.rooms_made}"
        room = self.rooms[name] = Room(name, self.server.group(name))
        return room

    def on_hello(self, conn: Connection, hello: Hello) -> None:
        if conn.id in self.players:
            return  # said Hello already
        room = self.room_for_newcomer()
        name = hello.name.strip()[:24] or f"player{conn.id}"
        player = Player(conn, name, room, self.rng.uniform(0, ROOM_SIZE), self.rng.uniform(0, ROOM_SIZE))
        self.players[conn.id] = room.players[conn.id] = player
        # Welcome first (reliable, in order before anything the room sends it), then the room hears of it.
        conn.send_nowait(Welcome(conn.id, room.name, [p.name for p in room.players.values()]))
        room.group.add(conn)
        self.broadcast(room, Joined(name))

    def on_input(self, conn: Connection, message: Input) -> None:
        player = self.players.get(conn.id)
        if player is not None:  # clamp: never trust a client's input
            player.dx = max(-1.0, min(1.0, message.dx))
            player.dy = max(-1.0, min(1.0, message.dy))
            player.ack = message.seq

    def on_say(self, conn: Connection, message: Say) -> None:
        player = self.players.get(conn.id)
        if player is not None:
            self.broadcast(player.room, ChatLine(player.name, message.text[:200]))

    def on_stats(self, conn: Connection, stats: Stats) -> None:
        self.received += stats.received
        self.ages_us.extend(stats.ages_us[:100])

    def on_disconnect(self, conn: Connection) -> None:
        if conn.lost:
            count_reason(self.why_lost, conn.close_reason)
        player = self.players.pop(conn.id, None)
        if player is None:
            return
        room = player.room
        del room.players[conn.id]
        # The connection has left the room's group already: this reaches the others only.
        self.broadcast(room, Left(player.name))
        if not room.players:
            room.group.close()
            del self.rooms[room.name]

    def on_error(self, conn: Connection | None, exc: BaseException) -> None:
        self.errors += 1
        if self.errors <= 10:
            print(f"server: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    def broadcast(self, room: Room, event: object) -> None:
        """A room event: encoded once, offered to every member, never waited for (a member whose log is full
        misses it and is counted in ``room.group.refused``; a real game might close such a hopeless member)."""
        room.group.broadcast(event)
        self.events += 1

    # -- the game

    def step(self, room: Room, dt: float, sent_ns: int) -> int:
        """Move the room's players, then send each a snapshot of itself and its nearest players; returns how many
        snapshots were handed over."""
        players = list(room.players.values())
        for p in players:
            p.x = min(ROOM_SIZE, max(0.0, p.x + p.dx * SPEED * dt))
            p.y = min(ROOM_SIZE, max(0.0, p.y + p.dy * SPEED * dt))
        # Area of interest: the players nearest to the centre of each occupied cell, computed once per cell.
        nearby: dict[tuple[int, int], tuple[list[int], list[float], list[float]]] = {}
        sent = 0
        for p in players:
            cell = (int(p.x // CELL), int(p.y // CELL))
            seen = nearby.get(cell)
            if seen is None:
                cx, cy = (cell[0] + 0.5) * CELL, (cell[1] + 0.5) * CELL
                near = heapq.nsmallest(self.args.nearby, players, key=lambda q: (q.x - cx) ** 2 + (q.y - cy) ** 2)
                seen = nearby[cell] = (
                    [q.conn.id for q in near],
                    [round(q.x, 2) for q in near],
                    [round(q.y, 2) for q in near],
                )
            snapshot = Snapshot(self.tick, sent_ns, p.ack, round(p.x, 2), round(p.y, 2), *seen)
            # Newest-wins, now or never: False means this player's pipe is full; its next snapshot replaces it.
            with contextlib.suppress(ConnectionClosedError):
                sent += p.conn.send_unreliable(snapshot)
        return sent

    async def play(self) -> None:
        """Tick at ``--rate`` until cancelled (or ``--duration``), printing the figures once a second."""
        args = self.args
        period = 1.0 / args.rate
        start = time.monotonic()
        end = start + args.duration if args.duration else math.inf
        next_tick = start
        window_start, window_ticks, window_sent = start, 0, 0
        cpu_start = time.process_time()
        while (now := time.monotonic()) < end:
            if now < next_tick:
                await asyncio.sleep(next_tick - now)
                continue
            if now - next_tick > period:
                self.late_ticks += 1  # a whole tick behind: skip ahead rather than burst to catch up
                next_tick = now
            next_tick += period
            self.tick += 1
            sent_ns = time.time_ns()
            for room in list(self.rooms.values()):
                window_sent += self.step(room, period, sent_ns)
            window_ticks += 1
            if now - window_start >= 1.0:
                cpu = time.process_time()
                self.report(now - window_start, window_ticks, window_sent, cpu - cpu_start)
                self.score()
                window_start, window_ticks, window_sent, cpu_start = now, 0, 0, cpu

    def score(self) -> None:
        """Once a second someone in each room scores: a reliable event for the whole room."""
        for room in list(self.rooms.values()):
            if room.players:
                lucky = self.rng.choice(list(room.players.values()))
                lucky.score += 1
                self.broadcast(room, Scored(lucky.name, lucky.score))

    def report(self, elapsed: float, ticks: int, sent: int, cpu: float) -> None:
        players = len(self.players)
        ages = sorted(self.ages_us)
        per_player = self.received / players / elapsed if players else 0.0
        print(
            f"server: t={self.tick / self.args.rate:.0f}s players={players} rooms={len(self.rooms)} "
            f"ticks/s={ticks / elapsed:.1f} sent/s={sent / elapsed:.0f} snapshots/s/player={per_player:.1f} "
            f"staleness_ms p50={percentile(ages, 0.5) / 1000:.1f} p99={percentile(ages, 0.99) / 1000:.1f} "
            f"events={self.events} cpu={100 * cpu / elapsed:.0f}%",
            flush=True,
        )
        self.received = 0
        self.ages_us = []


async def run_server(args: argparse.Namespace) -> int:
    game = Game(args)
    server = game.server
    try:
        await server.bind()
    except ServerError as exc:
        print(f"server: {exc}", flush=True)
        return 1
    # Players arrive by the hundred: short-lived handshake objects die young instead of bringing on full
    # collections of everything the server holds (see endpoint.gc_tuning); start-up's objects are frozen.
    endpoint.tune_gc(freeze=True)
    print(
        f"server: playing on {args.host}:{args.port} at {args.rate:g} Hz; open UDP {args.port} and "
        f"{server.control_port} (control port) to players; Ctrl-C stops",
        flush=True,
    )
    try:
        await game.play()  # until --duration, or Ctrl-C/SIGTERM (endpoint.run cancels us)
    finally:
        players = len(game.players)
        await server.close()  # every player is told the server closed
        print(
            f"server: closed after {game.tick} ticks ({game.late_ticks} late) with {players} players; "
            f"{game.rooms_made} rooms made, {game.events} room events",
            flush=True,
        )
        for why, count in sorted(game.why_lost.items(), key=lambda item: -item[1])[:5]:
            print(f"server: lost {count}: {why}", flush=True)
    return 0


# =========================================================================== bots


@attrs.define
class Tally:
    """What the bots of one process received."""

    connected: int = 0
    welcomed: int = 0
    snapshots: int = 0
    joined: int = 0
    left: int = 0
    chat: int = 0
    scored: int = 0
    lost: int = 0
    why_lost: dict[str, int] = attrs.Factory(dict)  # close reason (figures left out) -> connections
    errors: int = 0


class Bot:
    """One player: a Client of its own, wandering about, chatting, timing the snapshots it gets."""

    def __init__(self, index: int, config: ClientConfiguration, tally: Tally, chatty: float) -> None:
        self.name = f"bot{index}"
        self.client = Client(config)
        self.conn: Connection | None = None
        self.tally = tally
        self.chatty = chatty  # chance per input that the bot says something
        self.rng = random.Random(index)
        self.heading = self.rng.uniform(0, 2 * math.pi)
        self.seq = 0
        self.last_tick = 0
        self.received = 0
        self.ages_us: list[int] = []
        self.all_ages_us: list[int] = []
        self.done = asyncio.Event()
        c = self.client
        c.on_connect(self.on_connect)
        c.on_disconnect(self.on_disconnect)
        c.on_error(self.on_error)
        c.on_message(Welcome, self.on_welcome)
        c.on_message(Snapshot, self.on_snapshot)
        c.on_message(Joined, lambda conn, m: self.count("joined"))
        c.on_message(Left, lambda conn, m: self.count("left"))
        c.on_message(ChatLine, lambda conn, m: self.count("chat"))
        c.on_message(Scored, lambda conn, m: self.count("scored"))

    def count(self, what: str) -> None:
        setattr(self.tally, what, getattr(self.tally, what) + 1)

    async def on_connect(self, conn: Connection) -> None:
        await conn.send(Hello(self.name))  # before any message is dispatched to us

    def on_disconnect(self, conn: Connection) -> None:
        if conn.lost or conn.closed_by_peer:
            self.tally.lost += conn.lost
            if conn.lost:
                count_reason(self.tally.why_lost, conn.close_reason)
            self.done.set()

    def on_error(self, conn: Connection | None, exc: BaseException) -> None:
        self.tally.errors += 1
        if self.tally.errors <= 5:  # the first few of the process: the rest are usually echoes
            print(f"{self.name}: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    def on_welcome(self, conn: Connection, welcome: Welcome) -> None:
        self.tally.welcomed += 1

    def on_snapshot(self, conn: Connection, snapshot: Snapshot) -> None:
        age_us = (time.time_ns() - snapshot.sent_ns) // 1000
        self.last_tick = snapshot.tick
        self.received += 1
        self.tally.snapshots += 1
        self.ages_us.append(age_us)
        self.all_ages_us.append(age_us)

    def play(self, stats_due: bool) -> None:
        """One input (and now and then a chat line, and once a second the stats); never waits."""
        conn = self.conn
        if conn is None or conn.is_closed:
            return
        self.heading += self.rng.uniform(-0.6, 0.6)
        self.seq += 1
        try:
            conn.send_nowait(Input(self.seq, math.cos(self.heading), math.sin(self.heading)))  # newest-wins
            if self.rng.random() < self.chatty:
                conn.send_nowait(Say(f"hello from {self.name}"))
            if stats_due:
                conn.send_nowait(Stats(self.received, self.ages_us))
                self.received, self.ages_us = 0, []
        except ConnectionClosedError:
            pass


async def run_worker(args: argparse.Namespace) -> int:
    """One bot process: ``--bots`` clients on one driver of their own (clients with equal settings share it)."""
    name = f"bots[{args.worker}]"
    config = ClientConfiguration(
        aeron_dir=args.aeron_dir,
        serialization=make_serialization(),
        prefer_ipc=False,
        connect_timeout=args.connect_timeout,
    )
    tally = Tally()
    chatty = 1.0 / (args.chat_every * args.input_rate)
    bots = [Bot(args.first + i, config, tally, chatty) for i in range(args.bots)]
    # A game's loading screen: the driver is started (and leased by every bot) before anyone connects, and what
    # start-up made is frozen with the rest for the storm of connects to come (see run_server).
    started = await asyncio.gather(*(bot.client.start() for bot in bots), return_exceptions=True)
    failed = next((r for r in started if isinstance(r, BaseException)), None)
    if failed is not None:
        print(f"{name}: no driver: {type(failed).__name__}: {failed}", flush=True)
        await asyncio.gather(*(bot.client.close() for bot in bots), return_exceptions=True)
        return 1
    endpoint.tune_gc(freeze=True)
    limit = asyncio.Semaphore(CONNECTS_AT_ONCE)
    connect_deadline = time.monotonic() + args.connect_timeout

    async def connect(bot: Bot) -> None:
        """Connect, trying again (as a game client would) until ``--connect-timeout`` has passed."""
        async with limit:
            while True:
                try:
                    bot.conn = await bot.client.connect(args.host, args.port)
                    tally.connected += 1
                    return
                except (ClientTimeoutError, ClientRejectedError) as exc:
                    if time.monotonic() >= connect_deadline or (
                        isinstance(exc, ClientRejectedError) and exc.reason.name not in RETRY
                    ):
                        raise
                    await asyncio.sleep(random.uniform(0.1, 0.5))

    async def connect_all() -> float:
        results = await asyncio.gather(*(connect(bot) for bot in bots), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        print(f"{name}: {tally.connected}/{len(bots)} connected", flush=True)
        for failure in failures[:3]:
            print(f"{name}: connect failed: {type(failure).__name__}: {failure}", flush=True)
        return time.monotonic() + args.duration if args.duration else math.inf  # --duration of play, once connected

    connecting = asyncio.create_task(connect_all())
    try:
        # One loop drives every bot of the process (not a task per bot); a bot plays as soon as it is connected.
        period = 1.0 / args.input_rate
        per_second = max(1, round(args.input_rate))
        n = 0
        while not connecting.done() or time.monotonic() < connecting.result():
            n += 1
            for bot in bots:
                if bot.conn is not None and not bot.done.is_set():
                    bot.play(n % per_second == 0)
            if connecting.done() and all(bot.conn is None or bot.done.is_set() for bot in bots):
                break  # nobody left playing (the server closed, say)
            await asyncio.sleep(period)
    except EndpointError as exc:
        print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        connecting.cancel()  # the totals first: closing many clients on a starved machine can outlast our stop time
        ages = sorted(a for bot in bots for a in bot.all_ages_us)
        t = tally
        print(
            f"{name}: done connected={t.connected} welcomed={t.welcomed} snapshots={t.snapshots} "
            f"joined={t.joined} left={t.left} chat={t.chat} scored={t.scored} lost={t.lost} "
            f"p50_ms={percentile(ages, 0.5) / 1000:.1f} p99_ms={percentile(ages, 0.99) / 1000:.1f}",
            flush=True,
        )
        for why, count in sorted(t.why_lost.items(), key=lambda item: -item[1])[:5]:
            print(f"{name}: lost {count}: {why}", flush=True)
        await asyncio.gather(connecting, return_exceptions=True)
        await asyncio.gather(*(bot.client.close() for bot in bots), return_exceptions=True)
    return 0


async def relay(process: asyncio.subprocess.Process, totals: dict[str, float]) -> None:
    """Print a bot process's lines as they come; add up its final figures."""
    assert process.stdout is not None
    while line := await process.stdout.readline():
        text = line.decode(errors="replace").rstrip()
        print(text, flush=True)
        if " done " in text:
            for key, value in re.findall(r"(\w+)=([\d.]+)", text):
                if not key.endswith("_ms"):
                    totals[key] = totals.get(key, 0) + float(value)


async def run_bots(args: argparse.Namespace) -> int:
    """Start the bot processes, relay their output, stop them (by pid) when we are stopped."""
    base = args.aeron_dir or str(Path(tempfile.gettempdir()) / f"game-bots-{args.port}")
    processes: list[asyncio.subprocess.Process] = []
    relays = []
    totals: dict[str, float] = {}
    first = 0
    try:
        for worker in range(args.processes):
            count = args.bots // args.processes + (1 if worker < args.bots % args.processes else 0)
            process = await asyncio.create_subprocess_exec(
                *(sys.executable, __file__, "bots", "--worker", str(worker), "--first", str(first)),
                *("--bots", str(count), "--host", args.host, "--port", str(args.port)),
                *("--aeron-dir", f"{base}-{worker}", "--duration", str(args.duration)),
                *("--input-rate", str(args.input_rate), "--chat-every", str(args.chat_every)),
                *("--connect-timeout", str(args.connect_timeout)),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            processes.append(process)
            relays.append(asyncio.create_task(relay(process, totals)))
            first += count
        codes = [await process.wait() for process in processes]
    finally:
        for process in processes:  # stopped early (Ctrl-C, SIGTERM): each bot process closes its clients
            if process.returncode is None:
                process.terminate()
        waits = asyncio.gather(*(process.wait() for process in processes))
        # Looked at even if we are cancelled while waiting (a second Ctrl-C): else asyncio reports it unretrieved.
        waits.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            await asyncio.wait_for(waits, STOP_BOTS_WITHIN)
        except TimeoutError:
            for process in processes:
                if process.returncode is None:
                    print(f"bots: process {process.pid} did not stop; killing it", flush=True)
                    process.kill()
                    await process.wait()
        await asyncio.gather(*relays, return_exceptions=True)
        summary = " ".join(f"{key}={int(value)}" for key, value in totals.items())
        print(f"bots: {args.bots} bots in {args.processes} processes: {summary}", flush=True)
    return max(codes)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "server":
        return endpoint.run(lambda: run_server(args))
    if args.worker is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
        return endpoint.run(lambda: run_worker(args), signals=(signal.SIGTERM,), shutdown_timeout=STOP_BOTS_WITHIN)
    return endpoint.run(lambda: run_bots(args), shutdown_timeout=STOP_BOTS_WITHIN + 10.0)


if __name__ == "__main__":
    sys.exit(main())
