"""The one task per event loop that polls every end point on it (and drives INVOKER-mode drivers).

It knows an end point only as a :class:`Polled` (:class:`endpoint.base.EndPoint` is one): the end points
register with it, not the other way round.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

from driver.agent import AgentInvoker, tighten_timer_slack
from driver.client.subscription import Image
from driver.concurrent._watches import FrameWatch
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.media._net import ImageJournal
from endpoint.config import Configuration
from endpoint.connection.liveness import tick_interval_ns
from endpoint.connection.shell import Connection
from endpoint.handshake.routes import HandshakeRoutes
from endpoint.registry import SharedDriver

__all__ = ["FEEDBACK_WAIT_NS", "LoopPoller", "Polled", "ReadFlow", "feedback_wake_ns", "nap_plan"]

_FrameEntry = tuple[AtomicBuffer, int, tuple[AtomicBuffer, ...], int, int]
"""One image in a :class:`FrameWatch`: its position counter and offset, its terms, position bits, term mask."""

_TICK_NS = 100_000_000
_MIN_TICK_NS = 10_000_000
"""Timers run every half ``ping_interval`` (so a dead peer is found within ``peer_timeout`` plus one
``ping_interval``), but at most every 100 ms and at least every 10 ms."""
_BREATHE_EVERY_NS = 500_000
_BREATHE_S = 0.000_02
_SPIN_NS = 1_000_000
"""How long a round with nothing to do still spins after we sent or a driver command came: an answer may follow."""
_SPIN_AFTER_READ_NS = 100_000
"""How long it spins after rounds that only read messages (where arrivals end naps, only in a flow: see
:meth:`LoopPoller._spins`): the rest of a burst. Longer would spin for good on a flow that thins out."""
_FLOW_WINDOW_NS = 1_000_000
_FLOW_READS = 64
"""Messages read per :data:`_FLOW_WINDOW_NS` that make a flow (64,000 a second): a stream at full rate, whose
reader, once it spins, reads each next batch at once instead of after a wake-up. A game server's players' inputs
(1,000 players at 20 Hz: one every 50 µs) are not one: spinning after each of them kept its loop running empty
rounds (a driver duty cycle and a loop iteration each) 2,700 times a second, a few % of a core, for arrivals that
end a nap anyway."""
_SPIN_HANDSHAKES_MAX = 8
"""A loop with more handshakes than this waiting on its routes is in a connect storm: it does not spin for their
answers, which then arrive all the time and end its naps. Spinning there cost a process of 100 clients (a route
each) a quarter of its CPU, taken from the server on the same host. A few handshakes still spin (see
``endpoint.handshake.routes``)."""
_SHALLOW_IDLE_NS = 1_000_000_000
_SHALLOW_SLEEP_S = 0.001
_DEEP_SLEEP_S = 0.01
_MIN_NAP_NS = 1_000_000
"""A nap until the next timer is at least this long (a timer due sooner is run a little late rather than
spinning for it)."""
_BUSY_NAP_NS = 10_000_000
"""A poller that sleeps soundly (see :meth:`LoopPoller._sound`) naps at most this long within a second of its last
work: whatever arrives wakes it, and the driver's own timers (a NAK repeated, a status message due) are run at
least this often while traffic flows."""
FEEDBACK_WAIT_NS = _TICK_NS
"""How long feedback to the driver's publications (status messages, NAKs) that arrives during a deep nap may
wait before it ends the nap (see :func:`feedback_wake_ns`): one step of the timer grid, so in practice it waits
for the timer round that ends the nap anyway. An idle server's 1,000 clients send it 1,000 status messages a
second, spread evenly; waking for them every 25 ms tripled its rounds (each a driver duty cycle over every
stream and a look at every connection) for nothing: a status message of an idle receiver changes nothing that
cannot wait 100 ms (the publication's connection timeout is seconds), and a NAK then asks for data sent more than
a second ago. A server's driver reads each client's feedback on a socket of its own; a socket shared by many
publications is read up to ``FEEDBACK_BATCH`` datagrams per duty cycle, two cycles per timer round, which
covers the status messages of over a thousand images behind it."""


def nap_plan(
    now_ns: int, last_work_ns: int, next_tick_ns: int, sound: bool, naps_early: bool = False
) -> tuple[int, bool]:
    """How long to nap, and whether feedback arriving meanwhile may wait (:func:`feedback_wake_ns`). Pure.

    Within a second of the last work: up to :data:`_BUSY_NAP_NS` (until the next timer) if ``naps_early`` (see
    :meth:`LoopPoller._naps_early`), else 1 ms (more may follow, and the driver's own short timers, a NAK's delay
    or a resend, are served at that cadence); after that until the next timer when whatever arrives ends the
    nap anyway (``sound``), else 10 ms. Only in the first of those deep naps may feedback wait: then this end
    sent nothing for a second, so feedback only refreshes what the driver knows of idle receivers, while data,
    setups and commands still end the nap at once (the first message after idle is not made to wait)."""
    if now_ns - last_work_ns < _SHALLOW_IDLE_NS:
        if naps_early:
            return max(_MIN_NAP_NS, min(next_tick_ns - now_ns, _BUSY_NAP_NS)), False
        return int(_SHALLOW_SLEEP_S * 1e9), False
    if sound:
        return max(_MIN_NAP_NS, next_tick_ns - now_ns), True
    return int(_DEEP_SLEEP_S * 1e9), False


class ReadFlow:
    """Whether the messages a loop reads come as a flow (at least :data:`_FLOW_READS` per
    :data:`_FLOW_WINDOW_NS`) or spread out, judged over the last window and the current one. Pure: time is
    passed in."""

    __slots__ = ("_count", "_start_ns", "flowing")

    def __init__(self, now_ns: int) -> None:
        self._start_ns = now_ns
        self._count = 0
        self.flowing = False

    def add(self, now_ns: int, read: int) -> bool:
        """Count ``read`` messages read at ``now_ns``; whether they flow."""
        count = self._count + read
        elapsed = now_ns - self._start_ns
        if elapsed >= _FLOW_WINDOW_NS:  # a window ends: its rate decides (a nap may have made it longer)
            self.flowing = count * _FLOW_WINDOW_NS >= _FLOW_READS * elapsed
            self._start_ns = now_ns
            self._count = 0
        else:
            self._count = count
            if count >= _FLOW_READS:  # a flow that starts is one before its window ends
                self.flowing = True
        return self.flowing


def feedback_wake_ns(arrived_ns: int, nap_end_ns: int) -> int | None:
    """When feedback that arrived at ``arrived_ns`` during a deep nap should end it: :data:`FEEDBACK_WAIT_NS`
    later, or None if the nap ends by then anyway. Pure.

    An idle server's clients send status messages spread evenly over each second (every image has its own
    timer), and a wake-up for each one costs a duty cycle over every stream; waiting lets the next timer round
    read them all (see :data:`FEEDBACK_WAIT_NS`)."""
    wake_ns = arrived_ns + FEEDBACK_WAIT_NS
    return wake_ns if wake_ns < nap_end_ns else None


class Polled(Protocol):
    """What the poller needs of an end point."""

    @property
    def config(self) -> Configuration: ...

    @property
    def _shared(self) -> SharedDriver | None: ...

    @property
    def _mapped(self) -> tuple[Connection, ...]:
        """Its connections whose image is mapped (asked for on a full rebuild only: end points came or went)."""
        ...

    @property
    def _network_connections(self) -> int:
        """How many of its connections are over UDP."""
        ...

    @property
    def _unmapped(self) -> tuple[Connection, ...]: ...

    @property
    def polls_handshakes(self) -> bool:
        """It has streams of its own to poll every round (a server's handshake streams)."""
        ...

    def _poll_unmapped(self) -> int: ...

    @property
    def _sleeps_soundly(self) -> bool:
        """Whatever it waits for wakes the poller when it comes (a datagram, a command, a send of this loop)."""
        ...

    def _tick(self, now_ns: int) -> bool:
        """Its timers; True if they may have written something for the driver to send."""
        ...

    def _notify_error(self, connection: Connection | None, error: BaseException) -> None: ...

    def _begin_restart(self, driver: SharedDriver, cause: BaseException) -> None:
        """Its driver failed: drop what ran on it and lease it again (once, however often told)."""
        ...


class LoopPoller:
    """The one task per event loop that polls every end point on that loop.

    A process running many clients (bots, tests) then pays for one wake-up per
    idle period, not one per end point, and one native call finds the
    connections with data; when every image is UDP on a driver run here, the
    drivers' image journals name them instead (a round costs what came, not
    how many connections there are). When there is work it yields to the loop after each
    round; when there is none it waits: ``busy_spin`` (if any end point asked
    for it) only yields; otherwise it keeps yielding for 1 ms after it last
    sent or handled a driver command (0.1 ms after it last only read messages),
    then sleeps 1 ms, and after a second without work sleeps until its
    next timer when anything that arrives wakes it anyway (see below), 10 ms
    otherwise, so idle end points cost little. On a loop of clients only, when
    anything that arrives wakes it, it neither yields for that millisecond nor
    sleeps only 1 ms: it naps at once, 10 ms at most within a second of work
    (the driver's timers), so a process of many UDP clients with traffic every
    few milliseconds (a bot farm) does not run a whole round, the driver's duty
    cycle included, over and over between its datagrams. Keepalive pings are
    not work.
    At every point of a 100 ms grid (or of half the shortest ``ping_interval``,
    down to 10 ms) it runs the end points' timers: the connections that are
    due on their agendas (keepalives, dead-peer timeouts), handshake expiry,
    driver health. Timers on a grid shared by every end point (and every
    process: the clock is the machine's) fall due together, so their work
    and the datagrams it sends come in one wake-up, not many.

    An embedded driver in INVOKER mode runs here too, one duty cycle per round:
    the driver, the end points and the loop then share one thread and never wait
    for each other's GIL hand-offs. A datagram on one of that driver's sockets
    ends a nap at once (the poller watches them with an epoll set of its own,
    itself watched by the loop). So does a client's command (the driver's
    doorbell) and a send of this loop's (:meth:`poke`). When every end point on
    the loop is on such a driver and none waits for what rings nothing (a
    connection over IPC, a handshake under way or arriving over IPC, an image
    not yet mapped), nothing can arrive unseen, and an idle poller sleeps until
    its next timer: an idle server wakes for the datagrams it gets and for its
    timers, not on a fixed period.
    """

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPoller] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.endpoints: tuple[Polled, ...] = ()
        self._polling_unmapped: tuple[Polled, ...] = ()
        self._busy_spin = False
        self._tick_ns = _TICK_NS
        self.task: asyncio.Task[None] | None = None
        self.changed = True
        self._poked = False
        self._wake: asyncio.Future[None] | None = None
        self._mapped: list[Connection] = []
        """The owner of each entry of ``_frames`` (a connection with an unreliable image owns two)."""
        self._entries: list[_FrameEntry] = []
        self._watching: dict[int, tuple[Polled, Connection, list[Image]]] = {}
        """The connections in ``_frames`` (by ``id``), in their order there, with their end point and images."""
        self._entries_of: dict[int, list[int]] = {}
        """The indices in ``_frames`` of each image (by registration id, as the driver's image journal names it)."""
        self._journals: list[tuple[SharedDriver, ImageJournal, int]] = []
        """Each INVOKER-mode driver's journal of images its receiver wrote to, and how far it has been read."""
        self._look_all = True
        """Look at every image next round (a tick, an image mapped, a journal changed or overrun): otherwise, while
        every image is UDP on a driver run here, only those its journal names and those read last round."""
        self._carried: list[int] = []
        """Indices polled last round that read all a poll takes or hold off reading (more may wait there)."""
        self.looks_spared = 0
        """Rounds that looked only at the images a driver's journal named, not at every image."""
        self._rewatch: dict[int, tuple[Polled, Connection, bool]] = {}
        """Connections whose place in ``_frames`` changed since the last round (taken in at the next)."""
        self._unmapped_pollers: dict[int, Polled] = {}
        self._frames = FrameWatch([])
        self._udp_only = True
        """No connection in ``_frames`` reads an IPC log (whose frames its publisher writes, not our driver)."""
        self._routes_scanned: int | None = None
        self._routes_spin_until_ns = 0
        """The same for the handshake routes' answers (UDP routes only), and until when the last look found a
        handshake expecting an answer soon (the rounds between keep spinning)."""
        self.route_scans_skipped = 0
        """Rounds that did not look at the handshake routes waiting for answers (no datagram since a look)."""
        self._drivers: tuple[SharedDriver, ...] = ()
        """The drivers of the end points that run on this loop (INVOKER mode)."""
        self._leased: tuple[SharedDriver, ...] = ()
        """Every driver an end point here leases."""
        self._invokers: tuple[AgentInvoker, ...] = ()
        self._driver_invokers: tuple[AgentInvoker, ...] = ()
        self._network = False
        self._wakeable = False
        self._sound_base = False
        """Wakeable, and every end point that is not polled for handshakes or unmapped images sleeps soundly
        (those that are say so each time, see :meth:`_sound`)."""
        self._serving = False
        """A server is polled here: after work the poller keeps yielding and napping briefly as before (the early
        nap was measured for processes of clients; a server's play under load is judged separately)."""
        self._commands_handled = 0
        self.rounds = 0
        """Rounds run so far (each runs the INVOKER-mode drivers' duty cycles): how busy the poller keeps itself."""
        self.flushes_after_work = 0
        """Duty cycles run again at the end of a round with work, so that what it wrote leaves before the loop runs
        anything else (a server's loop only: see :meth:`_rounds`)."""
        self._breathe = False
        self._sockets = _SocketWatch(self._end_nap, self._on_feedback)
        self._sockets_version: tuple[tuple[int, int], ...] = ()
        self._nap_end_ns = 0
        """When the current nap ends (0 when not napping, or feedback may not wait: see :meth:`_on_feedback`)."""
        self._feedback_wake: asyncio.TimerHandle | None = None
        self.routes = HandshakeRoutes()
        """The clients' handshake routes on this loop."""

    @classmethod
    def for_running_loop(cls) -> LoopPoller:
        loop = asyncio.get_running_loop()
        poller = cls._by_loop.get(loop)
        if poller is None:
            poller = cls._by_loop[loop] = cls()
        return poller

    def add(self, endpoint: Polled) -> None:
        self.endpoints = (*self.endpoints, endpoint)
        self.changed = True
        for connection in endpoint._mapped:  # its own only: the others' are watched already
            self.rewatch(endpoint, connection, True)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name="endpoint poller")

    def remove(self, endpoint: Polled) -> None:
        self.endpoints = tuple(e for e in self.endpoints if e is not endpoint)
        self.changed = True
        self._rewatch = {k: v for k, v in self._rewatch.items() if v[0] is not endpoint}
        mine = [k for k, (owner, _, _) in self._watching.items() if owner is endpoint]
        if mine:
            for key in mine:
                del self._watching[key]
            self._rewatch_all()

    def rewatch(self, endpoint: Polled, connection: Connection, watch: bool) -> None:
        """``connection`` of ``endpoint`` came, went or had an image mapped or let go; ``watch``: its images are
        to be checked natively from now on. Taken in at the start of the next round, touching only the
        connections named (a storm of connects costs each connect the same, however many are open)."""
        self._rewatch[id(connection)] = (endpoint, connection, watch)

    def _collect(self) -> None:
        """What the end points ask of the poller (taken again when one comes or goes, or its driver changes);
        their connections are taken in one by one (:meth:`rewatch`), never by walking them all."""
        self.changed = False
        # A process of many clients (bots, tests) has many end points with nothing to poll but mapped images.
        self._unmapped_pollers = {id(e): e for e in self.endpoints if e._unmapped or e.polls_handshakes}
        self._polling_unmapped = tuple(self._unmapped_pollers.values())
        self._busy_spin = any(e.config.idle_strategy == "busy_spin" for e in self.endpoints)
        self._tick_ns = min(
            (tick_interval_ns(int(e.config.ping_interval * 1e9), _TICK_NS, _MIN_TICK_NS) for e in self.endpoints),
            default=_TICK_NS,
        )
        drivers = {id(e._shared): e._shared for e in self.endpoints if e._shared is not None}
        self._leased = tuple(drivers.values())
        self._drivers = tuple(d for d in drivers.values() if d.invokers)
        self._invokers = tuple(i for d in self._drivers for i in d.invokers)
        # Taken now: a restart stops a driver from a worker thread, and its ``invokers`` then read as empty.
        self._driver_invokers = tuple(d.invokers[0] for d in self._drivers if d.invokers)
        self._network = any(e._network_connections for e in self.endpoints)
        # Threads of a driver (or a driver client) in this process need the GIL now and then; INVOKER ones don't.
        self._breathe = any(not d.invokers for d in drivers.values())
        # Anything that arrives wakes a nap if every end point is on an INVOKER-mode driver whose sockets and
        # doorbell are watched (and each end point says it waits for nothing else: see _nap_plan).
        self._wakeable = (
            bool(self._drivers)
            and len(self._drivers) == len(drivers)
            and all(e._shared is not None for e in self.endpoints)
        )
        # The rest can change only through a new poll set (IPC connections, images mapped), which brings us here.
        polling = set(map(id, self._polling_unmapped))
        self._sound_base = self._wakeable and all(e._sleeps_soundly for e in self.endpoints if id(e) not in polling)
        self._serving = any(e.polls_handshakes for e in self.endpoints)

    def _rewatch_all(self) -> None:
        """``_frames`` and its owners made again from ``_watching``."""
        self._mapped = [c for _, c, images in self._watching.values() for _ in images]
        watched = [image for _, _, images in self._watching.values() for image in images]
        self._entries = [image.ready_entry for image in watched]
        self._entries_of = {}
        for index, image in enumerate(watched):
            self._entries_of.setdefault(image.correlation_id, []).append(index)
        self._frames = FrameWatch(self._entries)
        self._udp_only = not any(c.is_ipc for c in self._mapped)
        self._look_all = True

    def _take_rewatched(self) -> None:
        """Take in the connections named by :meth:`rewatch` since the last round: new ones are appended to the
        native check; one leaving or changing has the list made again."""
        pending = self._rewatch
        self._rewatch = {}
        watching = self._watching
        watched_before = len(self._entries)
        rebuild = False
        touched: dict[int, Polled] = {}
        network = False
        for key, (endpoint, connection, watch) in pending.items():
            touched[id(endpoint)] = endpoint
            network = network or not connection.is_ipc
            if watching.pop(key, None) is not None:
                rebuild = True
            images = _watched_images(connection) if watch else []
            if images:
                watching[key] = (endpoint, connection, images)
                if not rebuild:
                    for image in images:
                        self._entries_of.setdefault(image.correlation_id, []).append(len(self._entries))
                        self._mapped.append(connection)
                        self._entries.append(image.ready_entry)
                    if connection.is_ipc:
                        self._udp_only = False
        if rebuild:
            self._rewatch_all()
        elif len(self._entries) > watched_before:
            self._frames.extend(self._entries[watched_before:])
            self._look_all = True
        pollers = self._unmapped_pollers
        moved = False
        for key, endpoint in touched.items():
            wanted = bool(endpoint._unmapped) or endpoint.polls_handshakes
            if wanted != (key in pollers):
                moved = True
                if wanted:
                    pollers[key] = endpoint
                else:
                    del pollers[key]
        if moved:
            self._polling_unmapped = tuple(pollers.values())
        # A UDP connection came where there was none, or an end point touched has none left: ask them all.
        if (network and not self._network) or (
            self._network and not all(e._network_connections for e in touched.values())
        ):
            self._network = any(e._network_connections for e in self.endpoints)

    async def _run(self) -> None:
        try:
            while self.endpoints:
                try:
                    await self._rounds()
                except Exception as exc:  # a bug of ours must not leave every end point on this loop unpolled
                    for endpoint in self.endpoints:
                        endpoint._notify_error(None, exc)
                    self.changed = True
                    await asyncio.sleep(0.01)
        finally:  # also when the loop shuts down and cancels us
            self._sockets.close()
            self._sockets_version = ()
            self.task = None

    async def _rounds(self) -> None:
        monotonic_ns = time.monotonic_ns
        sleep = asyncio.sleep
        next_tick = 0
        last_breath = 0
        last_work = last_exchange = last_read = monotonic_ns()
        flow = ReadFlow(last_work)
        tighten_timer_slack()  # the brief stops below should not last the default 50 µs slack longer
        while self.endpoints:
            endpoints = self.endpoints
            self.rounds += 1
            work = 0
            read = 0
            if self._drivers:
                stamp = monotonic_ns()
                for driver in self._drivers:
                    driver.driven_ns = stamp
                for invoker in self._invokers:
                    invoker.invoke()
                # The driver's own work is not counted: its timers would keep the poller from ever napping
                # deeply, and data it receives shows up in images anyway. Commands are: a client (maybe in
                # another process) is mid-conversation with it, e.g. a handshake, and waits for each answer.
                commands = sum(driver.commands_handled() for driver in self._drivers)
                if commands != self._commands_handled:
                    self._commands_handled = commands
                    work += 1
            if self.changed:
                self._collect()
            if self._rewatch:
                self._take_rewatched()  # (an image just mapped may hold frames that came before: all are looked at)
            for endpoint in self._polling_unmapped:
                try:
                    work += endpoint._poll_unmapped()
                except Exception as exc:  # a broken end point must not stop the others
                    endpoint._notify_error(None, exc)
            if self.routes.polled:
                stamp = monotonic_ns()
                drain = stamp >= next_tick  # also the routes nobody waits on: IPC answer streams are shared
                # A UDP route's answers come only with a datagram our driver read, so a process of many clients (a
                # route each) does not look at every route every round of a storm.
                version = self._data_version() if self.routes.udp_only and self._wakeable else None
                if drain or version is None or version != self._routes_scanned:
                    answers = 0
                    spin_until = 0
                    waiting = 0
                    for route in self.routes.polled:
                        if drain or route.waiting:
                            answers += route.poll()
                            if route.waiting:
                                waiting += len(route.waiting)
                                spin_until = max(spin_until, route.spin_until_ns)
                    work += answers
                    self._routes_scanned = None if answers else version
                    self._routes_spin_until_ns = spin_until if waiting <= _SPIN_HANDSHAKES_MAX else 0
                else:
                    self.route_scans_skipped += 1
                if stamp < self._routes_spin_until_ns:
                    work += 1  # an answer is expected within milliseconds: keep spinning
            if self._mapped:
                # Every image UDP on drivers run here: frames come only where their receivers wrote, which their
                # journals name, so only those images (and those read last round) are polled, not every image
                # looked at (a server's round finds a few of its thousand players' inputs).
                written = self._journal_written() if self._udp_only and self._wakeable else None
                if written is not None:
                    self.looks_spared += 1
                    ready = self._carried
                    if written:
                        entries_of = self._entries_of
                        indices = set(ready)
                        for image_id in written:
                            indices.update(entries_of.get(image_id, ()))
                        ready = sorted(indices)
                else:  # otherwise one native call finds the connections with a frame waiting
                    ready = self._frames.ready()
                if ready:
                    ready_read, self._carried = _poll_connections(self._mapped, ready)
                    read += ready_read
                else:
                    self._carried = []
            now = monotonic_ns()
            if now >= next_tick:
                next_tick = (now // self._tick_ns + 1) * self._tick_ns  # on the grid (see the class docstring)
                self._look_all = True  # (every image is looked at once a step, come what may)
                self.routes.tick(now)
                self._check_drivers()
                wrote = False
                for endpoint in endpoints:
                    try:
                        wrote = endpoint._tick(now) or wrote
                    except Exception as exc:
                        wrote = True
                        endpoint._notify_error(None, exc)
                # UDP: what the timers wrote (keepalives, cancels, acks) leaves in this wake-up; a step at which
                # no timer looked at anything needs no second duty cycle
                if self._network and wrote:
                    for invoker in self._driver_invokers:
                        invoker.invoke()
            if self._breathe and now - last_breath > _BREATHE_EVERY_NS and threading.active_count() > 1:
                last_breath = now
                # Yielding to the loop hands the GIL back and takes it again at once, which starves the
                # driver's threads in this process (an embedded driver, the driver client's conductor):
                # CPython lets a waiting thread force a switch only if the holder never released it. So a
                # spinning loop stops briefly now and then; otherwise publisher limits and heartbeats stall.
                time.sleep(_BREATHE_S)
            if work or self._poked:  # (a listener that answered poked)
                last_exchange = now
            if work or read or self._poked:
                self._poked = False
                last_work = now
                if read and (not self._sound_base or flow.add(now, read)):
                    last_read = now  # (what a spin waits out: see _spins)
                if self._network and self._serving:  # UDP: send what this round wrote, acknowledge what it read, now
                    self.flushes_after_work += 1
                    for invoker in self._driver_invokers:
                        invoker.invoke()
                # A loop of clients only leaves that to the next round, which follows at once and begins with the
                # duty cycle: a player process (hundreds of clients on one driver, rounds of a few snapshots read
                # or inputs sent) runs one duty cycle per round instead of two.
                await sleep(0)
            elif self._spins(now, last_read, last_exchange):
                await sleep(0)
            elif await self._nap_driving(*self._nap_plan(now, last_work, next_tick)):
                last_breath = monotonic_ns()  # a nap let the other threads run: no breath owed after it
            else:
                # Work waits in the driver (a client's command, a hand-off between its agents): the next round
                # does it. A command counts as work there; the driver's own hand-offs do not start a second of
                # short naps.
                await sleep(0)

    def _journal_written(self) -> list[int] | None:
        """The images our drivers' receivers wrote to since the last round (by registration id), or None when
        every image must be looked at this round: :attr:`_look_all` was set, a driver has no journal (not run
        here) or a new one (restarted), or a reader fell behind one."""
        look_all = self._look_all
        self._look_all = False
        journals = self._journals
        drivers = self._drivers
        if len(journals) != len(drivers) or any(d is not j[0] for d, j in zip(drivers, journals, strict=False)):
            journals = self._journals = []
            for driver in drivers:
                journal = driver.image_journal()
                if journal is None:
                    return None
                journals.append((driver, journal, journal.written))
            return None
        written: list[int] = []
        for index, (driver, journal, cursor) in enumerate(journals):
            if driver.image_journal() is not journal:
                self._journals = []
                return None
            cursor, ids = journal.since(cursor)
            journals[index] = (driver, journal, cursor)
            if ids is None:
                look_all = True
            elif ids:
                written += ids
        return None if look_all else written

    def _data_version(self) -> int | None:
        """The INVOKER-mode drivers' data versions together (see :meth:`SharedDriver.data_version`); None if one
        has none."""
        total = 0
        for driver in self._drivers:
            version = driver.data_version()
            if version is None:
                return None
            total += version
        return total

    def _sound(self) -> bool:
        """Nothing any end point here waits for can arrive without waking a nap: every one is on an INVOKER-mode
        driver whose sockets and doorbell are watched, none reads an IPC log or waits for an image to be mapped,
        no handshake is under way on a server or on an IPC route of this loop's clients (a UDP route's answers
        are datagrams our driver reads; what a handshake sends pokes the poller)."""
        routes = self.routes
        return (
            self._sound_base
            and all(e._sleeps_soundly for e in self._polling_unmapped)
            and (routes.udp_only or not any(route.waiting for route in routes.polled))
        )

    def _naps_early(self) -> bool:
        """Within a second of work, nap at once and up to :data:`_BUSY_NAP_NS`: nothing can arrive unseen, and no
        server is polled here (a process of clients: players, bots, load generators)."""
        return not self._serving and self._sound()

    def _spins(self, now: int, last_read: int, last_exchange: int) -> bool:
        """Yield rather than nap: ``busy_spin``, or within a millisecond of a send or driver command (an answer
        then usually comes within that millisecond; 0.1 ms after ``last_read``) unless :meth:`_naps_early`.

        ``last_read``: the last round that read messages of a flow (see :class:`ReadFlow`, asked only then) when
        whatever arrives ends a nap (:attr:`_sound_base`: UDP on drivers run here), else the last that read: a
        loop reading an IPC log, which no arrival wakes, would otherwise leave a message spread out from the
        others waiting up to a nap (1 ms)."""
        if self._busy_spin:
            return True
        recent = now - last_exchange < _SPIN_NS or now - last_read < _SPIN_AFTER_READ_NS
        return recent and not self._naps_early()

    def _check_drivers(self) -> None:
        """Each leased driver's health, once a tick step (not once per end point: a process of a thousand
        clients has one driver); a failed one is restarted by every end point on it."""
        for driver in self._leased:
            failure = driver.check_alive()
            if failure is not None:
                for endpoint in self.endpoints:
                    if endpoint._shared is driver:
                        endpoint._begin_restart(driver, failure)

    def _nap_plan(self, now: int, last_work: int, next_tick: int) -> tuple[int, bool]:
        """:func:`nap_plan`, with whether whatever arrives ends a nap, and whether to nap early."""
        sound = self._sound()
        return nap_plan(now, last_work, next_tick, sound, sound and not self._serving)

    async def _nap_driving(self, nap_ns: int, feedback_may_wait: bool = False) -> bool:
        """Nap, watching the INVOKER-mode drivers' sockets and doorbells; False (no nap) if work waits.
        ``feedback_may_wait``: feedback arriving meanwhile ends the nap only a little later (see
        :func:`feedback_wake_ns`)."""
        drivers = self._drivers
        seconds = nap_ns / 1e9
        if not drivers:
            await self._nap(seconds)
            return True
        version = tuple((id(d), d.sockets_version()) for d in drivers)
        if version != self._sockets_version:  # a server's driver has a socket per UDP client: list them rarely
            self._sockets_version = version
            feedback = [s for d in drivers for s in d.feedback_sockets()]
            lazy = {id(s) for s in feedback}
            self._sockets.watch([s for d in drivers for s in d.readable_sockets() if id(s) not in lazy], feedback)
        parked = [d for d in drivers if d.park()]
        try:
            if len(parked) < len(drivers):
                return False
            until = time.monotonic_ns() + nap_ns
            for driver in drivers:
                driver.napping_until_ns = until  # not stalled, only idle: the keeper stays asleep
            self._nap_end_ns = until if feedback_may_wait else 0
            await self._nap(seconds)
            return True
        finally:
            self._nap_end_ns = 0
            for driver in parked:
                driver.unpark()

    async def _nap(self, seconds: float) -> None:
        """Sleep, unless :meth:`poke` wakes us first."""
        loop = asyncio.get_running_loop()
        wake = self._wake = loop.create_future()
        handle = loop.call_later(seconds, _wake_up, wake)
        try:
            await wake
        finally:
            handle.cancel()
            self._wake = None
            if self._feedback_wake is not None:
                self._feedback_wake.cancel()
                self._feedback_wake = None
            self._sockets.watch_feedback(True)

    def poke(self) -> None:
        """A connection on this loop just sent: an answer may follow soon, so spin again (waking a nap)."""
        self._poked = True
        wake = self._wake  # _end_nap written out: this runs for every message sent
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _end_nap(self) -> None:
        """A datagram reached the driver: run a round now, but spin on only if that round finds work (a
        server's idle UDP connections bring heartbeats and status messages all the time)."""
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _on_feedback(self) -> None:
        """Feedback reached the driver: during a deep nap end it a little later (unwatched meanwhile: one wake-up
        for the feedback of many idle streams), else at once."""
        wake = self._wake
        if wake is None or wake.done():
            return
        end_ns = self._nap_end_ns
        if not end_ns:
            wake.set_result(None)
            return
        self._sockets.watch_feedback(False)
        if self._feedback_wake is None:
            wake_ns = feedback_wake_ns(time.monotonic_ns(), end_ns)
            if wake_ns is not None:
                loop = asyncio.get_running_loop()
                self._feedback_wake = loop.call_later((wake_ns - time.monotonic_ns()) / 1e9, _wake_up, wake)


class _SocketWatch:
    """Two epoll sets of driver sockets, whose readiness calls ``on_readable`` (data, setups, the doorbell) or
    ``on_feedback`` (feedback sockets) from the event loop; the feedback set can be unwatched for a while.

    The loop watches each set's one descriptor, so sockets the driver closes or replaces never
    confuse the loop's own selector; a closed socket leaves the set by itself.
    """

    def __init__(self, on_readable: Callable[[], None], on_feedback: Callable[[], None]) -> None:
        self._sets = (_EpollSet(on_readable), _EpollSet(on_feedback))

    def watch(self, sockets: list[socket.socket], feedback: list[socket.socket]) -> None:
        if not hasattr(select, "epoll"):
            return  # elsewhere the nap just ends on its timer
        self._sets[0].watch(sockets)
        self._sets[1].watch(feedback)

    def watch_feedback(self, on: bool) -> None:
        """Watch the feedback set again, or stop watching it (its datagrams stay in the sockets meanwhile)."""
        self._sets[1].attend(on)

    def close(self) -> None:
        for watched in self._sets:
            watched.close()


class _EpollSet:
    """One epoll set watched by the running loop (see :class:`_SocketWatch`)."""

    def __init__(self, on_readable: Callable[[], None]) -> None:
        self._on_readable = on_readable
        self._epoll: select.epoll | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched: dict[int, socket.socket] = {}
        self._attended = False

    def watch(self, sockets: list[socket.socket]) -> None:
        wanted = {s.fileno(): s for s in sockets if s.fileno() >= 0}
        if wanted.keys() == self._watched.keys() and all(wanted[f] is self._watched[f] for f in wanted):
            return
        if self._epoll is None:
            self._epoll = select.epoll()
            self._loop = asyncio.get_running_loop()
            self.attend(True)
        epoll = self._epoll
        for fd, sock in self._watched.items():
            if wanted.get(fd) is not sock:
                with contextlib.suppress(OSError):  # closed: the kernel dropped it from the set already
                    epoll.unregister(fd)
        for fd, sock in wanted.items():
            if self._watched.get(fd) is not sock:
                try:
                    epoll.register(fd, select.EPOLLIN)
                except FileExistsError:
                    epoll.modify(fd, select.EPOLLIN)
        self._watched = wanted

    def attend(self, on: bool) -> None:
        """Have the loop watch the set (or not)."""
        if on == self._attended or self._epoll is None or self._loop is None or self._loop.is_closed():
            return
        self._attended = on
        if on:
            self._loop.add_reader(self._epoll.fileno(), self._on_readable)
        else:
            self._loop.remove_reader(self._epoll.fileno())

    def close(self) -> None:
        if self._epoll is not None:
            self.attend(False)
            self._epoll.close()
            self._epoll = None
        self._attended = False
        self._watched = {}


def _wake_up(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _watched_images(connection: Connection) -> list[Image]:
    """What the native check watches of ``connection``: its image, and its unreliable image beside it (a frame in
    either has the connection polled); none before its image is mapped."""
    image = connection._image
    if image is None:
        return []
    unreliable = connection._u_image
    if unreliable is None:
        return [image]
    return [image, unreliable]


def _poll_connections(mapped: list[Connection], ready: list[int]) -> tuple[int, list[int]]:
    """Poll the connections at ``ready`` (indices into ``mapped``): what they read, and those that read all a poll
    takes or hold off reading (frames may still wait there: the next round polls them again)."""
    read = 0
    carried: list[int] = []
    last: Connection | None = None
    for index in ready:
        connection = mapped[index]
        if connection is last:  # its unreliable image's entry, next to its own: one poll reads both
            continue
        last = connection
        try:
            got = connection._poll()
        except Exception as exc:
            connection._endpoint._notify_error(connection, exc)
            continue
        read += got
        if connection.may_hold_more or (not got and connection._not_reading()):
            carried.append(index)
    return read, carried
