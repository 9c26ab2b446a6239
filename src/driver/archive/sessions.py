"""Control sessions of the archive (sans-IO): connect, answer, queue, give up -- time passed in, no IO.

A control session is what a client's ConnectRequest opens (Aeron Archive's
``ControlSession``): the archive adds a publication on the client's response
channel and answers the connect once that publication is connected, within
the connect timeout. Answers go out at once when the publication takes them;
otherwise they wait in the session's bounded queue. A session ends (its state
becomes DONE, with the reason) when the client's response channel never
connects, when it disconnects, when an answer waits longer than the timeout,
or when the queue is full -- the archive never blocks on a slow client.

The shell (the archive conductor) owns the publications: it calls
:meth:`ControlSession.poll` with whether the publication is connected, offers
:meth:`ControlSession.next_answer` and reports :meth:`ControlSession.sent` or
:meth:`ControlSession.blocked`.
"""

from __future__ import annotations

import collections
import enum
from typing import Final

from driver.archive import control
from driver.archive.control import ControlResponse, ResponseCode
from driver.archive.errors import ArchiveError

__all__ = ["ControlSession", "ControlSessions", "Listing", "Search", "SessionLimitError", "SessionState"]

DEFAULT_MAX_QUEUED: Final = 256
DEFAULT_MAX_SESSIONS: Final = 64
MAX_REFUSALS: Final = 8
"""Refusals (connects over the limit answered with an error) under way at once; more are dropped unanswered."""


class SessionLimitError(ArchiveError):
    """The archive already holds as many control sessions as it allows."""


class SessionState(enum.Enum):
    CONNECTING = "connecting"
    ACTIVE = "active"
    DONE = "done"


class Listing:
    """A listing under way: the next recording id to look at, how many more to send, what to match."""

    __slots__ = ("correlation_id", "fragment", "limit_id", "next_id", "remaining", "stream_id")

    def __init__(
        self,
        correlation_id: int,
        from_id: int,
        count: int,
        *,
        stream_id: int | None = None,
        fragment: str | None = None,
    ) -> None:
        self.correlation_id = correlation_id
        self.next_id = max(0, from_id)
        self.remaining = max(0, count)
        self.stream_id = stream_id
        self.fragment = fragment
        self.limit_id = from_id + count if fragment is None else -1
        """Listing by id range ends at from + count; a filtered listing ends after count matches."""

    @property
    def filtered(self) -> bool:
        return self.fragment is not None


class Search:
    """A FindLastMatchingRecording under way: the catalog is looked at newest first, a bounded number of entries
    per duty cycle, so one request cannot hold the archive's thread for a whole catalog."""

    __slots__ = ("channel", "correlation_id", "min_id", "next_id", "session_id", "stream_id")

    def __init__(
        self, correlation_id: int, min_id: int, end_id: int, session_id: int, stream_id: int, channel: str
    ) -> None:
        self.correlation_id = correlation_id
        self.min_id = min_id
        self.next_id = end_id - 1
        self.session_id = session_id
        self.stream_id = stream_id
        self.channel = channel


class ControlSession:
    """One client's session (see the module docstring)."""

    __slots__ = (
        "connect_correlation_id",
        "deadline_ns",
        "dropped",
        "listing",
        "max_queued",
        "queue",
        "reason",
        "refusal",
        "search",
        "session_id",
        "state",
        "timeout_ns",
        "version",
    )

    def __init__(
        self,
        session_id: int,
        connect_correlation_id: int,
        now_ns: int,
        timeout_ns: int,
        *,
        version: int = control.SCHEMA_VERSION,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        self.session_id = session_id
        self.connect_correlation_id = connect_correlation_id
        self.version = version
        self.timeout_ns = timeout_ns
        self.deadline_ns = now_ns + timeout_ns
        self.max_queued = max_queued
        self.queue: collections.deque[bytes] = collections.deque()
        self.state = SessionState.CONNECTING
        self.reason = ""
        self.dropped = 0
        """Answers dropped because the queue was full (the session ends with the first)."""
        self.listing: Listing | None = None
        self.search: Search | None = None
        self.refusal = ""
        """Why the connect is refused (the archive is full): answered as an error, then the session ends."""

    @property
    def is_done(self) -> bool:
        return self.state is SessionState.DONE

    def end(self, reason: str) -> None:
        if self.state is not SessionState.DONE:
            self.state = SessionState.DONE
            self.reason = reason
            self.listing = None
            self.search = None

    def poll(self, now_ns: int, connected: bool) -> int:
        """Advance on time and on the response publication's connection; returns work done."""
        if self.state is SessionState.CONNECTING:
            if connected:
                self.state = SessionState.ACTIVE
                self.deadline_ns = 0
                if self.refusal:
                    self.respond(ResponseCode.ERROR, self.connect_correlation_id, 0, self.refusal)
                else:
                    self.respond(ResponseCode.OK, self.connect_correlation_id, self.session_id)
                return 1
            if now_ns - self.deadline_ns > 0:
                self.end(f"control session {self.session_id}: the client's response channel never connected")
            return 0
        if self.state is SessionState.ACTIVE and not connected:
            self.end(f"control session {self.session_id}: the client's response channel disconnected")
        return 0

    def respond(self, code: int, correlation_id: int, relevant_id: int = 0, error_message: str = "") -> None:
        """Queue a ControlResponse."""
        self.enqueue(
            control.encode(ControlResponse(self.session_id, correlation_id, relevant_id, int(code), error_message))
        )

    def error(self, correlation_id: int, message: str, code: int = control.ErrorCode.GENERIC) -> None:
        self.respond(ResponseCode.ERROR, correlation_id, int(code), message)

    @property
    def room(self) -> int:
        return self.max_queued - len(self.queue)

    def enqueue(self, message: bytes) -> bool:
        """Queue an answer; a full queue drops it (counted) and ends the session: the client is not reading."""
        if self.state is SessionState.DONE:
            self.dropped += 1
            return False
        if len(self.queue) >= self.max_queued:
            self.dropped += 1
            self.end(
                f"control session {self.session_id}: {self.max_queued} answers queued and the client not reading; "
                "answer dropped and the session closed"
            )
            return False
        self.queue.append(message)
        return True

    def next_answer(self) -> bytes | None:
        return self.queue[0] if self.queue and self.state is SessionState.ACTIVE else None

    def sent(self) -> None:
        self.queue.popleft()
        self.deadline_ns = 0
        if self.refusal and not self.queue:
            self.end(f"control session {self.session_id} refused: {self.refusal}")

    def blocked(self, now_ns: int) -> None:
        """The publication refused the next answer: give it the timeout, then end the session."""
        if self.deadline_ns == 0:
            self.deadline_ns = now_ns + self.timeout_ns
        elif now_ns - self.deadline_ns > 0:
            self.end(
                f"control session {self.session_id}: the client stopped reading; "
                f"{len(self.queue)} answer(s) dropped and the session closed"
            )


class ControlSessions:
    """Every control session by id, at most ``max_sessions``; ids from ``first_id`` up (random per archive)."""

    def __init__(self, first_id: int, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self.max_refusals = MAX_REFUSALS
        self._next_id = first_id
        self.by_id: dict[int, ControlSession] = {}
        self.refused = 0

    def open(
        self, correlation_id: int, now_ns: int, timeout_ns: int, *, version: int, max_queued: int
    ) -> ControlSession:
        """A new session; over the limit, one that answers the connect with an error and ends (while fewer than
        ``max_refusals`` such answers are under way; beyond that :class:`SessionLimitError`: nothing is answered)."""
        refusal = ""
        if len(self.by_id) >= self.max_sessions:
            self.refused += 1
            refusal = f"SessionLimitError: the archive holds its limit of {self.max_sessions} control sessions"
            if sum(1 for s in self.by_id.values() if s.refusal) >= self.max_refusals:
                raise SessionLimitError(refusal.partition(": ")[2])
        session_id = self._next_id
        self._next_id += 1
        session = ControlSession(session_id, correlation_id, now_ns, timeout_ns, version=version, max_queued=max_queued)
        session.refusal = refusal
        self.by_id[session_id] = session
        return session

    def get(self, session_id: int) -> ControlSession | None:
        session = self.by_id.get(session_id)
        return None if session is None or session.is_done or session.refusal else session

    def remove(self, session_id: int) -> ControlSession | None:
        return self.by_id.pop(session_id, None)

    def __len__(self) -> int:
        return len(self.by_id)
