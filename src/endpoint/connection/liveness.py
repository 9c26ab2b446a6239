"""When a connection's peer is presumed dead, and when to send it a keepalive: pure, time passed in.

Theory of operation. Only messages read from the peer's image prove the peer alive (its data, pings,
pongs, anything). Signals of the driver's (a publication limit that moves, a publication that is still
connected, an image still mapped) say nothing about the peer's process for up to the driver's own
timeouts, so they never extend a peer's life; an image that closed or ended may only end it sooner (the
connection checks that itself).

Each end sends a keepalive when it has sent nothing for ``ping_interval``, and at the latest
:attr:`Liveness.keepalive_slack_ns` after that (half a ping interval, less when ``peer_timeout`` leaves
little room), so a live peer is heard at least that often whatever the traffic pattern (one way streaming
included: the receiving end's keepalives reach the sender, whose own may be held back by back pressure).
The slack lets the keepalives of many idle connections that fall due within it leave in one wake-up (the
end point's agenda, :mod:`endpoint.connection.agenda`, files each connection at a point of a grid inside
that window), and makes an idle connection's keepalives a third fewer than one every ``ping_interval``.
Keepalives ride the reliable stream, so a lost one is sent again, not missed, once something later reveals
the gap: the last keepalive before a quiet spell has nothing after it but the next one, so on a lossy path a
few keepalives lost in a row would look like a dead peer. A peer silent for two ping intervals (overdue) is
therefore asked to answer at once (:attr:`Verdict.PROBE`, a ping it answers), at most every half ping interval:
its answer, arriving after whatever was lost, makes our driver ask for the rest. At 5% loss each way a live
peer then takes about twice as many losses in a row to be mistaken for dead, at the cost of a ping now and
then on a lossy path (none on a clean one, where an idle peer is heard every ping interval and a half).
A peer is dead when nothing was heard from it for longer than ``peer_timeout``. :meth:`Liveness.next_check_ns`
says when the next check can find something to do (a keepalive owed, the peer overdue, or dead); the end point
checks no later than one grid step after that, so a peer that dies at ``t`` is declared dead no later than
``t + peer_timeout + grid``, the grid being at most half ``ping_interval``: the promise of detection
within ``peer_timeout`` plus one ``ping_interval``.

So is time this end did not run at all (its
loop or its process held up past its next check): the deadline moves on by the stall. And while our driver's
kernel dropped datagrams for its receive sockets during the silence (their queues full: the driver read them too
late, an overloaded process), the peer may well have spoken and been lost on our side: it is declared dead only
after a few peer timeouts, as the driver treats its images (:func:`driver.core.silence.silence_ends`).
While this end is not reading the peer (a stream's consumer or the listeners are behind), the silence is
ours: the clock restarts when reading resumes. So is a silence while the peer's stream keeps reaching our
driver (its receiver high-water mark moves: the peer's process wrote new messages) but this end has not read
them yet, because it is overloaded or a gap waits for a retransmit: liveness is judged by what the peer
sent, not by how late we got to read it (:meth:`ConnectionCore.tick` takes the mark).
"""

from __future__ import annotations

import enum

from driver.core.silence import silence_ends

__all__ = ["PEER_TIMED_OUT", "Liveness", "Verdict", "tick_interval_ns"]

PEER_TIMED_OUT = "peer timed out"
"""How the close reason of a connection lost to :attr:`Verdict.DEAD` begins."""


class Verdict(enum.Enum):
    """What a connection should do after :meth:`Liveness.check`."""

    ALIVE = 0
    KEEPALIVE = 1
    """Alive, but we have been quiet for a ping interval: send a keepalive."""
    DEAD = 2
    PROBE = 3
    """Alive, but silent for two ping intervals: ask the peer to answer (it also serves as a keepalive)."""


class Liveness:
    """Liveness of one connection's peer, from what was heard and sent when (monotonic nanoseconds)."""

    __slots__ = (
        "dropped_ns",
        "keepalive_slack_ns",
        "last_heard_ns",
        "last_probe_ns",
        "last_sent_ns",
        "overdue_ns",
        "peer_timeout_ns",
        "ping_interval_ns",
    )

    def __init__(self, now_ns: int, ping_interval_ns: int, peer_timeout_ns: int) -> None:
        if not 0 < ping_interval_ns < peer_timeout_ns:
            raise ValueError(f"need 0 < ping_interval_ns ({ping_interval_ns}) < peer_timeout_ns ({peer_timeout_ns})")
        self.ping_interval_ns = ping_interval_ns
        self.peer_timeout_ns = peer_timeout_ns
        self.keepalive_slack_ns = min(ping_interval_ns // 2, (peer_timeout_ns - ping_interval_ns) // 4)
        """How much later than ``ping_interval`` after our last send a keepalive may leave (so that many leave
        together): half a ping interval, or a quarter of what ``peer_timeout`` leaves beyond it if that is less,
        so the peer still hears us several times within its timeout."""
        self.last_heard_ns = now_ns
        """When a message from the peer was last read (or reading last resumed)."""
        self.last_sent_ns = now_ns
        """When a message of ours was last handed to the driver."""
        self.overdue_ns = min(2 * ping_interval_ns, peer_timeout_ns)
        """Silent this long, the peer is overdue: probed, and how far its stream got is watched."""
        self.last_probe_ns = now_ns - ping_interval_ns
        """When the peer was last asked to answer."""
        self.dropped_ns = now_ns - 1
        """When our driver was last seen dropping datagrams in the kernel (see :meth:`datagrams_dropped`)."""

    def heard(self, now_ns: int) -> None:
        """A message from the peer was read."""
        if now_ns > self.last_heard_ns:
            self.last_heard_ns = now_ns

    def sent(self, now_ns: int) -> None:
        """A message of ours was handed to the driver."""
        if now_ns > self.last_sent_ns:
            self.last_sent_ns = now_ns

    def not_reading(self, now_ns: int) -> None:
        """We are not reading the peer right now: its silence is not its fault."""
        self.heard(now_ns)

    def stalled(self, now_ns: int, stall_ns: int) -> None:
        """This end did not run at all for ``stall_ns`` (its loop or process was held up): that much of the
        silence is ours, so the deadline moves on by it (never past now)."""
        if stall_ns > 0:
            self.last_heard_ns = min(now_ns, self.last_heard_ns + stall_ns)

    def datagrams_dropped(self, at_ns: int) -> None:
        """Our driver's kernel dropped datagrams for its receive sockets (seen at ``at_ns``): a silence that saw
        this may be ours, not the peer's (see the module's docstring)."""
        if at_ns > self.dropped_ns:
            self.dropped_ns = at_ns

    @property
    def deadline_ns(self) -> int:
        """The peer is dead if nothing is heard from it by this time (exclusive)."""
        return self.last_heard_ns + self.peer_timeout_ns

    def silent_for_ns(self, now_ns: int) -> int:
        return now_ns - self.last_heard_ns

    def next_check_ns(self, grid_ns: int) -> int:
        """When :meth:`check` can next find something to do if nothing is heard or sent meanwhile (hearing and
        sending only move it later): the keepalive, at the last point of the grid inside its slack window (the
        window's start if none is); the peer overdue (silent two ping intervals, when the end point starts
        looking at how far its stream got) or dead, at the first point of the grid after. Pure: no clock."""
        owed = self.last_sent_ns + self.ping_interval_ns
        keepalive = max(owed, (owed + self.keepalive_slack_ns) // grid_ns * grid_ns)
        overdue = self.last_heard_ns + self.overdue_ns
        return min(keepalive, (overdue // grid_ns + 1) * grid_ns)

    def check(self, now_ns: int) -> Verdict:
        silent_ns = now_ns - self.last_heard_ns
        if silence_ends(silent_ns, self.peer_timeout_ns, self.dropped_ns >= self.last_heard_ns):
            return Verdict.DEAD
        if silent_ns > self.overdue_ns and now_ns - self.last_probe_ns >= self.ping_interval_ns // 2:
            return Verdict.PROBE
        if now_ns - self.last_sent_ns >= self.ping_interval_ns:
            return Verdict.KEEPALIVE
        return Verdict.ALIVE

    def probed(self, now_ns: int) -> None:
        """The probe :meth:`check` asked for went out (it counts as a send)."""
        self.last_probe_ns = now_ns
        self.sent(now_ns)


def tick_interval_ns(ping_interval_ns: int, ceiling_ns: int, floor_ns: int) -> int:
    """How often liveness is checked: half a ping interval, kept within ``[floor_ns, ceiling_ns]``."""
    return max(floor_ns, min(ceiling_ns, ping_interval_ns // 2))
