"""A game server's load: N players over UDP, inputs and snapshots at 20 Hz, asyncio TCP + msgpack beside it.

    python benchmarks/game_server.py [--players 200,500,1000] [--duration 20] [--idle-seconds 5]
                                     [--processes 4] [--tcp/--no-tcp] [--idle-only] [--unreliable]
                                     [--overload 1.5 [--capacity N]] [--players-nice N] [--profile]
                                     [--uvloop/--no-uvloop] [--quick]

One server process (a ``Server`` with its embedded driver and default settings, on uvloop when it is
installed) and ``--players`` clients spread over ``--processes`` client processes, each process with a
driver of its own (``prefer_ipc=False``: every player is a UDP connection). The server keeps a world of
players that move; every player sends an ``Input`` at 20 Hz (steering its player) and the server sends
every player, at 20 Hz, a ``Snapshot`` of its 16 nearest players (interest management by grid cell: the
world grows with the players so a cell holds about 16; the players of a cell see the same view, so each cell's
snapshot is encoded once and sent to all of them: ``server.broadcast(snapshot, to=...)``, and the TCP server
likewise packs once per cell) carrying the tick number and the time the tick began sending
(``time.monotonic_ns``, one clock for every process on a machine), from which the client computes how
stale the snapshot is when it is read. The tick never awaits a send: a snapshot back pressure refuses is
counted and dropped (``--unreliable`` registers ``Snapshot`` newest-wins on the server, see
``Connection.send_unreliable``). A tick that comes due while an earlier one is still running is skipped and
counted: the tick rate falls, the ticks do not pile up.

Per player count, in this order: connect everyone; wait for the handshakes' own streams to close; the
server's CPU over ``--idle-seconds`` with everyone connected and quiet (idle); then play: two seconds of
warm-up, then ``--duration`` seconds measured: the server's CPU (``/proc/<pid>/stat``, every thread, the
embedded driver's included), snapshots each client read per second (mean, and the worst client's),
staleness p50/p99, the inputs' age when the server read them (p50/p99, from the player's send: inputs queued
in the server's socket show here, not in staleness), connections lost (either side saw a disconnect), the
tick rate the server kept and the ticks it skipped. With ``--tcp`` (the default) the same workload runs on
asyncio TCP with msgpack (length-prefixed frames, streams on both sides, the same event loop) in the same run,
and the end point's figures are printed as ratios of TCP's.

``--players-nice N`` lowers the player processes' priority (both servers' alike): on one small machine the
players otherwise take the server's cores whenever it would run, which real players, on machines of their own,
do not. ``--idle-only`` measures only the idle phase. ``--overload F`` runs once more at F times the server's
capacity (``--capacity``, or the most players this run served at 19.5 snapshots per second or more) and
says how far the tick rate fell and whether any connection was lost. ``--profile`` runs the end point
server under cProfile (its event loop thread, which with the default INVOKER mode also runs the driver)
and prints where the time went.

A thousand players keep both cores of a 2-core machine busy: keep such runs short.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import os
import random
import re
import signal
import struct
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, percentile, print_table
from _endpoint_common import (
    Input,
    Snapshot,
    children,
    context_switches,
    cpu_seconds,
    free_port_both,
    game_serialization,
    wait_event,
)

TICK_HZ = 20
INPUT_HZ = 20
VIEW = 16
"""Players in each snapshot."""
DENSITY = 0.01
"""Players per square metre of the world."""
WARMUP_S = 2.0
SERVED_RATE = 19.5
"""Snapshots per second a player must get to count as served."""
SEND_BUFFER_LIMIT = 64 * 1024
"""Bytes a TCP connection may have waiting in its transport before a snapshot to it is dropped."""
_T0 = time.monotonic()


def note(text: str) -> None:
    print(f"  [{time.monotonic() - _T0:6.1f} s] {text}", file=sys.stderr, flush=True)


# -- the world ----------------------------------------------------------------------------------------------------


Cells = list[tuple[list[list[float]], list[int]]]
"""A tick's views: per grid cell, its view (``[id, x, y]`` of up to :data:`VIEW` of its players) and every player
in it (who all see that view)."""


class World:
    """Players wandering a square world sized for :data:`DENSITY`; each one's view is the first :data:`VIEW`
    players of its grid cell (cells hold about that many). The views are made once per cell, not once per player,
    and a cell's players are sent the same snapshot (one encoding for all of them), as a game server would."""

    def __init__(self, players: int) -> None:
        self.side = math.sqrt(max(players, VIEW) / DENSITY)
        self.cell = math.sqrt(VIEW / DENSITY)
        self.columns = max(1, int(self.side // self.cell))
        self.players: dict[int, list[float]] = {}
        """id -> [x, y, vx, vy]"""
        self._random = random.Random(players)

    def add(self, player: int) -> None:
        r = self._random
        self.players[player] = [r.uniform(0, self.side), r.uniform(0, self.side), r.uniform(-5, 5), r.uniform(-5, 5)]

    def remove(self, player: int) -> None:
        self.players.pop(player, None)

    def steer(self, player: int, dx: float, dy: float) -> None:
        state = self.players.get(player)
        if state is not None:
            state[2], state[3] = dx, dy

    def step(self, dt: float) -> Cells:
        """Move everyone by ``dt`` seconds; each occupied cell's view and players."""
        side, cell, columns = self.side, self.cell, self.columns
        last = columns - 1
        cells: dict[int, tuple[list[list[float]], list[int]]] = {}
        for player, state in self.players.items():
            x, y = state[0] + state[2] * dt, state[1] + state[3] * dt
            if not 0.0 <= x < side:
                state[2] = -state[2]
                x = min(max(x, 0.0), side - 0.001)
            if not 0.0 <= y < side:
                state[3] = -state[3]
                y = min(max(y, 0.0), side - 0.001)
            state[0], state[1] = x, y
            key = min(int(x // cell), last) * columns + min(int(y // cell), last)
            found = cells.get(key)
            if found is None:
                cells[key] = ([[player, x, y]], [player])
            else:
                view, members = found
                members.append(player)
                if len(view) < VIEW:
                    view.append([player, x, y])
        return list(cells.values())


class TickStats:
    """What the server's tick loop did while measured."""

    def __init__(self) -> None:
        self.ticks = 0
        self.skipped = 0
        self.refused = 0
        self.sent = 0
        self.lost = 0
        self.inputs = 0
        """Inputs the server read while measured (the end point server counts them)."""
        self.measured_s = 0.0
        self.rounds = 0
        """Rounds the end point server's poller ran while measured (each runs its driver's duty cycles)."""
        self.input_ages: list[int] = []
        """How long each input read took from its player's send to the server's read, ns (queued in the kernel
        included: what snapshot staleness does not show)."""
        self.input_age_p50_ms = self.input_age_p99_ms = float("nan")

    def sum_up_inputs(self) -> None:
        """The input ages as percentiles (the report crosses processes: not every age)."""
        ages = sorted(self.input_ages)
        self.input_age_p50_ms = percentile(ages, 50) / 1e6
        self.input_age_p99_ms = percentile(ages, 99) / 1e6
        self.input_ages = []


async def tick_loop(world: World, send_all: Callable[[int, Cells, TickStats], None], signals: Any) -> TickStats:
    """Run ticks at :data:`TICK_HZ` from ``play`` to ``done``; a tick that came due while the last one ran is
    skipped (counted), never run late in a burst. Counts only between ``measure`` and ``done``."""
    play, measure, done = signals["play"], signals["measure"], signals["done"]
    stats, idle = TickStats(), TickStats()
    # Polled ten times a second, not a hundred: the idle phase measures the server, and a 10 ms poll of a
    # multiprocessing Event was a hundred extra wake-ups a second of it (play starts with two seconds of warm-up).
    await wait_event(play, 3600, interval=0.1)
    period = 1.0 / TICK_HZ
    start = time.monotonic()
    tick = 0
    measuring_since = 0.0
    while not done.is_set():
        due = start + tick * period
        now = time.monotonic()
        if now < due:
            await asyncio.sleep(due - now)
            continue
        current = stats if measuring_since else idle
        if not measuring_since and measure.is_set():
            measuring_since = now
            current = stats
        behind = int((now - due) / period)
        current.skipped += behind
        tick += behind
        send_all(tick, world.step(period * (1 + behind)), current)
        current.ticks += 1
        tick += 1
        await asyncio.sleep(0)
    stats.measured_s = time.monotonic() - measuring_since if measuring_since else 0.0
    return stats


# -- event loops --------------------------------------------------------------------------------------------------


def run_loop(main: Callable[[], Coroutine[Any, Any, None]], use_uvloop: bool, profile: bool = False) -> None:
    """Run ``main`` on uvloop (when asked and installed) or asyncio's loop; with ``profile`` under cProfile."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if use_uvloop:
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:
            pass
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main())
    finally:
        if profiler is not None:
            profiler.disable()
            _print_profile(profiler)


def _print_profile(profiler: Any, top: int = 40) -> None:
    import io
    import pstats

    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(top)
        body = text.getvalue()
        start = body.find("   ncalls")
        total = body[: body.find("   ncalls")].strip().splitlines()
        print(f"\n--- cProfile of the end point server, by {order} ({total[-1] if total else ''}) ---", file=sys.stderr)
        print(body[start:].rstrip(), file=sys.stderr, flush=True)


def _on_sigterm() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))


# -- the end point server and clients -----------------------------------------------------------------------------


def endpoint_game_server(
    aeron_dir: str,
    port: int,
    players: int,
    unreliable: bool,
    use_uvloop: bool,
    profile: bool,
    signals: Any,
    settings: dict[str, Any],
) -> None:
    """The game server on a ``Server`` with default settings: players join on connect, steer on ``Input``,
    get a ``Snapshot`` each tick."""
    _on_sigterm()

    async def serve() -> None:
        from endpoint import Connection, Server, ServerConfiguration

        serialization = game_serialization()
        if unreliable:  # this end's choice: every send of a Snapshot goes newest-wins (see send_unreliable)
            serialization.register(Snapshot, unreliable=True)
        config = ServerConfiguration(
            port=port, listen_address="127.0.0.1", aeron_dir=aeron_dir, serialization=serialization, **settings
        )
        server = Server(config)
        world = World(players)
        connections: dict[int, Connection] = {}
        errors: list[str] = []
        playing = [False]
        stats_box: list[TickStats] = []
        connected = signals["connected"]
        received = [0]
        """Inputs read so far (a measured window's are the difference)."""

        @server.on_connect
        def on_connect(conn: Connection) -> None:
            connections[conn.id] = conn
            world.add(conn.id)
            connected.value += 1

        closed: dict[str, int] = {}

        @server.on_disconnect
        def on_disconnect(conn: Connection) -> None:
            connections.pop(conn.id, None)
            world.remove(conn.id)
            connected.value -= 1
            _count_reason(closed, conn.close_reason)
            if playing[0] and stats_box:
                stats_box[0].lost += 1

        @server.on_message(Input)
        def on_input(conn: Connection, message: Input) -> None:
            received[0] += 1
            world.steer(conn.id, message.dx, message.dy)
            if stats_box:
                stats_box[0].input_ages.append(now_ns() - message.sent_ns)

        @server.on_error
        def on_error(conn: Connection | None, exc: BaseException) -> None:
            if len(errors) < 20:
                errors.append(f"{type(exc).__name__}: {exc}")

        now_ns = time.monotonic_ns
        broadcast = server.broadcast
        from endpoint.poller import LoopPoller

        poller = LoopPoller.for_running_loop()

        def poller_rounds() -> int:
            return int(getattr(poller, "rounds", 0))

        def send_all(tick: int, cells: Cells, stats: TickStats) -> None:
            if not stats_box or stats_box[0] is not stats:
                stats_box[:] = [stats]
                stats.inputs = -received[0]
                stats.rounds = -poller_rounds()
            playing[0] = True
            sent_ns = now_ns()  # the world as of this tick: staleness counts the time it takes to send it
            get = connections.get
            for view, members in cells:
                to = [c for c in map(get, members) if c is not None]
                # One encoding per cell for everyone in it; back pressure refuses (counted), never waits.
                taken = broadcast(Snapshot(tick, sent_ns, view), to=to)
                stats.sent += taken
                stats.refused += len(to) - taken

        try:
            async with server:
                signals["ready"].set()
                stats = await tick_loop(world, send_all, signals)
                playing[0] = False
                stats.inputs += received[0]
                stats.rounds += poller_rounds()
                stats.sum_up_inputs()
                signals["out"].put(("server", stats.__dict__, errors[:5], repr(server.handshake_stats), dict(closed)))
                await wait_event(signals["stop"], 300, interval=0.05)
        except Exception as exc:
            signals["out"].put(("server", None, [f"{type(exc).__name__}: {exc}"], "", {}))
            raise

    run_loop(serve, use_uvloop, profile)


_REASONS = 16
"""Distinct close reasons a process tallies (the rest are counted as "other")."""


def _count_reason(reasons: dict[str, int], reason: str) -> None:
    """Why connections closed, for the report: few distinct reasons (figures in them left out), each counted."""
    reason = re.sub(r"\d+(\.\d+)?", "#", reason)[:120]
    key = reason if reason in reasons or len(reasons) < _REASONS else "other"
    reasons[key] = reasons.get(key, 0) + 1


class ClientTally:
    """One client process's figures over the measured window."""

    def __init__(self, count: int) -> None:
        self.snapshots = [0] * count
        self.staleness_ns: list[int] = []
        self.lost = 0
        self.refused_inputs = 0
        self.inputs = 0
        """Inputs sent while measured."""
        self.measuring = False
        self.window_s = 0.0
        self.cpu_s = 0.0
        """This process's CPU (every thread, its driver's included) while measured."""
        self.closed: dict[str, int] = {}
        """Why this process's connections closed (before the run's end)."""
        self.rounds: Callable[[], int] = lambda: 0
        """Rounds this process's end point poller has run so far (0 where there is none)."""
        self.rounds_per_s = 0.0

    def report(self) -> tuple[Any, ...]:
        return (
            "played", self.snapshots, self.staleness_ns, self.lost, self.refused_inputs, self.window_s, self.inputs,
            self.cpu_s, self.closed, self.rounds_per_s,
        )  # fmt: skip


async def _follow_window(tally: ClientTally, signals: Any) -> None:
    """Measure between the parent's ``measure`` and ``done`` (polled, so handlers read a plain flag)."""
    await wait_event(signals["measure"], 3600, interval=0.01)
    began, cpu, rounds = time.monotonic(), time.process_time(), tally.rounds()
    tally.measuring = True
    await wait_event(signals["done"], 3600, interval=0.01)
    tally.measuring = False
    tally.window_s = time.monotonic() - began
    tally.cpu_s = time.process_time() - cpu
    tally.rounds_per_s = (tally.rounds() - rounds) / tally.window_s if tally.window_s > 0 else 0.0


async def _send_inputs(
    senders: Sequence[Callable[[Input], object]], tally: ClientTally, signals: Any, slots: int = 10
) -> None:
    """Every player sends an ``Input`` at :data:`INPUT_HZ`: one task for all of a process's players, which sends
    each slot's share of them, ``slots`` times a period (1: a bot farm's tick, every input at once)."""
    slots = max(1, slots)
    period = 1.0 / INPUT_HZ
    rand = random.Random(len(senders)).random  # (random() is a C call, uniform() a Python one)
    now_ns = time.monotonic_ns
    seq = 0
    start = time.monotonic()
    step = 0
    done = signals["done"]
    while not done.is_set():
        due = start + step * period / slots
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        chosen = senders[step % slots :: slots]
        for send in chosen:
            seq += 1
            try:
                if send(Input(seq, 10.0 * rand() - 5.0, 10.0 * rand() - 5.0, now_ns())) is False:
                    tally.refused_inputs += 1
            except Exception:
                tally.refused_inputs += 1
        if tally.measuring:
            tally.inputs += len(chosen)
        step += 1


def endpoint_game_clients(
    aeron_dir: str,
    port: int,
    count: int,
    concurrency: int,
    use_uvloop: bool,
    signals: Any,
    out: Any,
    settings: dict[str, Any],
    loss: float = 0.0,
    input_slots: int = 10,
) -> None:
    """``count`` UDP players in one process (sharing its driver): connect, wait for play, play, report.

    ``loss``: the share of the datagrams this process's driver receives that it drops (its debug fault setting),
    so the server's snapshots to these players are lost on the way."""
    _on_sigterm()
    if loss:
        os.environ["AERON_DEBUG_RECEIVE_LOSS_RATE"] = str(loss)

    async def run() -> None:
        from endpoint import Client, ClientConfiguration, Connection

        tally = ClientTally(count)
        now_ns = time.monotonic_ns
        connected_once = [False] * count

        def on_snapshot(index: int, conn: Connection, snapshot: Snapshot) -> None:
            if tally.measuring:
                tally.snapshots[index] += 1
                tally.staleness_ns.append(now_ns() - snapshot.sent_ns)

        def on_disconnect(index: int, conn: Connection) -> None:
            if connected_once[index] and not signals["stop"].is_set():
                tally.lost += 1
                _count_reason(tally.closed, conn.close_reason)

        from endpoint.poller import LoopPoller

        poller = LoopPoller.for_running_loop()
        tally.rounds = lambda: getattr(poller, "rounds", 0)
        clients = []
        for index in range(count):
            client = Client(
                ClientConfiguration(
                    aeron_dir=aeron_dir,
                    serialization=game_serialization(),
                    prefer_ipc=False,
                    connect_timeout=60.0,
                    **settings,
                )
            )
            client.on_message(Snapshot)(functools.partial(on_snapshot, index))
            client.on_disconnect(functools.partial(on_disconnect, index))
            clients.append(client)
        gate = asyncio.Semaphore(concurrency)

        async def connect(index: int) -> None:
            async with gate:
                await clients[index].connect("127.0.0.1", port)
                connected_once[index] = True

        start = time.perf_counter()
        outcomes = await asyncio.gather(*(connect(i) for i in range(count)), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        first = f"{type(failed[0]).__name__}: {failed[0]}" if failed else ""
        out.put(("connected", count - len(failed), time.perf_counter() - start, first))
        if await wait_event(signals["play"], 600, interval=0.01):
            senders = [c.send_nowait for c, ok in zip(clients, connected_once, strict=True) if ok]
            window = asyncio.ensure_future(_follow_window(tally, signals))
            await _send_inputs(senders, tally, signals, input_slots)
            await asyncio.wait_for(window, 60)
            out.put(tally.report())
        await wait_event(signals["stop"], 300, interval=0.05)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(c.close() for c in clients), return_exceptions=True), 30)

    run_loop(run, use_uvloop)


# -- the asyncio TCP + msgpack server and clients -----------------------------------------------------------------

_LENGTH = struct.Struct("<I")


def tcp_game_server(port: int, players: int, use_uvloop: bool, signals: Any) -> None:
    """The same game on ``asyncio.start_server``: a frame is a 4-byte length and a msgpack array."""
    _on_sigterm()

    async def serve() -> None:
        import msgpack

        world = World(players)
        writers: dict[int, asyncio.StreamWriter] = {}
        ids = iter(range(1, 1 << 30))
        playing = [False]
        stats_box: list[TickStats] = []
        connected = signals["connected"]
        unpackb, pack_length = msgpack.unpackb, _LENGTH.pack

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            player = next(ids)
            writers[player] = writer
            world.add(player)
            connected.value += 1
            try:
                while True:
                    header = await reader.readexactly(4)
                    _seq, dx, dy, sent_ns = unpackb(await reader.readexactly(_LENGTH.unpack(header)[0]))
                    world.steer(player, dx, dy)
                    if stats_box:
                        stats_box[0].input_ages.append(now_ns() - sent_ns)
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                pass  # the player left, or the server is shutting down
            finally:
                writers.pop(player, None)
                world.remove(player)
                connected.value -= 1
                if playing[0] and stats_box and not signals["done"].is_set():
                    stats_box[0].lost += 1
                writer.close()

        packb = msgpack.Packer().pack
        now_ns = time.monotonic_ns

        def send_all(tick: int, cells: Cells, stats: TickStats) -> None:
            if not stats_box or stats_box[0] is not stats:
                stats_box[:] = [stats]
            playing[0] = True
            sent_ns = now_ns()
            get = writers.get
            for view, members in cells:
                body = packb([tick, sent_ns, view])  # one encoding per cell, as the end point server does
                data = pack_length(len(body)) + body
                for player in members:
                    writer = get(player)
                    if writer is None:
                        continue
                    transport = writer.transport
                    if transport.is_closing():
                        continue
                    if transport.get_write_buffer_size() > SEND_BUFFER_LIMIT:
                        stats.refused += 1
                        continue
                    writer.write(data)
                    stats.sent += 1

        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            signals["ready"].set()
            stats = await tick_loop(world, send_all, signals)
            playing[0] = False
            stats.sum_up_inputs()
            signals["out"].put(("server", stats.__dict__, [], "", {}))
            await wait_event(signals["stop"], 300, interval=0.05)
            for writer in list(writers.values()):
                writer.close()

    run_loop(serve, use_uvloop)


def tcp_game_clients(
    port: int, count: int, concurrency: int, use_uvloop: bool, signals: Any, out: Any, input_slots: int = 10
) -> None:
    """``count`` TCP players in one process."""
    _on_sigterm()

    async def run() -> None:
        import msgpack

        tally = ClientTally(count)
        now_ns = time.monotonic_ns
        unpackb = msgpack.unpackb
        gate = asyncio.Semaphore(concurrency)
        writers: list[asyncio.StreamWriter | None] = [None] * count
        readers: list[asyncio.Task[None]] = []

        async def read(index: int, reader: asyncio.StreamReader) -> None:
            try:
                while True:
                    header = await reader.readexactly(4)
                    _tick, sent_ns, _view = unpackb(await reader.readexactly(_LENGTH.unpack(header)[0]))
                    if tally.measuring:
                        tally.snapshots[index] += 1
                        tally.staleness_ns.append(now_ns() - sent_ns)
            except (asyncio.IncompleteReadError, ConnectionError):
                if not signals["stop"].is_set():
                    tally.lost += 1

        async def connect(index: int) -> None:
            async with gate:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
                writers[index] = writer
                readers.append(asyncio.ensure_future(read(index, reader)))

        start = time.perf_counter()
        outcomes = await asyncio.gather(*(connect(i) for i in range(count)), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        first = f"{type(failed[0]).__name__}: {failed[0]}" if failed else ""
        out.put(("connected", count - len(failed), time.perf_counter() - start, first))
        packb, pack_length = msgpack.Packer().pack, _LENGTH.pack

        def sender(writer: asyncio.StreamWriter) -> Callable[[Input], object]:
            def send(message: Input) -> bool:
                if writer.transport.get_write_buffer_size() > SEND_BUFFER_LIMIT:
                    return False
                body = packb([message.seq, message.dx, message.dy, message.sent_ns])
                writer.write(pack_length(len(body)) + body)
                return True

            return send

        if await wait_event(signals["play"], 600, interval=0.01):
            window = asyncio.ensure_future(_follow_window(tally, signals))
            await _send_inputs([sender(w) for w in writers if w is not None], tally, signals, input_slots)
            await asyncio.wait_for(window, 60)
            out.put(tally.report())
        await wait_event(signals["stop"], 300, interval=0.05)
        for writer in writers:
            if writer is not None:
                writer.close()
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)

    run_loop(run, use_uvloop)


# -- one measurement ----------------------------------------------------------------------------------------------


class Result(NamedTuple):
    transport: str
    players: int
    connected: int
    connect_s: float
    idle_cpu: float
    """Server, % of one core, everyone connected and quiet."""
    play_cpu: float
    """Server, % of one core, while playing (measured window)."""
    client_cpu: float
    """All client processes together, % of one core, while playing."""
    snaps_mean: float
    snaps_min: float
    stale_p50_ms: float
    stale_p99_ms: float
    stale_max_ms: float
    lost_client: int
    lost_server: int
    tick_rate: float
    skipped: int
    refused: int
    refused_inputs: int
    error: str
    udp_drops: int = 0
    """Datagrams the kernel dropped for a full socket receive buffer while measured (the whole machine)."""
    idle_wakeups: float = float("nan")
    """Server, context switches per second of all its threads while idle: how often it is woken to run."""
    message_us: float = float("nan")
    """Server CPU per message while playing, µs: snapshots sent plus inputs read (the end point server counts
    both; what the bar's "under 50% of a core at 1,000 players" needs is 12.5)."""
    served: int = 0
    """Players that read :data:`SERVED_RATE` snapshots per second or more."""
    client_us_per_message: float = float("nan")
    """The player processes' CPU (as each measured its own) per message they handled (inputs sent + snapshots
    read), in µs: what a player costs its process, whatever the server managed to send."""
    client_rounds: float = float("nan")
    """Rounds per second the player processes' end point pollers ran (each runs their drivers' duty cycles)."""
    server_rounds: float = float("nan")
    """Rounds per second the server's end point poller ran while playing (each a pass of its driver's agents and
    its connections with data: what a round costs, over hundreds of connections, counts per round)."""
    input_p50_ms: float = float("nan")
    input_p99_ms: float = float("nan")
    """How long inputs took from the players' sends to the server's reads (p50, p99): a server behind on its
    socket reads them late even while its snapshots, sent at once, stay fresh."""

    @property
    def lost(self) -> int:
        return max(self.lost_client, self.lost_server)


def _get(queue: Any, timeout: float, what: str) -> Any:
    try:
        return queue.get(timeout=timeout)
    except Exception as exc:  # queue.Empty
        raise RuntimeError(f"no {what} within {timeout:g} s") from exc


def _cpu(pids: Sequence[int]) -> list[float]:
    out = []
    for pid in pids:
        try:
            out.append(cpu_seconds(pid))
        except OSError:
            out.append(float("nan"))
    return out


def _switches(pid: int) -> float:
    try:
        return float(context_switches(pid))
    except OSError:
        return float("nan")


_COUNTERS_PER_PLAYER = {"udp": 12, "udp-unreliable": 19}
"""Counters a UDP connection holds at the server (its streams' positions, the end point's three), with newest-wins
streams both ways when it uses them."""
_DEFAULT_COUNTERS_BYTES = 4 << 20
_COUNTERS_ROOM = 0.7 * (_DEFAULT_COUNTERS_BYTES // 128)
"""Counters the default file holds with room to spare (the end point's own stop at 75% of it)."""


def run_game(transport: str, players: int, args: argparse.Namespace, profile: bool = False) -> Result:
    """One server and ``args.processes`` client processes, ``players`` players between them."""
    endpoint = transport != "tcp"
    processes = max(1, min(args.processes, players))
    shares = [players // processes + (1 if i < players % processes else 0) for i in range(processes)]
    with children() as group:
        ctx = group.ctx
        signals = {name: ctx.Event() for name in ("ready", "play", "measure", "done", "stop")} | {
            "connected": ctx.Value("i", 0, lock=False),
            "out": ctx.Queue(),
        }
        out = ctx.Queue()
        port = free_port_both()
        uv = args.uvloop
        settings: dict[str, Any] = {"socket_rcvbuf": args.rcvbuf} if args.rcvbuf else {}
        server_settings = {**settings, "threading_mode": args.server_threading} if args.server_threading else settings
        if endpoint and players * _COUNTERS_PER_PLAYER[transport] > _COUNTERS_ROOM:
            # The server's counters file must hold every connection's (its default holds 32,768).
            need = players * _COUNTERS_PER_PLAYER[transport] / _COUNTERS_ROOM * _DEFAULT_COUNTERS_BYTES
            server_settings = {**server_settings, "counters_buffer_length": 1 << math.ceil(math.log2(need))}
        player_settings = {**settings, "threading_mode": args.player_threading} if args.player_threading else settings
        if endpoint:
            server_dir = fresh_aeron_dir("game-srv")
            group.dirs.append(server_dir)
            server = group.start(
                endpoint_game_server,
                str(server_dir),
                port,
                players,
                transport == "udp-unreliable",
                uv,
                profile,
                signals,
                server_settings,
            )
        else:
            server = group.start(tcp_game_server, port, players, uv, signals)
        if not signals["ready"].wait(60):
            raise RuntimeError(f"the {transport} server did not start")
        crowd = []
        for share in shares:
            if endpoint:
                client_dir = fresh_aeron_dir("game-cli")
                group.dirs.append(client_dir)
                crowd.append(
                    group.start(
                        endpoint_game_clients,
                        str(client_dir),
                        port,
                        share,
                        args.concurrency,
                        uv,
                        signals,
                        out,
                        player_settings,
                        args.loss,
                        args.input_slots,
                    )
                )
            else:
                crowd.append(
                    group.start(tcp_game_clients, port, share, args.concurrency, uv, signals, out, args.input_slots)
                )
            if args.players_nice:
                # Players stand for machines of their own: at a lower priority they take only what the server leaves.
                os.setpriority(os.PRIO_PROCESS, crowd[-1].pid, os.getpriority(os.PRIO_PROCESS, 0) + args.players_nice)
        niceness = sorted({os.getpriority(os.PRIO_PROCESS, proc.pid) for proc in crowd})  # read back: in effect
        note(f"{transport}: {players} players connecting from {processes} processes (nice {niceness})")
        connected, connect_s, errors = 0, 0.0, []
        for _ in crowd:
            _, got, seconds, first = _get(out, 120 + players / 5, "connect report")
            connected += got
            connect_s = max(connect_s, seconds)
            if first:
                errors.append(first)
        note(f"{transport}: {connected} connected in {connect_s:.1f} s (server holds {signals['connected'].value})")
        # Over UDP the handshakes' own streams close a few seconds after the last handshake.
        time.sleep(args.settle + (args.handshake_settle if endpoint else 0.0))
        before = _cpu([server.pid])[0]
        switches = _switches(server.pid)
        time.sleep(args.idle_seconds)
        idle_cpu = (_cpu([server.pid])[0] - before) / args.idle_seconds * 100
        idle_wakeups = (_switches(server.pid) - switches) / args.idle_seconds
        note(f"{transport}: idle server {idle_cpu:.1f} % of a core, {idle_wakeups:.0f} wake-ups/s")
        if args.idle_only:
            signals["done"].set()
            signals["play"].set()
            signals["measure"].set()
            signals["stop"].set()
            closed = _get(signals["out"], 60, "server report")[4]
            if closed:
                errors.append(f"server closed connections: {closed}")
            for proc in [*crowd, server]:
                group.join(proc, 30)
            nan = float("nan")
            return Result(
                transport, players, connected, connect_s, idle_cpu, nan, nan, nan, nan, nan, nan, nan, 0, 0, nan, 0, 0,
                0, "; ".join(errors), 0, idle_wakeups,
            )  # fmt: skip
        signals["play"].set()
        time.sleep(WARMUP_S)
        pids = [server.pid, *(p.pid for p in crowd)]
        drops = udp_receive_buffer_errors()
        before_all = _cpu(pids)
        began = time.monotonic()
        signals["measure"].set()
        time.sleep(args.duration)
        signals["done"].set()
        elapsed = time.monotonic() - began
        after_all = _cpu(pids)
        drops = udp_receive_buffer_errors() - drops
        cpu = [(a - b) / elapsed * 100 for a, b in zip(after_all, before_all, strict=True)]
        snapshots: list[int] = []
        rates: list[float] = []
        """Snapshots per second each player read, over its own process's measured window."""
        staleness: list[int] = []
        lost_client = refused_inputs = inputs = 0
        players_cpu_s = 0.0
        players_closed: dict[str, int] = {}
        players_rounds = 0.0
        for _ in crowd:
            _, counts, stale, lost, refused, window_s, sent, cpu_s, closed, rounds = _get(out, 120, "play report")
            players_rounds += rounds
            for reason, count in closed.items():
                players_closed[reason] = players_closed.get(reason, 0) + count
            snapshots += counts
            rates += [c / window_s for c in counts] if window_s > 0 else [0.0] * len(counts)
            staleness += stale
            lost_client += lost
            refused_inputs += refused
            inputs += sent
            players_cpu_s += cpu_s
        _, stats, server_errors, handshakes, server_closed = _get(signals["out"], 120, "server report")
        if server_closed:
            errors.append(f"server closed connections: {server_closed}")
        if players_closed:
            errors.append(f"players' connections closed: {players_closed}")
        signals["stop"].set()
        for proc in [*crowd, server]:
            if not group.join(proc, 60):
                errors.append(f"process {proc.pid} did not end within 60 s (stopped)")
        if stats is None:
            raise RuntimeError(f"{transport} server failed: {server_errors}")
        if server_errors:
            errors.append(f"server errors: {server_errors} {handshakes}")
    rates.sort()
    staleness.sort()
    messages = inputs + sum(snapshots)
    ms = 1e-6
    return Result(
        transport,
        players,
        connected,
        connect_s,
        idle_cpu,
        cpu[0],
        sum(cpu[1:]),
        sum(rates) / len(rates) if rates else float("nan"),
        rates[0] if rates else float("nan"),
        percentile(staleness, 50) * ms,
        percentile(staleness, 99) * ms,
        (staleness[-1] if staleness else float("nan")) * ms,
        lost_client,
        stats["lost"],
        stats["ticks"] / stats["measured_s"] if stats["measured_s"] else float("nan"),
        stats["skipped"],
        stats["refused"],
        refused_inputs,
        "; ".join(errors),
        drops,
        idle_wakeups,
        _message_us(cpu[0], stats),
        sum(1 for rate in rates if rate >= SERVED_RATE),
        players_cpu_s / messages * 1e6 if messages else float("nan"),
        players_rounds,
        stats["rounds"] / stats["measured_s"] if stats["measured_s"] and stats["rounds"] else float("nan"),
        stats["input_age_p50_ms"],
        stats["input_age_p99_ms"],
    )


def _message_us(cpu_percent: float, stats: dict[str, Any]) -> float:
    """Server CPU per message (snapshot sent or input read), µs; NaN when the server did not count its inputs."""
    messages = stats["sent"] + stats["inputs"]
    if not stats["measured_s"] or not stats["inputs"] or not messages:
        return float("nan")
    return cpu_percent / 100 * stats["measured_s"] / messages * 1e6


def udp_receive_buffer_errors() -> int:
    """The machine's UDP datagrams dropped so far for a full receive buffer (``RcvbufErrors``, /proc/net/snmp)."""
    try:
        lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Udp:")]
        return int(lines[1][lines[0].index("RcvbufErrors")])
    except (OSError, ValueError, IndexError):
        return 0


# -- main ---------------------------------------------------------------------------------------------------------


def _row(r: Result) -> tuple[object, ...]:
    return (
        r.transport,
        r.players,
        f"{r.connected}",
        f"{r.play_cpu:.0f} / {r.idle_cpu:.1f}",
        f"{r.message_us:.1f}",
        f"{r.idle_wakeups:.0f}",
        f"{r.snaps_mean:.1f} / {r.snaps_min:.1f}",
        f"{r.stale_p50_ms:.1f} / {r.stale_p99_ms:.1f}",
        f"{r.stale_max_ms:.0f}",
        f"{r.input_p50_ms:.1f} / {r.input_p99_ms:.1f}",
        f"{r.lost}",
        f"{r.tick_rate:.1f}",
        f"{r.skipped}",
        f"{r.refused}",
        f"{r.client_cpu:.0f}",
        f"{r.client_us_per_message:.1f}",
        f"{r.client_rounds:.0f}",
        f"{r.server_rounds:.0f}",
        f"{r.served}",
        f"{r.udp_drops}",
    )


_HEADER = [
    "",
    "players",
    "connected",
    "server CPU % play / idle",
    "server µs/msg",
    "idle wake-ups/s",
    "snapshots/s mean / min",
    "staleness ms p50 / p99",
    "max ms",
    "input age ms p50 / p99",
    "lost",
    "ticks/s",
    "skipped",
    "refused",
    "clients CPU %",
    "clients µs/msg",
    "clients rounds/s",
    "server rounds/s",
    "served",
    "UDP drops",
]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b and a == a and b == b else "-"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", default="200", help="player counts, comma-separated (e.g. 200,500,1000)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of play measured per count")
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="seconds of the idle measurement")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds to wait after connecting, before idle")
    parser.add_argument(
        "--handshake-settle", type=float, default=5.0, help="more seconds over UDP, for the handshake streams to close"
    )
    parser.add_argument("--rcvbuf", type=int, default=0, help="socket_rcvbuf of every end point's driver (0: default)")
    parser.add_argument(
        "--server-threading",
        default="",
        choices=["", "INVOKER", "SHARED", "SHARED_NETWORK", "DEDICATED"],
        help="the server's embedded driver: on its event loop (INVOKER, the default) or in threads of its own",
    )
    parser.add_argument(
        "--player-threading",
        default="",
        choices=["", "INVOKER", "SHARED", "SHARED_NETWORK", "DEDICATED"],
        help="the player processes' drivers (default: their default, INVOKER); the server keeps --server-threading",
    )
    parser.add_argument(
        "--input-slots",
        type=int,
        default=10,
        help="each player process sends its players' inputs in this many slots a period (1: all at once, a bot farm)",
    )
    parser.add_argument("--processes", type=int, default=4, help="client processes (each with a driver)")
    parser.add_argument(
        "--players-nice",
        type=int,
        default=0,
        help="raise the player processes' nice value by this much (both servers' players; 0: the server's priority)",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="handshakes in flight per client process")
    parser.add_argument("--tcp", action=argparse.BooleanOptionalAction, default=True, help="asyncio TCP beside it")
    parser.add_argument("--endpoint", action=argparse.BooleanOptionalAction, default=True, help="the end point")
    parser.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=True, help="uvloop if installed")
    parser.add_argument("--idle-only", action="store_true", help="connect and measure the idle server only")
    parser.add_argument("--unreliable", action="store_true", help="snapshots by conn.send_unreliable")
    parser.add_argument(
        "--loss",
        type=float,
        default=0.0,
        help="the players' drivers drop this share of what they receive; runs reliable and newest-wins snapshots",
    )
    parser.add_argument("--overload", type=float, default=0.0, help="one more run at this factor of the capacity")
    parser.add_argument("--capacity", type=int, default=0, help="players the server serves (default: from this run)")
    parser.add_argument("--profile", action="store_true", help="cProfile the end point server (stderr)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 players, 2 processes, 2 s of play")
    args = parser.parse_args(argv)
    if args.quick:
        args.players, args.processes, args.duration, args.idle_seconds = "20", 2, 2.0, 1.0
        args.settle, args.handshake_settle = 0.2, 1.0
    _on_sigterm()
    counts = [int(n) for n in args.players.split(",") if n.strip()]
    endpoint_transport = "udp"
    if args.unreliable:
        from endpoint import Connection

        if not hasattr(Connection, "send_unreliable"):
            sys.exit("--unreliable: this end point has no Connection.send_unreliable")
        endpoint_transport = "udp-unreliable"
    results: list[Result] = []
    pairs: list[tuple[Result | None, Result | None]] = []
    failed: list[str] = []

    def one(transport: str, n: int) -> Result | None:
        try:
            result = run_game(transport, n, args, profile=args.profile and transport != "tcp")
        except Exception as exc:
            note(f"{transport} {n}: FAILED: {type(exc).__name__}: {exc}")
            failed.append(f"{transport} {n}")
            return None
        note(
            f"{transport} {n}: {result.connected} connected, {result.served} served (>= {SERVED_RATE:g} snapshots/s); "
            f"server {result.play_cpu:.0f}% playing, {result.snaps_mean:.1f} snapshots/s, "
            f"p99 {result.stale_p99_ms:.1f} ms, inputs read {result.input_p99_ms:.1f} ms late at p99, "
            f"lost {result.lost}; players {result.client_cpu:.0f}% "
            f"({result.client_us_per_message:.1f} µs per message)"
        )
        results.append(result)
        return result

    loss_pairs: list[tuple[Result, Result]] = []
    for n in counts:
        ours = one(endpoint_transport, n) if args.endpoint else None
        if args.loss and args.endpoint:
            other = one("udp" if endpoint_transport == "udp-unreliable" else "udp-unreliable", n)
            if ours is not None and other is not None:
                loss_pairs.append((ours, other) if ours.transport == "udp" else (other, ours))
        theirs = one("tcp", n) if args.tcp else None
        pairs.append((ours, theirs))
    overload_result = None
    if args.overload and args.endpoint and not args.idle_only:
        capacity = args.capacity or max(
            (r.players for r in results if r.transport != "tcp" and r.snaps_min >= SERVED_RATE), default=0
        )
        if capacity:
            overload_result = one(endpoint_transport, round(capacity * args.overload))
        else:
            note("--overload: no player count was served at 19.5 snapshots/s; give --capacity")

    print_table(
        f"Game server: inputs and snapshots ({VIEW} players each) at {TICK_HZ} Hz, {args.processes} client processes, "
        f"{args.duration:g} s measured ({'uvloop' if args.uvloop else 'asyncio loop'})",
        _HEADER,
        [_row(r) for r in results],
    )
    ratios = []
    for ours, theirs in pairs:
        if ours is None or theirs is None:
            continue
        ratios.append(
            (
                ours.players,
                _ratio(ours.play_cpu, theirs.play_cpu),
                _ratio(ours.idle_cpu, theirs.idle_cpu),
                _ratio(ours.snaps_mean, theirs.snaps_mean),
                _ratio(ours.stale_p99_ms, theirs.stale_p99_ms),
            )
        )
    if ratios:
        print_table(
            "End point / asyncio TCP + msgpack, same run",
            ["players", "server CPU playing", "server CPU idle", "snapshots/s", "staleness p99"],
            ratios,
        )
    tick_ms = 1000 / TICK_HZ
    for reliable, newest in loss_pairs:
        p99 = newest.stale_p99_ms
        verdict = "within" if p99 <= 2 * tick_ms else "NOT within"
        print(
            f"\n  {args.loss:.0%} loss, {reliable.players} players: staleness p99 reliable "
            f"{reliable.stale_p99_ms:.1f} ms, newest-wins {p99:.1f} ms ({p99 / tick_ms:.1f} ticks): {verdict} two ticks"
        )
    if overload_result is not None:
        r = overload_result
        print(
            f"\n  overload: {r.players} players ({args.overload:g} x capacity): tick rate {r.tick_rate:.1f} of "
            f"{TICK_HZ} ({r.skipped} ticks skipped), {r.snaps_mean:.1f} snapshots/s (worst client {r.snaps_min:.1f}), "
            f"{r.lost} connections lost"
        )
    for r in results:
        if r.snaps_mean == r.snaps_mean:
            print(
                f"  {r.transport} {r.players}: {r.connected} of {r.players} connected, {r.served} served "
                f"(>= {SERVED_RATE:g} snapshots/s each)"
            )
    for r in results:
        if r.error:
            print(f"  {r.transport} {r.players}: {r.error}")
        if r.refused_inputs:
            print(f"  {r.transport} {r.players}: {r.refused_inputs} inputs refused by back pressure")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
