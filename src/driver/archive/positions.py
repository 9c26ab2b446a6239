"""Where an Aeron archive's live recording has got to: its ``rec-pos`` counter, found from the archive directory.

Aeron 1.15.1 leaves a live recording's stop position unset in the catalog and
publishes its progress only in a ``rec-pos`` counter (type 100, key: int64
recording id, int32 session id, source identity) in the ``cnc.dat`` of the
driver its archive uses -- the directory its mark file names. A reader of the
archive directory in another process follows such a recording through that
counter. Our own archive keeps the position in the catalog too (see
:mod:`driver.archive.catalog`), so this is only needed for Aeron's.

Lookups are lazy and cheap to fail: no mark file, no driver, or no counter (the
recording stopped, the archive is gone) all mean "unknown", and the driver's
files are looked for again at most once a second.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from driver.archive.errors import MarkFileError
from driver.archive.mark import read_mark_file
from driver.cnc import CncFile
from driver.concurrent.counters import (
    KEY_OFFSET,
    METADATA_LENGTH,
    NULL_COUNTER_ID,
    RECORD_ALLOCATED,
    TYPE_ID_OFFSET,
    CountersReader,
)
from driver.errors import DriverError

__all__ = ["RECORDING_POSITION_TYPE_ID", "RecordingPositions"]

RECORDING_POSITION_TYPE_ID = 100
_RETRY_S = 1.0


class RecordingPositions:
    """``positions(recording_id)``: the live recording's ``rec-pos`` value, or None when it cannot be found."""

    def __init__(self, archive_dir: str | os.PathLike[str]) -> None:
        self._archive_dir = Path(archive_dir)
        self._cnc: CncFile | None = None
        self._counters: CountersReader | None = None
        self._ids: dict[int, int] = {}
        self._next_try = 0.0

    def __call__(self, recording_id: int) -> int | None:
        counters = self._open()
        if counters is None:
            return None
        counter_id = self._ids.get(recording_id, NULL_COUNTER_ID)
        if counter_id == NULL_COUNTER_ID or not self._is_recording(counters, counter_id, recording_id):
            counter_id = counters.find_by_type_id_and_registration_id(RECORDING_POSITION_TYPE_ID, recording_id)
            if counter_id == NULL_COUNTER_ID:
                self.close()  # a restarted driver has a new cnc.dat: map it afresh next time
                return None
            self._ids[recording_id] = counter_id
        return counters.get_counter_value(counter_id)

    @staticmethod
    def _is_recording(counters: CountersReader, counter_id: int, recording_id: int) -> bool:
        metadata = counters.metadata_buffer
        offset = counter_id * METADATA_LENGTH
        return (
            offset + METADATA_LENGTH <= metadata.capacity
            and metadata.get_int_volatile(offset) == RECORD_ALLOCATED
            and metadata.get_int(offset + TYPE_ID_OFFSET) == RECORDING_POSITION_TYPE_ID
            and metadata.get_long(offset + KEY_OFFSET) == recording_id
        )

    def _open(self) -> CountersReader | None:
        if self._counters is not None:
            return self._counters
        now = time.monotonic()
        if now < self._next_try:
            return None
        self._next_try = now + _RETRY_S
        try:
            aeron_dir = read_mark_file(self._archive_dir).aeron_directory
            if not aeron_dir:
                return None
            self._cnc = CncFile.map_existing(Path(aeron_dir), timeout_s=0.0)
        except (MarkFileError, DriverError, OSError, ValueError):
            return None
        self._counters = CountersReader(self._cnc.counters_metadata_buffer, self._cnc.counters_values_buffer)
        return self._counters

    def close(self) -> None:
        self._counters = None
        self._ids.clear()
        if self._cnc is not None:
            self._cnc.close()
            self._cnc = None
