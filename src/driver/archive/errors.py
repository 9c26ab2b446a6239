"""Errors of the archive: one base class, one subclass per thing a caller can act on."""

from __future__ import annotations

from driver.errors import DriverError

__all__ = [
    "ArchiveError",
    "ArchiveInUseError",
    "ArchiveStorageError",
    "ArchiveTimeoutError",
    "ArchiveToolError",
    "CatalogError",
    "CatalogLayoutError",
    "InvalidPositionError",
    "MarkFileError",
    "MaxRecordingsError",
    "MaxReplaysError",
    "RecordingNotFoundError",
    "RecordingStateError",
    "ReplayLimitError",
]


class ArchiveError(DriverError):
    """Anything the archive refuses or fails to do."""


class ArchiveInUseError(ArchiveError):
    """Another archive holds the directory's mark file."""


class CatalogError(ArchiveError):
    """The catalog file is not one we can read (wrong version, entry length or a torn descriptor)."""


class CatalogLayoutError(CatalogError):
    """The directory holds an archive in a layout this version does not read (our own layout from before the
    archive spoke Aeron's); :func:`driver.archive.catalog.migrate_archive` converts it once."""


class MarkFileError(ArchiveError):
    """The mark file is absent or does not hold a mark file header."""


class RecordingNotFoundError(ArchiveError, KeyError):
    """No valid recording has this id."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "recording not found"


class RecordingStateError(ArchiveError):
    """The recording is in the wrong state for the request (e.g. truncating an active recording)."""


class InvalidPositionError(ArchiveError, ValueError):
    """A position is outside a recording or not on a frame boundary."""


class ArchiveStorageError(ArchiveError, OSError):
    """Writing a segment failed (disk full, file size limit, I/O error); the recording stopped there."""


class ArchiveTimeoutError(ArchiveError, TimeoutError):
    """The archive did not answer within the client's timeout."""


class ReplayLimitError(ArchiveError):
    """A bounded replay's limit counter is not one the archive can read (unknown id, or not allocated)."""


class ArchiveToolError(ArchiveError):
    """An operator verb cannot read the directory it was given; the message says why (one line)."""


class MaxReplaysError(ArchiveError):
    """The archive already runs ``max_concurrent_replays`` replays (Aeron's ``MAX_REPLAYS``)."""


class MaxRecordingsError(ArchiveError):
    """The archive already holds ``max_concurrent_recordings`` recordings or recording subscriptions (Aeron's
    ``MAX_RECORDINGS``)."""
