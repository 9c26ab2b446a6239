"""The archive's operations as blocking methods, once, for every way of reaching an archive.

:class:`~driver.archive.Archive` (same process: the conductor's queue) and
:class:`~driver.archive.client.ArchiveClient` (another process: the control
channel) differ only in how one request travels, which each supplies as
``_request(operation, *args)``; the operation names and argument order are the
contract (the client maps each to its Aeron Archive control request).
"""

from __future__ import annotations

import abc
from typing import Any

from driver.archive.catalog import RecordingDescriptor
from driver.archive.replayer import FOLLOW

__all__ = ["ArchiveOperations", "descriptors"]

ALL = 1 << 30


def descriptors(rows: list[dict[str, Any]]) -> list[RecordingDescriptor]:
    return [RecordingDescriptor(**row) for row in rows]


class ArchiveOperations(abc.ABC):
    """Recording, listing, replaying and housekeeping, each a request answered by the archive."""

    @abc.abstractmethod
    def _request(self, operation: str, *args: Any) -> Any: ...

    def _list(self, operation: str, from_id: int, count: int, *args: Any) -> list[RecordingDescriptor]:
        """A listing, page by page (an answer over the control channel holds as many as fit in one message)."""
        found: list[RecordingDescriptor] = []
        while len(found) < count:
            page = descriptors(self._request(operation, from_id, count - len(found), *args))
            if not page:
                break
            found.extend(page)
            from_id = page[-1].recording_id + 1
        return found

    def start_recording(self, channel: str, stream_id: int, *, local: bool = True) -> int:
        """Record every image of ``channel``/``stream_id`` from now on; returns the subscription id.

        ``local``: the publication is on the archive's driver (IPC); a UDP stream is recorded as a receiver
        with ``local=False`` (local UDP recording needs spy subscriptions, which our driver does not offer).
        """
        return int(self._request("start_recording", channel, stream_id, local))

    def stop_recording(self, channel: str, stream_id: int) -> bool:
        """Stop the recording subscription of exactly this channel string and stream."""
        return bool(self._request("stop_recording", channel, stream_id))

    def stop_recording_subscription(self, subscription_id: int) -> bool:
        return bool(self._request("stop_recording_subscription", subscription_id))

    def extend_recording(self, recording_id: int, channel: str, stream_id: int, *, local: bool = True) -> int:
        """Continue a stopped recording with the next image on ``channel`` that starts at its stop position."""
        return int(self._request("extend_recording", recording_id, channel, stream_id, local))

    def recordings(self, from_id: int = 0, count: int = ALL) -> list[RecordingDescriptor]:
        return self._list("list_recordings", from_id, count)

    def recordings_for_uri(
        self, channel_fragment: str, stream_id: int | None = None, from_id: int = 0, count: int = ALL
    ) -> list[RecordingDescriptor]:
        """Recordings whose original channel contains ``channel_fragment`` (and of ``stream_id``, if given)."""
        return self._list("list_recordings_for_uri", from_id, count, channel_fragment, stream_id)

    def recording_subscriptions(
        self, channel_fragment: str = "", stream_id: int | None = None, *, pseudo_index: int = 0, count: int = ALL
    ) -> list[tuple[int, int, str]]:
        """The archive's recording subscriptions (subscription id, stream id, stripped channel) whose channel
        contains ``channel_fragment`` (and of ``stream_id``, if given), from ``pseudo_index`` in creation order."""
        rows = self._request("list_recording_subscriptions", pseudo_index, count, channel_fragment, stream_id)
        return [(int(a), int(b), str(c)) for a, b, c in rows]

    def recording(self, recording_id: int) -> RecordingDescriptor:
        return RecordingDescriptor(**self._request("list_recording", recording_id))

    def recording_position(self, recording_id: int) -> int | None:
        """Recorded position of an active recording (None once it stopped)."""
        value = self._request("recording_position", recording_id)
        return None if value is None else int(value)

    def stop_position(self, recording_id: int) -> int | None:
        """Stop position of a stopped recording (None while it is active)."""
        value = self._request("stop_position", recording_id)
        return None if value is None else int(value)

    def replay(
        self, recording_id: int, channel: str, stream_id: int, *, position: int = -1, length: int = FOLLOW
    ) -> int:
        """Replay onto ``channel``/``stream_id`` from ``position`` (-1: the start) for ``length`` bytes
        (-1: to the end, following an active recording); returns Aeron's replay session id, whose low 32 bits are
        the replay image's session id (subscribe with ``session-id=<replay_session_id(id)>``, as
        ``ArchiveClient.replay_subscription`` does)."""
        return int(self._request("replay", recording_id, position, length, channel, stream_id))

    def bounded_replay(
        self,
        recording_id: int,
        limit_counter_id: int,
        channel: str,
        stream_id: int,
        *,
        position: int = -1,
        length: int = FOLLOW,
    ) -> int:
        """A replay as :meth:`replay` that never reads past the value of counter ``limit_counter_id`` (a live
        recording's ``rec-pos`` counter, or any counter on the archive's driver): it waits while the counter has not
        moved and ends at ``length`` (-1: never; stop it with :meth:`stop_replay`). An unknown or free counter is a
        :class:`~driver.archive.errors.ReplayLimitError`."""
        args = (recording_id, position, length, limit_counter_id, channel, stream_id)
        return int(self._request("bounded_replay", *args))

    def archive_id(self) -> int:
        """The archive's id: stable across restarts of the same archive directory."""
        return int(self._request("archive_id"))

    def stop_replay(self, replay_id: int) -> bool:
        return bool(self._request("stop_replay", replay_id))

    def truncate_recording(self, recording_id: int, position: int) -> None:
        """Cut a stopped recording at a frame position."""
        self._request("truncate_recording", recording_id, position)

    def purge_recording(self, recording_id: int) -> None:
        """Delete a stopped recording's files and catalog entry."""
        self._request("purge_recording", recording_id)
