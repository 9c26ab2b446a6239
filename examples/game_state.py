"""Game state server: 60 Hz world snapshots pushed to a crowd of bot clients, with live latency stats.

::

    python examples/game_state.py                           # 100 bots over IPC for 10 s
    python examples/game_state.py --bots 200 --procs 4 --duration 30
    python examples/game_state.py --udp                     # bots over UDP (each bot process its own driver)

One command runs everything: this process is the game server; it starts the
bots in 1-4 child processes (``--procs``), each running many ``Client`` objects
on one asyncio loop. The server owns the world: every tick (``--rate``, 60 Hz)
it moves each player by its latest input and pushes a ``Snapshot`` to every
bot in its ``world`` group with ``broadcast_unreliable``: encoded once for all of
them, newest-wins (a snapshot is stale a tick later, so it is never waited for
nor sent again: a bot too slow to take one, or whose copy was lost, simply
misses it, and never sees an older one after a newer one). Over UDP a snapshot
that fits one datagram goes on each connection's ``reliable=false`` stream;
a larger one (the whole world of many bots) on the reliable one. Bots send
``Move`` inputs at ``--input-rate`` (20 Hz).

Each bot measures how old every snapshot is when it arrives (the snapshot
carries the server's ``time.time_ns()``; all processes share the machine's
clock) and how many ticks it missed, and reports that to the server over its
own connection once per second of ticks. The server prints a line per second
and, at the end, a summary::

    game: t=3s ticks/s=60.0 sent/s=6000 delivered/s=6000 missed=0 age_ms mean=2.27 max=8.40 players=100
    ...
    game: bots=100 connected=100 snapshots_received=... missed_ticks=... mean_latency_ms=... max_latency_ms=...

By default the bots use the server's driver directory, so they attach to the
server's driver and connect over IPC. With ``--udp`` each bot process starts
a driver of its own (``<aeron dir>-bots<k>``) and connects over UDP.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence

import attrs
from messages import GameOver, Move, Report, Snapshot, make_serialization

import endpoint
from endpoint import (
    Client,
    ClientConfiguration,
    ClientError,
    Connection,
    ConnectionClosedError,
    EndpointError,
    Server,
    ServerConfiguration,
    ServerError,
)

__all__ = ["main", "parse_args"]

WORLD_SIZE = 100.0
"""The world is a square, 0 .. WORLD_SIZE on each axis."""
SPEED = 10.0
"""World units per second at full input."""
CONNECTS_AT_ONCE = 8
"""Handshakes a bot process runs in parallel: enough to connect quickly, few enough not to swamp the server."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A 60 Hz game state server and a crowd of bots.")
    p.add_argument("--bots", type=int, default=100, help="bot clients (default: %(default)s)")
    p.add_argument("--procs", type=int, default=0, help="bot processes, 1-4 (default: one per 50 bots, at most 4)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of play (default: %(default)s)")
    p.add_argument(
        "--rate", type=float, default=60.0, help="server ticks (snapshots) per second (default: %(default)s)"
    )
    p.add_argument(
        "--input-rate", type=float, default=20.0, help="Move inputs per bot per second (default: %(default)s)"
    )
    p.add_argument("--host", default="127.0.0.1", help="server address (default: %(default)s)")
    p.add_argument("--port", type=int, default=24013, help="server port (default: %(default)s)")
    p.add_argument("--aeron-dir", default=None, help="the server's driver directory (default: the end point default)")
    p.add_argument("--udp", action="store_true", help="bots connect over UDP, each bot process with its own driver")
    p.add_argument("--connect-timeout", type=float, default=30.0, help="seconds for all bots to connect")
    # Internal: how the server starts its bot processes.
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.bots < 1 or args.duration <= 0 or args.rate <= 0 or args.input_rate <= 0:
        p.error("--bots, --duration, --rate and --input-rate must be positive")
    if args.procs == 0:
        args.procs = min(4, max(1, math.ceil(args.bots / 50)))
    if not 1 <= args.procs <= 4 or args.procs > args.bots:
        p.error("--procs must be from 1 to 4, and at most --bots")
    return args


def term_length_for(bots: int) -> int:
    """A term long enough for one snapshot of ``bots`` players (a message may be at most 1/8 of a term)."""
    snapshot_bytes = 64 + 24 * bots  # about 5 + 9 + 9 bytes per player, plus the header fields
    term = 64 * 1024
    while term // 8 < 2 * snapshot_bytes:
        term *= 2
    return term


# =========================================================================== server


@attrs.define
class Player:
    x: float
    y: float
    dx: float = 0.0
    dy: float = 0.0


@attrs.define
class Window:
    """What bots reported over some stretch of time (one second, or the whole game)."""

    received: int = 0
    missed: int = 0
    age_sum_ns: int = 0
    age_max_ns: int = 0

    def add(self, report: Report) -> None:
        self.received += report.received
        self.missed += report.missed
        self.age_sum_ns += report.age_sum_ns
        self.age_max_ns = max(self.age_max_ns, report.age_max_ns)

    @property
    def mean_age_ms(self) -> float:
        return self.age_sum_ns / self.received / 1e6 if self.received else 0.0


class Game:
    """The server side: the world, the tick loop and the statistics bots send in."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        term = term_length_for(args.bots)
        self.server = Server(
            ServerConfiguration(
                port=args.port,
                listen_address=args.host,
                aeron_dir=args.aeron_dir,
                serialization=make_serialization(),
                term_length=term,  # UDP connections
                ipc_term_length=term,  # IPC connections
            )
        )
        self.players: dict[int, Player] = {}  # connection id -> player
        self.world = self.server.group("world")
        """Every player's connection: snapshots go to it (a connection leaves it by itself when it closes)."""
        self.rng = random.Random(1)
        self.connected = 0
        self.tick = 0
        self.sent = 0
        self.dropped = 0
        self.second = Window()
        self.total = Window()
        self.finals = 0
        self.all_final = asyncio.Event()
        self.final_expected = 0
        self.errors = 0

        server = self.server
        server.on_connect(self.on_connect)
        server.on_disconnect(self.on_disconnect)
        server.on_message(Move, self.on_move)
        server.on_message(Report, self.on_report)
        server.on_error(self.on_error)

    # -- listeners: plain functions, so messages are handled inline in the server's poller (no task each)

    def on_connect(self, conn: Connection) -> None:
        self.connected += 1
        self.world.add(conn)
        self.players[conn.id] = Player(self.rng.uniform(0, WORLD_SIZE), self.rng.uniform(0, WORLD_SIZE))

    def on_disconnect(self, conn: Connection) -> None:
        self.players.pop(conn.id, None)

    def on_move(self, conn: Connection, move: Move) -> None:
        player = self.players.get(conn.id)
        if player is not None:  # clamp: never trust a client's input
            player.dx = max(-1.0, min(1.0, move.dx))
            player.dy = max(-1.0, min(1.0, move.dy))

    def on_report(self, conn: Connection, report: Report) -> None:
        self.second.add(report)
        self.total.add(report)
        if report.final:
            self.finals += 1
            if self.finals >= self.final_expected > 0:
                self.all_final.set()

    def on_error(self, conn: Connection | None, exc: BaseException) -> None:
        self.errors += 1
        if self.errors <= 10:
            print(f"game: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    # -- the game

    def step(self, dt: float) -> Snapshot:
        """Move every player by its latest input and take a snapshot of the world."""
        ids, xs, ys = [], [], []
        for player_id, p in self.players.items():
            p.x = min(WORLD_SIZE, max(0.0, p.x + p.dx * SPEED * dt))
            p.y = min(WORLD_SIZE, max(0.0, p.y + p.dy * SPEED * dt))
            ids.append(player_id)
            xs.append(round(p.x, 2))
            ys.append(round(p.y, 2))
        self.tick += 1
        return Snapshot(self.tick, time.time_ns(), ids, xs, ys)

    async def wait_for_bots(self, bots: list[asyncio.subprocess.Process]) -> float:
        started = time.monotonic()
        deadline = started + self.args.connect_timeout
        while len(self.server.connections) < self.args.bots and time.monotonic() < deadline:
            if all(b.returncode is not None for b in bots):
                break  # every bot process gave up
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    async def play(self) -> None:
        """Tick at ``--rate`` for ``--duration`` seconds, printing a stats line every second of ticks."""
        args = self.args
        period = 1.0 / args.rate
        ticks_per_second = max(1, round(args.rate))
        start = time.monotonic()
        end = start + args.duration
        next_tick = start
        window_start, window_ticks, window_sent = start, 0, 0
        late = 0
        self.second = Window()
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now < next_tick:
                await asyncio.sleep(next_tick - now)
                continue
            if now - next_tick > period:
                late += 1  # the loop fell a whole tick behind: skip ahead rather than bursting to catch up
                next_tick = now
            next_tick += period
            snapshot = self.step(period)
            expected = len(self.world)
            # Encoded once, offered to every member newest-wins, never waited for; returns how many took it.
            sent = self.world.broadcast_unreliable(snapshot)
            window_ticks += 1
            window_sent += sent
            self.sent += sent
            self.dropped += expected - sent
            # Bots report on the first snapshot of each second (in ticks); half a second later their
            # reports are surely in, so print then.
            if self.tick % ticks_per_second == ticks_per_second // 2 and self.tick > ticks_per_second:
                elapsed = now - window_start
                w = self.second
                print(
                    f"game: t={self.tick // ticks_per_second}s ticks/s={window_ticks / elapsed:.1f} "
                    f"sent/s={window_sent / elapsed:.0f} delivered/s={w.received} missed={w.missed} "
                    f"age_ms mean={w.mean_age_ms:.2f} max={w.age_max_ns / 1e6:.2f} players={len(self.players)}",
                    flush=True,
                )
                window_start, window_ticks, window_sent = now, 0, 0
                self.second = Window()
        if late:
            print(f"game: the tick loop fell a tick behind {late} times", flush=True)

    async def game_over(self) -> None:
        """Tell every bot the game is over and wait (briefly) for their final reports."""
        connections = self.server.connections
        if not connections:
            return
        self.final_expected = len(connections)
        message = GameOver(self.tick)
        # Unlike snapshots, GameOver must arrive: send() waits out back pressure.
        await asyncio.gather(*(c.send(message) for c in connections), return_exceptions=True)
        try:
            await asyncio.wait_for(self.all_final.wait(), 5.0)
        except TimeoutError:
            print(f"game: only {self.finals} of {self.final_expected} bots sent their final report", flush=True)


def spawn_args(args: argparse.Namespace, worker: int, first: int, count: int, aeron_dir: str) -> list[str]:
    deadline = args.connect_timeout + args.duration + 20.0
    return [
        *("--worker", str(worker), "--first", str(first), "--bots", str(count), "--deadline", str(deadline)),
        *("--host", args.host, "--port", str(args.port), "--aeron-dir", aeron_dir),
        *("--rate", str(args.rate), "--input-rate", str(args.input_rate)),
        *("--connect-timeout", str(args.connect_timeout)),
        *(["--udp"] if args.udp else []),
    ]


async def start_bots(args: argparse.Namespace, server_dir: str) -> list[asyncio.subprocess.Process]:
    """Split the bots over ``--procs`` child processes (they stay in our process group: a kill of it ends them)."""
    processes = []
    first = 0
    for worker in range(args.procs):
        count = args.bots // args.procs + (1 if worker < args.bots % args.procs else 0)
        # IPC: the server's directory (the bots attach to its driver). UDP: a driver per bot process.
        aeron_dir = f"{server_dir}-bots{worker}" if args.udp else server_dir
        process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, *spawn_args(args, worker, first, count, aeron_dir)
        )
        processes.append(process)
        first += count
    return processes


async def stop_bots(processes: list[asyncio.subprocess.Process], timeout: float) -> None:
    """Wait for the bot processes to finish; terminate (then kill) any that do not, by pid."""
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            print(f"game: bot process {process.pid} did not finish; terminating it", flush=True)
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5.0)
            except TimeoutError:
                process.kill()
                await process.wait()


async def run_server(args: argparse.Namespace) -> int:
    game = Game(args)
    server = game.server
    try:
        await server.bind()
    except ServerError as exc:
        print(f"game: {exc}", flush=True)
        return 1
    transport = "udp" if args.udp else "ipc"
    server_dir = str(server.config.resolved_aeron_dir())
    print(
        f"game: server on {args.host}:{args.port}, {args.rate:g} Hz; starting {args.bots} bots "
        f"in {args.procs} processes over {transport}",
        flush=True,
    )
    bots: list[asyncio.subprocess.Process] = []
    try:
        bots = await start_bots(args, server_dir)
        took = await game.wait_for_bots(bots)
        print(f"game: {len(server.connections)}/{args.bots} bots connected in {took:.1f} s", flush=True)
        try:
            await game.play()
        except asyncio.CancelledError:
            # Ctrl-C or SIGTERM (endpoint.run cancels us): end the game early, but properly: game over, the
            # bots' last reports, the summary. (A second signal cancels again and cuts that short.)
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        await game.game_over()
    finally:
        await server.close()
        await stop_bots(bots, 10.0)
    total = game.total
    print(
        f"game: bots={args.bots} connected={game.connected} snapshots_received={total.received} "
        f"missed_ticks={total.missed} mean_latency_ms={total.mean_age_ms:.2f} "
        f"max_latency_ms={total.age_max_ns / 1e6:.2f} ticks={game.tick} snapshots_sent={game.sent} "
        f"dropped_at_send={game.dropped}",
        flush=True,
    )
    return 0 if game.connected == args.bots and total.received > 0 else 1


# =========================================================================== bots (child processes)


class Bot:
    """One simulated player: a Client of its own, wandering about and timing the snapshots it gets."""

    def __init__(
        self, index: int, config: ClientConfiguration, report_every: int, on_error: Callable[..., None]
    ) -> None:
        self.index = index
        self.report_every = report_every
        self.client = Client(config)
        self.conn: Connection | None = None
        self.rng = random.Random(index)
        self.heading = self.rng.uniform(0, 2 * math.pi)
        self.seq = 0
        self.last_tick: int | None = None
        self.window = Window()  # since the last report
        self.done = asyncio.Event()
        self.client.on_message(Snapshot, self.on_snapshot)
        self.client.on_message(GameOver, self.on_game_over)
        self.client.on_disconnect(lambda conn: self.done.set())
        self.client.on_error(on_error)

    async def connect(self, host: str, port: int) -> None:
        self.conn = await self.client.connect(host, port)

    def on_snapshot(self, conn: Connection, snapshot: Snapshot) -> None:
        """Sync listener: runs inline in the client's poller, which matters at 60 snapshots a second per bot."""
        age = time.time_ns() - snapshot.sent_ns
        tick, last = snapshot.tick, self.last_tick
        self.last_tick = tick
        w = self.window
        if last is not None and tick > last + 1:
            w.missed += tick - last - 1
        w.received += 1
        w.age_sum_ns += age
        if age > w.age_max_ns:
            w.age_max_ns = age
        if last is not None and tick // self.report_every != last // self.report_every:
            # Report once per second of *server* time (the first snapshot of each second), so the
            # server's per-second lines line up with its ticks.
            report = self.report(final=False)
            if not conn.send_nowait(report):
                self.window.add(report)  # not taken (back pressure): carry it over to the next report

    async def on_game_over(self, conn: Connection, message: GameOver) -> None:
        if self.last_tick is not None and message.last_tick > self.last_tick:
            self.window.missed += message.last_tick - self.last_tick  # the last ones never came
        try:
            await conn.send(self.report(final=True))
            await conn.close("game over")
        except ConnectionClosedError:
            pass
        self.done.set()

    def report(self, *, final: bool) -> Report:
        w, self.window = self.window, Window()
        return Report(w.received, w.missed, w.age_sum_ns, w.age_max_ns, final)

    def send_input(self) -> None:
        """Wander: turn a little each time. send_nowait: if the pipe is full, this input is skipped, not queued."""
        conn = self.conn
        if conn is None or conn.is_closed:
            return
        self.heading += self.rng.uniform(-0.6, 0.6)
        self.seq += 1
        try:
            conn.send_nowait(Move(self.seq, math.cos(self.heading), math.sin(self.heading)))
        except ConnectionClosedError:
            pass


async def run_bots(args: argparse.Namespace) -> int:
    name = f"bots[{args.worker}]"
    config = ClientConfiguration(
        aeron_dir=args.aeron_dir,
        serialization=make_serialization(),  # one for all the bots of this process
        prefer_ipc=not args.udp,
        connect_timeout=args.connect_timeout,
    )
    # Every Client here has the same driver settings, so they share one driver connection (and with
    # --udp one embedded driver): a hundred clients do not mean a hundred drivers.
    errors = 0

    def on_error(conn: Connection | None, exc: BaseException) -> None:
        nonlocal errors
        errors += 1
        if errors <= 5:  # the same failure often hits every bot at once: show a few, not fifty
            print(f"{name}: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    report_every = max(1, round(args.rate))  # ticks per second
    bots = [Bot(args.first + i, config, report_every, on_error) for i in range(args.bots)]
    limit = asyncio.Semaphore(CONNECTS_AT_ONCE)

    async def connect(bot: Bot) -> None:
        async with limit:
            await bot.connect(args.host, args.port)

    deadline = time.monotonic() + args.deadline
    try:
        results = await asyncio.gather(*(connect(bot) for bot in bots), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        print(f"{name}: {len(bots) - len(failures)}/{len(bots)} connected", flush=True)
        for failure in failures[:3]:
            print(f"{name}: connect failed: {type(failure).__name__}: {failure}", flush=True)
        live = [bot for bot in bots if bot.conn is not None]
        # One loop drives the inputs of every bot of the process (not a task per bot).
        input_period = 1.0 / args.input_rate
        while live and time.monotonic() < deadline:
            live = [bot for bot in live if not bot.done.is_set()]
            for bot in live:
                bot.send_input()
            await asyncio.sleep(input_period)
    except (ClientError, EndpointError) as exc:
        print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        await asyncio.gather(*(bot.client.close() for bot in bots), return_exceptions=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: let the server end the game
        # The server stops a bot process with SIGTERM if it lingers: its clients then close gracefully.
        return endpoint.run(lambda: run_bots(args), signals=(signal.SIGTERM,))
    return endpoint.run(lambda: run_server(args))


if __name__ == "__main__":
    sys.exit(main())
