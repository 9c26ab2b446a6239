"""Aeron Archive's ``rec-pos`` counter: one per active recording, in the driver's counters, laid out as 1.15.1's
``RecordingPos`` lays it out, so a local follower (ours or Aeron's) finds a recording's live position by the
session id of the publication it records.

Key: recording id (int64), session id (int32), source identity (int32 length, then ASCII, at most 96 bytes);
label: ``rec-pos: <recording id> <session id> <stream id> <stripped channel>``; type id 100.
"""

from __future__ import annotations

import struct
from typing import Final

from driver.concurrent.counters import CountersReader

__all__ = [
    "MAX_SOURCE_IDENTITY_LENGTH",
    "NULL_COUNTER_ID",
    "NULL_RECORDING_ID",
    "RECORDING_POSITION_TYPE_ID",
    "find_counter_id_by_recording",
    "find_counter_id_by_session",
    "key_of",
    "label_of",
    "recording_id_of",
    "source_identity_of",
]

RECORDING_POSITION_TYPE_ID: Final = 100
NULL_COUNTER_ID: Final = -1
NULL_RECORDING_ID: Final = -1
MAX_SOURCE_IDENTITY_LENGTH: Final = 112 - 16
"""A counter key holds 112 bytes: 16 of ids and length, the rest the source identity."""
MAX_LABEL_LENGTH: Final = 380
_KEY_HEAD: Final = struct.Struct("<qii")


def key_of(recording_id: int, session_id: int, source_identity: str) -> bytes:
    source = source_identity.encode("ascii", "replace")[:MAX_SOURCE_IDENTITY_LENGTH]
    return _KEY_HEAD.pack(recording_id, session_id, len(source)) + source


def label_of(recording_id: int, session_id: int, stream_id: int, stripped_channel: str) -> str:
    return f"rec-pos: {recording_id} {session_id} {stream_id} {stripped_channel}"[:MAX_LABEL_LENGTH]


def _find(reader: CountersReader, match: slice, value: bytes) -> int:
    found = [NULL_COUNTER_ID]

    def visit(counter_id: int, type_id: int, key: bytes, label: str) -> None:
        if found[0] == NULL_COUNTER_ID and type_id == RECORDING_POSITION_TYPE_ID and key[match] == value:
            found[0] = counter_id

    reader.for_each(visit)
    return found[0]


def find_counter_id_by_session(reader: CountersReader, session_id: int) -> int:
    """The ``rec-pos`` counter of the recording of this publication session (NULL_COUNTER_ID: none now)."""
    return _find(reader, slice(8, 12), struct.pack("<i", session_id))


def find_counter_id_by_recording(reader: CountersReader, recording_id: int) -> int:
    return _find(reader, slice(0, 8), struct.pack("<q", recording_id))


def recording_id_of(reader: CountersReader, counter_id: int) -> int:
    """The recording id a ``rec-pos`` counter belongs to (NULL_RECORDING_ID if it is not one, or not now)."""
    if counter_id == NULL_COUNTER_ID or reader.get_counter_type_id(counter_id) != RECORDING_POSITION_TYPE_ID:
        return NULL_RECORDING_ID
    recording_id: int = _KEY_HEAD.unpack_from(reader.get_counter_key(counter_id))[0]
    return recording_id


def source_identity_of(reader: CountersReader, counter_id: int) -> str:
    key = reader.get_counter_key(counter_id)
    length = min(_KEY_HEAD.unpack_from(key)[2], MAX_SOURCE_IDENTITY_LENGTH)
    return key[16 : 16 + length].decode("ascii", "replace")
