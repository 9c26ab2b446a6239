"""An archive of recorded streams, in the manner of Aeron Archive.

Streams are recorded as they flow (the term buffers' frames, byte for byte,
into segment files), listed from a catalog, and replayed from any frame
position onto any channel, following a recording that is still growing.

- :class:`Archive` runs the archive agent beside a driver; :class:`ArchivingMediaDriver`
  runs both in one process; ``python -m driver.archive`` runs either standalone.
- :class:`ArchiveClient` / :class:`AsyncArchiveClient` talk to an archive in another process.
- :class:`Catalog` and :mod:`driver.archive.segments` read recordings straight from the
  directory (no archive needed), as the Spark data source does.
"""

from driver.archive.archive import Archive, ArchivingMediaDriver
from driver.archive.catalog import Catalog, RecordingDescriptor
from driver.archive.client import RecordingEvent
from driver.archive.context import ArchiveContext
from driver.archive.errors import (
    ArchiveError,
    ArchiveInUseError,
    ArchiveStorageError,
    ArchiveTimeoutError,
    CatalogError,
    InvalidPositionError,
    MaxRecordingsError,
    MaxReplaysError,
    RecordingNotFoundError,
    RecordingStateError,
    ReplayLimitError,
)
from driver.archive.replayer import FOLLOW

__all__ = [
    "FOLLOW",
    "Archive",
    "ArchiveContext",
    "ArchiveError",
    "ArchiveInUseError",
    "ArchiveStorageError",
    "ArchiveTimeoutError",
    "ArchivingMediaDriver",
    "Catalog",
    "CatalogError",
    "InvalidPositionError",
    "MaxRecordingsError",
    "MaxReplaysError",
    "RecordingDescriptor",
    "RecordingEvent",
    "RecordingNotFoundError",
    "RecordingStateError",
    "ReplayLimitError",
]
